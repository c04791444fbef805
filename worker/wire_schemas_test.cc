// The planned wire check (net/wire_check.h) against the dynamic-API reference on every message
// of the PS and worker services, on thousands of damaged copies each. Here because worker_test
// is the one test binary that sees both services' schemas and net's testing library.

#include <capnp/schema.h>

#include "gtest/gtest.h"
#include "net/wire_check_testing.h"
#include "ps/ps.capnp.h"
#include "worker/worker.capnp.h"

namespace asyncps {
namespace {

template <typename... Messages>
void ExpectSameVerdicts() {
  for (capnp::StructSchema schema : {capnp::Schema::from<Messages>()...}) {
    const net::testutil::MutationReport r = net::testutil::CompareOnDamagedMessages(schema, 1500, 7);
    const char* name = schema.getProto().getDisplayName().cStr();
    EXPECT_EQ(r.first_disagreement, "") << name;
    EXPECT_GT(r.rejected, 0) << name;
    EXPECT_EQ(r.accepted + r.rejected, r.messages) << name;
  }
}

TEST(WireSchemasTest, PlannedCheckAgreesWithTheReferenceOnEveryPsMessage) {
  ExpectSameVerdicts<wire::OptimizerConfig, wire::InitializerSpec, wire::CreateVariableRequest,
                     wire::CreateVariableResponse, wire::ReadRequest, wire::ReadResponse, wire::VariableUpdate,
                     wire::UpdateTag, wire::UpdateRequest, wire::UpdateResponse, wire::Gradient,
                     wire::PushGradientsRequest, wire::GatherRequest, wire::GatherResponse, wire::VariableInfo,
                     wire::ListVariablesResponse, wire::SaveCheckpointRequest, wire::SavedShard,
                     wire::SaveCheckpointResponse, wire::RestoreCheckpointRequest>();
}

TEST(WireSchemasTest, PlannedCheckAgreesWithTheReferenceOnEveryWorkerMessage) {
  ExpectSameVerdicts<wire::VariablePlacement, wire::SetDirectoryRequest, wire::Argument, wire::RunRequest,
                     wire::SplitBinding, wire::RunResponse, wire::CancelRequest, wire::CreateResourceRequest,
                     wire::DeleteResourceRequest, wire::HeartbeatResponse, wire::JoinRequest,
                     wire::JoinResponse, wire::LeaveRequest, wire::LeaveResponse, wire::ScaleRequest,
                     wire::ScaleResponse>();
}

}  // namespace
}  // namespace asyncps
