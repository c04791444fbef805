#include "core/exit_code.h"

namespace asyncps {

int ExitCodeForStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return kExitRetryable;
    default:
      return kExitFailure;
  }
}

}  // namespace asyncps
