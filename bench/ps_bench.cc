// Parameter-server pull and push throughput against memcpy and a raw TCP transfer of the same
// bytes, measured in the same run over loopback with real PS processes (1 PS, then 2 PS).
//
// Usage: ps_bench [--quick] [--only=SUBSTRING] [--pin=split|same|none]
//                 [--sparse_pin=split|same|none] [--dense_pin=split|same|none] [--scale=N]
//                 [--json=PATH]
//
// --only runs just the cases whose label ("ps=2 dense pull 64MiB", "ps=1 sparse gather 1000")
// contains SUBSTRING, and --scale=N runs N times the iterations, for profiling one case with
// perf. An aim none of whose cases ran is reported "not run" (bench/aims.h). --json=PATH also
// writes the figures as JSON (bench/report.h).
//
// Cases, for each PS count:
//   * dense pull (PsClient::Read) and dense push of a gradient with Adam applied on the PS
//     (PsClient::PushGradients) of a [N, 1024] f32 variable of 4 MiB and 64 MiB, in GB/s;
//   * sparse gather (PsClient::Gather), sparse push with SGD and sparse push with Adam
//     (PushGradients with ids) of 64-float rows of [1000000, 64] tables ([100000, 64] with
//     --quick), 1,000 and 10,000 ids per batch, in rows/s. Ids are uniform over the table with
//     about 10% repeats of an earlier id of the same batch (a push sums each repeated row's
//     gradients, a gather copies the row again). The raw reference moves the row bytes;
//   * the cost of exactly-once updates: the dense push+Adam tagged as a closure's call (each
//     iteration a new closure, so the PS records and drops a key per shard each time, as in
//     training; ps/update_dedup.h) against the same push untagged (deduplication off),
//     alternating iteration by iteration; the median of the paired ratios is the cost
//     (aim <= 1.05);
//   * "mlp step": the main job's step on the wire (the MLP's gradients pushed, Adam on the PS,
//     the next pull riding on the push) for each gradient compression, none, bf16, int8 and
//     topk:0.01: examples/s (steps/s x 128) against none, and bytes on the wire per step.
// With 2 PS every variable is split into 2 shards (FixedShardsPartitioner), one per PS, so
// both PS work at once; the raw reference then moves the same total bytes over 2 connections
// in parallel, driven by one client thread as PsClient's single I/O loop is.
//
// The raw reference is a one-way transfer into a preallocated buffer followed by a 1-byte
// acknowledgement, so it pays one small round trip, as every RPC does. Each figure is the
// median over iterations, and the PS operation and its raw reference alternate iteration by
// iteration, so noise on the (shared, 2-core) machine lands on both alike.
//
// --sparse_pin places the one-PS sparse cases as --pin places the small pushes (split: the PS
// and the raw receiver on CPU 0, this process on CPU 1). It defaults to none: on the shared
// 2-core VM under load, a 2.5 MB transfer pinned to one busy CPU waits on the scheduler (raw TCP
// took ~8 ms instead of ~1 ms, the PS operation likewise), which measures the scheduler and not
// the row path.
//
// --dense_pin does the same for the one-PS dense cases, also unpinned by default. Unpinned, a
// 4 MiB pull is bimodal on the 2-vCPU VM: when the PS's sending thread and this process's I/O
// thread share a vCPU, the reader waits (runnable) until the whole answer is sent while the
// other vCPU idles (perf sched timehist: 1.4 ms of scheduling delay in a 1.7 ms pull), where
// split they copy in parallel as the raw reference's two threads do.
//
// Exits 0 whether or not the aims are met (it is a measurement, not a test); 1 when an
// operation fails or returns a wrong value.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "bench/aims.h"
#include "bench/pipelined_echo.h"
#include "bench/report.h"
#include "bench/socket_bytes.h"
#include "bench/stats.h"
#include "coordinator/initializers.h"
#include "ps/update_rule.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/compression.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "core/tensor.h"
#include "net/asio.h"
#include "partitioners/partitioner.h"
#include "ps/parallel_apply.h"
#include "ps/update_rule.h"
#include "ps/update_tag.h"
#include "ps/variable.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using bench::Median;
using bench::Percentile;
using bench::Report;
using bench::Verdict;

using Clock = std::chrono::steady_clock;
using net::tcp;
using net::asio::ip::make_address;
namespace asio = net::asio;

// The aims from the issue: PS figure / raw TCP figure of the same bytes.
constexpr double kDensePushAim = 0.8;
constexpr double kDensePullAim = 0.9;
constexpr double kSparseAim = 0.5;
// Dense push+Adam with deduplication over the same push without it.
constexpr double kDedupCostAim = 1.05;
// Small pushes against a raw echo with as many in flight: 64 in flight (throughput), 1 in
// flight (p50 latency).
constexpr double kSmallPushThroughputAim = 1.3;
// 8 in flight: a shallow pipeline gives an RPC little to coalesce, so the aim is below parity.
constexpr double kSmallPush8Aim = 0.8;
constexpr double kSmallPushLatencyAim = 1.3;

// The aims' names in the summary and the JSON report.
constexpr char kDensePush[] = "dense push+Adam";
constexpr char kDensePull[] = "dense pull";
constexpr char kSparse[] = "sparse";
constexpr char kDedup[] = "dedup on/off";
constexpr char kSmallPushThroughput[] = "small push 64 in flight";
constexpr char kSmallPush8[] = "small push 8 in flight";
constexpr char kSmallPushLatency[] = "small push p50 latency";

constexpr int64_t kDenseCols = 1024;
constexpr int64_t kTableRows = 1000000;
constexpr int64_t kQuickTableRows = 100000;
constexpr int64_t kEmbeddingDim = 64;
constexpr double kRepeatFraction = 0.1;
constexpr int kIdBatches = 16;  // distinct id batches, cycled

struct Iterations {
  int full;
  int quick;
};

// Sized for roughly equal wall time per case (~1-3 s on two shared cores) in a full run.
constexpr Iterations kDense4MiB = {150, 4};
constexpr Iterations kDense64MiB = {15, 1};
constexpr Iterations kSparse1k = {1000, 20};
constexpr Iterations kSparse10k = {200, 4};

double Seconds(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double>(end - begin).count();
}

// ----- raw TCP reference -------------------------------------------------------------------------

// `bytes` set to `fill`, allocated as core/tensor.h allocates large blocks and faulted in.
std::shared_ptr<void> FaultedIn(size_t bytes, uint8_t fill) {
  std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
  std::memset(block.get(), fill, bytes);
  return block;
}

// Moves `total_bytes` over `connections` loopback connections at once (an equal share each):
// the client writes its share on every connection and waits for a 1-byte acknowledgement on
// each; a receiver thread per connection reads its share into a buffer allocated once, then
// acknowledges. The client drives all connections from the calling thread with async
// operations, as PsClient drives all PS from one I/O loop. `receiver_cpu` >= 0 pins the
// receiver threads there (where the PS is pinned).
//
// `mode` picks how each end calls the kernel: in Asio's default 64 KiB steps (many small
// copies that a sender and receiver running at once keep in cache, or a ping-pong of wakeups
// when they share a CPU: 1.5 or 5-6 GB/s for 64 MiB from one run to the next), or as much per
// call as the kernel takes (net::TransferAllUncapped). A reference in 64 KiB steps alone made
// 1024 system calls to write 64 MiB, and measured 1.5-1.7 GB/s where the PS moved 2.4-4.1.
// Measure times all four pairings and takes the fastest as the reference, so no mode's bad
// luck flatters the PS: its own connections write whole and read in 64 KiB steps once a read
// would block (an uncapped read measured slower), a pairing the reference once lacked.
struct RawMode {
  bool whole_write = false;
  bool whole_read = false;
};

class RawTransfer {
 public:
  RawTransfer(int connections, size_t total_bytes, int receiver_cpu, RawMode mode) : mode_(mode) {
    const size_t share = total_bytes / static_cast<size_t>(connections);
    for (int i = 0; i < connections; ++i) {
      const size_t bytes =
          i + 1 == connections ? total_bytes - share * static_cast<size_t>(i) : share;
      links_.push_back(std::make_unique<Link>(context_, bytes, receiver_cpu, mode.whole_read));
    }
  }

  ~RawTransfer() {
    for (auto& link : links_) {
      boost::system::error_code ignored;
      link->socket.shutdown(tcp::socket::shutdown_both, ignored);
      link->socket.close(ignored);
      link->receiver.join();
    }
  }

  // One transfer; false on a socket error.
  bool Once() {
    bool ok = true;
    for (auto& link : links_) {
      auto done = [&ok](const boost::system::error_code& ec, size_t) { ok = ok && !ec; };
      if (mode_.whole_write) {
        asio::async_write(link->socket, asio::buffer(link->out.get(), link->bytes), net::TransferAllUncapped(), done);
      } else {
        asio::async_write(link->socket, asio::buffer(link->out.get(), link->bytes), done);
      }
      asio::async_read(link->socket, asio::buffer(&link->ack, 1),
                       [&ok](const boost::system::error_code& ec, size_t) { ok = ok && !ec; });
    }
    context_.restart();
    context_.run();
    return ok;
  }

 private:
  struct Link {
    Link(asio::io_context& context, size_t bytes, int receiver_cpu, bool whole_read)
        : whole_read(whole_read),
          acceptor(receiver_context, tcp::endpoint(make_address("127.0.0.1"), 0)),
          socket(context),
          bytes(bytes),
          out(FaultedIn(bytes, 0x5a)),
          in(FaultedIn(bytes, 0)) {
      const uint16_t port = acceptor.local_endpoint().port();
      receiver = std::thread([this, receiver_cpu] {
        if (receiver_cpu >= 0) bench::PinTask(0, receiver_cpu);
        Receive();
      });
      socket.connect(tcp::endpoint(make_address("127.0.0.1"), port));
      socket.set_option(tcp::no_delay(true));
    }

    void Receive() {
      boost::system::error_code ec;
      tcp::socket s(receiver_context);
      acceptor.accept(s, ec);
      if (ec) return;
      s.set_option(tcp::no_delay(true), ec);
      const char ack_byte = 1;
      for (;;) {
        if (whole_read) {
          asio::read(s, asio::buffer(in.get(), bytes), net::TransferAllUncapped(), ec);
        } else {
          asio::read(s, asio::buffer(in.get(), bytes), ec);
        }
        if (ec) return;  // the client closed: done
        asio::write(s, asio::buffer(&ack_byte, 1), ec);
        if (ec) return;
      }
    }

    const bool whole_read;
    asio::io_context receiver_context;
    tcp::acceptor acceptor;
    tcp::socket socket;  // the client end
    // Allocated as the PS's and the client's own large blocks are (AllocateAlignedUninitialized:
    // transparent huge pages from 8 MiB), so the reference's copies take no more TLB misses
    // than theirs: with plain vectors the 64 MiB reference ran slower than the PS's own pull.
    const size_t bytes;
    std::shared_ptr<void> out;
    std::shared_ptr<void> in;
    char ack = 0;
    std::thread receiver;
  };

  const RawMode mode_;
  asio::io_context context_;
  std::vector<std::unique_ptr<Link>> links_;
};

// memcpy of `bytes` between two buffers allocated (and faulted in) once: median seconds.
double MemcpySeconds(size_t bytes, int iterations) {
  const std::shared_ptr<void> src = FaultedIn(bytes, 0x5a);
  const std::shared_ptr<void> dst = FaultedIn(bytes, 0);
  std::vector<double> samples;
  for (int i = 0; i < iterations + 2; ++i) {
    const Clock::time_point begin = Clock::now();
    std::memcpy(dst.get(), src.get(), bytes);
    const Clock::time_point end = Clock::now();
    if (i >= 2) samples.push_back(Seconds(begin, end));
  }
  // Keeps the copy from being optimised away.
  if (static_cast<const uint8_t*>(dst.get())[bytes / 2] != 0x5a) std::fprintf(stderr, "memcpy check failed\n");
  return Median(samples);
}

Tensor Gradient(Shape shape);

// The PS's own apply of a dense Adam push of `bytes` of f32, without the transfer: the
// finiteness check and Variable::ApplyGradient (variable, gradient and slots allocated once),
// each split over an ApplyPool of the PS's default size, as the PS splits them: median seconds.
// With 2 PS each applies half of this, at the same time.
double AdamSeconds(size_t bytes, int iterations) {
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
  const OptimizerConfig adam = opt::Adam();
  Tensor initial(DType::kF32, {n});
  std::fill_n(initial.data<float>(), n, 0.5f);
  ps::ApplyPool pool;
  auto variable = ps::Variable::Create("adam_alone", std::move(initial), &adam, &pool);
  if (!variable.ok()) return 0;
  const Tensor grad = Gradient({n});
  std::vector<double> samples;
  for (int i = 0; i < iterations + 1; ++i) {
    const Clock::time_point begin = Clock::now();
    if (!ps::AllFinite(grad, &pool) || !(*variable)->ApplyGradient(grad).ok()) return 0;
    const Clock::time_point end = Clock::now();
    if (i >= 1) samples.push_back(Seconds(begin, end));
  }
  return Median(samples);
}

// ----- measurement -------------------------------------------------------------------------------

// `a` against `b`: their median seconds, and the median over iterations of a/b measured
// back to back (the pair shares the machine's load of the moment, so on a busy machine the
// paired ratio is steadier than the ratio of medians).
struct PairTiming {
  double a_seconds = 0;
  double b_seconds = 0;
  double ratio = 0;
};

// Alternates `a` and `b` after a warm-up, each going first every other iteration so neither
// always follows the other. Nothing on failure.
std::optional<PairTiming> MeasurePair(int iterations, const std::function<absl::Status()>& a,
                                      const std::function<absl::Status()>& b) {
  std::vector<double> a_samples;
  std::vector<double> b_samples;
  std::vector<double> ratios;
  const int warmup = std::max(1, iterations / 10);
  for (int i = 0; i < warmup + iterations; ++i) {
    const std::function<absl::Status()>* order[2] = {&a, &b};
    if (i % 2 == 1) std::swap(order[0], order[1]);
    double seconds[2] = {0, 0};  // a, b
    for (const auto* op : order) {
      const Clock::time_point begin = Clock::now();
      if (absl::Status s = (*op)(); !s.ok()) {
        std::fprintf(stderr, "operation failed: %s\n", s.ToString().c_str());
        return std::nullopt;
      }
      seconds[op == &a ? 0 : 1] = Seconds(begin, Clock::now());
    }
    if (i < warmup) continue;
    a_samples.push_back(seconds[0]);
    b_samples.push_back(seconds[1]);
    ratios.push_back(seconds[0] / seconds[1]);
  }
  return PairTiming{Median(a_samples), Median(b_samples), Median(ratios)};
}

struct Timing {
  double op_seconds = 0;   // median per PS operation
  double raw_seconds = 0;  // median per raw transfer of the same bytes, the fastest mode's
  double memcpy_seconds = 0;
  double adam_seconds = 0;  // the PS's check and Adam alone over the same floats (push cases only)
  bool ok = false;
};

// Alternates `op` and a raw transfer of `bytes` over `connections` in each of RawTransfer's
// four modes, after a warm-up (which faults in buffers and lets TCP windows grow); the
// reference is the fastest mode's median. `receiver_cpu` as for RawTransfer.
Timing Measure(int connections, size_t bytes, int iterations,
               const std::function<absl::Status()>& op, int receiver_cpu = -1) {
  Timing t;
  std::vector<std::unique_ptr<RawTransfer>> raws;
  for (bool whole_write : {false, true}) {
    for (bool whole_read : {false, true}) {
      raws.push_back(std::make_unique<RawTransfer>(connections, bytes, receiver_cpu, RawMode{whole_write, whole_read}));
    }
  }
  std::vector<double> op_samples;
  std::vector<std::vector<double>> raw_samples(raws.size());
  const int warmup = std::max(1, iterations / 10);
  for (int i = 0; i < warmup + iterations; ++i) {
    Clock::time_point begin = Clock::now();
    if (absl::Status s = op(); !s.ok()) {
      std::fprintf(stderr, "operation failed: %s\n", s.ToString().c_str());
      return t;
    }
    Clock::time_point end = Clock::now();
    if (i >= warmup) op_samples.push_back(Seconds(begin, end));
    for (size_t m = 0; m < raws.size(); ++m) {
      begin = Clock::now();
      if (!raws[m]->Once()) {
        std::fprintf(stderr, "raw transfer failed\n");
        return t;
      }
      end = Clock::now();
      if (i >= warmup) raw_samples[m].push_back(Seconds(begin, end));
    }
  }
  t.op_seconds = Median(op_samples);
  t.raw_seconds = Median(raw_samples[0]);
  for (auto& samples : raw_samples) t.raw_seconds = std::min(t.raw_seconds, Median(samples));
  t.memcpy_seconds = MemcpySeconds(bytes, std::max(3, std::min(iterations, 50)));
  t.ok = true;
  return t;
}

std::string SizeLabel(size_t bytes) {
  return bytes >= (1 << 20) ? absl::StrFormat("%dMiB", bytes >> 20)
                            : absl::StrFormat("%dKiB", bytes >> 10);
}

// Prints a dense figure beside its references and adds it to `report`, judged against the
// aim `aim`; returns whether the aim was met.
bool ReportDense(Report& report, int num_ps, const char* what, size_t bytes, const Timing& t,
                 const char* aim) {
  const double gbs = static_cast<double>(bytes) / t.op_seconds / 1e9;
  const double raw_gbs = static_cast<double>(bytes) / t.raw_seconds / 1e9;
  const double memcpy_gbs = static_cast<double>(bytes) / t.memcpy_seconds / 1e9;
  const double ratio = gbs / raw_gbs;
  const std::string label = absl::StrFormat("ps=%d %s %s", num_ps, what, SizeLabel(bytes));
  // A push is checked whole (shapes, finite values, exactly-once admission) before any of it
  // is applied, so Adam cannot overlap the transfer: the best ratio a push can reach is the
  // transfer's share of transfer + the PS's check and Adam (each PS applies its share in
  // parallel).
  const double adam_per_ps = t.adam_seconds / num_ps;
  const double push_bound = t.adam_seconds > 0 ? t.raw_seconds / (t.raw_seconds + adam_per_ps) : 0;
  const bool met = report.Add(
      {.name = label,
       .value = gbs,
       .unit = "GB/s",
       .reference = absl::StrFormat("raw TCP x%d conn", num_ps),
       .reference_value = raw_gbs,
       .aim = aim,
       .note = t.adam_seconds > 0
                   ? absl::StrFormat("bound with the PS's check and Adam after the transfer (raw / (raw + check "
                                     "and Adam alone)): %.2f",
                                     push_bound)
                   : ""});
  report.Add({.name = label + ", memcpy of the same bytes", .value = memcpy_gbs, .unit = "GB/s"});
  if (t.adam_seconds > 0) {
    report.Add({.name = label + ", Adam alone",
                .value = static_cast<double>(bytes) / t.adam_seconds / 1e9,
                .unit = "GB/s"});
  }
  const std::string adam = t.adam_seconds > 0
                               ? absl::StrFormat(" | check+Adam alone %5.2f GB/s, bound raw/(raw+check+Adam) %.2f",
                                                 static_cast<double>(bytes) / t.adam_seconds / 1e9, push_bound)
                               : "";
  std::printf(
      "ps=%d %-17s %-6s %6.2f GB/s (%7.2f ms) | raw TCP %5.2f GB/s x%d conn  "
      "ratio %.2f  %-10s (%s) | memcpy %5.2f GB/s%s\n",
      num_ps, what, SizeLabel(bytes).c_str(), gbs, t.op_seconds * 1e3, raw_gbs, num_ps, ratio,
      Verdict(met), report.aims().Find(aim)->Condition().c_str(), memcpy_gbs, adam.c_str());
  std::fflush(stdout);
  return met;
}

bool ReportSparse(Report& report, int num_ps, const char* what, int64_t batch, const Timing& t,
                  const char* aim) {
  const double bytes = static_cast<double>(batch * kEmbeddingDim) * sizeof(float);
  const double rows = static_cast<double>(batch) / t.op_seconds;
  const double raw_rows = static_cast<double>(batch) / t.raw_seconds;
  const double memcpy_rows = static_cast<double>(batch) / t.memcpy_seconds;
  const double ratio = rows / raw_rows;
  const std::string label = absl::StrFormat("ps=%d %s %d", num_ps, what, batch);
  const bool met = report.Add({.name = label,
                               .value = rows / 1e6,
                               .unit = "Mrows/s",
                               .reference = absl::StrFormat("raw TCP x%d conn", num_ps),
                               .reference_value = raw_rows / 1e6,
                               .aim = aim});
  report.Add(
      {.name = label + ", memcpy of the same rows", .value = memcpy_rows / 1e6, .unit = "Mrows/s"});
  std::printf(
      "ps=%d %-17s %5lld ids %6.2f Mrows/s (%6.3f ms, %5.2f GB/s) | raw TCP %6.2f Mrows/s "
      "x%d conn  ratio %.2f  %-10s (%s) | memcpy %6.1f Mrows/s\n",
      num_ps, what, static_cast<long long>(batch), rows / 1e6, t.op_seconds * 1e3,
      bytes * rows / batch / 1e9, raw_rows / 1e6, num_ps, ratio, Verdict(met),
      report.aims().Find(aim)->Condition().c_str(), memcpy_rows / 1e6);
  std::fflush(stdout);
  return met;
}

// ----- workload ----------------------------------------------------------------------------------

// `batches` id tensors of `batch` ids uniform over [0, rows), where each id is, with
// probability `repeat`, instead a copy of an id drawn earlier in the same batch. Deterministic.
std::vector<Tensor> UniformIdBatches(int64_t rows, double repeat, int64_t batch, int batches) {
  std::mt19937_64 rng(20240601);
  std::uniform_int_distribution<int64_t> id(0, rows - 1);
  std::bernoulli_distribution repeated(repeat);
  std::vector<Tensor> out;
  for (int b = 0; b < batches; ++b) {
    Tensor ids(DType::kI64, {batch});
    int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < batch; ++i) {
      p[i] = i > 0 && repeated(rng) ? p[std::uniform_int_distribution<int64_t>(0, i - 1)(rng)] : id(rng);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

// A gradient of small, varied values (so Adam does real arithmetic, not a fixed point).
Tensor Gradient(Shape shape) {
  Tensor g(DType::kF32, std::move(shape));
  float* p = g.data<float>();
  for (int64_t i = 0; i < g.num_elements(); ++i) p[i] = 1e-3f * static_cast<float>(i % 97 - 48);
  return g;
}

bool AllEqual(const Tensor& t, float value) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (p[i] != value) return false;
  }
  return true;
}

struct Config {
  bool quick = false;
  std::string only;  // run only cases whose label contains this
  // Small pushes: "split" puts the PS (and the raw echo server) on CPU 0 and this process
  // on CPU 1, the realistic layout; "same" puts everything on CPU 0; "none" leaves it to the
  // scheduler.
  std::string pin = "split";
  std::string sparse_pin = "none";  // the same for the one-PS sparse cases
  std::string dense_pin = "none";   // and for the one-PS dense cases
  int scale = 1;  // multiplies the full runs' iteration counts (for profiling one case)
  std::string json;  // --json=PATH: where the figures go as JSON; empty: nowhere
};

// ----- small pushes in flight --------------------------------------------------------------------

// `total` pushes of a one-float gradient with `window` in flight, issued from this thread: a
// ring of futures, waiting for the oldest before issuing the next. Appends each push's
// latency (issue to completion seen) to `micros` when given. Pushes per second, 0 on failure.
double PipelinedPushes(PsClient& ps, const std::vector<GradientUpdate>& push, int total, int window,
                       std::vector<double>* micros) {
  std::vector<PsFuture<void>> ring(static_cast<size_t>(window));
  return bench::PipelinedRequests(
      total, window, "small push", [&](size_t slot) { ring[slot] = ps.PushGradientsAsync(push); },
      [&](size_t slot) { return ring[slot].Get(); }, micros);
}

// Pins the PS processes and this process as `config.pin` says; returns a description.
std::string PinForSmallPushes(const Config& config, const std::vector<pid_t>& ps_pids) {
  if (config.pin == "none" || std::thread::hardware_concurrency() < 2) return "unpinned";
  const int mine = config.pin == "same" ? 0 : 1;
  bool ok = bench::PinProcess(getpid(), mine);
  for (pid_t pid : ps_pids) ok = bench::PinProcess(pid, 0) && ok;
  if (!ok) return "pinning refused: unpinned";
  return config.pin == "same" ? "PS, echo server and client all on CPU 0"
                              : "PS and echo server on CPU 0, client process on CPU 1";
}

// A one-PS cluster and a client holding a small SGD variable.
struct SmallPushTarget {
  std::unique_ptr<testutil::LocalCluster> cluster;
  std::unique_ptr<testutil::TestChief> chief;
};

absl::StatusOr<SmallPushTarget> StartSmallPushTarget(bool inline_small_updates) {
  testutil::LocalCluster::Options cluster_options;
  cluster_options.num_ps = 1;
  cluster_options.num_workers = 1;  // idle; a cluster spec needs one
  cluster_options.token = "ps-bench";
  cluster_options.extra_env = {{"ASYNCPS_PS_INLINE_SMALL_UPDATES", inline_small_updates ? "1" : "0"}};
  SmallPushTarget t;
  ASSIGN_OR_RETURN(t.cluster, testutil::LocalCluster::Start(cluster_options));
  ASSIGN_OR_RETURN(t.chief, t.cluster->MakeChief());
  RETURN_IF_ERROR(t.chief->strategy().CreateVariable("small", init::Zeros({1}), opt::SGD(1e-6)).status());
  return t;
}

// Pushes of one f32 (SGD) with 1, 8 and 64 in flight from one thread, to a PS with the default
// dispatch (a small update runs on the I/O thread only while the PS is otherwise quiet,
// net::Dispatch::kAdaptive) and to one that always applies small updates on its I/O thread
// (--ps_inline_small_updates), beside a raw TCP echo of 64-byte messages with as many in
// flight (one system call per message). The three alternate round by round.
bool RunSmallPushes(const Config& config, Report& report) {
  auto inline_target = StartSmallPushTarget(true);
  auto default_target = StartSmallPushTarget(false);
  if (!inline_target.ok() || !default_target.ok()) {
    std::fprintf(stderr, "cannot start the small-push clusters: %s %s\n", inline_target.status().ToString().c_str(),
                 default_target.status().ToString().c_str());
    return false;
  }
  const std::vector<pid_t> ps_pids = {inline_target->cluster->ps_pid(0), default_target->cluster->ps_pid(0)};
  const std::vector<GradientUpdate> push = {{"small", Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}};
  const std::string layout = PinForSmallPushes(config, ps_pids);
  const int server_cpu = layout.rfind("PS", 0) == 0 ? 0 : -1;
  const int rounds = config.quick ? 2 : 6;
  PsClient& inline_ps = inline_target->chief->process().ps();
  PsClient& default_ps = default_target->chief->process().ps();
  bool ok = true;
  std::printf("small push (1 f32, SGD) from one thread (a ring of PsFutures), %s; medians of %d alternating rounds; "
              "load average %s\n",
              layout.c_str(), rounds, bench::LoadAverage().c_str());
  for (int window : {1, 8, 64}) {
    const int total = config.quick ? 500 : (window == 1 ? 4000 : 20000);
    bench::PipelinedEcho echo(64, server_cpu);
    std::vector<double> inline_rates, default_rates, raw_rates;
    std::vector<double> inline_micros, default_micros, raw_micros;
    const bool latency = window == 1;
    // Warm-up: connections, allocator, TCP state.
    const int warmup = std::min(total, 1000);
    ok = PipelinedPushes(inline_ps, push, warmup, window, nullptr) > 0 &&
         PipelinedPushes(default_ps, push, warmup, window, nullptr) > 0 && echo.Run(warmup, window, nullptr) > 0;
    for (int r = 0; ok && r < rounds; ++r) {
      inline_rates.push_back(PipelinedPushes(inline_ps, push, total, window, latency ? &inline_micros : nullptr));
      default_rates.push_back(PipelinedPushes(default_ps, push, total, window, latency ? &default_micros : nullptr));
      raw_rates.push_back(echo.Run(total, window, latency ? &raw_micros : nullptr));
      ok = inline_rates.back() > 0 && default_rates.back() > 0 && raw_rates.back() > 0;
    }
    if (!ok) break;
    // The headline figure is the default PS (adaptive dispatch); always-inline is the option.
    const double rate = Median(default_rates);
    const double raw_rate = Median(raw_rates);
    const double ratio = rate / raw_rate;
    const std::string label = absl::StrFormat("ps=1 small push %d in flight", window);
    const bool met = report.Add({.name = label,
                                 .value = rate,
                                 .unit = "req/s",
                                 .reference = "raw echo",
                                 .reference_value = raw_rate,
                                 .aim = window == 64  ? kSmallPushThroughput
                                        : window == 8 ? kSmallPush8
                                                      : ""});
    report.Add({.name = label + ", inline small updates",
                .value = Median(inline_rates),
                .unit = "req/s",
                .reference = "raw echo",
                .reference_value = raw_rate});
    std::printf(
        "ps=1 small push %2d in flight: %7.0f req/s | raw echo %7.0f req/s  ratio %.2f%s | inline small updates "
        "%7.0f req/s (%.2fx raw)\n",
        window, rate, raw_rate, ratio,
        window == 64  ? absl::StrFormat("  %s (>= %.1f)", Verdict(met), kSmallPushThroughputAim).c_str()
        : window == 8 ? absl::StrFormat("  %s (>= %.1f)", Verdict(met), kSmallPush8Aim).c_str()
                      : "",
        Median(inline_rates), Median(inline_rates) / raw_rate);
    if (latency) {
      const double p50 = Median(default_micros);
      const double raw_p50 = Median(raw_micros);
      const bool latency_met = report.Add({.name = "ps=1 small push p50 latency, 1 in flight",
                                           .value = p50,
                                           .unit = "us",
                                           .reference = "raw round trip",
                                           .reference_value = raw_p50,
                                           .aim = kSmallPushLatency});
      report.Add({.name = "ps=1 small push p99 latency, 1 in flight",
                  .value = Percentile(default_micros, 0.99),
                  .unit = "us",
                  .reference = "raw round trip",
                  .reference_value = Percentile(raw_micros, 0.99)});
      report.Add({.name = "ps=1 small push p50 latency, 1 in flight, inline small updates",
                  .value = Median(inline_micros),
                  .unit = "us",
                  .reference = "raw round trip",
                  .reference_value = raw_p50});
      std::printf("ps=1 small push p50 latency, 1 in flight: %.1f us (p99 %.0f) | raw round trip %.1f us (p99 %.0f)  "
                  "ratio %.2f  %s (<= %.1f) | inline small updates %.1f us (%.2fx raw)\n",
                  p50, Percentile(default_micros, 0.99), raw_p50, Percentile(raw_micros, 0.99), p50 / raw_p50,
                  Verdict(latency_met), kSmallPushLatencyAim, Median(inline_micros), Median(inline_micros) / raw_p50);
    }
    std::fflush(stdout);
  }
  if (layout.rfind("PS", 0) == 0) {
    for (pid_t pid : ps_pids) bench::UnpinProcess(pid);
    bench::UnpinProcess(getpid());
  }
  return ok;
}

// Pins a one-PS cluster for the dense or the sparse cases (`what`) as `pin` says (--dense_pin,
// --sparse_pin; split: the PS and the raw receiver on CPU 0, this process on CPU 1), and unpins
// when destroyed. With 2 PS nothing is pinned: one CPU would serialise the two PS that should
// work at once.
class OnePsPinning {
 public:
  OnePsPinning(int num_ps, const Config& config, const std::string& pin, const char* what,
               testutil::LocalCluster& cluster) {
    if (num_ps != 1) return;
    const std::vector<pid_t> ps_pids = {cluster.ps_pid(0)};
    Config pinned = config;
    pinned.pin = pin;
    pinned_ = PinForSmallPushes(pinned, ps_pids).rfind("PS", 0) == 0;
    if (pinned_) ps_pid_ = ps_pids[0];
    std::printf("ps=1 %s cases: %s\n", what,
                !pinned_ ? "unpinned"
                : pin == "same" ? "PS, raw receiver and client all on CPU 0"
                                : "PS and raw receiver on CPU 0, client process on CPU 1");
    std::fflush(stdout);
  }
  ~OnePsPinning() {
    if (!pinned_) return;
    bench::UnpinProcess(ps_pid_);
    bench::UnpinProcess(getpid());
  }
  OnePsPinning(const OnePsPinning&) = delete;
  OnePsPinning& operator=(const OnePsPinning&) = delete;

  // Where the raw reference's receiver runs: beside the PS.
  int receiver_cpu() const { return pinned_ ? 0 : -1; }

 private:
  bool pinned_ = false;
  pid_t ps_pid_ = 0;
};

// The main job's step on the wire for each gradient compression (core/compression.h): a push
// of the Fashion-MNIST MLP's gradients (235k floats, Adam on the PS) with the next pull riding
// on it (PsClient::PushGradientsAndReadAsync, as examples/fmnist_training.cc steps), one step
// in flight. Bytes on the wire per step are this process's TCP bytes (sent + received, as the
// kernel counts them: frames, headers and all) over the steps; examples/s is steps/s x 128
// (the job's batch). The reference is compression none, measured in the same run.
bool RunCompressedSteps(int num_ps, const Config& config, testutil::TestChief& chief, Report& report) {
  constexpr int kBatch = 128;
  const std::vector<std::pair<std::string, Shape>> layers = {
      {"mlp/w1", {784, 256}}, {"mlp/b1", {256}}, {"mlp/w2", {256, 128}},
      {"mlp/b2", {128}},      {"mlp/w3", {128, 10}}, {"mlp/b3", {10}}};
  std::vector<GradientUpdate> gradients;
  std::vector<std::string> names;
  for (const auto& [name, shape] : layers) {
    auto variable = chief.strategy().CreateVariable(name, init::Constant(shape, 0.01), opt::Adam(1e-4f));
    if (!variable.ok()) {
      std::fprintf(stderr, "cannot create %s: %s\n", name.c_str(), variable.status().ToString().c_str());
      return false;
    }
    gradients.push_back({name, Gradient(shape), std::nullopt});
    names.push_back(name);
  }
  const int steps = config.quick ? 10 : 300 * config.scale;
  double reference_steps_per_s = 0;
  for (const char* text : {"none", "bf16", "int8", "topk:0.01"}) {
    PsClient::Options options;
    options.compression = ParseCompression(text).value();
    options.shard_map = chief.process().ps().shard_map();
    PsClient client(chief.process().ps().connections(), chief.process().directory(), options);
    auto step = [&] { return client.PushGradientsAndReadAsync(gradients, names).Get().status(); };
    for (int i = 0; i < 3; ++i) {  // warm: connections, whole-value blocks, residuals
      if (absl::Status s = step(); !s.ok()) {
        std::fprintf(stderr, "%s step: %s\n", text, s.ToString().c_str());
        return false;
      }
    }
    absl::StatusOr<bench::TcpBytes> before_table = bench::ReadTcpBytes();
    absl::StatusOr<std::map<uint64_t, int64_t>> before =
        before_table.ok() ? bench::SocketBytesOf(getpid(), *before_table) : before_table.status();
    std::vector<double> seconds;
    seconds.reserve(steps);
    const auto begin = Clock::now();
    for (int i = 0; i < steps; ++i) {
      const auto t0 = Clock::now();
      if (absl::Status s = step(); !s.ok()) {
        std::fprintf(stderr, "%s step: %s\n", text, s.ToString().c_str());
        return false;
      }
      seconds.push_back(Seconds(t0, Clock::now()));
    }
    const double total = Seconds(begin, Clock::now());
    absl::StatusOr<bench::TcpBytes> after_table = bench::ReadTcpBytes();
    double bytes_per_step = -1;
    if (before.ok() && after_table.ok()) {
      absl::StatusOr<std::map<uint64_t, int64_t>> after = bench::SocketBytesOf(getpid(), *after_table);
      if (after.ok()) bytes_per_step = static_cast<double>(bench::SocketBytesMoved(*before, *after)) / steps;
    }
    const double steps_per_s = steps / total;
    if (reference_steps_per_s == 0) reference_steps_per_s = steps_per_s;
    const std::string label = absl::StrFormat("ps=%d mlp step %s", num_ps, text);
    report.Add({.name = label + " examples/s",
                .value = steps_per_s * kBatch,
                .unit = "examples/s",
                .reference = "compression none",
                .reference_value = reference_steps_per_s * kBatch});
    report.Add({.name = label + " bytes on the wire per step", .value = bytes_per_step, .unit = "bytes"});
    std::printf("ps=%d mlp step (push+pull, Adam) %-10s %8.0f examples/s (%.2fx none)  %9.0f bytes/step on the wire  "
                "p50 %.2f ms\n",
                num_ps, text, steps_per_s * kBatch, steps_per_s / reference_steps_per_s, bytes_per_step,
                Median(seconds) * 1e3);
    std::fflush(stdout);
  }
  return true;
}

// Runs every selected case against a fresh cluster of `num_ps` PS processes, adding its figures
// to `report`. False on failure.
bool RunCluster(int num_ps, const Config& config, Report& report) {
  auto selected = [&](const char* what, const std::string& size) {
    return absl::StrFormat("ps=%d %s %s", num_ps, what, size).find(config.only) !=
           std::string::npos;
  };
  testutil::LocalCluster::Options cluster_options;
  cluster_options.num_ps = num_ps;
  // A cluster spec needs a worker; it stays idle (the bench process talks to the PS itself).
  cluster_options.num_workers = 1;
  cluster_options.token = "ps-bench";
  auto cluster = testutil::LocalCluster::Start(cluster_options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cannot start cluster: %s\n", cluster.status().ToString().c_str());
    return false;
  }
  std::shared_ptr<const Partitioner> partitioner;
  if (num_ps > 1) partitioner = *FixedShardsPartitioner::Create(num_ps);
  auto chief = (*cluster)->MakeChief(partitioner);
  if (!chief.ok()) {
    std::fprintf(stderr, "cannot start the chief: %s\n", chief.status().ToString().c_str());
    return false;
  }
  ParameterServerStrategy& strategy = (*chief)->strategy();
  PsClient& ps = (*chief)->process().ps();
  auto iterations = [&config](Iterations i) { return config.quick ? i.quick : i.full * config.scale; };

  // The fixed cost of one call, which dominates small sparse batches: an empty RPC against a
  // 1-byte raw transfer (each including its round trip).
  if (selected("call floor", "")) {
    Timing floor =
        Measure(1, 1, config.quick ? 50 : 2000, [&] { return ps.Health(0, absl::Seconds(10)); });
    if (!floor.ok) return false;
    std::printf("ps=%d call floor: empty RPC (ps.Health) %.0f us | raw TCP 1 byte + ack %.0f us\n",
                num_ps, floor.op_seconds * 1e6, floor.raw_seconds * 1e6);
    report.Add({.name = absl::StrFormat("ps=%d call floor (empty RPC)", num_ps),
                .value = floor.op_seconds * 1e6,
                .unit = "us",
                .reference = "raw TCP 1 byte + ack",
                .reference_value = floor.raw_seconds * 1e6});
  }

  // The dedup cases' closures: one coordinator whose closures finish in order, one per
  // iteration (ids never restart: a closure below the watermark would be skipped as a zombie).
  constexpr uint64_t kCoordinator = uint64_t{1} << 40;
  uint64_t closure = kCoordinator;

  // Dense: pull (checked against the initial value first), then push with Adam.
  std::optional<OnePsPinning> dense_pinning;
  for (const auto& [rows, its] :
       {std::pair{int64_t{1024}, kDense4MiB}, std::pair{int64_t{16384}, kDense64MiB}}) {
    const size_t bytes = static_cast<size_t>(rows * kDenseCols) * sizeof(float);
    const bool pull_selected = selected("dense pull", SizeLabel(bytes));
    const bool push_selected = selected("dense push+Adam", SizeLabel(bytes));
    const bool dedup_selected = selected("dense push+Adam dedup", SizeLabel(bytes));
    if (!pull_selected && !push_selected && !dedup_selected) continue;
    if (!dense_pinning) dense_pinning.emplace(num_ps, config, config.dense_pin, "dense", **cluster);
    const std::string name = absl::StrFormat("dense_%s", SizeLabel(bytes));
    auto variable =
        strategy.CreateVariable(name, init::Constant({rows, kDenseCols}, 0.5), opt::Adam());
    if (!variable.ok()) {
      std::fprintf(stderr, "cannot create %s: %s\n", name.c_str(),
                   variable.status().ToString().c_str());
      return false;
    }
    auto first = ps.Read({name});
    if (!first.ok() || (*first)[0].num_elements() != rows * kDenseCols ||
        !AllEqual((*first)[0], 0.5f)) {
      std::fprintf(stderr, "dense read of %s returned a wrong value\n", name.c_str());
      return false;
    }
    if (pull_selected) {
      Timing pull =
          Measure(num_ps, bytes, iterations(its), [&] { return ps.Read({name}).status(); },
                  dense_pinning->receiver_cpu());
      if (!pull.ok) return false;
      ReportDense(report, num_ps, "dense pull", bytes, pull, kDensePull);
    }
    if (push_selected) {
      const std::vector<GradientUpdate> push = {{name, Gradient({rows, kDenseCols}), std::nullopt}};
      Timing adam = Measure(num_ps, bytes, iterations(its), [&] { return ps.PushGradients(push); },
                            dense_pinning->receiver_cpu());
      if (!adam.ok) return false;
      adam.adam_seconds = AdamSeconds(bytes, std::max(2, std::min(iterations(its), 10)));
      ReportDense(report, num_ps, "dense push+Adam", bytes, adam, kDensePush);
    }
    if (dedup_selected) {
      const std::vector<GradientUpdate> push = {{name, Gradient({rows, kDenseCols}), std::nullopt}};
      auto tagged = [&] {
        ++closure;
        return ps.PushGradients(push, ps::UpdateTag{kCoordinator, closure, /*sequence=*/1, closure});
      };
      auto untagged = [&] { return ps.PushGradients(push); };
      // Twice the push case's iterations: the difference sought is small beside the noise.
      auto t = MeasurePair(2 * iterations(its), tagged, untagged);
      if (!t) return false;
      const bool met = report.Add({.name = absl::StrFormat("ps=%d dense push+Adam %s dedup on", num_ps,
                                                           SizeLabel(bytes)),
                                   .value = t->a_seconds * 1e3,
                                   .unit = "ms",
                                   .reference = "dedup off",
                                   .reference_value = t->b_seconds * 1e3,
                                   .ratio = t->ratio,
                                   .aim = kDedup,
                                   .note = "ratio: median of paired on/off ratios"});
      std::printf(
          "ps=%d %-17s %-6s dedup on %7.2f ms | off %7.2f ms  ratio on/off %.3f (paired; of medians %.3f)  "
          "%-10s (<= %.2f)\n",
          num_ps, "dense push+Adam", SizeLabel(bytes).c_str(), t->a_seconds * 1e3, t->b_seconds * 1e3, t->ratio,
          t->a_seconds / t->b_seconds, Verdict(met), kDedupCostAim);
      std::fflush(stdout);
    }
  }

  dense_pinning.reset();  // unpinned before the sparse cases pin as they are told

  if (selected("mlp step", "") && !RunCompressedSteps(num_ps, config, **chief, report)) return false;

  // Sparse: [rows, 64] tables, one with SGD (gathered and pushed) and one with Adam (pushed).
  const int64_t table_rows = config.quick ? kQuickTableRows : kTableRows;
  std::optional<OnePsPinning> pinning;
  bool sgd_created = false;
  bool adam_created = false;
  for (const auto& [batch, its] :
       {std::pair{int64_t{1000}, kSparse1k}, std::pair{int64_t{10000}, kSparse10k}}) {
    const std::string size = std::to_string(batch);
    const bool gather_selected = selected("sparse gather", size);
    const bool sgd_selected = selected("sparse push+SGD", size);
    const bool adam_selected = selected("sparse push+Adam", size);
    if (!gather_selected && !sgd_selected && !adam_selected) continue;
    auto create = [&](const std::string& name, const OptimizerConfig& optimizer, bool& created) {
      if (created) return true;
      auto variable = strategy.CreateVariable(name, init::Uniform({table_rows, kEmbeddingDim}), optimizer);
      if (!variable.ok()) {
        std::fprintf(stderr, "cannot create %s: %s\n", name.c_str(), variable.status().ToString().c_str());
        return false;
      }
      created = true;
      return true;
    };
    if ((gather_selected || sgd_selected) && !create("table_sgd", opt::SGD(1e-3), sgd_created)) return false;
    if (adam_selected && !create("table_adam", opt::Adam(), adam_created)) return false;
    if (!pinning) pinning.emplace(num_ps, config, config.sparse_pin, "sparse", **cluster);
    const std::vector<Tensor> ids = UniformIdBatches(table_rows, kRepeatFraction, batch, kIdBatches);
    const size_t row_bytes = static_cast<size_t>(batch * kEmbeddingDim) * sizeof(float);
    size_t next = 0;
    if (gather_selected) {
      auto rows = ps.Gather("table_sgd", ids[0]);
      if (!rows.ok() || rows->rank() != 2 || rows->dim(0) != batch || rows->dim(1) != kEmbeddingDim) {
        std::fprintf(stderr, "gather returned a wrong shape\n");
        return false;
      }
      Timing gather = Measure(
          num_ps, row_bytes, iterations(its),
          [&] { return ps.Gather("table_sgd", ids[next++ % ids.size()]).status(); }, pinning->receiver_cpu());
      if (!gather.ok) return false;
      ReportSparse(report, num_ps, "sparse gather", batch, gather, kSparse);
    }
    const Tensor gradient = Gradient({batch, kEmbeddingDim});
    for (const auto& [selected_push, what, name] :
         {std::tuple{sgd_selected, "sparse push+SGD", "table_sgd"},
          std::tuple{adam_selected, "sparse push+Adam", "table_adam"}}) {
      if (!selected_push) continue;
      const std::string table = name;
      Timing push = Measure(
          num_ps, row_bytes, iterations(its),
          [&] { return ps.PushGradients({{table, gradient, ids[next++ % ids.size()]}}); },
          pinning->receiver_cpu());
      if (!push.ok) return false;
      ReportSparse(report, num_ps, what, batch, push, kSparse);
    }
  }
  return true;
}

int Run(const Config& config, Report& report) {
  std::printf(
      "ps_bench%s: real PS processes on loopback; medians; PS op and raw TCP alternate per "
      "iteration\n",
      config.quick ? " --quick" : "");
  std::fflush(stdout);
  bench::Aims& aims = report.aims();
  aims.Declare(kSmallPushThroughput, bench::AimBound::kAtLeast, kSmallPushThroughputAim);
  aims.Declare(kSmallPush8, bench::AimBound::kAtLeast, kSmallPush8Aim);
  aims.Declare(kSmallPushLatency, bench::AimBound::kAtMost, kSmallPushLatencyAim);
  aims.Declare(kDensePush, bench::AimBound::kAtLeast, kDensePushAim);
  aims.Declare(kDensePull, bench::AimBound::kAtLeast, kDensePullAim);
  aims.Declare(kSparse, bench::AimBound::kAtLeast, kSparseAim);
  aims.Declare(kDedup, bench::AimBound::kAtMost, kDedupCostAim);
  if (std::string("ps=1 small push").find(config.only) != std::string::npos &&
      !RunSmallPushes(config, report)) {
    std::printf("small push FAILED (see stderr)\n");
    return 1;
  }
  for (int num_ps : {1, 2}) {
    if (!RunCluster(num_ps, config, report)) {
      std::printf("ps=%d FAILED (see stderr)\n", num_ps);
      return 1;
    }
  }
  // Ratios against raw references (PS figure / raw TCP of the same bytes; dedup on/off).
  std::printf("%s\n", aims.Summary().c_str());
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  asyncps::Config config;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      config.quick = true;
    } else if (std::strncmp(argv[i], "--only=", 7) == 0) {
      config.only = argv[i] + 7;
    } else if (asyncps::bench::ParseJsonFlag(argv[i], &config.json)) {
    } else if (std::strncmp(argv[i], "--scale=", 8) == 0 && std::atoi(argv[i] + 8) > 0) {
      config.scale = std::atoi(argv[i] + 8);
    } else if (std::strncmp(argv[i], "--sparse_pin=", 13) == 0 &&
               (std::strcmp(argv[i] + 13, "split") == 0 || std::strcmp(argv[i] + 13, "same") == 0 ||
                std::strcmp(argv[i] + 13, "none") == 0)) {
      config.sparse_pin = argv[i] + 13;
    } else if (std::strncmp(argv[i], "--dense_pin=", 12) == 0 &&
               (std::strcmp(argv[i] + 12, "split") == 0 || std::strcmp(argv[i] + 12, "same") == 0 ||
                std::strcmp(argv[i] + 12, "none") == 0)) {
      config.dense_pin = argv[i] + 12;
    } else if (std::strncmp(argv[i], "--pin=", 6) == 0 &&
               (std::strcmp(argv[i] + 6, "split") == 0 || std::strcmp(argv[i] + 6, "same") == 0 ||
                std::strcmp(argv[i] + 6, "none") == 0)) {
      config.pin = argv[i] + 6;
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only=SUBSTRING] [--pin=split|same|none] [--sparse_pin=split|same|none] "
                   "[--dense_pin=split|same|none] [--scale=N] [--json=PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  // Warnings only: info lines would interleave with the results.
  asyncps::InitLogging("bench", 0, "warn");
  asyncps::bench::Report report(argc, argv);
  return report.Finish(config.json, asyncps::Run(config, report));
}
