#include "net/wire_check.h"

#include <kj/exception.h>

#include <string>

#include "gtest/gtest.h"
#include "net/frame_codec.h"
#include "net/test_messages.capnp.h"
#include "net/raw_client_testing.h"
#include "net/wire_check_testing.h"

namespace asyncps::net {
namespace {

// The received form of `m` (what a server's handler would see).
InMessage Received(OutMessage& m) {
  const std::string bytes = EncodeFrameToString(m);
  auto in = FrameDecoder::DecodeAll(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                                    FrameLimits(), nullptr);
  EXPECT_TRUE(in.ok()) << in.status();  // the framing layer accepts all of these
  return std::move(*in);
}

using testutil::PointerField;

TEST(WireCheckTest, WellFormedMessagesPass) {
  OutMessage m;
  auto hello = m.envelope().initHello();
  hello.setRole("worker");
  hello.setProof(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>("abc"), 3));
  InMessage in = Received(m);
  EXPECT_TRUE(CheckEnvelope(in).ok());

  OutMessage r;
  auto body = r.InitRequestBody<testwire::ReadRequest>();
  body.initNames(2).set(0, "a");
  InMessage rin = Received(r);
  EXPECT_TRUE(CheckEnvelope(rin).ok());
  EXPECT_TRUE(CheckStruct<testwire::ReadRequest>(rin.envelope().getRequest().getBody()).ok());
}

TEST(WireCheckTest, StructWhereTextIsExpected) {
  OutMessage m;
  auto hello = m.envelope().initHello();
  PointerField(hello, "role").initAs<wire::Empty>();
  InMessage in = Received(m);
  // Unchecked, the generated accessor throws: this is what used to kill a server.
  EXPECT_THROW((void)in.envelope().getHello().getRole(), kj::Exception);
  absl::Status s = CheckEnvelope(in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(WireCheckTest, TextWithoutNulTerminator) {
  OutMessage m;
  auto request = m.envelope().initRequest();
  const std::string bytes = "ps.Read";  // as Data: no NUL after it
  PointerField(request, "method").setAs<capnp::Data>(
      capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
  InMessage in = Received(m);
  EXPECT_THROW((void)in.envelope().getRequest().getMethod(), kj::Exception);
  EXPECT_EQ(CheckEnvelope(in).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireCheckTest, ListOfNumbersWhereTextIsExpected) {
  OutMessage m;
  auto request = m.envelope().initRequest();
  PointerField(request, "method").initAs<capnp::List<int64_t>>(3);
  InMessage in = Received(m);
  EXPECT_EQ(CheckEnvelope(in).code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireCheckTest, BodyOfTheWrongKind) {
  OutMessage m;
  m.envelope().initRequest().getBody().initAs<capnp::List<int64_t>>(4);
  InMessage in = Received(m);
  EXPECT_TRUE(CheckEnvelope(in).ok());  // the body is an AnyPointer: its reader checks it
  EXPECT_EQ(CheckStruct<testwire::ReadRequest>(in.envelope().getRequest().getBody()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireCheckTest, NestedListElementsAreChecked) {
  // A list of structs where List(Text) is expected, one level down.
  OutMessage m;
  auto body = m.InitRequestBody<testwire::ReadRequest>();
  PointerField(body, "names").initAs<capnp::List<wire::Empty>>(2);
  InMessage in = Received(m);
  EXPECT_EQ(CheckStruct<testwire::ReadRequest>(in.envelope().getRequest().getBody()).code(),
            absl::StatusCode::kInvalidArgument);

  // A bad text inside a struct inside a list (worker SetDirectory placements).
  OutMessage d;
  auto placements = d.InitRequestBody<testwire::SetDirectoryRequest>().initVariables(1);
  PointerField(placements[0], "name").initAs<wire::Empty>();
  InMessage din = Received(d);
  EXPECT_EQ(CheckStruct<testwire::SetDirectoryRequest>(din.envelope().getRequest().getBody()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WireCheckTest, OnlyTheActiveUnionMemberIsRead) {
  OutMessage m;
  auto args = m.InitRequestBody<testwire::RunRequest>().initArgs(1);
  args[0].setResource(7);
  InMessage in = Received(m);
  EXPECT_TRUE(CheckStruct<testwire::RunRequest>(in.envelope().getRequest().getBody()).ok());
}

TEST(WireCheckTest, CheckedResponseBodyRefusesMalformedResponses) {
  OutMessage m;
  m.envelope().initResponse().getBody().initAs<capnp::List<int64_t>>(2);
  InMessage in = Received(m);
  EXPECT_FALSE(CheckedResponseBody<testwire::ReadResponse>(in).ok());
  OutMessage good;
  good.InitResponseBody<testwire::ReadResponse>().initTensors(1);
  InMessage gin = Received(good);
  auto body = CheckedResponseBody<testwire::ReadResponse>(gin);
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(body->getTensors().size(), 1u);
}

// The planned checker against the dynamic-API reference on thousands of damaged copies of a
// fully populated message: any difference (a read the plan skips, an element size it gets
// wrong, a union member it misreads) shows as a disagreement. Both outcomes must occur, or
// the damage proved nothing.
void ExpectSameVerdicts(capnp::StructSchema schema) {
  for (uint64_t seed : {1, 2, 3}) {
    const testutil::MutationReport r = testutil::CompareOnDamagedMessages(schema, 2000, seed);
    EXPECT_EQ(r.first_disagreement, "") << schema.getProto().getDisplayName().cStr();
    EXPECT_GT(r.accepted, 0) << schema.getProto().getDisplayName().cStr();
    EXPECT_GT(r.rejected, 0) << schema.getProto().getDisplayName().cStr();
  }
}

TEST(WireCheckTest, PlannedCheckAgreesWithDynamicOnDamagedMessages) {
  ExpectSameVerdicts(capnp::Schema::from<wire::Envelope>());
  ExpectSameVerdicts(capnp::Schema::from<wire::Hello>());
  ExpectSameVerdicts(capnp::Schema::from<testwire::ReadRequest>());
  ExpectSameVerdicts(capnp::Schema::from<testwire::ReadResponse>());
  ExpectSameVerdicts(capnp::Schema::from<testwire::SetDirectoryRequest>());
  ExpectSameVerdicts(capnp::Schema::from<testwire::RunRequest>());
}

TEST(WireCheckTest, ACheckerIsReusableAcrossMessagesAndCopies) {
  const WireChecker checker(capnp::Schema::from<testwire::ReadRequest>());
  const WireChecker copy = checker;
  OutMessage good;
  good.InitRequestBody<testwire::ReadRequest>().initNames(1).set(0, "v");
  OutMessage bad;
  PointerField(bad.InitRequestBody<testwire::ReadRequest>(), "names").initAs<capnp::List<int64_t>>(2);
  InMessage gin = Received(good);
  InMessage bin = Received(bad);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(checker.Check(gin.envelope().getRequest().getBody()).ok());
    absl::Status s = copy.Check(bin.envelope().getRequest().getBody());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ReadRequest"), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace asyncps::net
