#ifndef ASYNCPS_INCLUDE_ASYNCPS_STATUS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_STATUS_H_

// Public API: RETURN_IF_ERROR / ASSIGN_OR_RETURN over absl::Status and absl::StatusOr, and the
// process logging set-up. Contracts are on each declaration.

#include "core/status_macros.h"  // IWYU pragma: export
#include "core/logging.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_STATUS_H_
