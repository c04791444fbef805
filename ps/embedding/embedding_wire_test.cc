// The planned wire check (net/wire_check.h) against the dynamic-API reference on every message
// of the embedding methods, on damaged copies of each (as worker/wire_schemas_test.cc does for
// the PS and worker services); and a round trip of the table config.

#include <capnp/schema.h>

#include "gtest/gtest.h"
#include "net/wire_check_testing.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_wire.h"

namespace asyncps::ps {
namespace {

template <typename... Messages>
void ExpectSameVerdicts() {
  for (capnp::StructSchema schema : {capnp::Schema::from<Messages>()...}) {
    const net::testutil::MutationReport r = net::testutil::CompareOnDamagedMessages(schema, 500, 11);
    const char* name = schema.getProto().getDisplayName().cStr();
    EXPECT_EQ(r.first_disagreement, "") << name;
    EXPECT_GT(r.rejected, 0) << name;
    EXPECT_EQ(r.accepted + r.rejected, r.messages) << name;
  }
}

TEST(EmbeddingWireTest, PlannedCheckAgreesWithTheReferenceOnEveryMessage) {
  ExpectSameVerdicts<wire::CreateEmbeddingTableRequest, wire::CreateEmbeddingTableResponse,
                     wire::EmbeddingLookupRequest, wire::EmbeddingLookupResponse, wire::EmbeddingPushRequest,
                     wire::EmbeddingPushResponse, wire::EmbeddingStatsRequest, wire::EmbeddingStatsResponse,
                     wire::SaveEmbeddingTablesRequest, wire::SaveEmbeddingTablesResponse,
                     wire::RestoreEmbeddingTablesRequest, wire::RestoreEmbeddingTablesResponse>();
}

TEST(EmbeddingWireTest, ConfigRoundTrip) {
  EmbeddingTableConfig c;
  c.name = "items";
  c.dim = 64;
  c.initializer.kind = EmbeddingInitializer::Kind::kTruncatedNormal;
  c.initializer.stddev = 0.02;
  c.initializer.seed = 99;
  c.optimizer = opt::Ftrl(0.05f, 0.001f);
  c.admission = {.min_count = 3, .probability = 0.5f, .sketch_width = 4096};
  c.ttl_steps = 1000;
  c.memory_cap_bytes = 1 << 30;
  net::OutMessage m;
  BuildCreateEmbeddingTableRequest(c, m);
  auto back = EmbeddingTableConfigFromWire(
      m.builder().getRoot<wire::Envelope>().getRequest().getBody().getAs<wire::CreateEmbeddingTableRequest>().asReader());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, "items");
  EXPECT_EQ(back->dim, 64);
  EXPECT_EQ(back->initializer.kind, EmbeddingInitializer::Kind::kTruncatedNormal);
  EXPECT_EQ(back->initializer.seed, 99u);
  EXPECT_EQ(back->optimizer.kind, OptimizerKind::kFtrl);
  EXPECT_EQ(back->optimizer.l1, 0.001f);
  EXPECT_EQ(back->admission.min_count, 3u);
  EXPECT_EQ(back->admission.sketch_width, 4096u);
  EXPECT_EQ(back->ttl_steps, 1000);
  EXPECT_EQ(back->memory_cap_bytes, uint64_t{1} << 30);
}

}  // namespace
}  // namespace asyncps::ps
