#ifndef ASYNCPS_INCLUDE_ASYNCPS_STEP_CONTEXT_H_
#define ASYNCPS_INCLUDE_ASYNCPS_STEP_CONTEXT_H_

// Public API: what a step function sees on a worker: asyncps::StepContext (arguments,
// variable reads/updates/gradients), VariableUpdate, GradientUpdate, asyncps::UpdateKind, and the
// PS-failure predicates (IsPsUnreachable, IsPsStateLost). Contracts are on each declaration.

#include "core/update_kind.h"     // IWYU pragma: export
#include "worker/step_context.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_STEP_CONTEXT_H_
