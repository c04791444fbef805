// Round-trip latency and throughput of our RPC against a plain Boost.Asio TCP echo of the same
// payload, measured in the same run over loopback.
//
// Usage: rpc_bench [--quick]
//
// For each payload size both sides run in alternating rounds, so noise from the (shared)
// machine lands on both figures alike rather than on whichever ran second. Exits 0 whether or
// not the aims are met: it is a measurement, not a test.
//
// On a VM with shared vCPUs a wakeup that crosses vCPUs can cost ~40-90 us instead of ~3 us,
// and whether two threads share a vCPU is up to the scheduler, so small-message latencies
// (raw included) are bimodal from run to run. `taskset -c 0 rpc_bench` gives stable ratios
// (every hop then costs a same-CPU context switch).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
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

using Clock = std::chrono::steady_clock;

constexpr char kToken[] = "bench";
constexpr char kEchoMethod[] = "bench.Echo";

// The two aims from the issue.
constexpr double kMaxSmallLatencyRatio = 1.3;  // rpc p50 / raw p50 at 64 B
constexpr double kMinLargeThroughputRatio = 0.9;  // rpc MB/s / raw MB/s at 16 MiB

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

  double Percentile(double p) {
    if (micros.empty()) return 0;
    std::sort(micros.begin(), micros.end());
    const size_t i = std::min(micros.size() - 1, static_cast<size_t>(p * micros.size()));
    return micros[i];
  }
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
  explicit RawEchoServer(size_t bytes)
      : acceptor_(context_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        buffer_(bytes) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { Serve(); });
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
      asio::read(socket, asio::buffer(buffer_), ec);
      if (ec) return;  // the client closed: done
      asio::write(socket, asio::buffer(buffer_), ec);
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
    asio::write(socket_, asio::buffer(out_), ec);
    if (ec) return false;
    asio::read(socket_, asio::buffer(in_), ec);
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

// A caller thread handing work to an EventLoop and blocking until the loop answers: the two
// thread hops that a blocking Call adds on top of the network round trip.
double LoopHopMicrosP50(EventLoop& loop, int iterations) {
  Samples samples;
  Measure(iterations, samples, [&] {
    Mutex mu;
    bool done = false;
    loop.Post([&] {
      MutexLock lock(&mu);
      done = true;
    });
    MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return true;
  });
  return samples.Percentile(0.5);
}

const char* Verdict(bool met) { return met ? "AIM MET" : "AIM MISSED"; }

// N calls kept in flight with CallAsync; each completion issues the next call from the loop
// thread. Returns calls per second, or 0 on failure.
double PipelinedCallsPerSecond(RpcClient& client, const Tensor& payload, int total, int window) {
  struct State {
    Mutex mu;
    int issued = 0;
    int completed = 0;
    bool failed = false;
    Notification done;
  };
  auto state = std::make_shared<State>();
  // Self-referencing issue function: the callback of each call may start the next.
  auto issue = std::make_shared<std::function<void()>>();
  *issue = [&client, &payload, state, total, weak = std::weak_ptr<std::function<void()>>(issue)] {
    client.CallAsync(kEchoMethod, EchoRequest(payload), absl::InfiniteDuration(),
                     [state, total, weak](absl::StatusOr<InMessage> response) {
                       bool issue_next = false;
                       bool finished = false;
                       {
                         MutexLock lock(&state->mu);
                         if (!response.ok()) state->failed = true;
                         ++state->completed;
                         if (!state->failed && state->issued < total) {
                           ++state->issued;
                           issue_next = true;
                         }
                         finished = state->completed == state->issued;
                       }
                       if (issue_next) {
                         if (auto next = weak.lock()) (*next)();
                       } else if (finished) {
                         state->done.Notify();
                       }
                     });
  };
  const Clock::time_point begin = Clock::now();
  {
    MutexLock lock(&state->mu);
    state->issued = std::min(window, total);
  }
  for (int i = 0; i < std::min(window, total); ++i) (*issue)();
  state->done.WaitForNotification();
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  MutexLock lock(&state->mu);
  if (state->failed) return 0;
  return state->completed / seconds;
}

int Run(bool quick) {
  // Separate loops so the server and the client each have their own I/O thread, as they would
  // in separate processes.
  EventLoop server_loop;
  EventLoop client_loop;
  RpcServer::Options server_options;
  server_options.role = "bench";
  server_options.token = kToken;
  server_options.handler_threads = 1;  // unused: the echo runs inline
  RpcServer server(server_loop, server_options);
  server.Register<testwire::ReadResponse>(kEchoMethod, {"bench"}, Echo, RpcServer::Dispatch::kInline);
  if (absl::Status s = server.Start(); !s.ok()) {
    std::fprintf(stderr, "cannot start rpc server: %s\n", s.ToString().c_str());
    return 0;
  }
  RpcClient::Options client_options;
  client_options.address = "127.0.0.1:" + std::to_string(server.port());
  client_options.role = "bench";
  client_options.token = kToken;
  RpcClient client(client_loop, client_options);

  std::printf("rpc_bench%s: %d alternating rounds per size, loopback TCP, TCP_NODELAY\n",
              quick ? " --quick" : "", kRounds);
  bool small_met = false;
  bool large_met = false;
  for (const SizeCase& c : kCases) {
    const int iterations = quick ? c.quick_iterations : c.iterations;
    const int per_round = std::max(1, iterations / kRounds);
    const int warmup = std::max(2, iterations / 10);

    Tensor payload(DType::kU8, {static_cast<int64_t>(c.bytes)});
    for (int64_t i = 0; i < payload.num_elements(); ++i) payload.data<uint8_t>()[i] = static_cast<uint8_t>(i * 131 + 7);

    RawEchoServer raw_server(c.bytes);
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
    std::string latency_aim;
    std::string throughput_aim;
    if (c.bytes == 64) {
      small_met = latency_ratio <= kMaxSmallLatencyRatio;
      latency_aim = std::string("  ") + Verdict(small_met) + " (<= 1.3)";
    }
    if (c.bytes == (16 << 20)) {
      large_met = throughput_ratio >= kMinLargeThroughputRatio;
      throughput_aim = std::string("  ") + Verdict(large_met) + " (>= 0.9)";
    }
    std::printf(
        "size=%-7s rpc p50=%.0fus p99=%.0fus  raw p50=%.0fus p99=%.0fus  ratio p50=%.2f%s  "
        "| rpc %.1f MB/s raw %.1f MB/s ratio=%.2f%s\n",
        c.label, rpc_p50, rpc_p99, raw_p50, raw_p99, latency_ratio, latency_aim.c_str(), rpc_mbs,
        raw_mbs, throughput_ratio, throughput_aim.c_str());
    std::fflush(stdout);
  }

  Tensor small(DType::kU8, {64});
  const int pipelined_calls = quick ? 2000 : 20000;
  for (int window : {1, 8, 64}) {
    const double calls_per_second = PipelinedCallsPerSecond(client, small, pipelined_calls, window);
    std::printf("pipelined 64B rpc: %d calls, %2d in flight: %.0f calls/s (%.1fus per call)%s\n",
                pipelined_calls, window, calls_per_second,
                calls_per_second > 0 ? 1e6 / calls_per_second : 0.0,
                window == 1 ? "  [issued from the loop thread: no caller hops]" : "");
  }
  std::printf("caller->loop->caller hop (Post + wait, as in Call): p50=%.1fus\n",
              LoopHopMicrosP50(client_loop, quick ? 1000 : 10000));
  std::printf("aims: 64B p50 ratio %s, 16MiB throughput ratio %s\n", Verdict(small_met),
              Verdict(large_met));
  return 0;
}

}  // namespace
}  // namespace asyncps::net

int main(int argc, char** argv) {
  bool quick;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick)) return 2;
  // Warnings only: the server's "listening" line would interleave with the results.
  asyncps::InitLogging("bench", 0, "warn");
  return asyncps::net::Run(quick);
}
