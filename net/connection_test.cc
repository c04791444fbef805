// The framed connection under a real server and client: frames split at arbitrary read
// boundaries, many frames arriving in one read, payloads partly buffered and partly read
// straight into their block, headers larger than the read buffer, and many threads sending on
// one connection at once (direct writes racing queued ones and a close).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "net/connection.h"
#include "net/fifo.h"
#include "net/frame_codec.h"
#include "net/test_messages.capnp.h"
#include "net/rpc_client.h"
#include "net/raw_client_testing.h"
#include "net/rpc_server.h"

namespace asyncps::net {
namespace {

constexpr char kToken[] = "t0ken";
const PeerRoles kCallers = {"worker"};

// Returns every tensor of the request (a ReadResponse body) in a ReadResponse.
absl::Status Echo(const RequestContext&, const InMessage& req, OutMessage* resp) {
  auto refs = req.RequestBody<testwire::ReadResponse>().getTensors();
  auto out = resp->InitResponseBody<testwire::ReadResponse>().initTensors(refs.size());
  for (unsigned i = 0; i < refs.size(); ++i) {
    absl::StatusOr<Tensor> t = req.TensorAt(refs[i]);
    if (!t.ok()) return t.status();
    resp->AddTensor(*t, out[i]);
  }
  return absl::OkStatus();
}

// Returns the request's names (a ReadRequest body) unchanged: a large header both ways.
absl::Status EchoNames(const RequestContext&, const InMessage& req, OutMessage* resp) {
  auto names = req.RequestBody<testwire::ReadRequest>().getNames();
  auto out = resp->InitResponseBody<testwire::ReadRequest>().initNames(names.size());
  for (unsigned i = 0; i < names.size(); ++i) out.set(i, names[i]);
  return absl::OkStatus();
}

// Bytes that differ per tensor, so a misplaced or mixed-up payload is noticed.
Tensor Pattern(size_t bytes, uint32_t seed) {
  Tensor t(DType::kU8, {static_cast<int64_t>(bytes)});
  uint32_t state = seed * 2654435761u + 1;
  for (auto& b : t.flat<uint8_t>()) {
    state = state * 1103515245u + 12345u;
    b = static_cast<uint8_t>(state >> 16);
  }
  return t;
}

OutMessage EchoRequest(const std::vector<Tensor>& tensors) {
  OutMessage m;
  auto refs = m.InitRequestBody<testwire::ReadResponse>().initTensors(static_cast<unsigned>(tensors.size()));
  for (size_t i = 0; i < tensors.size(); ++i) m.AddTensor(tensors[i], refs[static_cast<unsigned>(i)]);
  return m;
}

// A whole request frame as the client would send it.
std::string RequestFrame(uint64_t id, const std::string& method, const std::vector<Tensor>& tensors) {
  OutMessage m = EchoRequest(tensors);
  m.envelope().setRequestId(id);
  m.envelope().getRequest().setMethod(method);
  return EncodeFrameToString(m);
}

// True when `response` carries exactly `expected`, in order.
bool EchoMatches(const InMessage& response, const std::vector<Tensor>& expected) {
  bool ok = false;
  absl::Status decode = CatchDecodeErrors([&] {
    auto envelope = response.envelope();
    if (envelope.which() != wire::Envelope::RESPONSE || envelope.getResponse().getCode() != 0) {
      return absl::OkStatus();
    }
    auto refs = response.ResponseBody<testwire::ReadResponse>().getTensors();
    if (refs.size() != expected.size()) return absl::OkStatus();
    for (unsigned i = 0; i < refs.size(); ++i) {
      absl::StatusOr<Tensor> t = response.TensorAt(refs[i]);
      if (!t.ok() || !t->Equals(expected[i])) return absl::OkStatus();
    }
    ok = true;
    return absl::OkStatus();
  });
  return decode.ok() && ok;
}

using testutil::RawClient;

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RpcServer::Options options;
    options.role = "ps";
    options.token = kToken;
    options.handler_threads = 3;
    server_ = std::make_unique<RpcServer>(loop_, options);
    server_->Register<testwire::ReadResponse>("t.Echo", kCallers, Echo, RpcServer::Dispatch::kInline);
    server_->Register<testwire::ReadResponse>("t.PoolEcho", kCallers, Echo, RpcServer::Dispatch::kPool);
    server_->Register<testwire::ReadRequest>("t.EchoNames", kCallers, EchoNames, RpcServer::Dispatch::kInline);
    ASSERT_TRUE(server_->Start().ok());
  }

  void TearDown() override {
    clients_.clear();
    server_.reset();
  }

  RpcClient& NewClient() {
    RpcClient::Options options;
    options.address = absl::StrCat("127.0.0.1:", server_->port());
    options.role = "worker";
    options.token = kToken;
    clients_.push_back(std::make_unique<RpcClient>(client_loop_, options));
    return *clients_.back();
  }

  // Handshakes, then sends `requests` in `pieces` and checks every answer.
  void ExpectEchoes(const std::string& label, const std::vector<std::vector<Tensor>>& requests,
                    const std::vector<size_t>& pieces) {
    std::string stream;
    for (size_t i = 0; i < requests.size(); ++i) {
      stream += RequestFrame(i + 1, i % 2 == 0 ? "t.Echo" : "t.PoolEcho", requests[i]);
    }
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.connected()) << label;
    absl::StatusOr<InMessage> ack = raw.Handshake(kToken, "worker");
    ASSERT_TRUE(ack.ok()) << label << ": " << ack.status();
    EXPECT_TRUE(ack->envelope().getHelloAck().getOk()) << label;
    std::thread writer([&] { EXPECT_TRUE(raw.WriteInPieces(stream, pieces)) << label; });
    // Joined on every exit (a failed ASSERT returns early); the raw client closes after it.
    struct Joiner {
      std::thread& t;
      ~Joiner() { t.join(); }
    } joiner{writer};
    std::vector<bool> answered(requests.size(), false);
    for (size_t n = 0; n < requests.size(); ++n) {
      absl::StatusOr<InMessage> response = raw.ReadFrame();
      ASSERT_TRUE(response.ok()) << label << ": " << response.status();
      const uint64_t id = response->envelope().getRequestId();
      ASSERT_TRUE(id >= 1 && id <= requests.size() && !answered[id - 1]) << label << ": id " << id;
      answered[id - 1] = true;
      EXPECT_TRUE(EchoMatches(*response, requests[id - 1])) << label << ": request " << id;
    }
  }

  EventLoop loop_;
  EventLoop client_loop_;
  std::unique_ptr<RpcServer> server_;
  std::vector<std::unique_ptr<RpcClient>> clients_;
};

// Payload sizes on both sides of every threshold of the reader: the read buffer and the
// size from which a payload remainder bypasses it.
std::vector<std::vector<Tensor>> BoundaryRequests() {
  const size_t direct = Connection::kDirectReadBytes;
  const size_t buffer = Connection::kReadBufferBytes;
  std::vector<std::vector<Tensor>> requests;
  uint32_t seed = 1;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, direct - 1, direct, direct + 1, buffer - 100,
                       buffer, buffer + 3, 3 * buffer + 5}) {
    requests.push_back({Pattern(bytes, seed++)});
  }
  // Several payloads in one frame, with odd sizes so each needs padding.
  requests.push_back({Pattern(3, seed++), Pattern(direct + 5, seed++), Pattern(7, seed++),
                      Pattern(buffer + 1, seed++)});
  return requests;
}

TEST_F(ConnectionTest, FramesSplitAtArbitraryReadBoundaries) {
  const auto requests = BoundaryRequests();
  for (size_t piece : {size_t{4093}, size_t{7}, size_t{8}, size_t{4097}, size_t{16385}}) {
    ExpectEchoes(absl::StrCat("pieces of ", piece), requests, {piece});
  }
  std::mt19937 rng(7);
  std::vector<size_t> pieces;
  for (int i = 0; i < 64; ++i) pieces.push_back(1 + rng() % 20000);
  ExpectEchoes("random pieces", requests, pieces);
}

TEST_F(ConnectionTest, ByteAtATime) {
  ExpectEchoes("bytes", {{Pattern(5, 1)}, {Pattern(Connection::kDirectReadBytes + 9, 2)}}, {1});
}

TEST_F(ConnectionTest, ManySmallFramesInOneWrite) {
  std::vector<std::vector<Tensor>> requests;
  for (uint32_t i = 0; i < 500; ++i) requests.push_back({Pattern(1 + i % 97, i)});
  ExpectEchoes("one write", requests, {size_t{1} << 30});
}

TEST_F(ConnectionTest, LargePayloadPartlyBufferedThenNextFrameInSameWrite) {
  // One write holds a small frame, a 3 MiB frame (its start lands in the read buffer, the rest
  // is read straight into the block), and small frames right behind it, which must not be
  // swallowed by the direct read.
  ExpectEchoes("mixed", {{Pattern(64, 1)}, {Pattern(3 << 20, 2)}, {Pattern(64, 3)}, {Pattern(10, 4)}},
               {size_t{1} << 30});
}

TEST_F(ConnectionTest, HeaderLargerThanReadBufferBothWays) {
  RpcClient& client = NewClient();
  OutMessage request;
  constexpr unsigned kNames = 4000;
  auto names = request.InitRequestBody<testwire::ReadRequest>().initNames(kNames);
  for (unsigned i = 0; i < kNames; ++i) names.set(i, absl::StrCat("variable/", i, "/kernel").c_str());
  absl::StatusOr<InMessage> response = client.Call("t.EchoNames", std::move(request), absl::Seconds(30));
  ASSERT_TRUE(response.ok()) << response.status();
  auto got = response->ResponseBody<testwire::ReadRequest>().getNames();
  ASSERT_EQ(got.size(), kNames);
  EXPECT_EQ(std::string(got[kNames - 1].cStr()), absl::StrCat("variable/", kNames - 1, "/kernel"));
  // The connection is still in step afterwards.
  Tensor t = Pattern(100, 9);
  absl::StatusOr<InMessage> echo = client.Call("t.Echo", EchoRequest({t}), absl::Seconds(30));
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_TRUE(EchoMatches(*echo, {t}));
}

TEST_F(ConnectionTest, ManyThreadsMixLargeAndSmallCallsOnOneConnection) {
  // Large frames make direct writes stop part-way (the socket buffer fills), so the rest is
  // queued for the loop while other threads keep sending; pooled handlers answer from their
  // own threads.
  RpcClient& client = NewClient();
  constexpr int kThreads = 6;
  constexpr int kCalls = 24;
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const size_t bytes = i % 3 == 0 ? (3 << 20) + 5 : i % 3 == 1 ? 300 << 10 : 64;
        Tensor payload = Pattern(bytes, static_cast<uint32_t>(t * 1000 + i));
        absl::StatusOr<InMessage> r =
            client.Call(i % 2 == 0 ? "t.Echo" : "t.PoolEcho", EchoRequest({payload}), absl::Seconds(60));
        if (r.ok() && EchoMatches(*r, {payload})) good.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), kThreads * kCalls);
}

TEST_F(ConnectionTest, CallsIssuedFromCallbacksOnTheLoopThread) {
  // Completion callbacks run on the client's loop thread while it is delivering frames;
  // calls they make are written once the delivery is done.
  RpcClient& client = NewClient();
  struct State {
    Mutex mu;
    int issued ABSL_GUARDED_BY(mu) = 0;
    int good ABSL_GUARDED_BY(mu) = 0;
    int done ABSL_GUARDED_BY(mu) = 0;
  };
  constexpr int kTotal = 400;
  constexpr int kWindow = 8;
  State state;
  std::function<void()> issue = [&] {
    Tensor payload = Pattern(32, 5);
    client.CallAsync("t.Echo", EchoRequest({payload}), absl::Seconds(30),
                     [&, payload](absl::StatusOr<InMessage> r) {
                       bool next = false;
                       {
                         MutexLock lock(&state.mu);
                         ++state.done;
                         if (r.ok() && EchoMatches(*r, {payload})) ++state.good;
                         if (state.issued < kTotal) {
                           ++state.issued;
                           next = true;
                         }
                       }
                       if (next) issue();
                     });
  };
  {
    MutexLock lock(&state.mu);
    state.issued = kWindow;
  }
  for (int i = 0; i < kWindow; ++i) issue();
  MutexLock lock(&state.mu);
  ASSERT_TRUE(state.mu.AwaitWithTimeout(
      absl::Condition(+[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->done == kTotal; },
                      &state),
      absl::Seconds(60)));
  EXPECT_EQ(state.good, kTotal);
}

TEST_F(ConnectionTest, DisconnectWhileLargeWritesAreInFlight) {
  RpcClient& client = NewClient();
  Tensor big = Pattern(8 << 20, 3);
  ASSERT_TRUE(client.Call("t.Echo", EchoRequest({Pattern(8, 1)}), absl::Seconds(30)).ok());
  constexpr int kCalls = 6;
  std::atomic<int> finished{0};
  std::atomic<int> bad_status{0};
  Notification all_done;
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i) {
    threads.emplace_back([&] {
      client.CallAsync("t.Echo", EchoRequest({big}), absl::Seconds(60), [&](absl::StatusOr<InMessage> r) {
        if (!r.ok() && r.status().code() != absl::StatusCode::kUnavailable) bad_status.fetch_add(1);
        if (finished.fetch_add(1) + 1 == kCalls) all_done.Notify();
      });
    });
  }
  client.Disconnect();
  for (auto& th : threads) th.join();
  ASSERT_TRUE(all_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(bad_status.load(), 0);
  // The client reconnects for the next call.
  Tensor small = Pattern(16, 4);
  absl::StatusOr<InMessage> r = client.Call("t.Echo", EchoRequest({small}), absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(EchoMatches(*r, {small}));
}

TEST_F(ConnectionTest, PeerClosingMidPayloadClosesOnlyThatConnection) {
  RpcClient& good = NewClient();
  {
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.connected());
    const std::string frame = RequestFrame(1, "t.Echo", {Pattern(1 << 20, 1)});
    ASSERT_TRUE(raw.Handshake(kToken, "worker").ok());
    ASSERT_TRUE(raw.Write(frame.substr(0, frame.size() / 2)));
  }  // closes with half a payload sent
  Tensor t = Pattern(20, 2);
  absl::StatusOr<InMessage> r = good.Call("t.Echo", EchoRequest({t}), absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(EchoMatches(*r, {t}));
}

TEST_F(ConnectionTest, OversizedPayloadIsRejectedBeforeReadingIt) {
  // A frame declaring a payload above the limit closes the connection at once, without the
  // server waiting for (or allocating) the payload.
  server_.reset();
  RpcServer::Options options;
  options.token = kToken;
  options.limits.max_payload_bytes = 1 << 20;
  server_ = std::make_unique<RpcServer>(loop_, options);
  server_->Register<testwire::ReadResponse>("t.Echo", kCallers, Echo, RpcServer::Dispatch::kInline);
  ASSERT_TRUE(server_->Start().ok());
  RawClient raw(server_->port());
  ASSERT_TRUE(raw.connected());
  const std::string frame = RequestFrame(1, "t.Echo", {Pattern((1 << 20) + 1, 1)});
  // Only the header: the payload bytes never come.
  const size_t header_bytes = frame.size() - (((1 << 20) + 1 + 7) / 8 * 8);
  ASSERT_TRUE(raw.Handshake(kToken, "worker").ok());
  ASSERT_TRUE(raw.Write(frame.substr(0, header_bytes)));
  absl::StatusOr<InMessage> next = raw.ReadFrame();
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable) << next.status();
}

TEST(FifoTest, KeepsOrderAcrossReuseAndCompactionAndReusesItsStorage) {
  Fifo<std::unique_ptr<int>> fifo;
  int next_in = 0;
  int next_out = 0;
  auto pop = [&] {
    ASSERT_FALSE(fifo.empty());
    std::unique_ptr<int> v = std::move(fifo.front());
    fifo.pop_front();
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(*v, next_out++);
  };
  // Drains now and then: the storage starts over instead of growing.
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 5; ++i) fifo.push_back(std::make_unique<int>(next_in++));
    while (!fifo.empty()) pop();
    EXPECT_EQ(fifo.storage_size(), 0u);
  }
  // Never drains (one more in than out each step): the popped front is dropped once it is
  // half the storage, so the storage stays within twice what is queued (plus the threshold).
  for (int step = 0; step < 2000; ++step) {
    fifo.push_back(std::make_unique<int>(next_in++));
    fifo.push_back(std::make_unique<int>(next_in++));
    pop();
    EXPECT_LE(fifo.storage_size(), 2 * fifo.size() + Fifo<int>::kCompactAfter + 2);
  }
  size_t counted = 0;
  for (auto& v : fifo) EXPECT_EQ(*v, next_out + static_cast<int>(counted++));
  EXPECT_EQ(counted, fifo.size());
  while (!fifo.empty()) pop();
  EXPECT_EQ(next_out, next_in);
}

}  // namespace
}  // namespace asyncps::net
