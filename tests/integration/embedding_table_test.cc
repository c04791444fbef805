// ParameterServerStrategy's embedding tables against real PS processes: creation on every PS
// (idempotent; bad configs refused with the PS still serving) and RecreateVariables giving a
// table back to a PS that restarted empty.
#include <memory>
#include <vector>

#include "coordinator/parameter_server_strategy.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "ps/embedding/key_partition.h"
#include "tests/testutil/local_cluster.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace {

constexpr int64_t kDim = 4;

EmbeddingInitializer Constant(double value) {
  EmbeddingInitializer init;
  init.kind = EmbeddingInitializer::Kind::kConstant;
  init.value = value;
  return init;
}

class EmbeddingTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testutil::LocalCluster::Options o;
    o.num_ps = 2;
    o.num_workers = 1;
    auto cluster = testutil::LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
  }

  void TearDown() override {
    chief_.reset();
    cluster_.reset();
  }

  ParameterServerStrategy& strategy() { return chief_->strategy(); }

  std::unique_ptr<testutil::LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
};

// A key PsForKey places on PS `ps` of 2.
int64_t KeyOn(int ps) {
  int64_t key = 0;
  while (ps::PsForKey(key, 2) != ps) ++key;
  return key;
}

TEST_F(EmbeddingTableTest, CreateIsIdempotentAndRefusesBadConfigs) {
  ASSERT_TRUE(strategy().CreateEmbeddingTable("e", kDim, Constant(0.25), opt::Adagrad()).ok());
  ASSERT_TRUE(strategy().CreateEmbeddingTable("e", kDim, Constant(0.25), opt::Adagrad()).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(
      strategy().CreateEmbeddingTable("e", kDim + 1, Constant(0.25), opt::Adagrad())));
  EXPECT_TRUE(
      absl::IsInvalidArgument(strategy().CreateEmbeddingTable("bad", -3, Constant(0), opt::SGD())));
  EXPECT_TRUE(absl::IsInvalidArgument(
      strategy().CreateEmbeddingTable("bad", 1 << 20, Constant(0), opt::SGD())));
  // Still serving: both PS answer for "e" with the initial value.
  auto rows = strategy().LookupEmbeddings(
      "e", Tensor::FromVector(std::vector<int64_t>{KeyOn(0), KeyOn(1)}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->shape(), (Shape{2, kDim}));
  for (float v : rows->flat<float>()) EXPECT_EQ(v, 0.25f);
}

TEST_F(EmbeddingTableTest, RecreateVariablesGivesTheTableBackToARestartedPs) {
  ASSERT_TRUE(strategy().CreateEmbeddingTable("e", kDim, Constant(0.5), opt::SGD()).ok());
  ASSERT_TRUE(cluster_->KillPs(1).ok());
  ASSERT_TRUE(cluster_->RestartPs(1).ok());
  const Tensor keys = Tensor::FromVector(std::vector<int64_t>{KeyOn(1)});
  // Once the chief's connection is back (it reconnects by itself; polled with a deadline), the
  // restarted PS answers that it does not know the table, which PS 0 holds: the PS lost it
  // (PsStateLostError, what automatic PS recovery acts on), not an unknown table.
  absl::Status lost = strategy().LookupEmbeddings("e", keys).status();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (IsPsUnreachable(lost) && !IsPsStateLost(lost) && absl::Now() < deadline) {
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(20));  // poll pacing
    lost = strategy().LookupEmbeddings("e", keys).status();
  }
  EXPECT_TRUE(IsPsStateLost(lost)) << lost;
  // A table no PS holds stays NotFound.
  EXPECT_TRUE(absl::IsNotFound(strategy().LookupEmbeddings("never_created", keys).status()));
  ASSERT_TRUE(strategy().RecreateVariables().ok());
  auto rows = strategy().LookupEmbeddings("e", keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (float v : rows->flat<float>()) EXPECT_EQ(v, 0.5f);
}

}  // namespace
}  // namespace asyncps
