#include "ps/embedding/embedding_table.h"

#include <cmath>
#include <algorithm>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "ps/embedding/embedding_initializer.h"
#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace {

EmbeddingTableConfig Config(int64_t dim = 8) {
  EmbeddingTableConfig c;
  c.name = "emb";
  c.dim = dim;
  c.initializer.kind = EmbeddingInitializer::Kind::kUniform;
  c.initializer.seed = 42;
  c.optimizer = opt::Adam(0.01f);
  return c;
}

std::unique_ptr<EmbeddingTable> Make(const EmbeddingTableConfig& c) {
  auto t = EmbeddingTable::Create(c);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::vector<float> Lookup(EmbeddingTable& t, std::vector<int64_t> keys, bool train = false) {
  std::vector<float> out(keys.size() * t.dim());
  t.Lookup(keys, train, out.data());
  return out;
}

std::vector<float> Initial(const EmbeddingTableConfig& c, int64_t key) {
  std::vector<float> out(c.dim);
  EmbeddingInitialValue(c.initializer, key, c.dim, out.data());
  return out;
}

absl::StatusOr<EmbeddingTable::PushResult> Push(EmbeddingTable& t, const std::vector<int64_t>& keys, float g = 1.0f) {
  std::vector<float> grads(keys.size() * t.dim(), g);
  return t.Push(keys, grads.data());
}

TEST(EmbeddingTableTest, LookupDoesNotInsertFirstPushDoes) {
  auto c = Config();
  auto t = Make(c);
  EXPECT_EQ(Lookup(*t, {7}, /*train=*/true), Initial(c, 7));
  EXPECT_FALSE(t->HasRow(7));
  EXPECT_EQ(t->Stats().rows, 0u);
  auto r = Push(*t, {7});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->created, 1u);
  EXPECT_TRUE(t->HasRow(7));
  EXPECT_EQ(t->Stats().rows, 1u);
  EXPECT_NE(Lookup(*t, {7}), Initial(c, 7));
}

TEST(EmbeddingTableTest, InitialValueIsTheSameOnEveryTableAndAfterEviction) {
  auto c = Config(33);  // odd: the last element of a pair too
  c.ttl_steps = 1;
  auto a = Make(c);
  auto b = Make(c);
  std::vector<float> first = Lookup(*a, {123456789});
  EXPECT_EQ(first, Lookup(*b, {123456789}));
  ASSERT_TRUE(Push(*a, {123456789}).ok());
  ASSERT_TRUE(Push(*a, {1}).ok());
  ASSERT_TRUE(Push(*a, {2}).ok());
  ASSERT_TRUE(Push(*a, {3}).ok());  // steps 2..4: the row of step 1 has expired
  EXPECT_FALSE(a->HasRow(123456789));
  EXPECT_EQ(Lookup(*a, {123456789}), first);
  // Other seeds and keys differ; values lie in the uniform range.
  EXPECT_NE(Lookup(*a, {123456790}), first);
  for (float v : first) {
    EXPECT_GE(v, -0.05f);
    EXPECT_LT(v, 0.05f);
  }
}

TEST(EmbeddingTableTest, NormalAndTruncatedNormalInitializers) {
  EmbeddingInitializer init;
  init.kind = EmbeddingInitializer::Kind::kTruncatedNormal;
  init.stddev = 1.0;
  init.mean = 3.0;
  std::vector<float> v(4096);
  double sum = 0;
  for (int64_t key = 0; key < 16; ++key) {
    EmbeddingInitialValue(init, key, 4096, v.data());
    for (float x : v) {
      EXPECT_LE(std::fabs(x - 3.0f), 2.0f);
      sum += x;
    }
  }
  EXPECT_NEAR(sum / (16 * 4096), 3.0, 0.02);
  init.kind = EmbeddingInitializer::Kind::kNormal;
  double sq = 0;
  EmbeddingInitialValue(init, 5, 4096, v.data());
  for (float x : v) sq += (x - 3.0) * (x - 3.0);
  EXPECT_NEAR(sq / 4096, 1.0, 0.1);
}

TEST(EmbeddingTableTest, BelowMinCountNoRowAndGradientsChangeNothing) {
  auto c = Config();
  c.admission.min_count = 3;
  auto t = Make(c);
  for (int i = 0; i < 2; ++i) Lookup(*t, {5}, /*train=*/true);
  Lookup(*t, {5}, /*train=*/false);  // evaluation does not count
  auto r = Push(*t, {5}, 100.0f);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dropped, 1u);
  EXPECT_EQ(r->created, 0u);
  EXPECT_FALSE(t->HasRow(5));
  EXPECT_EQ(Lookup(*t, {5}), Initial(c, 5));
  EXPECT_EQ(t->Stats().dropped_gradients, 1u);
  Lookup(*t, {5}, /*train=*/true);  // third count
  r = Push(*t, {5});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->created, 1u);
  EXPECT_TRUE(t->HasRow(5));
  EXPECT_EQ(t->Stats().admitted, 1u);
}

TEST(EmbeddingTableTest, ProbabilityAdmitsAboutThatFraction) {
  auto c = Config(1);
  c.admission.probability = 0.25f;
  auto t = Make(c);
  std::vector<int64_t> keys(20000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i) * 7919;
  auto r = Push(*t, keys);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->created + r->dropped, keys.size());
  EXPECT_GT(r->created, 4500u);
  EXPECT_LT(r->created, 5500u);
  // Deterministic: a second table of the same config admits the same keys.
  auto t2 = Make(c);
  ASSERT_TRUE(Push(*t2, keys).ok());
  for (int64_t k : {keys[1], keys[2], keys[3], keys[500]}) EXPECT_EQ(t->HasRow(k), t2->HasRow(k));
}

TEST(EmbeddingTableTest, PushAppliesTheOptimizerPerRow) {
  auto c = Config(16);
  auto t = Make(c);
  auto rule = UpdateRule::Create(c.optimizer);
  ASSERT_TRUE(rule.ok());
  std::vector<float> var = Initial(c, 9), m(16, 0.0f), v(16, 0.0f);
  std::vector<float> g(16);
  for (int i = 0; i < 16; ++i) g[i] = 0.1f * static_cast<float>(i) - 0.5f;
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(t->Push(std::vector<int64_t>{9}, g.data()).ok());
    float* slots[] = {m.data(), v.data()};
    (*rule)->Apply(var.data(), g.data(), slots, 16, step);
  }
  EXPECT_EQ(Lookup(*t, {9}), var);
  EXPECT_EQ(t->Stats().step, 3);
}

TEST(EmbeddingTableTest, RepeatedKeysOfOnePushAreSummed) {
  auto c = Config(4);
  c.optimizer = opt::SGD(1.0f);
  auto t = Make(c);
  std::vector<float> g = {1, 1, 1, 1, 2, 2, 2, 2};
  ASSERT_TRUE(t->Push(std::vector<int64_t>{3, 3}, g.data()).ok());
  std::vector<float> want = Initial(c, 3);
  for (float& x : want) x -= 3.0f;
  EXPECT_EQ(Lookup(*t, {3}), want);
  EXPECT_EQ(t->Stats().rows, 1u);
}

TEST(EmbeddingTableTest, TtlEvictsRowsNotUpdatedAndUpdatesRecreate) {
  auto c = Config(4);
  c.optimizer = opt::SGD(1.0f);
  c.ttl_steps = 8;
  auto t = Make(c);
  ASSERT_TRUE(Push(*t, {100}).ok());
  for (int64_t step = 2; step <= 9; ++step) ASSERT_TRUE(Push(*t, {step * 1000}).ok());
  EXPECT_TRUE(t->HasRow(100));  // 9 - 1 = 8: not more than ttl_steps
  for (int64_t step = 10; step <= 20; ++step) ASSERT_TRUE(Push(*t, {step * 1000}).ok());
  EXPECT_FALSE(t->HasRow(100));
  EXPECT_GE(t->Stats().evicted_ttl, 1u);
  // An update for the evicted key re-creates it from its initial value, then applies.
  ASSERT_TRUE(Push(*t, {100}, 0.5f).ok());
  std::vector<float> want = Initial(c, 100);
  for (float& x : want) x -= 0.5f;
  EXPECT_EQ(Lookup(*t, {100}), want);
}

TEST(EmbeddingTableTest, CapHoldsOverTenMillionDistinctKeys) {
  auto c = Config(4);
  c.optimizer = opt::SGD(0.1f);
  c.memory_cap_bytes = 4 << 20;
  auto t = Make(c);
  std::vector<int64_t> keys(20000);
  std::vector<float> grads(keys.size() * 4, 0.01f);
  uint64_t peak = 0;
  int64_t next = 1;
  for (int push = 0; push < 500; ++push) {  // 10^7 distinct keys
    for (int64_t& k : keys) k = MixKey(static_cast<uint64_t>(next++));
    auto r = t->Push(keys, grads.data());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->created, keys.size());
    peak = std::max(peak, t->Stats().memory_bytes);
    ASSERT_LE(t->Stats().memory_bytes, c.memory_cap_bytes);
  }
  const EmbeddingTableStats s = t->Stats();
  EXPECT_EQ(s.admitted, 10'000'000u);
  EXPECT_EQ(s.rows + s.evicted_cap, s.admitted);
  EXPECT_GT(s.rows, 0u);
  EXPECT_LE(peak, c.memory_cap_bytes);
  // The keys of the last push survive (least recently updated rows go first).
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(t->HasRow(keys[i]));
}

TEST(EmbeddingTableTest, CapSmallerThanOneBatchIsRefusedWhole) {
  auto c = Config(4);
  c.optimizer = opt::SGD(0.1f);
  c.memory_cap_bytes = 64 << 10;
  auto t = Make(c);
  std::vector<int64_t> keys(20000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int64_t>(i);
  auto r = Push(*t, keys);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("memory cap"), std::string::npos) << r.status();
  EXPECT_EQ(t->Stats().rows, 0u);
  EXPECT_EQ(t->Stats().step, 0);
  EXPECT_TRUE(Push(*t, {1, 2, 3}).ok());  // still serving
}

TEST(EmbeddingTableTest, BadConfigsAreRefused) {
  for (int64_t dim : {int64_t{0}, int64_t{-1}, int64_t{1} << 40}) {
    auto c = Config(dim);
    EXPECT_EQ(EmbeddingTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument) << dim;
  }
  auto c = Config();
  c.dtype = DType::kI64;
  EXPECT_EQ(EmbeddingTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config();
  c.memory_cap_bytes = 1000;
  auto s = EmbeddingTable::Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("minimum"), std::string::npos) << s;
  c = Config();
  c.optimizer.learning_rate = -1;
  EXPECT_EQ(EmbeddingTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config();
  c.admission.probability = 2;
  EXPECT_EQ(EmbeddingTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmbeddingTableTest, ExportImportRoundTripWithSlots) {
  auto c = Config(8);
  c.admission.min_count = 2;
  auto a = Make(c);
  std::vector<int64_t> keys;
  for (int64_t k = 0; k < 3000; ++k) keys.push_back(k * 31 - 5000);
  Lookup(*a, keys, true);
  Lookup(*a, keys, true);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Push(*a, keys, 0.1f * (i + 1)).ok());
  Lookup(*a, {777777}, true);  // counted once: not admitted, the count survives the restore
  EmbeddingTableState state = a->Export();
  EXPECT_EQ(state.keys.num_elements(), 3000);
  ASSERT_EQ(state.slots.size(), 2u);
  auto b = Make(c);
  const EmbeddingTableState* states[] = {&state};
  ASSERT_TRUE(b->Import(states, [](int64_t) { return true; }).ok());
  EXPECT_EQ(b->restores(), 1u);
  EXPECT_EQ(b->Stats().step, 3);
  EXPECT_EQ(Lookup(*a, keys), Lookup(*b, keys));
  // Slots came along: one more identical push keeps them identical.
  ASSERT_TRUE(Push(*a, keys, -0.3f).ok());
  ASSERT_TRUE(Push(*b, keys, -0.3f).ok());
  EXPECT_EQ(Lookup(*a, keys), Lookup(*b, keys));
  Lookup(*b, {777777}, true);
  EXPECT_EQ(Push(*b, {777777})->created, 1u);
}

TEST(EmbeddingTableTest, ImportRefusesAMismatchAndKeepsTheTable) {
  auto c = Config(8);
  auto a = Make(c);
  ASSERT_TRUE(Push(*a, {1, 2}).ok());
  EmbeddingTableState state = a->Export();
  state.slots.pop_back();
  const EmbeddingTableState* states[] = {&state};
  EXPECT_EQ(a->Import(states, [](int64_t) { return true; }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(a->HasRow(1));
  EmbeddingTableState good = a->Export();
  const EmbeddingTableState* twice[] = {&good, &good};
  EXPECT_EQ(a->Import(twice, [](int64_t) { return true; }).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Stats().rows, 2u);
}

// A damaged step (a checkpoint's or a state transfer's): at INT64_MAX the next push overflowed
// the push counter, which keys the TTL and the decay.
TEST(EmbeddingTableTest, ImportRefusesAStepOutOfRangeAndKeepsTheTable) {
  auto c = Config(4);
  c.optimizer = opt::CosineDecay(opt::SGD(1.0f), 8, 0.5f);
  c.initializer.kind = EmbeddingInitializer::Kind::kZeros;
  auto a = Make(c);
  ASSERT_TRUE(Push(*a, {1, 2}).ok());
  const std::vector<float> before = Lookup(*a, {1, 2});
  for (int64_t step : {int64_t{-1}, (int64_t{1} << 62) + 1, std::numeric_limits<int64_t>::max()}) {
    EmbeddingTableState state = a->Export();
    state.step = step;
    const EmbeddingTableState* states[] = {&state};
    const absl::Status imported = a->Import(states, [](int64_t) { return true; });
    EXPECT_EQ(imported.code(), absl::StatusCode::kInvalidArgument) << imported;
    EXPECT_NE(imported.message().find("step"), std::string::npos) << imported;
    EXPECT_EQ(a->Stats().step, 1);
    EXPECT_EQ(a->restores(), 0u);
    EXPECT_EQ(Lookup(*a, {1, 2}), before);
  }
  // The largest step taken: the next push decays to the floor, without overflow.
  EmbeddingTableState state = a->Export();
  state.step = int64_t{1} << 62;
  const EmbeddingTableState* states[] = {&state};
  ASSERT_TRUE(a->Import(states, [](int64_t) { return true; }).ok());
  ASSERT_TRUE(Push(*a, {1}).ok());
  EXPECT_EQ(a->Stats().step, (int64_t{1} << 62) + 1);
  EXPECT_FLOAT_EQ(Lookup(*a, {1})[0], before[0] - 0.5f);
}

// Trains `from` PS-tables, restores them into `to` tables by PsForKey, and compares lookups.
void Reshard(int from, int to) {
  auto c = Config(4);
  c.optimizer = opt::Adagrad(0.1f);
  std::vector<std::unique_ptr<EmbeddingTable>> old_ps;
  for (int i = 0; i < from; ++i) old_ps.push_back(Make(c));
  std::mt19937_64 rng(from * 10 + to);
  std::vector<int64_t> all;
  for (int step = 0; step < 20; ++step) {
    std::vector<std::vector<int64_t>> per_ps(from);
    for (int i = 0; i < 200; ++i) {
      const int64_t key = static_cast<int64_t>(rng() % 5000) - 2500;
      if (std::find(per_ps[PsForKey(key, from)].begin(), per_ps[PsForKey(key, from)].end(), key) !=
          per_ps[PsForKey(key, from)].end()) {
        continue;
      }
      per_ps[PsForKey(key, from)].push_back(key);
      all.push_back(key);
    }
    for (int p = 0; p < from; ++p) ASSERT_TRUE(Push(*old_ps[p], per_ps[p], 0.01f * step).ok());
  }
  for (int64_t k = -3000; k < 3000; k += 7) all.push_back(k);  // many without rows
  std::vector<EmbeddingTableState> states;
  for (auto& t : old_ps) states.push_back(t->Export());
  std::vector<const EmbeddingTableState*> ptrs;
  for (auto& s : states) ptrs.push_back(&s);
  std::vector<std::unique_ptr<EmbeddingTable>> new_ps;
  uint64_t rows = 0;
  for (int j = 0; j < to; ++j) {
    new_ps.push_back(Make(c));
    ASSERT_TRUE(new_ps[j]->Import(ptrs, [&](int64_t key) { return PsForKey(key, to) == j; }).ok());
    rows += new_ps[j]->Stats().rows;
  }
  uint64_t old_rows = 0;
  for (auto& t : old_ps) old_rows += t->Stats().rows;
  EXPECT_EQ(rows, old_rows);
  for (int64_t key : all) {
    EXPECT_EQ(Lookup(*old_ps[PsForKey(key, from)], {key}), Lookup(*new_ps[PsForKey(key, to)], {key})) << key;
  }
}

TEST(EmbeddingTableTest, RestoreFourPsIntoThree) { Reshard(4, 3); }
TEST(EmbeddingTableTest, RestoreTwoPsIntoFive) { Reshard(2, 5); }

TEST(KeyPartitionTest, StableSpreadAndSmallMoves) {
  EXPECT_EQ(PsForKey(12345, 1), 0);
  std::vector<int> counts(4);
  int moved = 0;
  for (int64_t k = 0; k < 40000; ++k) {
    const int p = PsForKey(k, 4);
    ASSERT_GE(p, 0);
    ASSERT_LT(p, 4);
    ++counts[p];
    moved += PsForKey(k, 5) != p;
  }
  for (int n : counts) EXPECT_NEAR(n, 10000, 500);
  EXPECT_NEAR(moved, 8000, 600);  // about 1/5 move from 4 to 5 PS
  EXPECT_EQ(PsForKey(987654321, 7), PsForKey(987654321, 7));
}

TEST(EmbeddingTableTest, ConcurrentLookupsAndPushes) {
  auto c = Config(8);
  c.ttl_steps = 50;
  c.memory_cap_bytes = 1 << 20;
  c.admission.min_count = 2;
  c.admission.sketch_width = 1 << 12;
  auto t = Make(c);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w);
      std::vector<int64_t> keys(256);
      std::vector<float> out(keys.size() * 8), grads(keys.size() * 8, 0.01f);
      for (int i = 0; i < 200; ++i) {
        for (int64_t& k : keys) k = static_cast<int64_t>(rng() % 20000);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        t->Lookup(keys, true, out.data());
        ASSERT_TRUE(t->Push(keys, grads.data()).ok());
        keys.resize(256);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 20; ++i) EXPECT_GE(t->Export().keys.num_elements(), 0);
  });
  for (auto& th : threads) th.join();
  const EmbeddingTableStats s = t->Stats();
  EXPECT_EQ(s.rows + s.evicted_cap + s.evicted_ttl, s.admitted);
  EXPECT_LE(s.memory_bytes, c.memory_cap_bytes);
}

}  // namespace
}  // namespace asyncps::ps
