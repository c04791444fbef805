#include "data_service/log_limiter.h"

#include "gtest/gtest.h"

namespace asyncps::data_service {
namespace log_limiter_test_internal {

TEST(LogLimiterTest, BurstThenOnePerIntervalWithTheSuppressedCount) {
  LogLimiter limiter(3, absl::Seconds(10));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(t0, &suppressed)) << i;
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(1), &suppressed)) << i;
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(9), &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 6);
  EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(15), &suppressed));
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(20), &suppressed));
  EXPECT_EQ(suppressed, 1);
  EXPECT_TRUE(limiter.Allow(t0 + absl::Seconds(31), &suppressed));
  EXPECT_EQ(suppressed, 0);
}

}  // namespace log_limiter_test_internal
}  // namespace asyncps::data_service
