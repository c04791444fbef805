// RpcServer's limits and its decode-error boundary, over real sockets: each refusal is a
// closed connection (or a clear status) counted by reason, and the server keeps serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/test_messages.capnp.h"
#include "net/raw_client_testing.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"

namespace asyncps::net {
namespace rpc_limits_test_internal {
namespace {

using testutil::RawClient;

constexpr char kToken[] = "limits-token";

using testutil::PointerField;

// Waits (polling, with a deadline) until `condition` holds.
template <typename Fn>
bool Eventually(Fn condition, absl::Duration timeout = absl::Seconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));  // polling interval, not synchronisation
  }
  return condition();
}

class RpcLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = metrics::ProcessMetrics::Create("ps", 0, "");
    ASSERT_TRUE(m.ok());
    process_metrics_ = std::move(*m);
    metrics_ = std::make_unique<metrics::RpcMetrics>(*process_metrics_);
    options_.token = kToken;
    options_.role = "ps";
    options_.metrics = metrics_.get();
  }

  void TearDown() override {
    Release();
    clients_.clear();
    server_.reset();
  }

  void StartServer() {
    server_ = std::make_unique<RpcServer>(loop_, options_);
    server_->Register<wire::Empty>("t.Ping", {"worker"}, [](const RequestContext&, const InMessage&, OutMessage*) {
      return absl::OkStatus();
    });
    server_->Register<wire::Empty>("t.Block", {"worker"}, [this](const RequestContext&, const InMessage&, OutMessage*) {
      entered_.Notify();
      release_.WaitForNotification();
      return absl::OkStatus();
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  RpcClient& NewClient() {
    RpcClient::Options o;
    o.address = absl::StrCat("127.0.0.1:", server_->port());
    o.role = "worker";
    o.token = kToken;
    o.initial_backoff = absl::ZeroDuration();
    clients_.push_back(std::make_unique<RpcClient>(loop_, o));
    return *clients_.back();
  }

  bool Ping() {
    RpcClient& c = clients_.empty() ? NewClient() : *clients_.front();
    return c.Call("t.Ping", OutMessage(), absl::Seconds(20)).ok();
  }

  double Rejected(const char* reason) { return metrics_->RejectedCount(reason); }

  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  std::unique_ptr<metrics::ProcessMetrics> process_metrics_;
  std::unique_ptr<metrics::RpcMetrics> metrics_;
  RpcServer::Options options_;
  EventLoop loop_;
  std::unique_ptr<RpcServer> server_;
  std::vector<std::unique_ptr<RpcClient>> clients_;
  Notification entered_;
  Notification release_;
};

TEST_F(RpcLimitsTest, HugeFrameBeforeHandshakeIsRefusedFromItsHeader) {
  StartServer();
  {
    // A segment table announcing one 2 GiB segment: closed after 8 bytes.
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.ReadChallenge().ok());
    const uint32_t table[2] = {0, 1u << 28};
    ASSERT_TRUE(raw.Write(std::string(reinterpret_cast<const char*>(table), sizeof(table))));
    EXPECT_TRUE(raw.WaitClosed());
  }
  {
    // A small hello that announces a 2 GiB payload.
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.ReadChallenge().ok());
    OutMessage m;
    m.envelope().initHello();
    m.envelope().initPayloadSizes(1).set(0, uint64_t{2} << 30);
    auto words = capnp::messageToFlatArray(m.builder());
    ASSERT_TRUE(raw.Write(std::string(reinterpret_cast<const char*>(words.begin()), words.size() * 8)));
    EXPECT_TRUE(raw.WaitClosed());
  }
  EXPECT_TRUE(Eventually([&] { return Rejected("bad_frame") == 2; }));
  EXPECT_TRUE(Ping());
}

TEST_F(RpcLimitsTest, HandshakeMustFinishBeforeItsDeadline) {
  options_.handshake_timeout = absl::Milliseconds(100);
  StartServer();
  RawClient silent(server_->port());
  ASSERT_TRUE(silent.ReadChallenge().ok());
  EXPECT_TRUE(silent.WaitClosed());  // says nothing, and is closed for it
  EXPECT_EQ(Rejected("handshake_timeout"), 1);
  EXPECT_TRUE(Ping());
}

TEST_F(RpcLimitsTest, MalformedHelloClosesThatConnectionOnly) {
  StartServer();
  ASSERT_TRUE(Ping());
  for (int variant = 0; variant < 2; ++variant) {
    RawClient raw(server_->port());
    ASSERT_TRUE(raw.ReadChallenge().ok());
    OutMessage m;
    auto hello = m.envelope().initHello();
    if (variant == 0) {
      PointerField(hello, "role").initAs<wire::Empty>();  // struct where text is expected
    } else {
      const std::string role = "worker";  // text bytes without NUL
      PointerField(hello, "role").setAs<capnp::Data>(
          capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(role.data()), role.size()));
    }
    ASSERT_TRUE(raw.Write(EncodeFrameToString(m)));
    EXPECT_TRUE(raw.WaitClosed()) << variant;
    EXPECT_TRUE(Ping()) << variant;
  }
  EXPECT_EQ(Rejected("malformed"), 2);
}

TEST_F(RpcLimitsTest, MalformedRequestAfterHandshake) {
  StartServer();
  RawClient raw(server_->port());
  ASSERT_TRUE(raw.Handshake(kToken, "worker").ok());
  // A body of the wrong kind is answered with InvalidArgument on a connection that stays up.
  OutMessage bad_body;
  bad_body.envelope().initRequest().getBody().initAs<capnp::List<int64_t>>(4);
  ASSERT_TRUE(raw.Write(testutil::RequestFrame(std::move(bad_body), 1, "t.Ping")));
  auto answer = raw.ReadFrame();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  ASSERT_TRUE(raw.Write(testutil::RequestFrame(OutMessage(), 2, "t.Ping")));
  answer = raw.ReadFrame();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->envelope().getResponse().getCode(), 0);
  // A method name without its NUL closes the connection.
  OutMessage bad_header;
  const std::string method = "t.Ping";
  PointerField(bad_header.envelope().initRequest(), "method")
      .setAs<capnp::Data>(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(method.data()), method.size()));
  ASSERT_TRUE(raw.Write(EncodeFrameToString(bad_header)));
  EXPECT_TRUE(raw.WaitClosed());
  EXPECT_TRUE(Ping());
}

TEST_F(RpcLimitsTest, ConnectionsBeyondTheCapAreClosedAtAccept) {
  options_.max_connections = 3;
  StartServer();
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(server_->port()));
    ASSERT_TRUE(held.back()->ReadChallenge().ok());
  }
  RawClient extra(server_->port());
  EXPECT_TRUE(extra.WaitClosed());
  EXPECT_EQ(Rejected("connection_cap"), 1);
  held.pop_back();
  ASSERT_TRUE(Eventually([&] { return server_->num_connections() < 3; }));
  EXPECT_TRUE(Ping());
}

TEST_F(RpcLimitsTest, IdleConnectionsAreClosedButNotOnesWithACallInFlight) {
  options_.idle_timeout = absl::Milliseconds(100);
  StartServer();
  RpcClient& busy = NewClient();
  Notification done;
  absl::Status status = absl::UnknownError("not called");
  busy.CallAsync("t.Block", OutMessage(), absl::Seconds(60), [&](absl::StatusOr<InMessage> r) {
    status = r.status();
    done.Notify();
  });
  entered_.WaitForNotification();
  // An idle authenticated connection beside it is closed by the idle sweep...
  RawClient idle(server_->port());
  ASSERT_TRUE(idle.Handshake(kToken, "worker").ok());
  EXPECT_TRUE(idle.WaitClosed());
  EXPECT_GE(Rejected("idle_timeout"), 1);
  // ... while the busy one, idle just as long, keeps its call.
  Release();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok()) << status;
  // Once closed for idleness, a client reconnects on its next call.
  ASSERT_TRUE(Eventually([&] { return server_->num_connections() == 0; }));
  EXPECT_TRUE(busy.Call("t.Ping", OutMessage(), absl::Seconds(20)).ok());
}

TEST_F(RpcLimitsTest, EmptyTokenOnlyOnLoopback) {
  options_.token = "";
  options_.host = "0.0.0.0";
  server_ = std::make_unique<RpcServer>(loop_, options_);
  absl::Status s = server_->Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  options_.host = "127.0.0.1";
  server_ = std::make_unique<RpcServer>(loop_, options_);
  EXPECT_TRUE(server_->Start().ok());
}

TEST_F(RpcLimitsTest, AcceptBacksOffWhenDescriptorsRunOut) {
  StartServer();
  ASSERT_TRUE(Ping());
  rlimit original;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &original), 0);
  // The client's socket exists before the limit bites and connects after: the server's
  // accept then finds no descriptor to give it (this process is both ends).
  const int waiting = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(waiting, 0);
  std::vector<int> filler;
  for (int fd; (fd = dup(0)) >= 0 && filler.size() < 64;) filler.push_back(fd);  // fill low holes
  rlimit low = original;
  low.rlim_cur = static_cast<rlim_t>(filler.back()) + 1;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  for (int fd; (fd = dup(0)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(waiting, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);  // the kernel accepts
  // While descriptors are exhausted accept fails; it must back off, not spin: a spinning loop
  // fails hundreds of thousands of times in the time the back-off fails a few times.
  const bool failed = Eventually([&] { return Rejected("accept_error") >= 4; }, absl::Seconds(30));
  const double errors = Rejected("accept_error");
  for (int fd : filler) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &original), 0);
  ASSERT_TRUE(failed);
  EXPECT_LT(errors, 100) << "accept loop is spinning";
  // Once descriptors are back the pending connection is accepted: its challenge arrives.
  pollfd p{waiting, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 30000), 1);
  close(waiting);
  EXPECT_TRUE(Ping());
}

// A client facing a hostile server: malformed handshake frames fail its calls, never the process.
TEST(RpcClientHostileServerTest, MalformedHandshakeFromServerFailsTheCall) {
  EventLoop loop;
  for (int variant = 0; variant < 3; ++variant) {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(listen(listener, 4), 0);
    socklen_t len = sizeof(addr);
    getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    std::thread server([listener, variant] {
      const int fd = accept(listener, nullptr, nullptr);
      OutMessage challenge;
      const std::string nonce = MakeNonce();
      challenge.envelope().initChallenge().setNonce(
          capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(nonce.data()), nonce.size()));
      challenge.envelope().getChallenge().setProtocolVersion(kProtocolVersion);
      OutMessage ack;
      auto a = ack.envelope().initHelloAck();
      a.setOk(true);
      if (variant == 0) PointerField(a, "role").initAs<wire::Empty>();
      if (variant == 1) PointerField(a, "error").initAs<capnp::List<int64_t>>(1);
      // variant 2: a well-formed ack without the server's proof.
      std::string bytes = EncodeFrameToString(challenge);
      if (variant == 0) {
        // A struct where the challenge's nonce (Data) is expected.
        OutMessage bad;
        PointerField(bad.envelope().initChallenge(), "nonce").initAs<wire::Empty>();
        bytes = EncodeFrameToString(bad);
      }
      bytes += EncodeFrameToString(ack);
      (void)!write(fd, bytes.data(), bytes.size());
      char buf[4096];
      while (read(fd, buf, sizeof(buf)) > 0) {
      }
      close(fd);
    });
    {
      RpcClient::Options o;
      o.address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
      o.role = "worker";
      o.token = kToken;
      RpcClient client(loop, o);
      auto r = client.Call("t.Ping", OutMessage(), absl::Seconds(20));
      EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << variant << ": " << r.status();
    }
    server.join();
    close(listener);
  }
}

}  // namespace
}  // namespace rpc_limits_test_internal
}  // namespace asyncps::net
