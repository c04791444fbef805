#ifndef ASYNCPS_COORDINATOR_CLOSURE_OUTCOME_H_
#define ASYNCPS_COORDINATOR_CLOSURE_OUTCOME_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// What happened to one attempt at running a closure, and so what the coordinator does next.
enum class ClosureOutcome {
  kSucceeded,       // value ready
  kFunctionError,   // the user's function failed: the error goes to the user (first error wins)
  kWorkerFailure,   // the worker died, hung, restarted or lost its resources: put the closure
                    // back and mark the worker down; the user never sees this
  kPsUnavailable,   // a parameter server could not be reached: Unavailable to the user
  kPsStateLost,     // a parameter server answered but no longer holds a variable the strategy
                    // created (it restarted empty): Unavailable to the user, marked so that
                    // IsPsStateLost(status) is true (what automatic PS recovery keys on)
  kCancelled,       // stopped because another closure failed
  kStaleGradient,   // a PS refused a push as staler than its max_staleness (IsStaleGradientError):
                    // nothing of it was applied; put the closure back to be recomputed on
                    // fresh values (same id and batch); the user never sees this
};

absl::string_view ClosureOutcomeName(ClosureOutcome outcome);

// Where a closure error came from, as the worker reports it (mirrors wire::ErrorSource).
enum class ErrorSource { kFunction, kPs, kCancelled, kPsStateLost };

// Classifies one attempt. `rpc` is the status of the worker.Run call itself: any failure of
// the call (Unavailable, DeadlineExceeded — the closure timed out or the worker hung —
// Cancelled by a dropped connection, FailedPrecondition for a restarted worker) is a worker
// failure, because a function's own errors travel inside a successful response (`function`,
// with `source` saying who failed). Malformed responses count as worker failures too. A
// function error that is a stale-gradient refusal is kStaleGradient, whatever the source said.
ClosureOutcome ClassifyClosure(const absl::Status& rpc, const absl::Status& function, ErrorSource source);

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLOSURE_OUTCOME_H_
