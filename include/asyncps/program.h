#ifndef ASYNCPS_INCLUDE_ASYNCPS_PROGRAM_H_
#define ASYNCPS_INCLUDE_ASYNCPS_PROGRAM_H_

// Public API: the user's program as every process builds it: asyncps::Program (named step
// functions, per-worker resources and datasets), Resource, ResourceContext, Values.
// Contracts are on each declaration.

#include "worker/program.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_PROGRAM_H_
