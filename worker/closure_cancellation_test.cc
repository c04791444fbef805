#include "worker/closure_cancellation.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

// The bug this class exists for: a re-dispatched closure's second attempt on the same worker
// must keep its flag when the first attempt ends, and a cancel must reach it.
TEST(ClosureCancellationTest, SecondAttemptKeepsItsFlagWhenTheFirstEnds) {
  ClosureCancellation c;
  auto first = c.Start(7);
  auto second = c.Start(7);
  EXPECT_NE(first.cancelled, second.cancelled);
  EXPECT_EQ(c.running(), 2u);
  c.Finish(first);
  EXPECT_EQ(c.running(), 1u);
  const uint64_t id = 7;
  c.Cancel({&id, 1});
  EXPECT_TRUE(second.cancelled->load());
  EXPECT_FALSE(first.cancelled->load());  // already finished: not touched
  c.Finish(second);
  EXPECT_EQ(c.running(), 0u);
}

TEST(ClosureCancellationTest, CancelReachesEveryRunningAttempt) {
  ClosureCancellation c;
  auto a = c.Start(1);
  auto b = c.Start(1);
  auto other = c.Start(2);
  const uint64_t id = 1;
  c.Cancel({&id, 1});
  EXPECT_TRUE(a.cancelled->load());
  EXPECT_TRUE(b.cancelled->load());
  EXPECT_FALSE(other.cancelled->load());
}

TEST(ClosureCancellationTest, CancelOvertakingItsRunCancelsAttemptAtStart) {
  ClosureCancellation c;
  const uint64_t id = 42;
  c.Cancel({&id, 1});
  auto late = c.Start(42);
  EXPECT_TRUE(late.cancelled->load());
  // Also a second attempt after the first ran: still cancelled.
  c.Finish(late);
  EXPECT_TRUE(c.Start(42).cancelled->load());
  EXPECT_FALSE(c.Start(43).cancelled->load());
}

TEST(ClosureCancellationTest, RememberedCancelsAreBounded) {
  ClosureCancellation c;
  std::vector<uint64_t> ids;
  for (uint64_t i = 1; i <= ClosureCancellation::kMaxRememberedCancels + 1; ++i) ids.push_back(i);
  c.Cancel(ids);
  EXPECT_FALSE(c.Start(1).cancelled->load());  // the oldest was forgotten
  EXPECT_TRUE(c.Start(2).cancelled->load());
}

// Concurrent attempts of the same ids started, cancelled and finished from many threads: no
// attempt's flag is lost, and every cancelled attempt that was running saw it.
TEST(ClosureCancellationTest, ConcurrentAttemptsOfOneClosure) {
  ClosureCancellation c;
  constexpr int kThreads = 8;
  constexpr int kRounds = 500;
  std::vector<std::thread> threads;
  std::atomic<int> lost{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const uint64_t id = 1000000 + static_cast<uint64_t>(r);  // shared by all threads
        auto attempt = c.Start(id);
        if (t == 0) c.Cancel({&id, 1});
        // Thread 0 cancelled `id` while its own attempt was registered.
        if (t == 0 && !attempt.cancelled->load()) lost.fetch_add(1);
        c.Finish(attempt);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ(c.running(), 0u);
}

// A replaced coordinator's closures: every running attempt is stopped, and nothing is
// remembered, so the new coordinator's closures (even with a colliding id) run.
TEST(ClosureCancellationTest, CancelAllStopsEveryRunningAttemptOnly) {
  ClosureCancellation c;
  auto a = c.Start(1);
  auto b = c.Start(1);
  auto other = c.Start(2);
  EXPECT_EQ(c.CancelAll(), 3u);
  EXPECT_TRUE(a.cancelled->load());
  EXPECT_TRUE(b.cancelled->load());
  EXPECT_TRUE(other.cancelled->load());
  c.Finish(a);
  c.Finish(b);
  c.Finish(other);
  auto later = c.Start(1);
  EXPECT_FALSE(later.cancelled->load());
  EXPECT_EQ(c.CancelAll(), 1u);
  EXPECT_TRUE(later.cancelled->load());
}

}  // namespace
}  // namespace asyncps
