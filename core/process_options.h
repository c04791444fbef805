#ifndef ASYNCPS_CORE_PROCESS_OPTIONS_H_
#define ASYNCPS_CORE_PROCESS_OPTIONS_H_

#include <cstdint>
#include <string>

namespace asyncps {

// Settings every asyncps process takes besides the cluster spec. Each comes from a flag,
// else the environment, else the default:
//   --cluster_token=T   ASYNCPS_CLUSTER_TOKEN   shared secret peers must present ("" allowed
//                                               only when every listener is on loopback)
//   --metrics_port=N    ASYNCPS_METRICS_PORT    /metrics port; 0 picks a free one, -1 disables
//   --log_level=L       ASYNCPS_LOG_LEVEL       spdlog level name (info)
// Limits of every RPC server (ps, worker), each refusal logged and counted in
// asyncps_rpc_server_rejected_total{reason}:
//   --rpc_max_connections=N        ASYNCPS_RPC_MAX_CONNECTIONS        open connections (1024)
//   --rpc_handshake_timeout_ms=N   ASYNCPS_RPC_HANDSHAKE_TIMEOUT_MS   to finish the handshake (5000)
//   --rpc_handshake_max_bytes=N    ASYNCPS_RPC_HANDSHAKE_MAX_BYTES    a frame before it (4096)
//   --rpc_idle_timeout_s=N         ASYNCPS_RPC_IDLE_TIMEOUT_S         idle connection, 0 = never (600)
//   --rpc_max_frame_bytes=N        ASYNCPS_RPC_MAX_FRAME_BYTES        payloads of one frame (2 GiB)
// and of the /metrics endpoint (civetweb):
//   --metrics_threads=N            ASYNCPS_METRICS_THREADS            HTTP worker threads (16)
//   --metrics_request_timeout_ms=N ASYNCPS_METRICS_REQUEST_TIMEOUT_MS a connection's read/write (500)
// Unknown arguments are ignored (they belong to the program).
struct ProcessOptions {
  std::string cluster_token;
  int metrics_port = 0;
  std::string log_level = "info";

  int64_t rpc_max_connections = 1024;
  int64_t rpc_handshake_timeout_ms = 5000;
  int64_t rpc_handshake_max_bytes = 4096;
  int64_t rpc_idle_timeout_s = 600;
  int64_t rpc_max_frame_bytes = int64_t{2} << 30;
  int64_t metrics_threads = 16;
  int64_t metrics_request_timeout_ms = 500;

  // The first malformed or out-of-range value among the settings above ("" when all are
  // good); servers refuse to start with it rather than silently use a default.
  std::string error;

  static ProcessOptions FromEnvAndFlags(int argc, char** argv);
};

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts afterwards, so
// they can be received synchronously by WaitForTerminationSignal. Call first thing in main
// (before any thread exists).
void BlockTerminationSignals();

// Waits for SIGINT or SIGTERM (blocked by BlockTerminationSignals) and returns its number.
int WaitForTerminationSignal();

}  // namespace asyncps

#endif  // ASYNCPS_CORE_PROCESS_OPTIONS_H_
