#include "core/one_shot_event.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

TEST(OneShotEventTest, WaitReturnsAtOnceWhenNotifiedBefore) {
  OneShotEvent event;
  EXPECT_FALSE(event.HasBeenNotified());
  event.Notify();
  event.Notify();  // idempotent
  EXPECT_TRUE(event.HasBeenNotified());
  event.Wait();
  EXPECT_TRUE(event.WaitWithTimeout(absl::ZeroDuration()));
}

TEST(OneShotEventTest, TimeoutWithoutNotifyReturnsFalse) {
  OneShotEvent event;
  EXPECT_FALSE(event.WaitWithTimeout(absl::Milliseconds(5)));
  EXPECT_FALSE(event.WaitUntil(absl::Now() - absl::Seconds(1)));
  EXPECT_FALSE(event.HasBeenNotified());
}

// Every waiter wakes, and each sees what the notifier wrote before Notify (TSan checks the
// ordering; a lost wake-up hangs the test).
TEST(OneShotEventTest, WakesEveryWaiterAndPublishesWritesBeforeNotify) {
  for (int round = 0; round < 200; ++round) {
    OneShotEvent event;
    int value = 0;
    std::atomic<int> saw{0};
    std::vector<std::thread> waiters;
    for (int i = 0; i < 3; ++i) {
      waiters.emplace_back([&, i] {
        if (i == 2) {
          ASSERT_TRUE(event.WaitWithTimeout(absl::Seconds(60)));
        } else {
          event.Wait();
        }
        if (value == 42) saw.fetch_add(1);
      });
    }
    value = 42;
    event.Notify();
    for (auto& t : waiters) t.join();
    EXPECT_EQ(saw.load(), 3);
  }
}

// The waiter may free the event as soon as it returns, possibly before Notify's wake call.
TEST(OneShotEventTest, WaiterMayDestroyTheEventRightAfterWaking) {
  for (int round = 0; round < 500; ++round) {
    auto event = std::make_unique<OneShotEvent>();
    OneShotEvent* raw = event.get();
    std::thread notifier([raw] { raw->Notify(); });
    event->Wait();
    event.reset();
    notifier.join();
  }
}

}  // namespace
}  // namespace asyncps
