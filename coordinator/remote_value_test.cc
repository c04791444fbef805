#include "coordinator/remote_value.h"

#include <thread>

#include "absl/status/status.h"
#include "core/sync.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace remote_value_test_internal {
namespace {

// Generous bound for "this must happen": only reached if the code under test is broken.
constexpr absl::Duration kEventually = absl::Seconds(30);
// How long a "this must not happen yet" check watches. It cannot cause a false failure:
// a correct implementation never produces the event however long we look.
constexpr absl::Duration kBriefly = absl::Milliseconds(50);

Values OneScalar(float v) { return Values{Tensor::Scalar<float>(v)}; }

float FirstScalar(const Values& values) { return *values.at(0).data<float>(); }

TEST(RemoteValueTest, StartsPendingWithUniqueIdsSharedByCopies) {
  RemoteValue a;
  RemoteValue b;
  EXPECT_EQ(a.state(), RemoteValue::State::kPending);
  EXPECT_FALSE(a.done());
  EXPECT_NE(a.id(), 0u);
  EXPECT_NE(a.id(), b.id());

  RemoteValue copy = a;
  EXPECT_EQ(copy.id(), a.id());
  ASSERT_TRUE(copy.SetReady(OneScalar(1.5f)));
  EXPECT_TRUE(a.done());
  EXPECT_EQ(a.state(), RemoteValue::State::kReady);
}

TEST(RemoteValueTest, FetchBlocksUntilReadyFromAnotherThread) {
  RemoteValue value;
  Notification fetched;
  absl::StatusOr<Values> result;
  std::thread fetcher([&] {
    result = value.Fetch();
    fetched.Notify();
  });
  EXPECT_FALSE(fetched.WaitForNotificationWithTimeout(kBriefly));
  EXPECT_TRUE(value.SetReady(OneScalar(2.0f)));
  ASSERT_TRUE(fetched.WaitForNotificationWithTimeout(kEventually));
  fetcher.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(FirstScalar(*result), 2.0f);
}

TEST(RemoteValueTest, ReadyIsFinalAndStaysFetchable) {
  RemoteValue value;
  ASSERT_TRUE(value.SetReady(OneScalar(3.0f)));
  EXPECT_FALSE(value.SetReady(OneScalar(4.0f)));
  EXPECT_FALSE(value.SetFailed(absl::InternalError("late")));
  EXPECT_FALSE(value.SetCancelled("late"));
  EXPECT_FALSE(value.SetAborted());
  EXPECT_FALSE(value.SetPending());
  EXPECT_EQ(value.state(), RemoteValue::State::kReady);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Values> result = value.Fetch();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(FirstScalar(*result), 3.0f);
  }
}

TEST(RemoteValueTest, FailedIsFinalAndReturnsTheError) {
  RemoteValue value;
  ASSERT_TRUE(value.SetFailed(absl::InvalidArgumentError("bad step")));
  EXPECT_FALSE(value.SetReady(OneScalar(1.0f)));
  EXPECT_FALSE(value.SetCancelled("late"));
  EXPECT_EQ(value.state(), RemoteValue::State::kFailed);
  absl::StatusOr<Values> result = value.Fetch();
  EXPECT_EQ(result.status(), absl::InvalidArgumentError("bad step"));
}

TEST(RemoteValueTest, FailedWithOkStatusBecomesInternal) {
  RemoteValue value;
  ASSERT_TRUE(value.SetFailed(absl::OkStatus()));
  EXPECT_EQ(value.Fetch().status().code(), absl::StatusCode::kInternal);
}

TEST(RemoteValueTest, CancelledReturnsCancelledAndLateResultCannotOverwrite) {
  RemoteValue value;
  ASSERT_TRUE(value.SetCancelled("an earlier closure failed"));
  EXPECT_FALSE(value.SetReady(OneScalar(1.0f)));  // a worker that finished late
  EXPECT_EQ(value.state(), RemoteValue::State::kCancelled);
  absl::StatusOr<Values> result = value.Fetch();
  EXPECT_EQ(result.status(), absl::CancelledError("an earlier closure failed"));
}

TEST(RemoteValueTest, FetchTimesOutWhilePending) {
  RemoteValue value;
  absl::StatusOr<Values> result = value.Fetch(absl::Milliseconds(1));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(value.state(), RemoteValue::State::kPending);
  ASSERT_TRUE(value.SetReady(OneScalar(5.0f)));
  result = value.Fetch(absl::Milliseconds(1));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(FirstScalar(*result), 5.0f);
}

TEST(RemoteValueTest, AbortedKeepsFetchWaitingUntilReady) {
  RemoteValue value;
  Notification fetched;
  absl::StatusOr<Values> result;
  std::thread fetcher([&] {
    result = value.Fetch();
    fetched.Notify();
  });
  EXPECT_TRUE(value.SetAborted());
  EXPECT_FALSE(value.SetAborted());  // already aborted: no change
  EXPECT_EQ(value.state(), RemoteValue::State::kAborted);
  EXPECT_FALSE(value.done());
  EXPECT_FALSE(fetched.WaitForNotificationWithTimeout(kBriefly));
  EXPECT_EQ(value.Fetch(absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  EXPECT_TRUE(value.SetPending());  // dispatched again
  EXPECT_FALSE(value.SetPending());
  EXPECT_TRUE(value.SetReady(OneScalar(6.0f)));
  ASSERT_TRUE(fetched.WaitForNotificationWithTimeout(kEventually));
  fetcher.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(FirstScalar(*result), 6.0f);
}

TEST(RemoteValueTest, ManyFetchersAllWake) {
  RemoteValue value;
  constexpr int kFetchers = 8;
  std::vector<std::thread> fetchers;
  std::vector<absl::StatusCode> codes(kFetchers, absl::StatusCode::kUnknown);
  for (int i = 0; i < kFetchers; ++i) {
    fetchers.emplace_back([&, i] { codes[i] = value.Fetch().status().code(); });
  }
  ASSERT_TRUE(value.SetCancelled("stop"));
  for (auto& t : fetchers) t.join();
  for (absl::StatusCode code : codes) EXPECT_EQ(code, absl::StatusCode::kCancelled);
}

TEST(RemoteValueTest, StateNames) {
  EXPECT_EQ(RemoteValueStateName(RemoteValue::State::kPending), "pending");
  EXPECT_EQ(RemoteValueStateName(RemoteValue::State::kAborted), "aborted");
  EXPECT_EQ(RemoteValueStateName(RemoteValue::State::kReady), "ready");
  EXPECT_EQ(RemoteValueStateName(RemoteValue::State::kFailed), "failed");
  EXPECT_EQ(RemoteValueStateName(RemoteValue::State::kCancelled), "cancelled");
}

}  // namespace
}  // namespace remote_value_test_internal
}  // namespace asyncps
