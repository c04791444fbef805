#include "ps/replication/replicated_tables.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "core/optimizer_config.h"
#include "core/sync.h"
#include "ps/embedding/embedding_table.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/embedding/key_partition.h"
#include "ps/replication/local_ps_cluster_testing.h"

namespace asyncps::ps {
namespace replicated_tables_test {
namespace {

template <typename Request>
void Route(net::OutMessage& m, uint32_t group, uint64_t generation) {
  if (generation == 0) return;
  auto r = m.envelope().getRequest().getBody().getAs<Request>().initRoute();
  r.setGroup(group);
  r.setGeneration(generation);
}

// A table that exercises everything a copy must agree on: Adam slots, admission by count (a
// sketch), TTL and a memory cap of about 100 rows per stripe.
EmbeddingTableConfig Config() {
  EmbeddingTableConfig c;
  c.name = "emb";
  c.dim = 4;
  c.initializer.seed = 5;
  c.optimizer = opt::Adam(0.01f);
  c.admission.min_count = 2;
  c.admission.sketch_width = 4096;
  c.ttl_steps = 40;
  c.memory_cap_bytes = EmbeddingBytesPerRowBound(c, 2) * EmbeddingTable::kStripes * 100;
  return c;
}

// `n` distinct keys PsForKey gives `group` (of 2 PS), drawn from `range` ids.
std::vector<int64_t> KeysOf(std::mt19937_64& rng, uint32_t group, int n, int64_t range) {
  std::vector<int64_t> keys;
  std::uniform_int_distribution<int64_t> id(1, range);
  while (static_cast<int>(keys.size()) < n) {
    const int64_t k = id(rng);
    if (PsForKey(k, 2) != static_cast<int>(group)) continue;
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    keys.push_back(k);
  }
  return keys;
}

class ReplicatedTablesTest : public ::testing::Test {
 protected:
  void Start(int num_ps, bool initial_map, ReplicatedPs::Options options = ReplicatedPs::Options()) {
    options.replicas = 2;
    cluster_ = std::make_unique<LocalPsCluster>(num_ps, options, /*with_tables=*/true);
    ASSERT_TRUE(cluster_->started());
    if (initial_map) {
      map_ = *ShardMap::Initial(num_ps, 2);
      ASSERT_TRUE(cluster_->SetMapEverywhere(map_).ok());
    }
  }

  absl::Status Create(int ps, uint32_t group, uint64_t gen, const EmbeddingTableConfig& c = Config()) {
    net::OutMessage m;
    BuildCreateEmbeddingTableRequest(c, m);
    Route<wire::CreateEmbeddingTableRequest>(m, group, gen);
    return cluster_->Call(ps, "chief", kCreateEmbeddingTableMethod, std::move(m)).status();
  }

  absl::Status TrainLookup(int ps, const std::vector<int64_t>& keys, uint32_t group, uint64_t gen) {
    net::OutMessage m;
    EmbeddingKeys k{"emb", Tensor::FromVector<int64_t>({static_cast<int64_t>(keys.size())}, keys)};
    BuildEmbeddingLookupRequest({&k, 1}, /*train=*/true, m);
    Route<wire::EmbeddingLookupRequest>(m, group, gen);
    return cluster_->Call(ps, "worker", kEmbeddingLookupMethod, std::move(m)).status();
  }

  // Pushes 0.1 to every element of the keys' rows, tagged by `closure` (non-zero); the
  // number of tables skipped as applied before.
  absl::StatusOr<uint32_t> Push(int ps, const std::vector<int64_t>& keys, uint64_t closure, uint32_t group,
                                uint64_t gen) {
    net::OutMessage m;
    const int64_t n = static_cast<int64_t>(keys.size());
    Tensor grads(DType::kF32, {n, 4});
    for (float& g : grads.flat<float>()) g = 0.1f;
    EmbeddingGradients g{"emb", Tensor::FromVector<int64_t>({n}, keys), grads};
    UpdateTag tag;
    tag.coordinator = 1;
    tag.closure = closure;
    tag.sequence = 1;
    tag.watermark = 1;
    BuildEmbeddingPushRequest({&g, 1}, tag, m);
    Route<wire::EmbeddingPushRequest>(m, group, gen);
    auto r = cluster_->Call(ps, "worker", kEmbeddingPushMethod, std::move(m));
    if (!r.ok()) return r.status();
    return r->ResponseBody<wire::EmbeddingPushResponse>().getAlreadyApplied();
  }

  std::string Bytes(int ps, uint32_t group) {
    EmbeddingService::Shard shard = cluster_->Tables(ps, group);
    return shard.store == nullptr ? "<no copy>" : EmbeddingShardBytes(shard);
  }

  EmbeddingTableStats StatsOf(int ps, uint32_t group) {
    auto t = cluster_->Tables(ps, group).store->Find("emb");
    return t.ok() ? (*t)->Stats() : EmbeddingTableStats();
  }

  std::unique_ptr<LocalPsCluster> cluster_;
  ShardMap map_;
};

TEST_F(ReplicatedTablesTest, BackupHoldsTheSameRowsAfterPushesAdmissionsAndEvictions) {
  Start(2, true);
  for (uint32_t g = 0; g < 2; ++g) ASSERT_TRUE(Create(static_cast<int>(g), g, 1).ok());
  std::mt19937_64 rng(3);
  for (uint64_t step = 1; step <= 150; ++step) {
    for (uint32_t g = 0; g < 2; ++g) {
      // Busy steps overflow the cap; then quiet ones, in which rows age past the TTL.
      const std::vector<int64_t> keys = KeysOf(rng, g, step <= 75 ? 200 : 10, 8000);
      ASSERT_TRUE(TrainLookup(static_cast<int>(g), keys, g, 1).ok());
      auto pushed = Push(static_cast<int>(g), keys, step * 2 + g, g, 1);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
    }
  }
  for (uint32_t g = 0; g < 2; ++g) {
    const int primary = static_cast<int>(g), backup = 1 - primary;
    const EmbeddingTableStats s = StatsOf(primary, g);
    // Everything a copy must reproduce happened: admissions refused, rows created, both kinds
    // of eviction.
    EXPECT_GT(s.dropped_gradients, 0u);
    EXPECT_GT(s.rows, 0u);
    EXPECT_GT(s.evicted_cap, 0u);
    EXPECT_GT(s.evicted_ttl, 0u);
    const std::string want = Bytes(primary, g);
    EXPECT_GT(want.size(), 1000u);
    EXPECT_TRUE(Bytes(backup, g) == want) << "group " << g << ": backup differs";
    EXPECT_EQ(StatsOf(backup, g).rows, s.rows);
  }
}

// Each PS is primary of one group and backup of the other, and pushes to both primaries keep
// every handler thread of both PS busy at once: each push waits for the other PS's
// ps.Replicate, which must still be served. (Pushes that held a handler thread until their
// backups acknowledged deadlocked both PS until the clients' deadlines: a 30 s stall per
// round, found by scripts/nemesis.py. Now no thread waits for an acknowledgement.)
TEST_F(ReplicatedTablesTest, PushesToBothPrimariesAtOnceNeverWaitOnEachOther) {
  Start(2, true);
  for (uint32_t g = 0; g < 2; ++g) ASSERT_TRUE(Create(static_cast<int>(g), g, 1).ok());
  for (int ps = 0; ps < 2; ++ps) cluster_->Client(ps, "worker");  // made before the threads share them
  constexpr int kThreads = 16;  // several times the servers' handler threads, on both PS
  constexpr int kPushes = 25;
  std::atomic<int> failed{0};
  Mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint32_t g = static_cast<uint32_t>(t % 2);
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 11);
      for (int i = 0; i < kPushes; ++i) {
        const uint64_t closure = 2 + static_cast<uint64_t>(t * kPushes + i);
        auto pushed = Push(static_cast<int>(g), KeysOf(rng, g, 16, 4000), closure, g, 1);
        if (!pushed.ok()) {
          MutexLock lock(&mu);
          if (failed++ == 0) first_error = pushed.status().ToString();
          return;  // (deadlocked pushes fail only at their 60 s deadline)
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0) << first_error;
  for (uint32_t g = 0; g < 2; ++g) {
    EXPECT_TRUE(Bytes(1 - static_cast<int>(g), g) == Bytes(static_cast<int>(g), g)) << "group " << g;
  }
}

TEST_F(ReplicatedTablesTest, RetriedTaggedPushAfterPromotionAppliesOnce) {
  Start(2, true);
  ASSERT_TRUE(Create(0, 0, 1).ok());
  std::mt19937_64 rng(4);
  const std::vector<int64_t> keys = KeysOf(rng, 0, 50, 1 << 30);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(TrainLookup(0, keys, 0, 1).ok());  // admitted
  auto first = Push(0, keys, 7, 0, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 0u);
  const std::string before = Bytes(1, 0);
  EXPECT_EQ(StatsOf(1, 0).rows, 50u);
  // PS 0 is lost: its backup is promoted at generation 2.
  ShardMap promoted = map_;
  promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
  promoted.groups[1] = GroupEntry{1, 2, 1, {}, {}};
  promoted.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  auto stale = Push(1, keys, 7, 0, 1);
  EXPECT_TRUE(IsStaleShardMap(stale.status())) << stale.status();
  auto retried = Push(1, keys, 7, 0, 2);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, 1u);
  EXPECT_TRUE(Bytes(1, 0) == before);
  auto fresh = Push(1, keys, 8, 0, 2);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, 0u);
  EXPECT_FALSE(Bytes(1, 0) == before);
}

TEST_F(ReplicatedTablesTest, StateTransferCarriesTablesAndLaterEvictionsAgree) {
  ReplicatedPs::Options options;
  options.transfer_chunk_bytes = 4096;  // many chunks, tables split over them
  Start(2, false, options);
  ShardMap alone = *ShardMap::Initial(2, 2);
  alone.groups[0].backups = {};
  ASSERT_TRUE(cluster_->SetMapEverywhere(alone).ok());
  ASSERT_TRUE(Create(0, 0, 1).ok());
  EmbeddingTableConfig empty = Config();
  empty.name = "empty";  // transferred with no row
  ASSERT_TRUE(Create(0, 0, 1, empty).ok());
  std::mt19937_64 rng(5);
  // Fill past the cap so rows are evicted and their places reused: the rebuilt copy lays its
  // rows out in another order than the primary.
  for (uint64_t closure = 1; closure <= 60; ++closure) {
    const std::vector<int64_t> keys = KeysOf(rng, 0, 200, 6000);
    ASSERT_TRUE(TrainLookup(0, keys, 0, 1).ok());
    ASSERT_TRUE(Push(0, keys, closure, 0, 1).ok());
  }
  ASSERT_GT(StatsOf(0, 0).evicted_cap, 0u);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> closures{60};
  std::thread writer([&] {
    std::mt19937_64 wrng(6);
    for (uint64_t closure = 61; !stop.load(); ++closure) {
      const std::vector<int64_t> keys = KeysOf(wrng, 0, 200, 6000);
      absl::Status l = TrainLookup(0, keys, 0, 0);
      auto p = Push(0, keys, closure, 0, 0);
      if (!l.ok() || !p.ok()) ADD_FAILURE() << l << p.status();
      closures.store(closure);
    }
  });
  ShardMap rebuild = alone;
  rebuild.groups[0].generation = 2;
  rebuild.groups[0].rebuilding = {1};
  rebuild.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, rebuild).ok());
  ASSERT_TRUE(cluster_->SetMap(0, rebuild).ok());
  auto in_sync = [&] {
    net::OutMessage req;
    req.InitRequestBody<wire::Empty>();
    auto resp = cluster_->Call(0, "chief", "ps.ReplicaStatus", std::move(req));
    if (!resp.ok()) return false;
    for (auto c : resp->ResponseBody<wire::ReplicaStatusResponse>().getCopies()) {
      if (c.getGroup() != 0) continue;
      for (auto b : c.getBackups()) {
        if (b.getPs() == 1 && b.getInSync()) return b.getTransferBytesTotal() > 0;
      }
    }
    return false;
  };
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (!in_sync() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(in_sync());
  ShardMap rebuilt = rebuild;
  rebuilt.groups[0].generation = 3;
  rebuilt.groups[0].backups = {1};
  rebuilt.groups[0].rebuilding = {};
  rebuilt.generation = 3;
  ASSERT_TRUE(cluster_->SetMap(1, rebuilt).ok());
  ASSERT_TRUE(cluster_->SetMap(0, rebuilt).ok());
  // Enough further pushes that the cap evicts rows on both copies after the transfer.
  const uint64_t evicted_at_sync = StatsOf(1, 0).evicted_cap;
  const uint64_t at = closures.load();
  while ((closures.load() < at + 30 || StatsOf(1, 0).evicted_cap <= evicted_at_sync) && absl::Now() < deadline + absl::Minutes(1)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  stop = true;
  writer.join();
  EXPECT_GT(StatsOf(1, 0).evicted_cap, evicted_at_sync);
  const std::string want = Bytes(0, 0);
  EXPECT_GT(want.size(), 1000u);
  EXPECT_TRUE(Bytes(1, 0) == want) << "rebuilt copy differs from the primary";
  auto rebuilt_empty = cluster_->Tables(1, 0).store->Find("empty");
  ASSERT_TRUE(rebuilt_empty.ok()) << rebuilt_empty.status();
  EXPECT_EQ((*rebuilt_empty)->Stats().rows, 0u);
}

// The cap's choice among rows updated at the same step goes by key, not by where the rows sit:
// two tables holding the same rows laid out in opposite orders evict the same ones.
TEST(ReplicatedTablesEvictionTest, CapEvictionTiesGoByKeyWhateverTheLayout) {
  EmbeddingTableConfig c = Config();
  c.admission = EmbeddingAdmission();
  c.ttl_steps = 0;
  auto a = EmbeddingTable::Create(c);
  auto b = EmbeddingTable::Create(c);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int64_t> keys;
  for (int64_t k = 1; k <= 800; ++k) keys.push_back(k * 7919);
  std::vector<int64_t> reversed(keys.rbegin(), keys.rend());
  std::vector<float> grads(keys.size() * 4, 0.1f);
  // One push each (every row at step 1), in opposite orders: opposite layouts in each stripe.
  ASSERT_TRUE((*a)->Push(keys, grads.data()).ok());
  ASSERT_TRUE((*b)->Push(reversed, grads.data()).ok());
  // New keys overflow the cap: the rows of step 1 go first, ties broken.
  for (int64_t round = 0; round < 3; ++round) {
    std::vector<int64_t> more;
    for (int64_t k = 1; k <= 400; ++k) more.push_back(-(round * 1000 + k) * 104729);
    ASSERT_TRUE((*a)->Push(more, grads.data()).ok());
    ASSERT_TRUE((*b)->Push(more, grads.data()).ok());
  }
  ASSERT_GT((*a)->Stats().evicted_cap, 0u);
  for (int64_t k : keys) ASSERT_EQ((*a)->HasRow(k), (*b)->HasRow(k)) << "key " << k;
}

}  // namespace
}  // namespace replicated_tables_test
}  // namespace asyncps::ps
