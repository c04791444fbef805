#include "net/server_session.h"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/in_memory_transport.h"
#include "net/test_messages.capnp.h"
#include "net/raw_client_testing.h"
#include "net/wire_check.h"

namespace asyncps::net {
namespace server_session_test_internal {
namespace {

constexpr char kToken[] = "session-token";

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

InMessage Decode(const std::string& bytes) {
  auto in = FrameDecoder::DecodeAll(Bytes(bytes), FrameLimits(), nullptr);
  EXPECT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(CheckEnvelope(*in).ok());
  return std::move(*in);
}

using testutil::PointerField;

// One session over an in-memory transport, serving "t.Names" (returns how many names a
// ReadRequest carries; workers may call it) and "t.ChiefOnly".
class ServerSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.role = "ps";
    config_.task_index = 2;
    config_.incarnation = 99;
    config_.token = kToken;
    config_.handshake_limits = HandshakeFrameLimits();
    methods_.Register<testwire::ReadRequest>("t.Names", {"worker"},
                                         [this](const RequestContext&, const InMessage& req, OutMessage*) {
                                           ++calls_;
                                           return absl::InvalidArgumentError(absl::StrCat(
                                               req.RequestBody<testwire::ReadRequest>().getNames().size(), " names"));
                                         });
    methods_.Register<wire::Empty>("t.ChiefOnly", {"chief"},
                                   [](const RequestContext&, const InMessage&, OutMessage*) { return absl::OkStatus(); });
    NewSession();
  }

  void NewSession() {
    auto transport = std::make_unique<InMemoryTransport>();
    transport_ = transport.get();
    session_ = std::make_shared<ServerSession>(
        &config_, &methods_, [](std::function<void()> fn) { fn(); }, std::move(transport), "memory", nonce_);
    session_->Start();
  }

  void Feed(const std::string& bytes) { DeliverBytes(Bytes(bytes), *transport_, *session_); }

  // The last frame the session sent.
  InMessage Last() { return Decode(transport_->sent().back()); }

  void Handshake(const std::string& role = "worker") {
    Feed(testutil::HelloFrame(kToken, nonce_, role));
    ASSERT_FALSE(transport_->closed()) << transport_->close_reason();
    ASSERT_TRUE(Last().envelope().getHelloAck().getOk());
  }

  std::string NamesRequest(uint64_t id, int n) {
    OutMessage m;
    m.InitRequestBody<testwire::ReadRequest>().initNames(n);
    return testutil::RequestFrame(std::move(m), id, "t.Names");
  }

  SessionConfig config_;
  MethodTable methods_;
  const std::string nonce_ = std::string(kNonceBytes, 'c');
  InMemoryTransport* transport_ = nullptr;
  std::shared_ptr<ServerSession> session_;
  int calls_ = 0;
};

TEST_F(ServerSessionTest, SendsChallengeUnderHandshakeLimits) {
  ASSERT_EQ(transport_->sent().size(), 1u);
  InMessage challenge = Last();
  ASSERT_EQ(challenge.envelope().which(), wire::Envelope::CHALLENGE);
  EXPECT_EQ(challenge.envelope().getChallenge().getNonce().size(), kNonceBytes);
  EXPECT_EQ(transport_->limits().max_payload_bytes, 0u);
}

TEST_F(ServerSessionTest, GoodProofIsAcceptedWithServerProofAndFullLimits) {
  Handshake();
  auto ack = Last().envelope().getHelloAck();
  auto proof = ack.getProof();
  EXPECT_TRUE(VerifyProof(kToken, ProofDirection::kServerAck, std::string(kNonceBytes, 'n'), {"ps", 2, 99},
                          absl::string_view(reinterpret_cast<const char*>(proof.begin()), proof.size())));
  EXPECT_EQ(transport_->limits().max_payload_bytes, FrameLimits().max_payload_bytes);
  EXPECT_EQ(session_->peer().role, "worker");
}

TEST_F(ServerSessionTest, WrongTokenAndReplayedAnswerAreRefused) {
  Feed(testutil::HelloFrame("other-token", nonce_, "worker"));
  EXPECT_TRUE(transport_->closed());
  EXPECT_FALSE(Last().envelope().getHelloAck().getOk());
  EXPECT_FALSE(session_->authenticated());

  // An answer that was right for another connection's challenge.
  const std::string old_answer = testutil::HelloFrame(kToken, std::string(kNonceBytes, 'o'), "worker");
  NewSession();
  Feed(old_answer);
  EXPECT_TRUE(transport_->closed());
  EXPECT_EQ(transport_->close_reason().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(ServerSessionTest, MalformedHelloClosesWithoutThrowing) {
  // A struct where the role text is expected.
  OutMessage m;
  PointerField(m.envelope().initHello(), "role").initAs<wire::Empty>();
  EXPECT_NO_THROW(Feed(EncodeFrameToString(m)));
  EXPECT_TRUE(transport_->closed());
  EXPECT_EQ(transport_->close_reason().code(), absl::StatusCode::kInvalidArgument);

  // Text bytes without a NUL terminator as the role.
  NewSession();
  OutMessage n;
  const std::string role = "worker";
  PointerField(n.envelope().initHello(), "role")
      .setAs<capnp::Data>(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(role.data()), role.size()));
  EXPECT_NO_THROW(Feed(EncodeFrameToString(n)));
  EXPECT_TRUE(transport_->closed());
}

TEST_F(ServerSessionTest, MalformedRequestHeaderClosesMalformedBodyIsAnswered) {
  Handshake();
  // Method as a list: the connection is closed.
  OutMessage bad_header;
  PointerField(bad_header.envelope().initRequest(), "method").initAs<capnp::List<int64_t>>(2);
  EXPECT_NO_THROW(Feed(EncodeFrameToString(bad_header)));
  EXPECT_TRUE(transport_->closed());

  // A body of the wrong kind: InvalidArgument, the handler never runs, the session goes on.
  NewSession();
  Handshake();
  OutMessage bad_body;
  bad_body.envelope().initRequest().getBody().initAs<capnp::List<wire::Empty>>(3);
  Feed(testutil::RequestFrame(std::move(bad_body), 5, "t.Names"));
  EXPECT_FALSE(transport_->closed());
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls_, 0);
  Feed(NamesRequest(6, 3));
  EXPECT_EQ(calls_, 1);
  EXPECT_EQ(Last().envelope().getRequestId(), 6u);
  EXPECT_EQ(std::string(Last().envelope().getResponse().getMessage().cStr()), "3 names");
}

TEST_F(ServerSessionTest, RolesAreCheckedPerMethod) {
  Handshake("worker");
  Feed(testutil::RequestFrame(OutMessage(), 1, "t.ChiefOnly"));
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  NewSession();
  Handshake("chief");
  Feed(testutil::RequestFrame(OutMessage(), 1, "t.ChiefOnly"));
  EXPECT_EQ(Last().envelope().getResponse().getCode(), 0);
  Feed(NamesRequest(2, 1));  // workers only
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(calls_, 0);
}

TEST_F(ServerSessionTest, RequestsAndPayloadsBeforeHandshakeAreRefused) {
  Feed(NamesRequest(1, 1));
  EXPECT_TRUE(transport_->closed());
  // A pre-handshake frame declaring a 2 GiB payload is refused from its header.
  NewSession();
  OutMessage big;
  big.envelope().initHello();
  big.envelope().initPayloadSizes(1).set(0, uint64_t{2} << 30);
  // Framed by hand: EncodeFrame would list the (absent) payloads truthfully.
  auto words = capnp::messageToFlatArray(big.builder());
  Feed(std::string(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word)));
  EXPECT_TRUE(transport_->closed());
  EXPECT_EQ(transport_->close_reason().code(), absl::StatusCode::kInvalidArgument);
}

// A deferred handler's answer goes out when it is sent (from wherever), once; the request
// counts as in flight until then.
TEST_F(ServerSessionTest, DeferredAnswerIsSentWhenTheHandlerSendsIt) {
  DeferredResponse kept;
  methods_.RegisterDeferred<testwire::ReadRequest>(
      "t.Later", {"worker"}, [&kept](const RequestContext&, const InMessage&, DeferredResponse answer) {
        kept = std::move(answer);
      });
  Handshake();
  const size_t before = transport_->sent().size();
  OutMessage m;
  m.InitRequestBody<testwire::ReadRequest>().initNames(1);
  Feed(testutil::RequestFrame(std::move(m), 7, "t.Later"));
  EXPECT_EQ(transport_->sent().size(), before);  // not answered yet
  EXPECT_EQ(session_->in_flight(), 1);
  ASSERT_TRUE(kept.pending());
  kept.Send(absl::AlreadyExistsError("later"));
  ASSERT_EQ(transport_->sent().size(), before + 1);
  EXPECT_EQ(Last().envelope().getRequestId(), 7u);
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(session_->in_flight(), 0);
  EXPECT_FALSE(kept.pending());
  kept.Send(absl::OkStatus());  // a second answer is not sent
  EXPECT_EQ(transport_->sent().size(), before + 1);
}

// A deferred handler that drops its answer, or throws before sending it, still answers.
TEST_F(ServerSessionTest, DroppedOrThrownDeferredAnswerIsAnswered) {
  methods_.RegisterDeferred<testwire::ReadRequest>("t.Drop", {"worker"},
                                                   [](const RequestContext&, const InMessage&, DeferredResponse) {});
  methods_.RegisterDeferred<testwire::ReadRequest>(
      "t.Throw", {"worker"},
      [](const RequestContext&, const InMessage&, DeferredResponse) { throw std::runtime_error("boom"); });
  Handshake();
  OutMessage a;
  a.InitRequestBody<testwire::ReadRequest>().initNames(1);
  Feed(testutil::RequestFrame(std::move(a), 8, "t.Drop"));
  EXPECT_EQ(Last().envelope().getRequestId(), 8u);
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kInternal));
  OutMessage b;
  b.InitRequestBody<testwire::ReadRequest>().initNames(1);
  Feed(testutil::RequestFrame(std::move(b), 9, "t.Throw"));
  EXPECT_EQ(Last().envelope().getRequestId(), 9u);
  EXPECT_EQ(Last().envelope().getResponse().getCode(), static_cast<int>(absl::StatusCode::kInternal));
  EXPECT_EQ(session_->in_flight(), 0);
}

// A deferred answer sent after the request frame is gone still labels the server's call
// metric with the method's name (the session keeps no view into the frame for it).
TEST_F(ServerSessionTest, ADeferredAnswerSentLaterIsCountedUnderItsMethod) {
  auto process = metrics::ProcessMetrics::Create("ps", 2, "");
  ASSERT_TRUE(process.ok()) << process.status();
  metrics::RpcMetrics rpc(**process);
  config_.metrics = &rpc;
  NewSession();
  std::vector<DeferredResponse> kept;
  methods_.RegisterDeferred<testwire::ReadRequest>(
      "t.AnsweredMuchLater", {"worker"},
      [&kept](const RequestContext&, const InMessage&, DeferredResponse answer) { kept.push_back(answer); });
  Handshake();
  for (uint64_t id = 20; id < 23; ++id) {
    OutMessage m;
    m.InitRequestBody<testwire::ReadRequest>().initNames(3);
    Feed(testutil::RequestFrame(std::move(m), id, "t.AnsweredMuchLater"));
  }
  ASSERT_EQ(kept.size(), 3u);
  // Other frames come and go (reusing the memory the requests were read into) before the
  // answers are sent.
  for (uint64_t id = 30; id < 40; ++id) Feed(NamesRequest(id, 5));
  for (DeferredResponse& answer : kept) answer.Send(absl::OkStatus());
  EXPECT_EQ(session_->in_flight(), 0);
  const std::string text = (*process)->Serialize();
  EXPECT_NE(text.find("method=\"t.AnsweredMuchLater\""), std::string::npos) << text;
  config_.metrics = nullptr;
}

}  // namespace
}  // namespace server_session_test_internal
}  // namespace asyncps::net
