// Hostile clients against real asyncps_ps and worker processes: every kind of bad input gets
// a clear status or a closed connection, and the process stays up, keeps serving a legitimate
// client (a variable created beforehand reads back intact), and its memory stays bounded.
#include <signal.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/frame_codec.h"
#include "net/peer.h"
#include "ps/ps.capnp.h"
#include "net/raw_client_testing.h"
#include "net/rpc_client.h"
#include "net/wire_check.h"
#include "worker/worker.capnp.h"
#include "ps/shard_initializer.h"
#include "ps/ps_wire.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using net::InMessage;
using net::OutMessage;
using net::testutil::RawClient;

constexpr int kMaxConnections = 16;

using net::testutil::PointerField;

int PortOf(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  return port;
}

// Resident set size of `pid` in KiB, from /proc/<pid>/status; -1 when unreadable.
int64_t RssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = -1;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib;
  }
  return -1;
}

bool Alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testutil::LocalCluster::Options options;
    options.num_ps = 1;
    options.num_workers = 1;
    options.extra_env = {{"ASYNCPS_RPC_MAX_CONNECTIONS", std::to_string(kMaxConnections)},
                         {"ASYNCPS_RPC_HANDSHAKE_TIMEOUT_MS", "300"}};
    auto cluster = testutil::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ps_address_ = cluster_->chief_spec().ps()[0];
    worker_address_ = cluster_->chief_spec().workers()[0];
    ps_ = Client(ps_address_);
    worker_ = Client(worker_address_);
    // The variable every check reads back.
    OutMessage m;
    auto req = m.InitRequestBody<wire::CreateVariableRequest>();
    req.setName("intact");
    req.setDtype(static_cast<uint8_t>(DType::kF32));
    req.initShape(1).set(0, 4);
    ps::InitializerSpec spec;
    spec.kind = "tensor";
    spec.tensor = Tensor::FromVector<float>({4}, {1.5f, -2.0f, 3.25f, 4.0f});
    ps::InitializerToWire(spec, m, req.initInitializer());
    auto created = ps_->Call("ps.CreateVariable", std::move(m), absl::Seconds(20));
    ASSERT_TRUE(created.ok()) << created.status();
    rss_before_ps_ = RssKib(cluster_->ps_pid(0));
    rss_before_worker_ = RssKib(cluster_->worker_pid(0));
  }

  void TearDown() override {
    ps_.reset();
    worker_.reset();
    cluster_.reset();
  }

  std::unique_ptr<net::RpcClient> Client(const std::string& address, const std::string& token = "") {
    net::RpcClient::Options o;
    o.address = address;
    o.role = "chief";
    o.token = token.empty() ? cluster_->token() : token;
    return std::make_unique<net::RpcClient>(loop_, o);
  }

  // The legitimate clients are still served and the variable is intact.
  void ExpectHealthy(const std::string& after) {
    SCOPED_TRACE(after);
    EXPECT_TRUE(Alive(cluster_->ps_pid(0)));
    EXPECT_TRUE(Alive(cluster_->worker_pid(0)));
    OutMessage m;
    m.InitRequestBody<wire::ReadRequest>().initNames(1).set(0, "intact");
    auto read = ps_->Call("ps.Read", std::move(m), absl::Seconds(20));
    ASSERT_TRUE(read.ok()) << read.status();
    auto body = net::CheckedResponseBody<wire::ReadResponse>(*read);
    ASSERT_TRUE(body.ok()) << body.status();
    auto value = read->TensorAt(body->getTensors()[0]);
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_TRUE(value->Equals(Tensor::FromVector<float>({4}, {1.5f, -2.0f, 3.25f, 4.0f})));
    OutMessage hb;
    hb.InitRequestBody<wire::Empty>();
    EXPECT_TRUE(worker_->Call("worker.Heartbeat", std::move(hb), absl::Seconds(20)).ok());
    // Nothing refused was buffered: far below the 2 GiB a refused frame announced.
    EXPECT_LT(RssKib(cluster_->ps_pid(0)) - rss_before_ps_, 256 * 1024);
    EXPECT_LT(RssKib(cluster_->worker_pid(0)) - rss_before_worker_, 256 * 1024);
  }

  std::vector<std::string> Targets() const { return {ps_address_, worker_address_}; }

  net::EventLoop loop_;
  std::unique_ptr<testutil::LocalCluster> cluster_;
  std::string ps_address_;
  std::string worker_address_;
  std::unique_ptr<net::RpcClient> ps_;
  std::unique_ptr<net::RpcClient> worker_;
  int64_t rss_before_ps_ = 0;
  int64_t rss_before_worker_ = 0;
};

TEST_F(HostileClientTest, EveryBadInputIsRefusedAndServersKeepServing) {
  ExpectHealthy("setup");
  const std::string token = cluster_->token();
  for (const std::string& target : Targets()) {
    SCOPED_TRACE(target);
    const int port = PortOf(target);
    {  // Garbage instead of a handshake.
      RawClient raw(port);
      ASSERT_TRUE(raw.ReadChallenge().ok());
      raw.Write(std::string("\xff\xff\xff\x7fGET / HTTP/1.1\r\n\r\n", 22));
      EXPECT_TRUE(raw.WaitClosed());
    }
    ExpectHealthy("garbage");
    {  // A 2 GiB frame before the handshake: refused from its 8-byte header.
      RawClient raw(port);
      ASSERT_TRUE(raw.ReadChallenge().ok());
      const uint32_t table[2] = {0, 1u << 28};
      raw.Write(std::string(reinterpret_cast<const char*>(table), sizeof(table)));
      EXPECT_TRUE(raw.WaitClosed());
    }
    ExpectHealthy("oversized pre-handshake frame");
    {  // Never finishes the handshake: closed at the deadline.
      RawClient raw(port);
      ASSERT_TRUE(raw.ReadChallenge().ok());
      EXPECT_TRUE(raw.WaitClosed());
    }
    ExpectHealthy("handshake deadline");
    {  // Wrong token: refused with a reason, then closed.
      RawClient raw(port);
      auto ack = raw.Handshake("not-the-token", "chief");
      ASSERT_TRUE(ack.ok()) << ack.status();
      EXPECT_FALSE(ack->envelope().getHelloAck().getOk());
      EXPECT_TRUE(raw.WaitClosed());
    }
    {  // No proof at all.
      RawClient raw(port);
      ASSERT_TRUE(raw.ReadChallenge().ok());
      OutMessage m;
      auto hello = m.envelope().initHello();
      hello.setProtocolVersion(net::kProtocolVersion);
      hello.setRole("chief");
      raw.Write(net::EncodeFrameToString(m));
      auto ack = raw.ReadFrame();
      ASSERT_TRUE(ack.ok()) << ack.status();
      EXPECT_FALSE(ack->envelope().getHelloAck().getOk());
      EXPECT_TRUE(raw.WaitClosed());
    }
    ExpectHealthy("bad proofs");
    {  // Replay: a correct answer seen on one connection, sent on another.
      RawClient first(port);
      auto nonce = first.ReadChallenge();
      ASSERT_TRUE(nonce.ok());
      const std::string answer = net::testutil::HelloFrame(token, *nonce, "chief");
      ASSERT_TRUE(first.Write(answer));
      auto ack = first.ReadFrame();
      ASSERT_TRUE(ack.ok());
      EXPECT_TRUE(ack->envelope().getHelloAck().getOk());
      RawClient second(port);
      ASSERT_TRUE(second.ReadChallenge().ok());
      ASSERT_TRUE(second.Write(answer));
      auto refused = second.ReadFrame();
      ASSERT_TRUE(refused.ok()) << refused.status();
      EXPECT_FALSE(refused->envelope().getHelloAck().getOk());
      EXPECT_TRUE(second.WaitClosed());
    }
    ExpectHealthy("replay");
    {  // A struct where the hello's role text is expected.
      RawClient raw(port);
      ASSERT_TRUE(raw.ReadChallenge().ok());
      OutMessage m;
      PointerField(m.envelope().initHello(), "role").initAs<wire::Empty>();
      raw.Write(net::EncodeFrameToString(m));
      EXPECT_TRUE(raw.WaitClosed());
    }
    {  // After a good handshake: a body of the wrong kind, then a method name without NUL.
      RawClient raw(port);
      auto ack = raw.Handshake(token, "chief");
      ASSERT_TRUE(ack.ok() && ack->envelope().getHelloAck().getOk());
      OutMessage bad_body;
      bad_body.envelope().initRequest().getBody().initAs<capnp::List<int64_t>>(3);
      const std::string method = target == ps_address_ ? "ps.Read" : "worker.Run";
      raw.Write(net::testutil::RequestFrame(std::move(bad_body), 1, method));
      auto answer = raw.ReadFrame();
      ASSERT_TRUE(answer.ok()) << answer.status();
      EXPECT_EQ(answer->envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kInvalidArgument));
      OutMessage bad_text;
      PointerField(bad_text.envelope().initRequest(), "method")
          .setAs<capnp::Data>(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(method.data()), method.size()));
      raw.Write(net::EncodeFrameToString(bad_text));
      EXPECT_TRUE(raw.WaitClosed());
    }
    ExpectHealthy("malformed pointers and text");
  }
}

TEST_F(HostileClientTest, WrongRoleCannotRunClosuresOnAWorker) {
  // A peer holding the token but claiming to be a worker may not call worker.Run.
  RawClient raw(PortOf(worker_address_));
  auto ack = raw.Handshake(cluster_->token(), "worker");
  ASSERT_TRUE(ack.ok() && ack->envelope().getHelloAck().getOk());
  OutMessage run;
  run.InitRequestBody<wire::RunRequest>().setFunction("anything");
  raw.Write(net::testutil::RequestFrame(std::move(run), 9, "worker.Run"));
  auto answer = raw.ReadFrame();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->envelope().getRequestId(), 9u);
  EXPECT_EQ(answer->envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  ExpectHealthy("wrong role");
}

TEST_F(HostileClientTest, IdleConnectionsPastCapCloseAndRssStaysBounded) {
  for (const std::string& target : Targets()) {
    SCOPED_TRACE(target);
    std::vector<std::unique_ptr<RawClient>> idle;
    int refused = 0;
    for (int i = 0; i < kMaxConnections + 8; ++i) {
      idle.push_back(std::make_unique<RawClient>(PortOf(target)));
      // Accepted connections get a challenge; the ones over the cap are closed at once.
      if (!idle.back()->ReadChallenge().ok()) ++refused;
    }
    EXPECT_GE(refused, 8);
    // The legitimate client's connection, made earlier, is still served meanwhile.
    ExpectHealthy("connection cap");
  }
  EXPECT_TRUE(Alive(cluster_->ps_pid(0)));
  const int64_t rss_ps = RssKib(cluster_->ps_pid(0));
  const int64_t rss_worker = RssKib(cluster_->worker_pid(0));
  std::printf("RSS ps %lld -> %lld KiB, worker %lld -> %lld KiB\n", static_cast<long long>(rss_before_ps_),
              static_cast<long long>(rss_ps), static_cast<long long>(rss_before_worker_),
              static_cast<long long>(rss_worker));
  // Far below what reading any refused frame (2 GiB) or one buffer per refused connection
  // beyond the cap would take.
  EXPECT_LT(rss_ps - rss_before_ps_, 64 * 1024);
  EXPECT_LT(rss_worker - rss_before_worker_, 64 * 1024);
}

}  // namespace
}  // namespace asyncps
