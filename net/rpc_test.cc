#include <arpa/inet.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/sync.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "core/incarnation.h"
#include "gtest/gtest.h"
#include "net/frame_codec.h"
#include "net/test_messages.capnp.h"
#include "net/peer_absent.h"
#include "net/rpc_client.h"
#include "net/raw_client_testing.h"
#include "net/rpc_server.h"

namespace asyncps::net {
namespace rpc_test_internal {
namespace {

constexpr char kToken[] = "s3cret";
const PeerRoles kCallers = {"worker"};

// A server answering "test.Scale" (multiplies a tensor by a scalar factor), "test.Fail",
// "test.Block" (waits for `release`) and "test.Throw" (reads a body of the wrong shape).
class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(0); }

  void StartServer(int port) {
    RpcServer::Options options;
    options.port = port;
    options.role = "ps";
    options.task_index = 7;
    options.token = kToken;
    server_ = std::make_unique<RpcServer>(loop_, options);
    server_->Register<testwire::ReadResponse>("test.Scale", kCallers, [](const RequestContext&, const InMessage& req, OutMessage* resp) {
      auto refs = req.RequestBody<testwire::ReadResponse>().getTensors();
      if (refs.size() != 2) return absl::InvalidArgumentError("want 2 tensors");
      auto x = req.TensorAt(refs[0]);
      auto k = req.TensorAt(refs[1]);
      if (!x.ok()) return x.status();
      if (!k.ok()) return k.status();
      Tensor y = x->Clone();
      for (float& v : y.flat<float>()) v *= k->data<float>()[0];
      auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(1);
      resp->AddTensor(y, out[0]);
      return absl::OkStatus();
    });
    server_->Register<wire::Empty>("test.Fail", kCallers, [](const RequestContext&, const InMessage&, OutMessage*) {
      return absl::NotFoundError("no such thing");
    });
    server_->Register<wire::Empty>("test.Block", kCallers, [this](const RequestContext&, const InMessage&, OutMessage*) {
      entered_.Notify();
      release_.WaitForNotification();
      return absl::OkStatus();
    });
    server_->Register<testwire::ReadRequest>("test.Throw", kCallers, [](const RequestContext&, const InMessage& req, OutMessage*) {
      auto names = req.RequestBody<testwire::ReadRequest>().getNames();
      for (auto n : names) (void)n.size();
      return absl::OkStatus();
    });
    // Declares an empty body, so nothing checks what it reads: its own reads throw.
    server_->Register<wire::Empty>("test.ThrowUnchecked", kCallers, [](const RequestContext&, const InMessage& req, OutMessage*) {
      auto names = req.RequestBody<testwire::ReadRequest>().getNames();
      for (auto n : names) (void)n.size();
      return absl::OkStatus();
    });
    // Answers whether it ran on the server's I/O thread.
    server_->Register<testwire::ReadResponse>(
        "test.WhereRun", kCallers,
        [this](const RequestContext&, const InMessage&, OutMessage* resp) {
          auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(1);
          resp->AddTensor(Tensor::Scalar<int32_t>(loop_.InLoopThread() ? 1 : 0), out[0]);
          return absl::OkStatus();
        },
        Dispatch::kInlineIfSmall);
    server_->Register<testwire::ReadResponse>(
        "test.WhereRunAdaptive", kCallers,
        [this](const RequestContext&, const InMessage&, OutMessage* resp) {
          auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(1);
          resp->AddTensor(Tensor::Scalar<int32_t>(loop_.InLoopThread() ? 1 : 0), out[0]);
          return absl::OkStatus();
        },
        Dispatch::kAdaptive);
    // A small update that waits for `release_small_` wherever it runs.
    server_->Register<testwire::ReadResponse>(
        "test.BlockAdaptive", kCallers,
        [this](const RequestContext&, const InMessage&, OutMessage*) {
          small_ran_inline_ = loop_.InLoopThread();
          small_entered_.Notify();
          release_small_.WaitForNotification();
          return absl::OkStatus();
        },
        Dispatch::kAdaptive);
    // Reads every placement's name and answers how many it read.
    server_->Register<testwire::SetDirectoryRequest>(
        "test.Directory", kCallers, [](const RequestContext&, const InMessage& req, OutMessage* resp) {
          int64_t read = 0;
          for (auto placement : req.RequestBody<testwire::SetDirectoryRequest>().getVariables()) {
            read += placement.getName().size() == 0 ? 1 : 0;
          }
          auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(1);
          resp->AddTensor(Tensor::Scalar<int64_t>(read), out[0]);
          return absl::OkStatus();
        });
    server_->Register<wire::Empty>("test.ChiefOnly", PeerRoles{"chief"}, [](const RequestContext&, const InMessage&, OutMessage*) {
      return absl::OkStatus();
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  void TearDown() override {
    Release();
    clients_.clear();
    server_.reset();
  }

  RpcClient& NewClient(const std::string& token = kToken,
                       absl::Duration initial_backoff = absl::Milliseconds(20),
                       metrics::RpcMetrics* metrics = nullptr) {
    RpcClient::Options options;
    options.metrics = metrics;
    options.initial_backoff = initial_backoff;
    options.address = "127.0.0.1:" + std::to_string(server_->port());
    options.role = "worker";
    options.task_index = 1;
    options.token = token;
    clients_.push_back(std::make_unique<RpcClient>(loop_, options));
    return *clients_.back();
  }

  static OutMessage ScaleRequest(std::vector<float> x, float k) {
    OutMessage req;
    auto refs = req.InitRequestBody<testwire::ReadResponse>().initTensors(2);
    req.AddTensor(Tensor::FromVector(x), refs[0]);
    req.AddTensor(Tensor::Scalar(k), refs[1]);
    return req;
  }

  static absl::StatusOr<std::vector<float>> Scaled(const absl::StatusOr<InMessage>& resp) {
    if (!resp.ok()) return resp.status();
    auto y = resp->TensorAt(resp->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
    if (!y.ok()) return y.status();
    return std::vector<float>(y->flat<float>().begin(), y->flat<float>().end());
  }

  static absl::StatusOr<std::vector<float>> Scale(RpcClient& client, std::vector<float> x, float k,
                                                  absl::Duration timeout = absl::Seconds(30)) {
    return Scaled(client.Call("test.Scale", ScaleRequest(std::move(x), k), timeout));
  }

  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (!release_small_.HasBeenNotified()) release_small_.Notify();
  }

  EventLoop loop_;
  std::unique_ptr<RpcServer> server_;
  std::vector<std::unique_ptr<RpcClient>> clients_;
  Notification entered_;
  Notification release_;
  Notification small_entered_;
  bool small_ran_inline_ = false;  // written before small_entered_ is notified
  Notification release_small_;
};

using testutil::RawClient;

TEST_F(RpcTest, CallRoundTripsTensorsAndReportsServerIdentity) {
  RpcClient& client = NewClient();
  auto y = Scale(client, {1, 2, 3}, 2.5f);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*y, (std::vector<float>{2.5f, 5.0f, 7.5f}));
  EXPECT_EQ(client.peer().role, "ps");
  EXPECT_EQ(client.peer().task_index, 7);
  EXPECT_EQ(client.peer().incarnation, ProcessIncarnation());
}

TEST_F(RpcTest, AnAnswerIsReadStraightWhereTheCallPlacesIt) {
  RpcClient& client = NewClient();
  ASSERT_TRUE(Scale(client, {1}, 1.0f).ok());  // connected
  const std::vector<float> x(3000, 1.5f);  // 12 KB: larger than one read of the buffer
  auto dest = std::make_shared<std::vector<float>>(x.size(), 0.0f);
  std::atomic<int> asked{0};
  RpcClient::CallOptions options(absl::Seconds(30));
  options.place_payloads = [dest, &asked](const InMessage& header) {
    asked.fetch_add(1);
    PayloadPlacement placement;
    auto refs = header.ResponseBody<testwire::ReadResponse>().getTensors();
    placement.destinations.resize(header.num_payloads());
    placement.destinations.at(refs[0].getPayload()) = {dest->data(), dest->size() * sizeof(float)};
    placement.owner = dest;
    return placement;
  };
  absl::StatusOr<InMessage> answer = client.Call("test.Scale", ScaleRequest(x, 2.0f), options);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(asked.load(), 1);
  auto y = answer->TensorAt(answer->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->raw_data(), dest->data());
  EXPECT_EQ(*dest, std::vector<float>(x.size(), 3.0f));

  // An error answer carries no payloads: nothing is asked, the error comes back.
  options.place_payloads = [&asked](const InMessage&) {
    asked.fetch_add(1);
    return PayloadPlacement();
  };
  EXPECT_EQ(client.Call("test.Fail", OutMessage(), options).status().code(), absl::StatusCode::kNotFound);
  // And a call without a placement is unaffected by the one before it.
  auto plain = Scale(client, {1, 2}, 3.0f);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(*plain, (std::vector<float>{3, 6}));
  EXPECT_EQ(asked.load(), 1);
}

// Forwards one TCP connection between a client and the server, recording every byte in both
// directions, so a test can see exactly what crossed the wire. With a `pace`, it waits that
// long after forwarding each chunk (64 KiB at most) and records nothing: a narrow link.
class RecordingRelay {
 public:
  explicit RecordingRelay(int server_port, absl::Duration pace = absl::ZeroDuration()) : pace_(pace) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    EXPECT_EQ(listen(listen_fd_, 1), 0);
    EXPECT_EQ(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, server_port] { Run(server_port); });
  }
  ~RecordingRelay() {
    Stop();
    close(listen_fd_);
  }
  int port() const { return port_; }
  // Everything relayed; call after the relay's connection ended (Stop).
  const std::string& bytes() const { return bytes_; }
  // From now on forwards nothing either way (reads nothing): a partition, as both ends see one.
  void Hold() { held_.store(true); }
  // Bytes forwarded so far from the client to the server, and back. Any thread.
  uint64_t to_server() const { return forwarded_[0].load(); }
  uint64_t to_client() const { return forwarded_[1].load(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run(int server_port) {
    pollfd accept_poll{listen_fd_, POLLIN, 0};
    while (!stop_.load() && poll(&accept_poll, 1, 50) == 0) {
    }
    if (stop_.load()) return;
    const int client = accept(listen_fd_, nullptr, nullptr);
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(server_port));
    if (client < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return;
    pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
    char buf[65536];
    bool open = true;
    while (open && !stop_.load()) {
      if (held_.load()) {
        absl::SleepFor(absl::Milliseconds(5));  // the partition lasts until Stop
        continue;
      }
      if (poll(fds, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          open = false;
          break;
        }
        if (pace_ == absl::ZeroDuration()) bytes_.append(buf, static_cast<size_t>(n));
        const int to = fds[1 - i].fd;
        for (ssize_t done = 0; done < n;) {
          const ssize_t w = write(to, buf + done, static_cast<size_t>(n - done));
          if (w <= 0) {
            open = false;
            break;
          }
          done += w;
        }
        forwarded_[i].fetch_add(static_cast<uint64_t>(n));
        // The link's rate (the fault this relay injects), not a wait for a condition.
        if (pace_ > absl::ZeroDuration()) absl::SleepFor(pace_);
      }
    }
    close(client);
    close(server);
  }

  const absl::Duration pace_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> held_{false};
  std::atomic<uint64_t> forwarded_[2] = {0, 0};  // [0] client to server, [1] back
  std::string bytes_;  // written by the relay thread only; read after Stop() joined it
  std::thread thread_;
};

// A worker's client whose connection goes through `relay`.
std::unique_ptr<RpcClient> ClientThrough(EventLoop& loop, const RecordingRelay& relay) {
  RpcClient::Options options;
  options.address = "127.0.0.1:" + std::to_string(relay.port());
  options.role = "worker";
  options.task_index = 1;
  options.token = kToken;
  return std::make_unique<RpcClient>(loop, options);
}

// The README's claim: the cluster token never crosses the wire (HMAC challenge-response).
TEST_F(RpcTest, TokenNeverCrossesTheWire) {
  RecordingRelay relay(server_->port());
  auto client = ClientThrough(loop_, relay);
  auto y = Scale(*client, {1, 2, 3}, 2.0f);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(*y, (std::vector<float>{2, 4, 6}));
  client.reset();  // closes the connection, which ends the relay's loop
  relay.Stop();
  // The recording saw the whole exchange (the method name travels in clear)...
  EXPECT_NE(relay.bytes().find("test.Scale"), std::string::npos);
  // ...and not the token, in either direction.
  EXPECT_EQ(relay.bytes().find(kToken), std::string::npos);
}

TEST_F(RpcTest, HandlerErrorReachesCaller) {
  RpcClient& client = NewClient();
  auto resp = client.Call("test.Fail", OutMessage());
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(resp.status().message(), "no such thing");
}

TEST_F(RpcTest, UnknownMethodIsUnimplementedAndConnectionStaysUsable) {
  RpcClient& client = NewClient();
  auto resp = client.Call("test.Nope", OutMessage());
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(Scale(client, {1}, 1).ok());
}

TEST_F(RpcTest, ConcurrentCallsFromManyThreadsOnOneConnection) {
  RpcClient& client = NewClient();
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const float x = static_cast<float>(t * 1000 + i);
        auto y = Scale(client, {x, -x}, 3.0f);
        if (y.ok() && (*y)[0] == 3 * x && (*y)[1] == -3 * x) good.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 8 * 200);
}

TEST_F(RpcTest, InlineIfSmallRunsSmallOnIoThreadLargeOnPool) {
  RpcClient& client = NewClient();
  auto ran_inline = [&](int64_t payload_bytes) -> int {
    OutMessage req;
    auto refs = req.InitRequestBody<testwire::ReadResponse>().initTensors(1);
    req.AddTensor(Tensor(DType::kU8, {payload_bytes}), refs[0]);
    auto resp = client.Call("test.WhereRun", std::move(req), absl::Seconds(30));
    if (!resp.ok()) return -1;
    auto where = resp->TensorAt(resp->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
    return where.ok() ? where->data<int32_t>()[0] : -1;
  };
  EXPECT_EQ(ran_inline(16), 1);
  EXPECT_EQ(ran_inline(kSmallRequestPayloadBytes), 1);
  EXPECT_EQ(ran_inline(kSmallRequestPayloadBytes + 1), 0);
}

// 1 when `frame` answers test.WhereRun* from the I/O thread, 0 from the pool, -1 on error.
int RanInline(const InMessage& frame) {
  int where = -1;
  absl::Status decode = CatchDecodeErrors([&] {
    if (frame.envelope().getResponse().getCode() != 0) return absl::OkStatus();
    auto tensor = frame.TensorAt(frame.ResponseBody<testwire::ReadResponse>().getTensors()[0]);
    if (tensor.ok()) where = tensor->data<int32_t>()[0];
    return absl::OkStatus();
  });
  return decode.ok() ? where : -1;
}

OutMessage WhereRunRequest(int64_t payload_bytes) {
  OutMessage req;
  auto refs = req.InitRequestBody<testwire::ReadResponse>().initTensors(1);
  req.AddTensor(Tensor(DType::kU8, {payload_bytes}), refs[0]);
  return req;
}

TEST_F(RpcTest, AdaptiveRunsALoneSmallRequestInlineAndDefersToABusyPool) {
  RpcClient& client = NewClient();
  auto call = [&](int64_t bytes) {
    auto frame = client.Call("test.WhereRunAdaptive", WhereRunRequest(bytes), absl::Seconds(30));
    return frame.ok() ? RanInline(*frame) : -1;
  };
  EXPECT_EQ(call(16), 1);
  EXPECT_EQ(call(kSmallRequestPayloadBytes + 1), 0);

  // A handler holds a pool thread: small requests go to the pool too (behind whatever the busy
  // handlers hold), not past it on the I/O thread.
  Notification blocked_done;
  client.CallAsync("test.Block", OutMessage(), absl::InfiniteDuration(),
                   [&](absl::StatusOr<InMessage>) { blocked_done.Notify(); });
  entered_.WaitForNotification();
  EXPECT_EQ(call(16), 0);
  Release();
  blocked_done.WaitForNotification();
  // The pool counts the blocked handler until it has returned, a moment after its answer
  // was sent: wait (with a deadline) for the pool to be idle again.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int where = call(16);
  while (where == 0 && absl::Now() < deadline) where = call(16);
  EXPECT_EQ(where, 1);
}

TEST_F(RpcTest, ASmallUpdateOnThePoolDoesNotSendTheNextOnesThere) {
  RpcClient& client = NewClient();
  auto where = [&] {
    auto frame = client.Call("test.WhereRunAdaptive", WhereRunRequest(16), absl::Seconds(30));
    return frame.ok() ? RanInline(*frame) : -1;
  };
  // A pooled handler holds a pool thread, so a small update goes to the pool too (it runs
  // on another pool thread, and is held there).
  Notification block_done;
  Notification small_done;
  client.CallAsync("test.Block", OutMessage(), absl::InfiniteDuration(),
                   [&](absl::StatusOr<InMessage>) { block_done.Notify(); });
  entered_.WaitForNotification();
  client.CallAsync("test.BlockAdaptive", WhereRunRequest(16), absl::InfiniteDuration(),
                   [&](absl::StatusOr<InMessage>) { small_done.Notify(); });
  ASSERT_TRUE(small_entered_.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_FALSE(small_ran_inline_);
  release_.Notify();
  ASSERT_TRUE(block_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // Only the small update is left on the pool: the next small update is served inline
  // rather than queued behind it.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int w = where();
  while (w == 0 && absl::Now() < deadline) w = where();  // until the blocked handler has returned
  EXPECT_EQ(w, 1);
  release_small_.Notify();
  ASSERT_TRUE(small_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST_F(RpcTest, AdaptiveServesABurstOfSmallRequestsInlineWhileThePoolIsIdle) {
  RawClient raw(server_->port());
  ASSERT_TRUE(raw.connected());
  auto ack = raw.Handshake(kToken, "worker", 1);
  ASSERT_TRUE(ack.ok()) << ack.status();
  ASSERT_TRUE(ack->envelope().getHelloAck().getOk());
  // Two requests in one write: the server reads both at once and, with its pool idle, serves
  // both on the I/O thread.
  ASSERT_TRUE(raw.Write(testutil::RequestFrame(WhereRunRequest(16), 1, "test.WhereRunAdaptive") +
                        testutil::RequestFrame(WhereRunRequest(16), 2, "test.WhereRunAdaptive")));
  std::map<uint64_t, int> where;
  for (int i = 0; i < 2; ++i) {
    auto frame = raw.ReadFrame();
    ASSERT_TRUE(frame.ok()) << frame.status();
    where[frame->envelope().getRequestId()] = RanInline(*frame);
  }
  EXPECT_EQ(where[1], 1);
  EXPECT_EQ(where[2], 1);
}

TEST_F(RpcTest, ABurstOfCallsSharesWrites) {
  auto process = metrics::ProcessMetrics::Create("worker", 1, "");
  ASSERT_TRUE(process.ok()) << process.status();
  metrics::RpcMetrics rpc(**process);
  RpcClient& client = NewClient(kToken, absl::Milliseconds(20), &rpc);
  ASSERT_TRUE(Scale(client, {1}, 1).ok());  // connected
  // Hold the loop thread (the server's too), so nothing is answered while the burst is made
  // and only the calling thread can write.
  Notification holding;
  Notification hold;
  loop_.Post([&] {
    holding.Notify();
    hold.WaitForNotification();
  });
  holding.WaitForNotification();
  const double writes = rpc.SocketWrites();
  const double frames = rpc.FramesSent();
  constexpr int kBurst = 64;
  std::atomic<int> right{0};
  std::atomic<int> done{0};
  Notification all_done;
  for (int i = 0; i < kBurst; ++i) {
    client.CallAsync("test.Scale", ScaleRequest({static_cast<float>(i)}, 2), absl::Seconds(30),
                     [&, i](absl::StatusOr<InMessage> r) {
                       auto y = Scaled(r);
                       if (y.ok() && *y == std::vector<float>{2.0f * i}) right.fetch_add(1);
                       if (done.fetch_add(1) + 1 == kBurst) all_done.Notify();
                     });
  }
  // Some of the burst is still queued for the loop thread.
  EXPECT_LT(rpc.FramesSent() - frames, kBurst);
  hold.Notify();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(right.load(), kBurst);
  EXPECT_EQ(rpc.FramesSent() - frames, kBurst);
  // One write per call would be 64; in parts of up to half the calls in flight it is 9.
  EXPECT_LE(rpc.SocketWrites() - writes, kBurst / 4);
}

TEST_F(RpcTest, ALoneCallIsWrittenAtOnceFromTheCallingThread) {
  auto process = metrics::ProcessMetrics::Create("worker", 1, "");
  ASSERT_TRUE(process.ok()) << process.status();
  metrics::RpcMetrics rpc(**process);
  RpcClient& client = NewClient(kToken, absl::Milliseconds(20), &rpc);
  ASSERT_TRUE(Scale(client, {1}, 1).ok());  // connected, nothing in flight
  // With the loop thread held, only the calling thread can have written it.
  Notification holding;
  Notification hold;
  loop_.Post([&] {
    holding.Notify();
    hold.WaitForNotification();
  });
  holding.WaitForNotification();
  const double frames = rpc.FramesSent();
  Notification done;
  client.CallAsync("test.Scale", ScaleRequest({1}, 2), absl::Seconds(30),
                   [&](absl::StatusOr<InMessage>) { done.Notify(); });
  EXPECT_EQ(rpc.FramesSent() - frames, 1);
  hold.Notify();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST_F(RpcTest, DeferredCallsOnAConnectionThatDropsEachCompleteOnce) {
  // Bursts queued for the loop race a disconnect: every call completes exactly once, either
  // answered or failed with Unavailable, and the client then works again.
  RpcClient& client = NewClient();
  ASSERT_TRUE(Scale(client, {1}, 1).ok());
  constexpr int kThreads = 4;
  constexpr int kCalls = 300;
  std::atomic<int> completions{0};
  std::atomic<int> wrong{0};
  Notification all_done;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const float x = static_cast<float>(t * kCalls + i);
        client.CallAsync("test.Scale", ScaleRequest({x}, 3), absl::Seconds(30), [&, x](absl::StatusOr<InMessage> r) {
          auto y = Scaled(r);
          if (y.ok() ? *y != std::vector<float>{3 * x} : y.status().code() != absl::StatusCode::kUnavailable) {
            wrong.fetch_add(1);
          }
          if (completions.fetch_add(1) + 1 == kThreads * kCalls) all_done.Notify();
        });
        if (t == 0 && i == kCalls / 2) client.Disconnect();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(completions.load(), kThreads * kCalls);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(Scale(client, {2}, 2).ok());
}

TEST_F(RpcTest, DeadlinesOfCallsInFlightTogetherEachExpireOnTime) {
  // One timer serves every deadline of a client: a shorter deadline arriving after a longer
  // one must still fire first, a call that completes must not disturb the others', and the
  // timer must be re-armed after it fired.
  RpcClient& client = NewClient();
  ASSERT_TRUE(Scale(client, {1}, 1).ok());
  Notification long_done;
  absl::Status long_status;
  client.CallAsync("test.Block", OutMessage(), absl::Hours(1), [&](absl::StatusOr<InMessage> r) {
    long_status = r.status();
    long_done.Notify();
  });
  entered_.WaitForNotification();
  // Two short deadlines in flight at once: after the first fires, the timer must be re-armed
  // for the second (or it would wait for the hour).
  Notification later_done;
  absl::Status later_status;
  client.CallAsync("test.Block", OutMessage(), absl::Milliseconds(120), [&](absl::StatusOr<InMessage> r) {
    later_status = r.status();
    later_done.Notify();
  });
  EXPECT_EQ(client.Call("test.Block", OutMessage(), absl::Milliseconds(40)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  later_done.WaitForNotification();
  EXPECT_EQ(later_status.code(), absl::StatusCode::kDeadlineExceeded) << later_status;
  for (absl::Duration timeout : {absl::Milliseconds(100), absl::Milliseconds(30), absl::Milliseconds(60)}) {
    const absl::Time start = absl::Now();
    auto r = client.Call("test.Block", OutMessage(), timeout);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
    EXPECT_GE(absl::Now() - start, timeout);
    // A call answered meanwhile (on the server's I/O thread: the expired calls still hold
    // pool threads) leaves the deadlines of the others alone.
    EXPECT_TRUE(client.Call("test.WhereRun", WhereRunRequest(16), absl::Seconds(30)).ok());
  }
  EXPECT_FALSE(long_done.HasBeenNotified());
  Release();
  ASSERT_TRUE(long_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(long_status.ok()) << long_status;
}

TEST_F(RpcTest, AVeryLongTimeoutDoesNotWrapIntoThePast) {
  RpcClient& client = NewClient();
  auto r = Scale(client, {2}, 3, absl::Hours(24 * 365 * 1000));
  EXPECT_TRUE(r.ok()) << r.status();
}

TEST_F(RpcTest, AHandlerNeverFailsOnReadBudgetTheCheckLeftIt) {
  // A list of zero-sized structs is one word on the wire but is charged per element on every
  // read. Whatever the count, the request is either refused by the check or read to the end
  // by the handler: never accepted and then failing half-way through the handler's reads.
  RpcClient& client = NewClient();
  int served = 0;
  int refused = 0;
  for (uint32_t n : {1u, 10u, 50u, 62u, 100u, 200u, 500u, 1000u, 5000u, 100000u}) {
    OutMessage m;
    auto body = m.InitRequestBody<testwire::SetDirectoryRequest>();
    body.setVersion(1);
    testutil::PointerField(body, "variables").initAsListOfAnyStruct(0, 0, n);
    auto r = client.Call("test.Directory", std::move(m), absl::Seconds(30));
    if (r.ok()) {
      ++served;
      auto read = r->TensorAt(r->ResponseBody<testwire::ReadResponse>().getTensors()[0]);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(read->data<int64_t>()[0], n);
    } else {
      ++refused;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << n;
      // Refused by the check, not by a handler's read failing after it passed.
      EXPECT_NE(r.status().message().find("malformed SetDirectoryRequest"), absl::string_view::npos)
          << n << ": " << r.status();
    }
  }
  EXPECT_GT(served, 3);
  EXPECT_GT(refused, 0);
}

TEST_F(RpcTest, DeadlineExceededWhileServerIsBusy) {
  RpcClient& client = NewClient();
  auto resp = client.Call("test.Block", OutMessage(), absl::Milliseconds(50));
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kDeadlineExceeded) << resp.status();
  Release();
  EXPECT_TRUE(Scale(client, {1}, 1).ok());  // the late response is ignored, not misdelivered
}

TEST_F(RpcTest, HandlerReadingMalformedBodyGetsInvalidArgument) {
  RpcClient& client = NewClient();
  for (const char* method : {"test.Throw", "test.ThrowUnchecked"}) {
    // A list of structs where a list of text is expected.
    OutMessage req;
    auto refs = req.InitRequestBody<testwire::ReadResponse>().initTensors(1);
    refs[0].initShape(3);
    auto resp = client.Call(method, std::move(req));
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << method << ": " << resp.status();
    EXPECT_TRUE(Scale(client, {1}, 1).ok());
  }
}

TEST_F(RpcTest, MethodRefusesRolesItDoesNotDeclare) {
  RpcClient& worker = NewClient();
  auto resp = worker.Call("test.ChiefOnly", OutMessage());
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kPermissionDenied) << resp.status();
  EXPECT_NE(resp.status().message().find("chief"), std::string::npos) << resp.status();
  EXPECT_TRUE(Scale(worker, {1}, 1).ok());  // the connection is still good
}

TEST_F(RpcTest, WrongTokenIsRefusedAndOthersKeepBeingServed) {
  RpcClient& bad = NewClient("wrong");
  auto resp = Scale(bad, {1}, 1);
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kPermissionDenied) << resp.status();
  EXPECT_NE(resp.status().message().find("wrong cluster token"), std::string::npos);
  RpcClient& good = NewClient();
  EXPECT_TRUE(Scale(good, {1}, 1).ok());
}

TEST_F(RpcTest, RawWrongTokenGetsRefusalThenClose) {
  RawClient raw(server_->port());
  ASSERT_TRUE(raw.connected());
  auto ack = raw.Handshake("nope", "worker");
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_FALSE(ack->envelope().getHelloAck().getOk());
  EXPECT_TRUE(raw.WaitClosed());
}

TEST_F(RpcTest, MalformedInputClosesOnlyThatConnection) {
  RpcClient& good = NewClient();
  ASSERT_TRUE(Scale(good, {1}, 1).ok());
  struct Case {
    std::string name;
    bool handshake_first;
    std::string bytes;
  };
  OutMessage request_before;
  request_before.envelope().initRequest().setMethod("test.Scale");
  OutMessage response_frame;
  response_frame.envelope().initResponse();
  const std::vector<Case> cases = {
      {"garbage", false, std::string("\xff\xff\xff\x7f garbage garbage", 24)},
      {"oversized", false, std::string("\x00\x00\x00\x00\x00\x00\x00\x40", 8)},
      {"request before handshake", false, EncodeFrameToString(request_before)},
      {"wrong type after handshake", true, EncodeFrameToString(response_frame)},
  };
  for (const auto& c : cases) {
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.connected()) << c.name;
    if (c.handshake_first) {
      ASSERT_TRUE(raw.Handshake(kToken, "worker").ok()) << c.name;
    }
    raw.Write(c.bytes);
    EXPECT_TRUE(raw.WaitClosed()) << c.name;
    auto y = Scale(good, {2}, 2);
    ASSERT_TRUE(y.ok()) << c.name << ": " << y.status();
    EXPECT_EQ((*y)[0], 4.0f);
  }
  // A truncated frame followed by a half-close: the server sees EOF mid-frame and closes.
  RawClient raw(server_->port());
  auto nonce = raw.ReadChallenge();
  ASSERT_TRUE(nonce.ok());
  std::string hello = testutil::HelloFrame(kToken, *nonce, "worker");
  raw.Write(hello.substr(0, hello.size() / 2));
  shutdown(raw.fd(), SHUT_WR);
  EXPECT_TRUE(raw.WaitClosed());
  EXPECT_TRUE(Scale(good, {1}, 1).ok());
}

TEST_F(RpcTest, PeerDeathFailsPendingCallsWithUnavailable) {
  RpcClient& client = NewClient();
  std::atomic<int> unavailable{0};
  Notification all_done;
  std::atomic<int> remaining{3};
  for (int i = 0; i < 3; ++i) {
    client.CallAsync("test.Block", OutMessage(), absl::InfiniteDuration(),
                     [&](absl::StatusOr<InMessage> r) {
                       if (r.status().code() == absl::StatusCode::kUnavailable) ++unavailable;
                       if (--remaining == 0) all_done.Notify();
                     });
  }
  entered_.WaitForNotification();
  client.Disconnect();  // the connection drops under the calls in flight
  // Disconnect returns only once the connection is closed and its calls have failed.
  EXPECT_TRUE(all_done.HasBeenNotified());
  all_done.WaitForNotification();
  EXPECT_EQ(unavailable.load(), 3);
  Release();
}

TEST_F(RpcTest, ServerRestartIsSeenAsReconnect) {
  // No backoff, so the first call after the restart connects at once.
  RpcClient& client = NewClient(kToken, absl::ZeroDuration());
  ASSERT_TRUE(Scale(client, {1}, 1).ok());
  const int port = server_->port();
  server_.reset();
  auto down = Scale(client, {1}, 1);
  EXPECT_EQ(down.status().code(), absl::StatusCode::kUnavailable) << down.status();
  StartServer(port);
  auto up = Scale(client, {3}, 2);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ((*up)[0], 6.0f);
}

TEST_F(RpcTest, FailFastWhenNobodyListens) {
  const int port = server_->port();
  server_.reset();
  RpcClient::Options options;
  options.address = "127.0.0.1:" + std::to_string(port);
  options.token = kToken;
  options.initial_backoff = absl::Seconds(10);  // the second call falls inside the backoff
  RpcClient client(loop_, options);
  auto resp = client.Call("test.Scale", OutMessage(), absl::Seconds(30));
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnavailable);
  // A refused connection is evidence that nobody serves there (net/peer_absent.h), also for
  // the calls failed before the next attempt.
  EXPECT_TRUE(IsPeerAbsent(resp.status())) << resp.status();
  auto again = client.Call("test.Scale", OutMessage(), absl::Seconds(30));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsPeerAbsent(again.status())) << again.status();
  StartServer(0);  // for TearDown
}

// Silence is no evidence: a call that times out on a live server, a handler's own error, and a
// connection that the server drops are not "peer absent".
TEST_F(RpcTest, OnlyARefusedConnectionIsEvidenceOfAnAbsentPeer) {
  RpcClient& client = NewClient();
  auto busy = client.Call("test.Block", OutMessage(), absl::Milliseconds(100));
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kDeadlineExceeded) << busy.status();
  EXPECT_FALSE(IsPeerAbsent(busy.status()));
  Release();
  auto failed = client.Call("test.Fail", OutMessage(), absl::Seconds(30));
  EXPECT_FALSE(failed.ok());
  EXPECT_FALSE(IsPeerAbsent(failed.status()));
  EXPECT_FALSE(IsPeerAbsent(absl::OkStatus()));
  EXPECT_TRUE(IsPeerAbsent(MarkPeerAbsent(absl::UnavailableError("gone"))));
  EXPECT_TRUE(MarkPeerAbsent(absl::OkStatus()).ok());
}

// Silence (what a worker tells the chief about a PS it cannot reach): zero while nothing is
// owed; growing while a call waits without a word from the server; cut back by an answer to
// any other call (a busy server is not a silent one); zero again once nothing waits.
TEST_F(RpcTest, SilenceGrowsWhileACallWaitsUnheardAndAnyAnswerEndsIt) {
  RpcClient& client = NewClient();
  EXPECT_EQ(client.Silence(), absl::ZeroDuration()) << "no call yet";
  ASSERT_TRUE(Scale(client, {1}, 2).ok());
  EXPECT_EQ(client.Silence(), absl::ZeroDuration()) << "nothing owed";
  Notification blocked_done;
  client.CallAsync("test.Block", OutMessage(), absl::Seconds(60),
                   [&](absl::StatusOr<InMessage>) { blocked_done.Notify(); });
  entered_.WaitForNotification();
  const absl::Duration unheard = absl::Milliseconds(100);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (client.Silence() < unheard && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling the figure, not synchronising
  }
  ASSERT_GE(client.Silence(), unheard) << "the blocked call is owed an answer";
  const absl::Time asked = absl::Now();
  ASSERT_TRUE(Scale(client, {1}, 2).ok());
  EXPECT_LE(client.Silence(), absl::Now() - asked) << "the server answered since";
  Release();
  blocked_done.WaitForNotification();
  EXPECT_EQ(client.Silence(), absl::ZeroDuration()) << "nothing owed any more";
}

// A call whose answer is still arriving is not silent: a 32 MiB answer through a relay that
// forwards 64 KiB every 2 ms. Once the relay has forwarded 8 MiB of the answer at T, the rest can
// only arrive after T (the kernels on the way hold less than 24 MiB), so while the call waits
// Silence() must fall below the time since T: counted from the last frame alone, it stays at
// the time since the call began. (The request's bytes leaving count for nothing: see
// SilenceIsNotEndedByBytesTheKernelTookForAnUnreachablePeer.)
TEST_F(RpcTest, SilenceCountsFromTheLastByteThatArrived) {
  RecordingRelay relay(server_->port(), absl::Milliseconds(2));
  auto client = ClientThrough(loop_, relay);
  ASSERT_TRUE(Scale(*client, {1}, 2).ok());  // connected
  const size_t n = size_t{8} << 20;  // floats: 32 MiB each way
  const uint64_t quarter = n;        // bytes: a quarter of one direction
  Notification done;
  absl::StatusOr<std::vector<float>> answer;
  client->CallAsync("test.Scale", ScaleRequest(std::vector<float>(n, 1.0f), 3.0f), absl::Seconds(120),
                    [&](absl::StatusOr<InMessage> r) {
                      answer = Scaled(r);
                      done.Notify();
                    });
  // Polls the figure (the condition under test) until it holds or the call ends.
  const uint64_t answer_bytes = 4 * n;
  auto heard_since = [&](absl::Time t) {
    while (relay.to_client() < answer_bytes) {
      const absl::Time now = absl::Now();
      const absl::Duration silence = client->Silence();
      // The answer not yet all through the relay: the call still waits.
      if (relay.to_client() < answer_bytes && silence < now - t) return true;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  };
  auto when_forwarded = [&](const std::function<uint64_t()>& count) {
    while (count() < quarter && !done.HasBeenNotified()) {
      absl::SleepFor(absl::Milliseconds(1));  // polling the relay's count, bounded by the call
    }
    return absl::Now();
  };
  const absl::Time answer_quarter = when_forwarded([&] { return relay.to_client(); });
  EXPECT_TRUE(heard_since(answer_quarter)) << "the answer kept arriving; the call was silent";
  done.WaitForNotification();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->size(), n);
  EXPECT_EQ(answer->back(), 3.0f);
  client.reset();
  relay.Stop();
}

// Bytes the kernel takes into the send buffer say nothing of the peer: behind a partition a
// client's calls keep "leaving" (a few MB fit) while nothing comes back. Found by the partition
// scenario of every worker cut from a primary: counting those writes as progress kept each
// worker's report of the PS under the heartbeat timeout, and the gray failure went unnoticed.
TEST_F(RpcTest, SilenceIsNotEndedByBytesTheKernelTookForAnUnreachablePeer) {
  RecordingRelay relay(server_->port());
  auto client = ClientThrough(loop_, relay);
  ASSERT_TRUE(Scale(*client, {1}, 2).ok());  // connected
  relay.Hold();
  std::atomic<int> answered{0};
  const absl::Duration unheard = absl::Seconds(1);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  // A call every 20 ms, each one written at once into the socket's send buffer.
  while (client->Silence() < unheard && absl::Now() < deadline) {
    client->CallAsync("test.Scale", ScaleRequest({1, 2, 3}, 2.0f), absl::Seconds(60),
                      [&](absl::StatusOr<InMessage>) { answered.fetch_add(1); });
    absl::SleepFor(absl::Milliseconds(20));  // the calls' pace, not a wait for a condition
  }
  EXPECT_GE(client->Silence(), unheard) << "calls written into the kernel's buffer hid the silence";
  EXPECT_EQ(answered.load(), 0) << "nothing crosses the partition";
  client.reset();  // fails the calls still waiting
  relay.Stop();
}

TEST_F(RpcTest, WaitForReadyCallSucceedsOnceServerStarts) {
  const int port = server_->port();
  server_.reset();
  RpcClient::Options options;
  options.address = "127.0.0.1:" + std::to_string(port);
  options.token = kToken;
  options.role = "worker";
  options.wait_for_ready = true;
  options.max_backoff = absl::Milliseconds(50);
  RpcClient client(loop_, options);
  Notification done;
  absl::Status status = absl::UnknownError("not called");
  OutMessage req;
  auto refs = req.InitRequestBody<testwire::ReadResponse>().initTensors(2);
  req.AddTensor(Tensor::FromVector<float>({1}, {4}), refs[0]);
  req.AddTensor(Tensor::Scalar(0.5f), refs[1]);
  client.CallAsync("test.Scale", std::move(req), absl::Seconds(60), [&](absl::StatusOr<InMessage> r) {
    status = r.status();
    done.Notify();
  });
  StartServer(port);
  done.WaitForNotification();
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace rpc_test_internal
}  // namespace asyncps::net
