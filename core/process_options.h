#ifndef ASYNCPS_CORE_PROCESS_OPTIONS_H_
#define ASYNCPS_CORE_PROCESS_OPTIONS_H_

#include <string>

#include "absl/status/statusor.h"

namespace asyncps {

// Settings every asyncps process takes besides the cluster spec. Each comes from a flag,
// else the environment, else the default — a flag always overrides the environment:
//   --cluster_token=T   ASYNCPS_CLUSTER_TOKEN   shared secret peers must present ("" allowed
//                                               only when every listener is on loopback)
//   --metrics_port=N    ASYNCPS_METRICS_PORT    /metrics port, an integer in [-1, 65535];
//                                               0 picks a free one, -1 disables
//   --log_level=L       ASYNCPS_LOG_LEVEL       trace, debug, info, warn, error, critical or
//                                               off (info)
// Unknown arguments are ignored (they belong to the program).
struct ProcessOptions {
  std::string cluster_token;
  int metrics_port = 0;
  std::string log_level = "info";

  // The settings from `argv` and the environment. InvalidArgument naming the flag (or the
  // variable) when a value is malformed, e.g. "--metrics_port=http" or a port out of range.
  static absl::StatusOr<ProcessOptions> Parse(int argc, char** argv);

  // Parse for main(): on a malformed value prints the error (naming the flag) to stderr and
  // exits with status 2, as flag parsers do, so a bad setting is never silently replaced by
  // the default.
  static ProcessOptions FromEnvAndFlags(int argc, char** argv);
};

// True for the log level names ProcessOptions accepts.
bool IsLogLevelName(const std::string& name);

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts afterwards, so
// they can be received synchronously by WaitForTerminationSignal. Call first thing in main
// (before any thread exists).
void BlockTerminationSignals();

// Waits for SIGINT or SIGTERM (blocked by BlockTerminationSignals) and returns its number.
int WaitForTerminationSignal();

}  // namespace asyncps

#endif  // ASYNCPS_CORE_PROCESS_OPTIONS_H_
