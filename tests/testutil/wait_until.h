#ifndef ASYNCPS_TESTS_TESTUTIL_WAIT_UNTIL_H_
#define ASYNCPS_TESTS_TESTUTIL_WAIT_UNTIL_H_

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/sync.h"

namespace asyncps::testutil {

// Evaluates `done` every `pacing` until it holds or `timeout` has passed, and returns its last
// answer. For conditions nothing signals (a counter on a PS or in the coordinator's metrics, a
// worker count): the deadline makes a condition that never comes a failing test, not a hang.
// Callers assert on the answer, or on the condition itself so the message shows its value.
inline bool WaitUntil(absl::FunctionRef<bool()> done, absl::Duration timeout,
                      absl::Duration pacing = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    Notification().WaitForNotificationWithTimeout(pacing);  // poll pacing
  }
  return done();
}

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_WAIT_UNTIL_H_
