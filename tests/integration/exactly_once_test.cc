// Exactly-once updates under worker failures (ps/update_dedup.h), with real processes: N
// closures, closure i adds 1 to row i of an [N] counter sharded over 2 PS, while a thread
// SIGKILLs and restarts a random worker every ~300 ms. Each closure works a little after its
// update, so a kill usually lands after the update reached the PS and before the closure
// answered: the coordinator runs it again. With deduplication every row ends at exactly 1;
// without it (TensorFlow's at-least-once), re-runs leave rows at 2. The same holds for the fused
// push-and-read (StepContext::PushGradientsAndReadAsync: closure i pushes gradient -1 to row i of
// an f32 counter under SGD at learning rate 1 and reads the counter back in the same request).
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/optimizer_config.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/worker_killer.h"

namespace asyncps {
namespace exactly_once_test_internal {
namespace {

using testutil::LocalCluster;
using testutil::WorkerKiller;

constexpr int kWorkers = 3;
constexpr int64_t kRows = 150;
constexpr int64_t kWorkAfterUpdateMs = 20;
constexpr absl::Duration kKillEvery = absl::Milliseconds(300);

class ExactlyOnceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = 2;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief(*FixedShardsPartitioner::Create(2));
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
    auto rows = chief_->strategy().CreateVariable("rows", init::Zeros({kRows}, DType::kI64));
    ASSERT_TRUE(rows.ok()) << rows.status();
    rows_ = std::make_unique<ShardedVariable>(*rows);
    ASSERT_EQ(rows_->num_shards(), 2u);
    // "push_and_read_row"'s counter: a gradient -1 adds 1.
    auto fused = chief_->strategy().CreateVariable("fused_rows", init::Zeros({kRows}, DType::kF32), opt::SGD(1.0f));
    ASSERT_TRUE(fused.ok()) << fused.status();
    fused_rows_ = std::make_unique<ShardedVariable>(*fused);
    ASSERT_EQ(fused_rows_->num_shards(), 2u);
  }

  void TearDown() override {
    fused_rows_.reset();
    rows_.reset();
    chief_.reset();
    cluster_.reset();
  }

  double Retried() {
    const std::string text = chief_->process().process_metrics().Serialize();
    const std::string name = "asyncps_coordinator_closures_retried_total{";
    const size_t at = text.find(name);
    if (at == std::string::npos) return 0;
    return std::stod(text.substr(text.find("} ", at) + 2));
  }

  // One epoch: zeroes `counter` (i64 or f32), schedules `function` (args: row, work ms) for
  // every row i through a fresh coordinator, joins, and returns the counter as integers.
  std::vector<int64_t> Epoch(bool deduplicate, const std::string& function = "add_to_row") {
    ShardedVariable& counter = function == "add_to_row" ? *rows_ : *fused_rows_;  // f32 for the push_* ones
    const Tensor zeros = function == "add_to_row" ? Tensor::FromVector(std::vector<int64_t>(kRows, 0))
                                                  : Tensor::FromVector(std::vector<float>(kRows, 0.0f));
    EXPECT_TRUE(counter.Assign(zeros).ok());
    ClusterCoordinator::Options options = testutil::FastFailureDetection();
    options.deduplicate_updates = deduplicate;
    ClusterCoordinator coordinator(chief_->strategy(), program_, options);
    for (int64_t i = 0; i < kRows; ++i) {
      auto scheduled =
          coordinator.Schedule(function, {Tensor::Scalar<int64_t>(i), Tensor::Scalar<int64_t>(kWorkAfterUpdateMs)});
      EXPECT_TRUE(scheduled.ok()) << scheduled.status();
    }
    absl::Status joined = coordinator.Join();
    EXPECT_TRUE(joined.ok()) << joined;
    auto value = counter.Read();
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) return {};
    std::vector<int64_t> out(kRows);
    for (int64_t i = 0; i < kRows; ++i) {
      out[i] = value->dtype() == DType::kF32 ? static_cast<int64_t>(value->data<float>()[i]) : value->data<int64_t>()[i];
    }
    return out;
  }

  void EveryRowIsExactlyOneWhileWorkersAreKilled(const std::string& function);

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> rows_;
  std::unique_ptr<ShardedVariable> fused_rows_;
};

// Rows not equal to `expected`, for the failure message.
std::string Mismatches(const std::vector<int64_t>& rows, int64_t expected) {
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] != expected) out += " row " + std::to_string(i) + "=" + std::to_string(rows[i]);
  }
  return out;
}

// Epochs of `function` with deduplication while workers are killed, until closures were re-run
// after kills (else nothing was tested): after each, every row is exactly 1.
void ExactlyOnceTest::EveryRowIsExactlyOneWhileWorkersAreKilled(const std::string& function) {
  WorkerKiller killer(*cluster_, kWorkers, kKillEvery, 20261122);
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  const double retried_before = Retried();
  int epochs = 0;
  while (Retried() - retried_before < 3 && absl::Now() < deadline) {
    const std::vector<int64_t> rows = Epoch(/*deduplicate=*/true, function);
    ++epochs;
    ASSERT_EQ(rows.size(), static_cast<size_t>(kRows));
    ASSERT_EQ(Mismatches(rows, 1), "") << "epoch " << epochs << " with " << killer.kills() << " kills so far";
  }
  EXPECT_TRUE(killer.error().ok()) << killer.error();
  EXPECT_GE(Retried() - retried_before, 3) << "closures were not re-run; " << killer.kills() << " kills";
}

TEST_F(ExactlyOnceTest, EveryRowIsExactlyOneWhileWorkersAreKilled) {
  EveryRowIsExactlyOneWhileWorkersAreKilled("add_to_row");
}

// The fused push-and-read: each closure's push and the read after it are one request per PS; a
// re-run's push is found applied and answers the values again (the closure checks its row reads 1).
TEST_F(ExactlyOnceTest, EveryRowIsExactlyOneThroughTheFusedPushAndReadWhileWorkersAreKilled) {
  EveryRowIsExactlyOneWhileWorkersAreKilled("push_and_read_row");
}

// The same with the push compressed top-k with error feedback (a residual per shard on each
// worker): a closure re-run on another worker, or on a restarted one, is applied once.
TEST_F(ExactlyOnceTest, EveryRowIsExactlyOneWithCompressedPushesWhileWorkersAreKilled) {
  EveryRowIsExactlyOneWhileWorkersAreKilled("push_compressed_and_read_row");
}

TEST_F(ExactlyOnceTest, WithoutDeduplicationReRunsApplyTwice) {
  WorkerKiller killer(*cluster_, kWorkers, kKillEvery, 20261122);
  // A kill may land before a closure's update rather than after; loop until a duplicate shows.
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  bool duplicated = false;
  while (!duplicated && absl::Now() < deadline) {
    const std::vector<int64_t> rows = Epoch(/*deduplicate=*/false);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kRows));
    for (int64_t v : rows) {
      ASSERT_GE(v, 1) << "at least once";
      duplicated = duplicated || v > 1;
    }
  }
  EXPECT_TRUE(killer.error().ok()) << killer.error();
  EXPECT_TRUE(duplicated) << "no row above 1 after " << killer.kills() << " kills";
}

}  // namespace
}  // namespace exactly_once_test_internal
}  // namespace asyncps
