#ifndef ASYNCPS_WORKER_SERVE_H_
#define ASYNCPS_WORKER_SERVE_H_

#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "worker/program.h"

namespace asyncps {

// Runs this process's non-chief role until SIGINT/SIGTERM and returns the exit code:
//   ps        serves variables (the same as the asyncps_ps binary);
//   worker    serves `program`'s functions and per-worker resources, talking to every PS.
//   dispatcher   the tf.data service's dispatcher (data_service/servers.h); its work_dir (the
//                journal) is ASYNCPS_DISPATCHER_WORK_DIR, in memory when unset or empty.
//   data_worker  a tf.data service data worker building `program`'s datasets.
//   evaluator is not served yet (returns 2 with an error).
// `options` (token, /metrics port, log level) are read by the caller's main, typically with
// ProcessOptions::FromEnvAndFlags(argc, argv): nothing else here reads the environment.
// Call from main before starting any thread: it blocks SIGINT/SIGTERM to wait for them.
int Serve(const ClusterSpec& cluster, const Program& program, const ProcessOptions& options);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_SERVE_H_
