#ifndef ASYNCPS_CORE_EXIT_CODE_H_
#define ASYNCPS_CORE_EXIT_CODE_H_

// Process exit codes, chosen for Kubeflow's restartPolicy ExitCode: the operator restarts a
// replica whose container exited with 128..255 (retryable: killed, preempted, lost its peers)
// and fails the job on 1..127 (permanent: restarting the same configuration fails again).
// A process killed by a signal is reported by Kubernetes as 128 + the signal, so a process that
// handles SIGTERM itself exits the same way as one that does not.

#include "absl/status/status.h"

namespace asyncps {

inline constexpr int kExitOk = 0;
// Permanent: the program failed in a way a restart would repeat (bad data, a bug).
inline constexpr int kExitFailure = 1;
// Permanent: bad flags, a bad TF_CONFIG, a role this binary does not play.
inline constexpr int kExitUsage = 2;
// Retryable: a peer could not be reached or went away (not a signal; 200 reads as no signal).
inline constexpr int kExitRetryable = 200;

// 128 + `signal`, the code Kubernetes reports for a container killed by `signal` (143 for
// SIGTERM, 130 for SIGINT): retryable.
inline constexpr int ExitCodeForSignal(int signal) { return 128 + signal; }

// True for the codes the operator restarts (128..255).
inline constexpr bool IsRetryableExitCode(int code) { return code >= 128 && code <= 255; }

// The exit code for a run that ended with `status`: 0 for OK; kExitRetryable for the codes
// that mean the cluster, not the job, failed (Unavailable, Aborted, DeadlineExceeded,
// Cancelled); kExitFailure for every other code (bad input, missing data, internal errors:
// a restart would fail the same way).
int ExitCodeForStatus(const absl::Status& status);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_EXIT_CODE_H_
