#ifndef ASYNCPS_INCLUDE_ASYNCPS_CHIEF_H_
#define ASYNCPS_INCLUDE_ASYNCPS_CHIEF_H_

// Public API: the chief's process, made in main before its strategy and coordinator
// (asyncps::ChiefProcess: the I/O loop, PS connections, /metrics and the status page), and the
// settings main reads for it from flags and the environment (asyncps::ProcessOptions).
// Contracts are on each declaration.

#include "coordinator/chief_process.h"  // IWYU pragma: export
#include "core/process_options.h"       // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_CHIEF_H_
