// Replicated embedding tables (issue 21 with issue 19's replication), with real processes: 3 PS
// with ps_replicas=2, 3 workers running the embedding counter (closure i pushes +1 to the rows
// of its own random int64 keys in table "counts", tagged). While rounds of closures run, the
// test SIGKILLs the primary of each group in turn, restarts it empty at its address, and waits
// (on the chief's shard map) until it is rebuilt — its tables coming back by state transfer —
// before the next kill. Every key must end at exactly 1: no row lost with a primary, no push
// applied twice when a closure's push is retried against the promoted backup, no closure failed.
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "tests/integration/embedding_counter.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/replicated_cluster.h"

namespace asyncps {
namespace embedding_replication_test {
namespace {

using testutil::LocalCluster;

constexpr int kPs = 3;
constexpr int kReplicas = 2;
constexpr int kWorkers = 3;
constexpr int kRound = 30;  // closures per round
constexpr int kKeysPerClosure = 4;
constexpr int64_t kDim = testutil::kCounterDim;
constexpr absl::Duration kWait = absl::Seconds(90);

class EmbeddingReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = kPs;
    o.worker_binary = "embedding_counter_program";
    auto cluster = testutil::ReplicatedCluster::Start(o, kReplicas);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    EmbeddingInitializer zeros;
    zeros.kind = EmbeddingInitializer::Kind::kZeros;
    const absl::Status created = strategy().CreateEmbeddingTable("counts", kDim, zeros, opt::SGD(1.0f));
    ASSERT_TRUE(created.ok()) << created;
  }

  void TearDown() override {
    coordinator_.reset();
    cluster_.reset();
  }

  ParameterServerStrategy& strategy() { return cluster_->chief().strategy(); }

  Program program_ = testutil::MakeEmbeddingCounterProgram();
  std::unique_ptr<testutil::ReplicatedCluster> cluster_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

TEST_F(EmbeddingReplicationTest, KilledPrimariesLoseNoRowAndCountEveryKeyOnce) {
  ASSERT_TRUE(cluster_->WaitFullyReplicated(kWait).ok());
  coordinator_ = std::make_unique<ClusterCoordinator>(strategy(), program_, testutil::FastFailureDetection());

  // Rounds of closures on their own thread, each closure with its own fresh random keys; the
  // test lets two rounds start per kill so every kill lands while closures are in flight.
  Mutex mu;
  int rounds_allowed = 0, rounds_started = 0;
  bool stop = false;
  std::vector<int64_t> keys;  // every key pushed, in closure order
  int64_t failed = 0;
  std::string first_failure;
  std::thread rounds([&] {
    std::mt19937_64 rng(20261127);
    absl::flat_hash_set<int64_t> seen;
    for (;;) {
      {
        MutexLock lock(&mu);
        auto go = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stop || rounds_started < rounds_allowed; };
        mu.Await(absl::Condition(&go));
        if (stop && rounds_started >= rounds_allowed) return;
      }
      std::vector<RemoteValue> values;
      std::vector<int64_t> round_keys;
      for (int i = 0; i < kRound; ++i) {
        std::vector<int64_t> mine;
        while (mine.size() < kKeysPerClosure) {
          const int64_t key = static_cast<int64_t>(rng());
          if (seen.insert(key).second) mine.push_back(key);
        }
        round_keys.insert(round_keys.end(), mine.begin(), mine.end());
        auto v = coordinator_->Schedule("count_keys", {Tensor::FromVector(mine), Tensor::Scalar<int64_t>(10)});
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) values.push_back(*v);
      }
      {
        MutexLock lock(&mu);
        ++rounds_started;
      }
      const absl::Status joined = coordinator_->Join();
      MutexLock lock(&mu);
      keys.insert(keys.end(), round_keys.begin(), round_keys.end());
      for (const RemoteValue& v : values) {
        auto r = v.Fetch();
        if (!r.ok() && failed++ == 0) first_failure = r.status().ToString();
      }
      if (!joined.ok() && failed++ == 0) first_failure = joined.ToString();
    }
  });
  auto next_phase = [&] {
    MutexLock lock(&mu);
    const int started = rounds_started;
    rounds_allowed = started + 2;
    auto begun = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return rounds_started > started; };
    mu.Await(absl::Condition(&begun));
  };

  // The primary of each group in turn (the first kill's PS comes back holding backups only).
  int kills = 0;
  for (uint32_t group = 0; group < kPs; ++group) {
    next_phase();
    const int primary = cluster_->PrimaryOf(static_cast<int>(group));
    ASSERT_GE(primary, 0) << cluster_->monitor().map().DebugString();
    const absl::Status rebuilt = cluster_->KillAndWaitRebuilt(primary, kWait);
    ASSERT_TRUE(rebuilt.ok()) << "group " << group << ": " << rebuilt;
    ++kills;
  }
  {
    MutexLock lock(&mu);
    rounds_allowed = rounds_started + 1;  // one more round on the rebuilt copies
    stop = true;
  }
  rounds.join();
  EXPECT_EQ(kills, kPs);
  EXPECT_EQ(failed, 0) << "first failure: " << first_failure;
  ASSERT_GE(keys.size(), static_cast<size_t>(kRound * kKeysPerClosure * (2 * kPs)));

  auto rows = strategy().LookupEmbeddings("counts", Tensor::FromVector(keys));
  ASSERT_TRUE(rows.ok()) << rows.status();
  int64_t wrong = 0;
  std::string examples;
  for (size_t k = 0; k < keys.size(); ++k) {
    const float count = rows->data<float>()[k * kDim];
    if (count == 1.0f) continue;
    if (wrong++ < 10) examples += " key " + std::to_string(keys[k]) + "=" + std::to_string(count);
  }
  EXPECT_EQ(wrong, 0) << "of " << keys.size() << " keys:" << examples;
}

}  // namespace
}  // namespace embedding_replication_test
}  // namespace asyncps
