#ifndef ASYNCPS_INCLUDE_ASYNCPS_PROCESS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_PROCESS_H_

// Public API for a program's main (not part of asyncps.h): logging set-up
// (asyncps::InitLogging), the process's settings from flags and environment
// (asyncps::ProcessOptions), its /metrics endpoint (asyncps::metrics::ProcessMetrics) and the
// exit codes Kubeflow's ExitCode restart policy reads (asyncps::ExitCodeForStatus: retryable
// >= 128, permanent 1-127). Contracts are on each declaration.

#include "core/exit_code.h"              // IWYU pragma: export
#include "core/logging.h"                // IWYU pragma: export
#include "core/process_options.h"        // IWYU pragma: export
#include "metrics/process_metrics.h"     // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_PROCESS_H_
