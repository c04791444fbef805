#include "coordinator/closure_watermark.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

std::shared_ptr<Closure> New(ClosureWatermark& ids) {
  auto c = std::make_shared<Closure>();
  ids.Assign(c);
  return c;
}

TEST(ClosureWatermarkTest, IdsCountUpFromARandomStartUniquePerCoordinator) {
  ClosureWatermark a;
  ClosureWatermark b;
  EXPECT_NE(a.first_id(), 0u);
  EXPECT_LT(a.first_id(), uint64_t{1} << 62);
  EXPECT_NE(a.first_id(), b.first_id());  // fails with probability 2^-61
  auto c0 = New(a);
  auto c1 = New(a);
  auto c2 = New(a);
  EXPECT_EQ(c0->id, a.first_id());
  EXPECT_EQ(c1->id, a.first_id() + 1);
  EXPECT_EQ(c2->id, a.first_id() + 2);
}

TEST(ClosureWatermarkTest, WatermarkIsTheLowestClosureStillHeld) {
  ClosureWatermark ids(100);
  EXPECT_EQ(ids.Watermark(), 100u);  // nothing scheduled: the next id
  auto c100 = New(ids);
  auto c101 = New(ids);
  auto c102 = New(ids);
  EXPECT_EQ(ids.Watermark(), 100u);
  c101.reset();  // finished out of order: 100 is still running
  EXPECT_EQ(ids.Watermark(), 100u);
  c100.reset();
  EXPECT_EQ(ids.Watermark(), 102u);
  c102.reset();
  EXPECT_EQ(ids.Watermark(), 103u);
  auto c103 = New(ids);
  EXPECT_EQ(ids.Watermark(), 103u);
}

TEST(ClosureWatermarkTest, FinishedClosuresBehindALongOneAreCompactedAway) {
  ClosureWatermark ids(1);
  auto long_running = New(ids);
  for (int i = 0; i < 100000; ++i) {
    New(ids);  // finishes at once
    if (i % 100 == 0) {
      EXPECT_EQ(ids.Watermark(), 1u);
    }
  }
  EXPECT_LT(ids.tracked(), 200u);
  long_running.reset();
  EXPECT_EQ(ids.Watermark(), 100002u);
  EXPECT_EQ(ids.tracked(), 0u);
}

TEST(ClosureWatermarkTest, ConcurrentlyNeverGoesBackOrPastAHeldClosure) {
  ClosureWatermark ids(1);
  std::atomic<bool> stop{false};
  std::atomic<bool> violated{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) {
        auto c = New(ids);
        // While this closure is held the watermark cannot pass it.
        if (ids.Watermark() > c->id) violated = true;
      }
    });
  }
  std::thread reader([&] {
    uint64_t last = 0;
    while (!stop) {
      const uint64_t w = ids.Watermark();
      if (w < last) violated = true;
      last = w;
    }
  });
  for (auto& t : threads) t.join();
  stop = true;
  reader.join();
  EXPECT_FALSE(violated.load());
  EXPECT_EQ(ids.Watermark(), 1u + 3 * 5000);
}

}  // namespace
}  // namespace asyncps
