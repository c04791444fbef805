#include "ps/variable_store.h"

#include <atomic>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::ps {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Variable> MakeVariable(const std::string& name, const Shape& shape) {
  return std::move(Variable::Create(name, Tensor(DType::kF32, shape), nullptr)).value();
}

TEST(VariableStoreTest, ReservationPastTheCapIsResourceExhausted) {
  VariableStore store(/*max_bytes=*/10000);
  auto first = store.Reserve("a", 6000);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(store.bytes(), 6000u);
  auto second = store.Reserve("big_table", 5000);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("'big_table'"));
  EXPECT_THAT(second.status().message(), HasSubstr("10000"));
  EXPECT_THAT(second.status().message(), HasSubstr("--ps_max_variable_bytes"));
  // A refused reservation holds nothing; a dropped one gives its bytes back.
  EXPECT_EQ(store.bytes(), 6000u);
  *first = VariableStore::Reservation();
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_TRUE(store.Reserve("big_table", 10000).ok());
  // Overflow of held + asked cannot wrap past the check.
  EXPECT_EQ(store.Reserve("huge", ~uint64_t{0}).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(VariableStoreTest, InsertKeepsTheReservationOnlyWhenItInserts) {
  VariableStore store(/*max_bytes=*/100000);
  auto v = MakeVariable("w", {10, 10});
  const uint64_t charge = v->charged_bytes();
  auto r = store.Reserve("w", charge);
  ASSERT_TRUE(r.ok());
  auto inserted = store.Insert(std::move(v), std::move(*r));
  ASSERT_TRUE(inserted.ok());
  EXPECT_TRUE(*inserted);
  EXPECT_EQ(store.bytes(), charge);

  // Idempotent re-create: the second reservation is returned.
  r = store.Reserve("w", charge);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(store.bytes(), 2 * charge);
  inserted = store.Insert(MakeVariable("w", {10, 10}), std::move(*r));
  ASSERT_TRUE(inserted.ok());
  EXPECT_FALSE(*inserted);
  EXPECT_EQ(store.bytes(), charge);

  // Conflicting re-create: AlreadyExists, reservation returned.
  r = store.Reserve("w", 500);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(store.Insert(MakeVariable("w", {5}), std::move(*r)).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store.bytes(), charge);
}

TEST(VariableStoreTest, InsertWithoutReservationChargesTheVariable) {
  auto v = MakeVariable("w", {100, 100});
  const uint64_t charge = v->charged_bytes();
  VariableStore store(/*max_bytes=*/charge + 10);
  ASSERT_TRUE(store.Insert(std::move(v)).ok());
  EXPECT_EQ(store.bytes(), charge);
  auto refused = store.Insert(MakeVariable("other", {100, 100}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("'other'"));
  EXPECT_EQ(store.List().size(), 1u);
}

// Many threads reserving at once never hold more than the cap together.
TEST(VariableStoreTest, ConcurrentReservationsNeverPassTheCap) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  VariableStore store(/*max_bytes=*/1000);
  std::atomic<int> granted{0};
  std::atomic<uint64_t> peak{0};
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < kPerThread; ++i) {
        auto r = store.Reserve("v", 300);
        if (!r.ok()) continue;
        granted.fetch_add(1);
        const uint64_t now = store.bytes();
        uint64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(granted.load(), 0);
  EXPECT_LE(peak.load(), 1000u);
  EXPECT_EQ(store.bytes(), 0u);
}

// Stores over one budget (the copies of the shard groups a replicated PS holds) share its cap:
// what one holds is charged to the budget, and a store that goes gives its bytes back.
TEST(VariableStoreTest, StoresOverABudgetShareItsCap) {
  VariableStore budget(/*max_bytes=*/10000);
  auto copy = std::make_unique<VariableStore>(&budget);
  EXPECT_EQ(copy->max_bytes(), 10000u);
  ASSERT_TRUE(budget.Reserve("own", 3000).ok());  // dropped at once: nothing held
  auto held = copy->Insert(MakeVariable("v", {1000}));  // 4000 bytes and its name
  ASSERT_TRUE(held.ok()) << held.status();
  const uint64_t v_bytes = copy->bytes();
  EXPECT_GE(v_bytes, 4000u);
  EXPECT_EQ(budget.bytes(), v_bytes) << "charged to the budget too";
  VariableStore other(&budget);
  auto refused = other.Reserve("w", 10000 - v_bytes + 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(other.bytes(), 0u);
  {
    auto fits = other.Reserve("w", 10000 - v_bytes);
    ASSERT_TRUE(fits.ok()) << fits.status();
    EXPECT_EQ(budget.bytes(), 10000u);
  }
  EXPECT_EQ(budget.bytes(), v_bytes) << "a dropped reservation goes back to the budget";
  copy.reset();
  EXPECT_EQ(budget.bytes(), 0u) << "a store that goes gives its variables' bytes back";
}

}  // namespace
}  // namespace asyncps::ps
