#include "core/stale_gradient.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace asyncps {
namespace {
constexpr absl::string_view kMarker = "stale gradient refused";
}  // namespace

absl::Status StaleGradientError(absl::string_view variable, int64_t staleness,
                                int64_t max_staleness) {
  return absl::AbortedError(
      absl::StrCat(kMarker, ": variable '", variable, "' moved ", staleness,
                   " versions since the gradient's read, over its max_staleness of ", max_staleness,
                   "; nothing of this push was applied (recompute)"));
}

bool IsStaleGradientError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StrContains(status.message(), kMarker);
}

}  // namespace asyncps
