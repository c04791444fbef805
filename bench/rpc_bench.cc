// Round-trip latency and throughput of our RPC against a plain Boost.Asio TCP echo of the same
// payload, measured in the same run over loopback.
//
// Usage: rpc_bench [--quick] [--only=SUBSTRING] [--pin=split|same|none] [--windows=1,8,64]
//                  [--json=PATH]
//
// Cases (--only runs those whose label contains SUBSTRING):
//   * "64B", "64KiB", "1MiB", "16MiB": blocking Call round trips against a blocking raw echo of
//     the same payload, p50/p99 latency and MB/s;
//   * "in flight": 64-byte calls with 1, 8 and 64 in flight from one thread (a ring of
//     CallAsync completions, waiting for the oldest before issuing the next), to an echo with
//     adaptive dispatch (net::Dispatch::kAdaptive, as small PS updates) and to one always on the
//     server's I/O thread, against a raw echo
//     with as many in flight on one connection (one system call per message per side), calls/s
//     and, at 1 in flight, p50/p99 latency;
//   * "hand-offs": a caller posting to the client's I/O thread and waiting for it, the thread
//     hand-off a blocking call pays beyond the network round trip (twice).
// Both sides run in alternating rounds, so noise from the (shared) machine lands on both
// figures alike rather than on whichever ran second. Exits 0 whether or not the aims are met:
// it is a measurement, not a test. An aim none of whose cases ran (--only, --windows) is
// reported "not run" (bench/aims.h); --json=PATH also writes the figures as JSON
// (bench/report.h).
//
// Pinning (--pin): "split" (the default, the realistic layout) puts the server's I/O and
// handler threads and the raw echo servers on CPU 0 and the calling thread and the client's I/O thread on
// CPU 1; "same" puts every thread on CPU 0; "none" leaves placement to the scheduler. On a VM
// with shared vCPUs a wake-up that crosses vCPUs costs far more than one on the same vCPU,
// and unpinned threads land on either, so unpinned small-message latencies (raw included) are
// bimodal from run to run.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/aims.h"
#include "bench/pipelined_echo.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "core/one_shot_event.h"
#include "core/sync.h"
#include "core/logging.h"
#include "core/tensor.h"
#include "net/asio.h"
#include "net/event_loop.h"
#include "net/message.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "net/test_messages.capnp.h"

namespace asyncps::net {
namespace {

using bench::Median;
using bench::Percentile;
using bench::Report;
using bench::Verdict;

using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "bench";
constexpr char kEchoMethod[] = "bench.Echo";
// The same echo with the dispatch small PS updates use (net::Dispatch::kAdaptive).
constexpr char kAdaptiveEchoMethod[] = "bench.AdaptiveEcho";

// The two aims from the issue.
constexpr double kMaxSmallLatencyRatio = 1.3;  // rpc p50 / raw p50 at 64 B
constexpr double kMinLargeThroughputRatio = 0.9;  // rpc MB/s / raw MB/s at 16 MiB
constexpr double kMinInFlightThroughputRatio = 1.3;  // rpc calls/s / raw echoes/s, 64 in flight

// The aims' names in the summary and the JSON report.
constexpr char kSmallLatencyAim[] = "64B p50 latency";
constexpr char kLargeThroughputAim[] = "16MiB throughput";
constexpr char kInFlightLatencyAim[] = "1 in flight p50 latency";
constexpr char kInFlightThroughputAim[] = "64 in flight throughput";

struct SizeCase {
  size_t bytes;
  const char* label;
  int iterations;        // per side, full run
  int quick_iterations;  // per side, --quick
};

// Iterations are sized for roughly equal wall time per case (~2-4 s on two shared cores).
constexpr SizeCase kCases[] = {
    {64, "64B", 20000, 1000},
    {64 << 10, "64KiB", 5000, 300},
    {1 << 20, "1MiB", 800, 40},
    {16 << 20, "16MiB", 50, 6},
};

// Rounds per case; rpc and raw alternate round by round.
constexpr int kRounds = 10;

struct Samples {
  std::vector<double> micros;  // one per round trip
  double seconds = 0;          // wall time of all measured round trips
  size_t round_trips = 0;

  double Percentile(double p) const { return bench::Percentile(micros, p); }
  double MegabytesPerSecond(size_t bytes) const {
    return seconds > 0 ? static_cast<double>(bytes) * round_trips / seconds / 1e6 : 0;
  }
};

// ----- raw reference: blocking Asio echo of exactly `bytes` bytes ------------------------------

// A server thread that accepts one connection and echoes fixed-size messages until the client
// closes it. The buffer is allocated once, so the reference pays no per-message allocation or
// framing. It is the floor for small messages; around 1 MiB it is not a strict one, because a
// blocking read wakes for every chunk that arrives and the two threads ping-pong more often
// than an epoll loop does.
class RawEchoServer {
 public:
  // `cpu` >= 0 pins the server thread there.
  RawEchoServer(size_t bytes, int cpu)
      : acceptor_(context_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        buffer_(bytes) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this, cpu] {
      if (cpu >= 0) bench::PinTask(0, cpu);
      Serve();
    });
  }
  ~RawEchoServer() { thread_.join(); }

  uint16_t port() const { return port_; }

 private:
  void Serve() {
    boost::system::error_code ec;
    tcp::socket socket(context_);
    acceptor_.accept(socket, ec);
    if (ec) return;
    socket.set_option(tcp::no_delay(true), ec);
    for (;;) {
      asio::read(socket, asio::buffer(buffer_), TransferAllUncapped(), ec);
      if (ec) return;  // the client closed: done
      asio::write(socket, asio::buffer(buffer_), TransferAllUncapped(), ec);
      if (ec) return;
    }
  }

  asio::io_context context_;
  tcp::acceptor acceptor_;
  std::vector<uint8_t> buffer_;
  uint16_t port_ = 0;
  std::thread thread_;
};

class RawEchoClient {
 public:
  RawEchoClient(uint16_t port, size_t bytes) : socket_(context_), out_(bytes, 0x5a), in_(bytes) {
    socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    socket_.set_option(tcp::no_delay(true));
  }

  // One blocking round trip; false on a socket error or a corrupted echo.
  bool RoundTrip() {
    boost::system::error_code ec;
    asio::write(socket_, asio::buffer(out_), TransferAllUncapped(), ec);
    if (ec) return false;
    asio::read(socket_, asio::buffer(in_), TransferAllUncapped(), ec);
    return !ec;
  }

  bool EchoMatches() const { return in_ == out_; }

  void Close() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

 private:
  asio::io_context context_;
  tcp::socket socket_;
  std::vector<uint8_t> out_;
  std::vector<uint8_t> in_;
};

// ----- our RPC -----------------------------------------------------------------------------------

// Answers on the server's I/O thread, returning the request's payload as the response payload.
// The response tensor views the request frame's block in place (the tensor's shared owner
// keeps the frame alive until the response is written), so the server copies nothing.
absl::Status Echo(const RequestContext&, const InMessage& req, OutMessage* resp) {
  auto refs = req.RequestBody<testwire::ReadResponse>().getTensors();
  if (refs.size() != 1) return absl::InvalidArgumentError("echo wants exactly one tensor");
  absl::StatusOr<Tensor> payload = req.TensorAt(refs[0]);
  if (!payload.ok()) return payload.status();
  auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(1);
  resp->AddTensor(*payload, out[0]);
  return absl::OkStatus();
}

OutMessage EchoRequest(const Tensor& payload) {
  OutMessage request;
  auto refs = request.InitRequestBody<testwire::ReadResponse>().initTensors(1);
  request.AddTensor(payload, refs[0]);
  return request;
}

// Checks that `response` carries a tensor equal to `sent`.
bool EchoMatches(const InMessage& response, const Tensor& sent) {
  bool ok = false;
  absl::Status decode = CatchDecodeErrors([&] {
    auto refs = response.ResponseBody<testwire::ReadResponse>().getTensors();
    if (refs.size() != 1) return absl::OkStatus();
    absl::StatusOr<Tensor> got = response.TensorAt(refs[0]);
    ok = got.ok() && got->Equals(sent);
    return absl::OkStatus();
  });
  return decode.ok() && ok;
}

bool RpcRoundTrip(RpcClient& client, const Tensor& payload, const Tensor* verify) {
  absl::StatusOr<InMessage> response = client.Call(kEchoMethod, EchoRequest(payload));
  if (!response.ok()) {
    std::fprintf(stderr, "rpc echo failed: %s\n", response.status().ToString().c_str());
    return false;
  }
  return verify == nullptr || EchoMatches(*response, *verify);
}

// ----- measurement -------------------------------------------------------------------------------

// Times `iterations` calls of `round_trip` into `samples`; false as soon as one fails.
template <typename Fn>
bool Measure(int iterations, Samples& samples, Fn&& round_trip) {
  const Clock::time_point begin = Clock::now();
  Clock::time_point last = begin;
  for (int i = 0; i < iterations; ++i) {
    if (!round_trip()) return false;
    const Clock::time_point now = Clock::now();
    samples.micros.push_back(std::chrono::duration<double, std::micro>(now - last).count());
    last = now;
  }
  samples.seconds += std::chrono::duration<double>(last - begin).count();
  samples.round_trips += static_cast<size_t>(iterations);
  return true;
}

// A caller thread handing work to an EventLoop and blocking until the loop answers (as a
// blocking call waits for its answer): two thread hand-offs, one of which every blocking call
// pays on top of the network round trip (the loop thread reads the answer and wakes the caller).
double LoopHopMicrosP50(EventLoop& loop, int iterations) {
  Samples samples;
  Measure(iterations, samples, [&] {
    OneShotEvent done;
    loop.Post([&] { done.Notify(); });
    done.Wait();
    return true;
  });
  return samples.Percentile(0.5);
}

// One call's completion, waited for by the thread that issued it, as a blocking Call waits.
class CallSlot {
 public:
  // The callback for the next call; the previous one must have completed and been waited for.
  RpcClient::Callback Callback() {
    auto state = std::make_shared<State>();
    state_ = state;
    return [state](absl::StatusOr<InMessage> result) {
      state->status = result.status();
      state->ready.Notify();
    };
  }
  absl::Status Wait() {
    state_->ready.Wait();
    return state_->status;
  }

 private:
  struct State {
    OneShotEvent ready;
    absl::Status status;  // written before `ready` is notified
  };
  std::shared_ptr<State> state_;
};

// `total` 64-byte echo calls with `window` in flight, issued from this thread: a ring of
// CallAsync completions, waiting for the oldest before issuing the next. Appends each call's
// latency (issue to completion seen) to `micros` when given. Calls per second, 0 on failure.
double PipelinedCalls(RpcClient& client, const char* method, const Tensor& payload, int total, int window,
                      std::vector<double>* micros) {
  std::vector<CallSlot> ring(static_cast<size_t>(window));
  return bench::PipelinedRequests(
      total, window, "rpc echo",
      [&](size_t slot) {
        client.CallAsync(method, EchoRequest(payload), absl::InfiniteDuration(), ring[slot].Callback());
      },
      [&](size_t slot) { return ring[slot].Wait(); }, micros);
}

struct Config {
  bool quick = false;
  std::string only;  // run only cases whose label contains this
  std::string pin = "split";
  std::vector<int> windows = {1, 8, 64};  // calls in flight for the "in flight" cases
  std::string json;  // --json=PATH: where the figures go as JSON; empty: nowhere
};

// Where the threads run: the server side (server I/O thread, raw echo servers) and the client
// side (calling thread, client I/O thread); -1 when unpinned.
struct Layout {
  int server_cpu = -1;
  int client_cpu = -1;
  std::string description = "unpinned";
};

Layout ChooseLayout(const Config& config) {
  Layout layout;
  if (config.pin == "none" || std::thread::hardware_concurrency() < 2) return layout;
  layout.server_cpu = 0;
  layout.client_cpu = config.pin == "same" ? 0 : 1;
  layout.description = config.pin == "same"
                           ? "every thread on CPU 0"
                           : "server threads and raw echo servers on CPU 0, caller and client I/O thread on CPU 1";
  return layout;
}

// Pins `loop`'s thread to `cpu` (nothing when -1); false when refused.
bool PinLoop(EventLoop& loop, int cpu) {
  if (cpu < 0) return true;
  bool ok = false;
  Notification pinned;
  loop.Post([&] {
    ok = bench::PinTask(0, cpu);
    pinned.Notify();
  });
  pinned.WaitForNotification();
  return ok;
}

// 64-byte calls with 1, 8 and 64 in flight from this thread beside a raw echo with as many
// in flight and the same pinning, in alternating rounds; medians of the rounds' rates. Two
// servers' views of the same echo: always on the I/O thread (kInline), and adaptive (the
// dispatch of small PS updates: inline only while nothing else is going on). The headline is
// the adaptive one.
bool RunInFlight(RpcClient& client, const Layout& layout, const std::vector<int>& windows, bool quick,
                 Report& report) {
  const int rounds = quick ? 2 : 6;
  Tensor payload(DType::kU8, {64});
  for (int64_t i = 0; i < 64; ++i) payload.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  std::printf("64B calls in flight from one thread (a ring of CallAsync completions) vs a raw echo with as many "
              "in flight; medians of %d alternating rounds\n",
              rounds);
  for (int window : windows) {
    const int total = quick ? 500 : (window == 1 ? 5000 : 20000);
    bench::PipelinedEcho echo(64, layout.server_cpu);
    const bool latency = window == 1;
    const int warmup = std::min(total, 1000);
    if (PipelinedCalls(client, kAdaptiveEchoMethod, payload, warmup, window, nullptr) <= 0 ||
        PipelinedCalls(client, kEchoMethod, payload, warmup, window, nullptr) <= 0 ||
        echo.Run(warmup, window, nullptr) <= 0) {
      return false;
    }
    std::vector<double> rates, inline_rates, raw_rates, micros, inline_micros, raw_micros;
    for (int r = 0; r < rounds; ++r) {
      rates.push_back(PipelinedCalls(client, kAdaptiveEchoMethod, payload, total, window, latency ? &micros : nullptr));
      inline_rates.push_back(
          PipelinedCalls(client, kEchoMethod, payload, total, window, latency ? &inline_micros : nullptr));
      raw_rates.push_back(echo.Run(total, window, latency ? &raw_micros : nullptr));
      if (rates.back() <= 0 || inline_rates.back() <= 0 || raw_rates.back() <= 0) return false;
    }
    const double rate = Median(rates);
    const double raw_rate = Median(raw_rates);
    const double ratio = rate / raw_rate;
    const std::string label = absl::StrFormat("in flight %d: 64B calls", window);
    const bool met = report.Add({.name = label,
                                 .value = rate,
                                 .unit = "calls/s",
                                 .reference = "raw echo",
                                 .reference_value = raw_rate,
                                 .aim = window == 64 ? kInFlightThroughputAim : ""});
    report.Add({.name = label + ", always-inline echo",
                .value = Median(inline_rates),
                .unit = "calls/s",
                .reference = "raw echo",
                .reference_value = raw_rate});
    std::string aim;
    if (window == 64) {
      aim = absl::StrFormat("  %s (>= %.1f)", Verdict(met), kMinInFlightThroughputRatio);
    }
    std::printf("in flight %2d: rpc %7.0f calls/s | raw echo %7.0f/s  ratio %.2f%s | always-inline echo %7.0f/s (%.2fx raw)\n",
                window, rate, raw_rate, ratio, aim.c_str(), Median(inline_rates), Median(inline_rates) / raw_rate);
    if (latency) {
      const double p50 = Percentile(micros, 0.5);
      const double raw_p50 = Percentile(raw_micros, 0.5);
      const bool latency_met = report.Add({.name = "in flight 1: p50 latency",
                                           .value = p50,
                                           .unit = "us",
                                           .reference = "raw echo",
                                           .reference_value = raw_p50,
                                           .aim = kInFlightLatencyAim});
      report.Add({.name = "in flight 1: p99 latency",
                  .value = Percentile(micros, 0.99),
                  .unit = "us",
                  .reference = "raw echo",
                  .reference_value = Percentile(raw_micros, 0.99)});
      std::printf("in flight  1: rpc p50=%.1fus p99=%.1fus | raw p50=%.1fus p99=%.1fus  ratio p50=%.2f  %s (<= %.1f) | "
                  "always-inline echo p50=%.1fus (%.2fx raw)\n",
                  p50, Percentile(micros, 0.99), raw_p50, Percentile(raw_micros, 0.99), p50 / raw_p50,
                  Verdict(latency_met), kMaxSmallLatencyRatio, Percentile(inline_micros, 0.5),
                  Percentile(inline_micros, 0.5) / raw_p50);
    }
    std::fflush(stdout);
  }
  return true;
}

int Run(const Config& config, Report& report) {
  const Layout layout = ChooseLayout(config);
  // Separate loops so the server and the client each have their own I/O thread, as they would
  // in separate processes.
  EventLoop server_loop;
  EventLoop client_loop;
  // The server's handler threads start in Start() and inherit this thread's CPU: the server's.
  if (!PinLoop(server_loop, layout.server_cpu) || !PinLoop(client_loop, layout.client_cpu) ||
      (layout.server_cpu >= 0 && !bench::PinTask(0, layout.server_cpu))) {
    std::fprintf(stderr, "pinning refused\n");
    return 1;
  }
  RpcServer::Options server_options;
  server_options.role = "bench";
  server_options.token = kToken;
  server_options.handler_threads = 2;  // for bench.AdaptiveEcho under load
  RpcServer server(server_loop, server_options);
  server.Register<testwire::ReadResponse>(kEchoMethod, {"bench"}, Echo, RpcServer::Dispatch::kInline);
  server.Register<testwire::ReadResponse>(kAdaptiveEchoMethod, {"bench"}, Echo, RpcServer::Dispatch::kAdaptive);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "cannot start rpc server: %s\n", s.ToString().c_str());
    return 1;
  }
  if (layout.client_cpu >= 0 && !bench::PinTask(0, layout.client_cpu)) {
    std::fprintf(stderr, "pinning refused\n");
    return 1;
  }
  RpcClient::Options client_options;
  client_options.address = "127.0.0.1:" + std::to_string(server.port());
  client_options.role = "bench";
  client_options.token = kToken;
  RpcClient client(client_loop, client_options);

  std::printf("rpc_bench%s: loopback TCP, TCP_NODELAY, %s; load average %s\n", config.quick ? " --quick" : "",
              layout.description.c_str(), bench::LoadAverage().c_str());
  bench::Aims& aims = report.aims();
  aims.Declare(kSmallLatencyAim, bench::AimBound::kAtMost, kMaxSmallLatencyRatio);
  aims.Declare(kLargeThroughputAim, bench::AimBound::kAtLeast, kMinLargeThroughputRatio);
  aims.Declare(kInFlightLatencyAim, bench::AimBound::kAtMost, kMaxSmallLatencyRatio);
  aims.Declare(kInFlightThroughputAim, bench::AimBound::kAtLeast, kMinInFlightThroughputRatio);
  bool failed = false;
  for (const SizeCase& c : kCases) {
    if (std::string(c.label).find(config.only) == std::string::npos) continue;
    const int iterations = config.quick ? c.quick_iterations : c.iterations;
    const int per_round = std::max(1, iterations / kRounds);
    const int warmup = std::max(2, iterations / 10);

    Tensor payload(DType::kU8, {static_cast<int64_t>(c.bytes)});
    for (int64_t i = 0; i < payload.num_elements(); ++i) payload.data<uint8_t>()[i] = static_cast<uint8_t>(i * 131 + 7);

    RawEchoServer raw_server(c.bytes, layout.server_cpu);
    RawEchoClient raw(raw_server.port(), c.bytes);

    // Warm-up also checks both echoes are correct, so the timed loops need not.
    bool ok = RpcRoundTrip(client, payload, &payload) && raw.RoundTrip() && raw.EchoMatches();
    for (int i = 0; ok && i < warmup; ++i) ok = RpcRoundTrip(client, payload, nullptr) && raw.RoundTrip();
    Samples rpc;
    Samples raw_samples;
    for (int round = 0; ok && round < kRounds; ++round) {
      ok = Measure(per_round, rpc, [&] { return RpcRoundTrip(client, payload, nullptr); }) &&
           Measure(per_round, raw_samples, [&] { return raw.RoundTrip(); });
    }
    raw.Close();
    if (!ok) {
      std::printf("size=%-7s FAILED (see stderr)\n", c.label);
      failed = true;
      continue;
    }
    const double rpc_p50 = rpc.Percentile(0.50);
    const double rpc_p99 = rpc.Percentile(0.99);
    const double raw_p50 = raw_samples.Percentile(0.50);
    const double raw_p99 = raw_samples.Percentile(0.99);
    const double rpc_mbs = rpc.MegabytesPerSecond(c.bytes);
    const double raw_mbs = raw_samples.MegabytesPerSecond(c.bytes);
    const double latency_ratio = rpc_p50 / raw_p50;
    const double throughput_ratio = rpc_mbs / raw_mbs;
    const bool small = c.bytes == 64;
    const bool large = c.bytes == (16 << 20);
    const bool small_met = report.Add({.name = absl::StrCat("size=", c.label, " p50 latency"),
                                       .value = rpc_p50,
                                       .unit = "us",
                                       .reference = "raw echo",
                                       .reference_value = raw_p50,
                                       .aim = small ? kSmallLatencyAim : ""});
    report.Add({.name = absl::StrCat("size=", c.label, " p99 latency"),
                .value = rpc_p99,
                .unit = "us",
                .reference = "raw echo",
                .reference_value = raw_p99});
    const bool large_met = report.Add({.name = absl::StrCat("size=", c.label, " throughput"),
                                       .value = rpc_mbs,
                                       .unit = "MB/s",
                                       .reference = "raw echo",
                                       .reference_value = raw_mbs,
                                       .aim = large ? kLargeThroughputAim : ""});
    std::string latency_aim;
    std::string throughput_aim;
    if (small) {
      latency_aim = absl::StrFormat("  %s (<= %.1f)", Verdict(small_met), kMaxSmallLatencyRatio);
    }
    if (large) {
      throughput_aim =
          absl::StrFormat("  %s (>= %.1f)", Verdict(large_met), kMinLargeThroughputRatio);
    }
    std::printf(
        "size=%-7s rpc p50=%.1fus p99=%.0fus  raw p50=%.1fus p99=%.0fus  ratio p50=%.2f%s  "
        "| rpc %.1f MB/s raw %.1f MB/s ratio=%.2f%s\n",
        c.label, rpc_p50, rpc_p99, raw_p50, raw_p99, latency_ratio, latency_aim.c_str(), rpc_mbs,
        raw_mbs, throughput_ratio, throughput_aim.c_str());
    std::fflush(stdout);
  }

  if (std::string("in flight").find(config.only) != std::string::npos) {
    if (!RunInFlight(client, layout, config.windows, config.quick, report)) {
      std::printf("in flight FAILED (see stderr)\n");
      failed = true;
    }
  }
  if (std::string("hand-offs").find(config.only) != std::string::npos) {
    const double hop = LoopHopMicrosP50(client_loop, config.quick ? 1000 : 10000);
    std::printf("caller->loop->caller hand-offs (Post + OneShotEvent wait): p50=%.1fus\n", hop);
    report.Add({.name = "caller->loop->caller hand-offs p50", .value = hop, .unit = "us"});
  }
  // Ratios: rpc / raw echo of the same payload, calls in flight and pinning.
  std::printf("%s\n", aims.Summary().c_str());
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace asyncps::net

int main(int argc, char** argv) {
  asyncps::net::Config config;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      config.quick = true;
    } else if (std::strncmp(argv[i], "--only=", 7) == 0) {
      config.only = argv[i] + 7;
    } else if (std::strncmp(argv[i], "--pin=", 6) == 0 &&
               (std::strcmp(argv[i] + 6, "split") == 0 || std::strcmp(argv[i] + 6, "same") == 0 ||
                std::strcmp(argv[i] + 6, "none") == 0)) {
      config.pin = argv[i] + 6;
    } else if (asyncps::bench::ParseJsonFlag(argv[i], &config.json)) {
    } else if (std::strncmp(argv[i], "--windows=", 10) == 0) {
      config.windows.clear();
      for (absl::string_view w : absl::StrSplit(argv[i] + 10, ',')) {
        int n = 0;
        if (!absl::SimpleAtoi(w, &n) || n < 1 || n > 4096) {
          std::fprintf(stderr, "--windows: a comma-separated list of 1..4096\n");
          return 2;
        }
        config.windows.push_back(n);
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--only=SUBSTRING] [--pin=split|same|none] [--windows=1,8,64] "
                   "[--json=PATH]\n",
                   argv[0]);
      return 2;
    }
  }
  // Warnings only: the server's "listening" line would interleave with the results.
  asyncps::InitLogging("bench", 0, "warn");
  asyncps::bench::Report report(argc, argv);
  return report.Finish(config.json, asyncps::net::Run(config, report));
}
