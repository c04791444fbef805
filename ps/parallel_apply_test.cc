#include "ps/parallel_apply.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "ps/update_rule.h"
#include "ps/variable.h"
#include "ps/variable_store.h"

namespace asyncps::ps {
namespace parallel_apply_test_internal {

// A pool that splits arrays of a few thousand elements, so that the tests below exercise every
// split at sizes ThreadSanitizer runs in moments (the PS's thresholds are megabytes).
ApplyPool::Options SmallPartsOptions(int helpers) {
  ApplyPool::Options options;
  options.helpers = helpers;
  options.min_dense_elements = 64;
  options.min_row_elements = 64;
  options.min_check_elements = 64;
  return options;
}

TEST(ApplyPoolTest, EveryPartRunsExactlyOnce) {
  for (int helpers : {0, 1, 3}) {
    ApplyPool pool(SmallPartsOptions(helpers));
    EXPECT_EQ(pool.threads(), helpers + 1);
    for (int parts : {0, 1, 2, 5, 16}) {
      SCOPED_TRACE(testing::Message() << helpers << " helpers, " << parts << " parts");
      std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
      pool.ParallelFor(parts, [&](int p) { runs[static_cast<size_t>(p)].fetch_add(1); });
      for (int p = 0; p < parts; ++p) EXPECT_EQ(runs[static_cast<size_t>(p)].load(), 1) << "part " << p;
    }
  }
  // Without a pool, every part runs on the caller.
  std::vector<std::thread::id> ran;
  ApplyInParts(nullptr, 3, [&](int) { ran.push_back(std::this_thread::get_id()); });
  EXPECT_EQ(ran, std::vector<std::thread::id>(3, std::this_thread::get_id()));
}

// With a helper, the two parts of a call run at once: each waits (up to a deadline) until the
// other has started. Run serially, the first would time out.
TEST(ApplyPoolTest, PartsRunConcurrentlyOnTheHelpers) {
  ApplyPool pool(SmallPartsOptions(1));
  Mutex mu;
  int started = 0;
  bool both = true;
  std::set<std::thread::id> threads;
  pool.ParallelFor(2, [&](int) {
    MutexLock lock(&mu);
    ++started;
    threads.insert(std::this_thread::get_id());
    both = mu.AwaitWithTimeout(absl::Condition(+[](int* n) { return *n == 2; }, &started), absl::Seconds(30)) && both;
  });
  EXPECT_TRUE(both);
  EXPECT_EQ(threads.size(), 2u);
}

TEST(ApplyPoolTest, PartsAreAtLeastTheMinimumWorkAndAFewPerThread) {
  ApplyPool three(SmallPartsOptions(3));
  EXPECT_EQ(three.Parts(0, 100), 1);
  EXPECT_EQ(three.Parts(199, 100), 1);
  EXPECT_EQ(three.Parts(200, 100), 2);
  EXPECT_EQ(three.Parts(1000000, 100), 16);
  EXPECT_EQ(three.Parts(1000000, 0), 16);
  EXPECT_EQ(ApplyPool(SmallPartsOptions(1)).Parts(1000000, 100), 8);
  EXPECT_EQ(ApplyPool(SmallPartsOptions(0)).Parts(1000000, 100), 1);
  EXPECT_EQ(ApplyPool(SmallPartsOptions(99)).threads(), ApplyPool::kMaxHelpers + 1);
  EXPECT_EQ(ApplyParts(nullptr, 1000000, &ApplyPool::Options::min_dense_elements), 1);
}

// The PS's defaults split a 4 MiB dense gradient (1M f32) and its check over the pool, and
// keep the training model's arrays whole (the MLP's largest is 784x256), where the workers keep
// every core busy and a hand-off would only add its cost.
TEST(ApplyPoolTest, DefaultsSplitA4MiBGradientAndKeepTheTrainingModelsArraysWhole) {
  ApplyPool::Options options;
  options.helpers = 1;
  ApplyPool pool(options);
  constexpr int64_t kMlpLargest = 784 * 256;
  constexpr int64_t k4MiB = int64_t{1} << 20;
  EXPECT_EQ(ApplyParts(&pool, kMlpLargest, &ApplyPool::Options::min_dense_elements), 1);
  EXPECT_EQ(ApplyParts(&pool, kMlpLargest, &ApplyPool::Options::min_check_elements), 1);
  EXPECT_EQ(ApplyParts(&pool, k4MiB, &ApplyPool::Options::min_dense_elements), 8);
  EXPECT_GE(ApplyParts(&pool, k4MiB, &ApplyPool::Options::min_check_elements), 2);
  // A 10k-row push of 64 floats stays whole (no measured gain from splitting it).
  EXPECT_EQ(ApplyParts(&pool, 10000 * 64, &ApplyPool::Options::min_row_elements), 1);
}

// The PS hands its pool to its store; the stores of a replicated PS's group copies, charged to
// that store, use the same pool.
TEST(ApplyPoolTest, AStoreChargedToABudgetUsesTheBudgetsPool) {
  ApplyPool pool(SmallPartsOptions(0));
  VariableStore store(uint64_t{1} << 20, &pool);
  VariableStore copy(&store);
  EXPECT_EQ(store.apply_pool(), &pool);
  EXPECT_EQ(copy.apply_pool(), &pool);
  EXPECT_EQ(VariableStore().apply_pool(), nullptr);
}

// ---- Variables: an apply split over threads gives the bits of one pass --------------------

std::unique_ptr<Variable> MakeTable(int64_t rows, int64_t cols, const OptimizerConfig& config, uint32_t seed,
                                    ApplyPool* pool) {
  Tensor initial(DType::kF32, {rows, cols});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t i = 0; i < initial.num_elements(); ++i) initial.data<float>()[i] = value(rng);
  auto v = Variable::Create("table", std::move(initial), &config, pool);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

Tensor RandomGradient(Shape shape, uint32_t seed) {
  Tensor g(DType::kF32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-0.5f, 0.5f);
  for (int64_t i = 0; i < g.num_elements(); ++i) g.data<float>()[i] = value(rng);
  return g;
}

// Value and slots of `v`, bit for bit.
std::vector<std::vector<uint32_t>> Bits(const Variable& v) {
  std::vector<std::vector<uint32_t>> out;
  Variable::State state = v.CheckpointState();
  auto bits = [](const Tensor& t) {
    std::vector<uint32_t> b(static_cast<size_t>(t.num_elements()));
    std::memcpy(b.data(), t.raw_data(), b.size() * sizeof(uint32_t));
    return b;
  };
  out.push_back(bits(state.value));
  for (const Tensor& s : state.slots) out.push_back(bits(s));
  return out;
}

// The reference: the same variable as plain arrays, updated by UpdateRule::Apply directly.
struct Reference {
  Reference(int64_t rows, int64_t cols, const OptimizerConfig& config, uint32_t seed) : cols(cols) {
    auto v = MakeTable(rows, cols, config, seed, nullptr);
    const Tensor value = v->Read();
    var.assign(value.data<float>(), value.data<float>() + value.num_elements());
    rule = std::move(*UpdateRule::Create(config));
    for (const SlotSpec& spec : rule->slots()) slots.emplace_back(var.size(), spec.initial_value);
  }

  // One dense step over the whole array in one call.
  void Dense(const Tensor& g, int64_t step) {
    std::vector<float*> s;
    for (auto& slot : slots) s.push_back(slot.data());
    rule->Apply(var.data(), g.data<float>(), s, static_cast<int64_t>(var.size()), step);
  }

  // One sparse step: duplicates summed in request order, then one Apply per distinct row.
  void Sparse(const std::vector<int64_t>& ids, const Tensor& g, int64_t step) {
    std::vector<int64_t> distinct;
    std::vector<std::vector<float>> sums(var.size() / static_cast<size_t>(cols));
    const float* grads = g.data<float>();
    for (size_t i = 0; i < ids.size(); ++i) {
      std::vector<float>& sum = sums[static_cast<size_t>(ids[i])];
      if (sum.empty()) {
        distinct.push_back(ids[i]);
        sum.assign(grads + i * cols, grads + (i + 1) * cols);
      } else {
        for (int64_t k = 0; k < cols; ++k) sum[static_cast<size_t>(k)] += grads[static_cast<int64_t>(i) * cols + k];
      }
    }
    for (int64_t row : distinct) {
      std::vector<float*> s;
      for (auto& slot : slots) s.push_back(slot.data() + row * cols);
      rule->Apply(var.data() + row * cols, sums[static_cast<size_t>(row)].data(), s, cols, step);
    }
  }

  std::vector<std::vector<uint32_t>> Bits() const {
    std::vector<std::vector<uint32_t>> out;
    auto bits = [](const std::vector<float>& a) {
      std::vector<uint32_t> b(a.size());
      std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
      return b;
    };
    out.push_back(bits(var));
    for (const auto& slot : slots) out.push_back(bits(slot));
    return out;
  }

  int64_t cols;
  std::unique_ptr<UpdateRule> rule;
  std::vector<float> var;
  std::vector<std::vector<float>> slots;
};

std::vector<OptimizerConfig> EveryOptimizer() {
  std::vector<OptimizerConfig> configs;
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdagrad,
                             OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    OptimizerConfig config;
    config.kind = kind;
    config.learning_rate = 0.05f;
    config.momentum = kind == OptimizerKind::kMomentum ? 0.9f : 0.0f;
    configs.push_back(config);
  }
  return configs;
}

// A dense value split into 16 parts (of a length that is no multiple of a SIMD width or a cache
// line), updated over a few steps, against one Apply over the whole array; and the same with
// a pool of no helpers and with none.
TEST(ApplyPoolTest, DenseGradientInPartsMatchesOnePassBitForBit) {
  constexpr int64_t kRows = 53;
  constexpr int64_t kCols = 37;  // 1961 elements: parts of ~122, not multiples of 16
  ApplyPool three(SmallPartsOptions(3));
  ApplyPool none(SmallPartsOptions(0));
  ASSERT_EQ(three.Parts(kRows * kCols, three.options().min_dense_elements), ApplyPool::kMaxParts);
  for (const OptimizerConfig& config : EveryOptimizer()) {
    SCOPED_TRACE(OptimizerKindName(config.kind));
    for (ApplyPool* pool : {&three, &none, static_cast<ApplyPool*>(nullptr)}) {
      SCOPED_TRACE(testing::Message() << (pool == nullptr ? 0 : pool->threads()) << " threads");
      auto v = MakeTable(kRows, kCols, config, 1, pool);
      ASSERT_NE(v, nullptr);
      Reference reference(kRows, kCols, config, 1);
      for (uint32_t step = 1; step <= 2; ++step) {
        const Tensor g = RandomGradient({kRows, kCols}, 100 + step);
        ASSERT_TRUE(v->ApplyGradient(g).ok());
        reference.Dense(g, step);
      }
      EXPECT_TRUE(Bits(*v) == reference.Bits());
    }
  }
}

// A variable made from a received state (a replica's state transfer) splits its applies too.
TEST(ApplyPoolTest, VariableFromStateAppliesInPartsBitForBit) {
  constexpr int64_t kRows = 40;
  constexpr int64_t kCols = 29;
  ApplyPool three(SmallPartsOptions(3));
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.05f;
  auto source = MakeTable(kRows, kCols, adam, 3, nullptr);
  ASSERT_NE(source, nullptr);
  auto v = Variable::CreateFromState("table", source->CheckpointState(), &adam, &three);
  ASSERT_TRUE(v.ok()) << v.status();
  Reference reference(kRows, kCols, adam, 3);
  const Tensor g = RandomGradient({kRows, kCols}, 300);
  ASSERT_TRUE((*v)->ApplyGradient(g).ok());
  reference.Dense(g, 1);
  EXPECT_TRUE(Bits(**v) == reference.Bits());
}

// A sparse push (with about 10% repeated ids, summed first) over a table whose rows are 5
// floats wide, split into runs of stripes (and in one pass), against the reference; then an
// empty push, which changes nothing.
TEST(ApplyPoolTest, SparseGradientInPartsMatchesOnePassBitForBit) {
  constexpr int64_t kRows = 700;
  constexpr int64_t kCols = 5;
  constexpr int64_t kIds = 400;
  ApplyPool three(SmallPartsOptions(3));
  ApplyPool none(SmallPartsOptions(0));
  for (const OptimizerConfig& config : EveryOptimizer()) {
    SCOPED_TRACE(OptimizerKindName(config.kind));
    for (ApplyPool* pool : {&three, &none, static_cast<ApplyPool*>(nullptr)}) {
      SCOPED_TRACE(testing::Message() << (pool == nullptr ? 0 : pool->threads()) << " threads");
      auto v = MakeTable(kRows, kCols, config, 2, pool);
      ASSERT_NE(v, nullptr);
      Reference reference(kRows, kCols, config, 2);
      std::mt19937 rng(7);
      std::uniform_int_distribution<int64_t> id(0, kRows - 1);
      std::bernoulli_distribution repeat(0.1);
      for (uint32_t step = 1; step <= 3; ++step) {
        std::vector<int64_t> ids(kIds);
        for (size_t i = 0; i < ids.size(); ++i) {
          ids[i] = i > 0 && repeat(rng) ? ids[std::uniform_int_distribution<size_t>(0, i - 1)(rng)] : id(rng);
        }
        const Tensor g = RandomGradient({kIds, kCols}, 200 + step);
        ASSERT_TRUE(v->ApplyRowGradients(Tensor::FromVector(ids), g).ok());
        reference.Sparse(ids, g, step);
      }
      ASSERT_TRUE(v->ApplyRowGradients(Tensor::FromVector(std::vector<int64_t>{}), Tensor(DType::kF32, {0, kCols})).ok());
      EXPECT_TRUE(Bits(*v) == reference.Bits());
    }
  }
}

// Sparse and dense SGD pushes in parts, from several threads at once, while another gathers:
// every update lands exactly once (integer-valued floats, so the sums are exact) and no reader
// sees a row half written (each row's elements move together).
TEST(ApplyPoolTest, ConcurrentPushesInPartsGiveExactTotals) {
  ApplyPool pool(SmallPartsOptions(3));
  constexpr int64_t kRows = 600;
  constexpr int64_t kCols = 8;
  constexpr int64_t kIds = 300;
  constexpr int kPushers = 3;
  constexpr int kPushes = 4;
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.learning_rate = 1.0f;
  auto v = Variable::Create("table", Tensor(DType::kF32, {kRows, kCols}), &sgd, &pool);
  ASSERT_TRUE(v.ok());
  Variable& table = **v;
  // Pusher t pushes ids (i * 7 + t) % kRows with gradient -1: each push adds 1 to those rows.
  std::vector<std::vector<int64_t>> ids(kPushers);
  std::vector<int64_t> expected(kRows, 0);
  for (int t = 0; t < kPushers; ++t) {
    for (int64_t i = 0; i < kIds; ++i) ids[static_cast<size_t>(t)].push_back((i * 7 + t) % kRows);
    for (int64_t id : ids[static_cast<size_t>(t)]) expected[static_cast<size_t>(id)] += kPushes;
  }
  for (int64_t& e : expected) e += kPushes;  // the dense pushes
  Tensor minus_one(DType::kF32, {kIds, kCols});
  std::fill_n(minus_one.data<float>(), minus_one.num_elements(), -1.0f);
  Tensor dense_minus_one(DType::kF32, {kRows, kCols});
  std::fill_n(dense_minus_one.data<float>(), dense_minus_one.num_elements(), -1.0f);
  std::atomic<bool> torn{false};
  std::atomic<int> writers{kPushers + 1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kPushers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPushes; ++i) {
        EXPECT_TRUE(table.ApplyRowGradients(Tensor::FromVector(ids[static_cast<size_t>(t)]), minus_one).ok());
      }
      writers.fetch_sub(1);
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kPushes; ++i) EXPECT_TRUE(table.ApplyGradient(dense_minus_one).ok());
    writers.fetch_sub(1);
  });
  threads.emplace_back([&] {
    const Tensor some = Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 7, 14, 299, kRows - 1});
    while (writers.load() > 0) {
      auto rows = table.Gather(some);
      ASSERT_TRUE(rows.ok());
      for (int64_t r = 0; r < rows->dim(0); ++r) {
        const float* row = rows->data<float>() + r * kCols;
        for (int64_t c = 1; c < kCols; ++c) torn = torn || row[c] != row[0];
      }
    }
  });
  for (auto& t : threads) t.join();
  EXPECT_FALSE(torn.load());
  const Tensor value = table.Read();
  int64_t wrong = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      wrong += value.data<float>()[r * kCols + c] != static_cast<float>(expected[static_cast<size_t>(r)]) ? 1 : 0;
    }
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(table.iterations(), kPushers * kPushes + kPushes);
}

// The check of a gradient in parts finds a NaN or an infinity in any part, including the last
// element and the first.
TEST(ApplyPoolTest, FinitenessOfAGradientInPartsIsCheckedInEveryPart) {
  ApplyPool pool(SmallPartsOptions(3));
  constexpr int64_t kElements = 4099;
  ASSERT_EQ(pool.Parts(kElements, pool.options().min_check_elements), ApplyPool::kMaxParts);
  Tensor g(DType::kF32, {kElements});
  std::fill_n(g.data<float>(), kElements, 0.25f);
  EXPECT_TRUE(AllFinite(g, &pool));
  for (int64_t at : {int64_t{0}, kElements / 3, kElements / 2 + 1, kElements - 1}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      g.data<float>()[at] = bad;
      EXPECT_FALSE(AllFinite(g, &pool)) << "at " << at;
      EXPECT_FALSE(AllFinite(g)) << "at " << at;
      g.data<float>()[at] = 0.25f;
    }
  }
  Tensor d(DType::kF64, {kElements});
  std::fill_n(d.data<double>(), kElements, 0.5);
  EXPECT_TRUE(AllFinite(d, &pool));
  d.data<double>()[kElements - 1] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(AllFinite(d, &pool));
}

}  // namespace parallel_apply_test_internal
}  // namespace asyncps::ps
