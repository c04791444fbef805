// Exactly-once updates of an embedding table under worker failures, with real processes: N
// closures, closure i pushes +1 to the rows of its own random int64 keys in table "counts"
// (2 PS, keys spread by PsForKey), while a thread SIGKILLs and restarts a random worker every
// ~300 ms. With deduplication every key's count ends at exactly 1 (and a key no closure pushed
// reads its initial 0 without getting a row); without it, re-runs leave counts at 2.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "ps/embedding/key_partition.h"
#include "tests/integration/embedding_counter.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/worker_killer.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;
using testutil::WorkerKiller;

constexpr int kWorkers = 3;
constexpr int kClosures = 150;
constexpr int kKeysPerClosure = 4;
constexpr int64_t kDim = testutil::kCounterDim;
constexpr int64_t kWorkAfterPushMs = 20;
constexpr int kUnpushed = 8;  // keys looked up that no closure pushed
constexpr absl::Duration kKillEvery = absl::Milliseconds(300);

class EmbeddingExactlyOnceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = 2;
    o.worker_binary = "embedding_counter_program";
    auto cluster = LocalCluster::Start(o);
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

  double Retried() {
    const std::string text = chief_->process().process_metrics().Serialize();
    const std::string name = "asyncps_coordinator_closures_retried_total{";
    const size_t at = text.find(name);
    if (at == std::string::npos) return 0;
    return std::stod(text.substr(text.find("} ", at) + 2));
  }

  // One epoch: closure i pushes its keys once; returns every key's count (element 0 of its
  // row), closures' keys first, then kUnpushed keys no closure pushed.
  std::vector<float> Epoch(int epoch, bool deduplicate) {
    const std::string table = "counts";
    EmbeddingInitializer zeros;
    zeros.kind = EmbeddingInitializer::Kind::kZeros;
    // Created once (idempotent after): each epoch counts fresh random keys, so the rows of
    // earlier epochs do not matter.
    EXPECT_TRUE(chief_->strategy().CreateEmbeddingTable(table, kDim, zeros, opt::SGD(1.0f)).ok());
    std::mt19937_64 rng(20261125 + static_cast<uint64_t>(epoch) * 7919 + (deduplicate ? 0 : 1));
    absl::flat_hash_set<int64_t> seen;
    std::vector<int64_t> keys;
    while (keys.size() < static_cast<size_t>(kClosures * kKeysPerClosure + kUnpushed)) {
      const int64_t key = static_cast<int64_t>(rng());  // any int64, negative ones included
      if (seen.insert(key).second) keys.push_back(key);
    }
    ClusterCoordinator::Options options = testutil::FastFailureDetection();
    options.deduplicate_updates = deduplicate;
    ClusterCoordinator coordinator(chief_->strategy(), program_, options);
    for (int i = 0; i < kClosures; ++i) {
      std::vector<int64_t> mine(keys.begin() + i * kKeysPerClosure,
                                keys.begin() + (i + 1) * kKeysPerClosure);
      auto scheduled = coordinator.Schedule(
          "count_keys", {Tensor::FromVector(mine), Tensor::Scalar<int64_t>(kWorkAfterPushMs)});
      EXPECT_TRUE(scheduled.ok()) << scheduled.status();
    }
    absl::Status joined = coordinator.Join();
    EXPECT_TRUE(joined.ok()) << joined;
    auto rows = chief_->strategy().LookupEmbeddings(table, Tensor::FromVector(keys));
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return {};
    EXPECT_EQ(rows->shape(), (Shape{static_cast<int64_t>(keys.size()), kDim}));
    std::vector<float> counts;
    for (size_t k = 0; k < keys.size(); ++k) counts.push_back(rows->data<float>()[k * kDim]);
    return counts;
  }

  Program program_ = testutil::MakeEmbeddingCounterProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
};

// The keys whose count is not what it should be (the first ten), for the failure message.
std::string Mismatches(const std::vector<float>& counts) {
  std::string out;
  int shown = 0;
  const size_t pushed = counts.size() - kUnpushed;
  for (size_t i = 0; i < counts.size() && shown < 10; ++i) {
    const float expected = i < pushed ? 1.0f : 0.0f;
    if (counts[i] == expected) continue;
    out += " key#" + std::to_string(i) + "=" + std::to_string(counts[i]);
    ++shown;
  }
  return out;
}

TEST_F(EmbeddingExactlyOnceTest, EveryKeyCountedOnceWhileWorkersAreKilled) {
  WorkerKiller killer(*cluster_, kWorkers, kKillEvery, 20261125);
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  const double retried_before = Retried();
  int epochs = 0;
  while (Retried() - retried_before < 3 && absl::Now() < deadline) {
    const std::vector<float> counts = Epoch(epochs, /*deduplicate=*/true);
    ++epochs;
    ASSERT_EQ(counts.size(), static_cast<size_t>(kClosures * kKeysPerClosure + kUnpushed));
    ASSERT_EQ(Mismatches(counts), "")
        << "epoch " << epochs << " with " << killer.kills() << " kills so far";
  }
  EXPECT_TRUE(killer.error().ok()) << killer.error();
  EXPECT_GE(Retried() - retried_before, 3)
      << "closures were not re-run; " << killer.kills() << " kills";
}

TEST_F(EmbeddingExactlyOnceTest, WithoutDeduplicationReRunsApplyTwice) {
  WorkerKiller killer(*cluster_, kWorkers, kKillEvery, 20261125);
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  bool duplicated = false;
  for (int epoch = 0; !duplicated && absl::Now() < deadline; ++epoch) {
    const std::vector<float> counts = Epoch(epoch, /*deduplicate=*/false);
    ASSERT_EQ(counts.size(), static_cast<size_t>(kClosures * kKeysPerClosure + kUnpushed));
    for (size_t i = 0; i + kUnpushed < counts.size(); ++i) {
      ASSERT_GE(counts[i], 1.0f) << "at least once";
      duplicated = duplicated || counts[i] > 1.0f;
    }
  }
  EXPECT_TRUE(killer.error().ok()) << killer.error();
  EXPECT_TRUE(duplicated) << "no key above 1 after " << killer.kills() << " kills";
}

// A PS killed and restarted empty mid-epoch loses its part of the table (and its update
// window). Automatic PS recovery (no checkpoint: re-initialisation) must notice the lost table
// — not only lost variables — create it again, and re-run the closures that failed on it: no
// closure fails, every key of the PS that kept its table is counted exactly once, and every key
// of the restarted PS is counted at most once (the rows it held before the loss are gone; the
// closures that ran after count once).
TEST_F(EmbeddingExactlyOnceTest, PsThatLostItsTableIsRebuiltByRecovery) {
  const std::string table = "counts";
  EmbeddingInitializer zeros;
  zeros.kind = EmbeddingInitializer::Kind::kZeros;
  ASSERT_TRUE(chief_->strategy().CreateEmbeddingTable(table, kDim, zeros, opt::SGD(1.0f)).ok());
  ASSERT_EQ(chief_->strategy().EmbeddingTableNames(), std::vector<std::string>{table});
  std::mt19937_64 rng(20261127);
  absl::flat_hash_set<int64_t> seen;
  std::vector<int64_t> keys;
  while (keys.size() < static_cast<size_t>(kClosures * kKeysPerClosure)) {
    const int64_t key = static_cast<int64_t>(rng());
    if (seen.insert(key).second) keys.push_back(key);
  }
  ClusterCoordinator::Options options = testutil::FastFailureDetectionWithPsRecovery(/*checkpoints=*/nullptr);
  ClusterCoordinator coordinator(chief_->strategy(), program_, options);
  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) {
    std::vector<int64_t> mine(keys.begin() + i * kKeysPerClosure, keys.begin() + (i + 1) * kKeysPerClosure);
    auto v = coordinator.Schedule("count_keys", {Tensor::FromVector(mine), Tensor::Scalar<int64_t>(kWorkAfterPushMs)});
    ASSERT_TRUE(v.ok()) << v.status();
    values.push_back(*v);
  }
  // Some closures have pushed; PS 1 goes and comes back empty.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  auto done = [&] {
    int n = 0;
    for (const RemoteValue& v : values) n += v.done() ? 1 : 0;
    return n;
  };
  while (done() < kClosures / 4 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(cluster_->KillPs(1).ok());
  ASSERT_TRUE(cluster_->RestartPs(1).ok());
  const absl::Status joined = coordinator.Join();
  EXPECT_TRUE(joined.ok()) << joined;
  for (const RemoteValue& v : values) EXPECT_TRUE(v.Fetch().ok()) << v.Fetch().status();
  const PsRecovery::Stats stats = coordinator.ps_recovery_stats();
  ASSERT_GE(stats.recoveries, 1) << "the lost table was not noticed";
  bool lost_ps1 = false;
  for (const auto& e : stats.events) {
    for (int p : e.lost_ps) lost_ps1 = lost_ps1 || p == 1;
  }
  EXPECT_TRUE(lost_ps1);
  auto rows = chief_->strategy().LookupEmbeddings(table, Tensor::FromVector(keys));
  ASSERT_TRUE(rows.ok()) << rows.status();
  int64_t ps0_wrong = 0, ps1_wrong = 0, ps1_counted = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const float count = rows->data<float>()[k * kDim];
    if (ps::PsForKey(keys[k], 2) == 0) {
      ps0_wrong += count == 1.0f ? 0 : 1;
    } else {
      ps1_wrong += (count == 0.0f || count == 1.0f) ? 0 : 1;
      ps1_counted += count == 1.0f ? 1 : 0;
    }
  }
  EXPECT_EQ(ps0_wrong, 0);
  EXPECT_EQ(ps1_wrong, 0);
  EXPECT_GT(ps1_counted, 0) << "the rebuilt table took no push";
}

}  // namespace
}  // namespace asyncps
