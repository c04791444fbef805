#include "coordinator/closure_outcome.h"

#include "core/stale_gradient.h"

namespace asyncps {

absl::string_view ClosureOutcomeName(ClosureOutcome outcome) {
  switch (outcome) {
    case ClosureOutcome::kSucceeded:
      return "succeeded";
    case ClosureOutcome::kFunctionError:
      return "function_error";
    case ClosureOutcome::kWorkerFailure:
      return "worker_failure";
    case ClosureOutcome::kPsUnavailable:
      return "ps_unavailable";
    case ClosureOutcome::kPsStateLost:
      return "ps_state_lost";
    case ClosureOutcome::kCancelled:
      return "cancelled";
    case ClosureOutcome::kStaleGradient:
      return "stale_gradient";
  }
  return "unknown";
}

ClosureOutcome ClassifyClosure(const absl::Status& rpc, const absl::Status& function, ErrorSource source) {
  if (!rpc.ok()) return ClosureOutcome::kWorkerFailure;
  if (function.ok()) return ClosureOutcome::kSucceeded;
  if (source != ErrorSource::kCancelled && IsStaleGradientError(function)) return ClosureOutcome::kStaleGradient;
  switch (source) {
    case ErrorSource::kPs:
      return ClosureOutcome::kPsUnavailable;
    case ErrorSource::kPsStateLost:
      return ClosureOutcome::kPsStateLost;
    case ErrorSource::kCancelled:
      return ClosureOutcome::kCancelled;
    case ErrorSource::kFunction:
      break;
  }
  return ClosureOutcome::kFunctionError;
}

}  // namespace asyncps
