#ifndef ASYNCPS_CORE_STALE_GRADIENT_H_
#define ASYNCPS_CORE_STALE_GRADIENT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// The error of a gradient push refused by OptimizerConfig::max_staleness: Aborted ("retry at a
// higher level", as gRPC defines it), naming the variable, its staleness and the bound. The
// PS applied nothing of the push; the coordinator runs the closure again (same closure id, so
// the exactly-once window still lines its calls up) instead of reporting an error.
absl::Status StaleGradientError(absl::string_view variable, int64_t staleness,
                                int64_t max_staleness);

// True for a status made by StaleGradientError, also after it crossed the wire as code and
// message only (a PS answer, then a worker's closure result): Aborted with the marker text.
bool IsStaleGradientError(const absl::Status& status);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_STALE_GRADIENT_H_
