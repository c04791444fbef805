#ifndef ASYNCPS_CORE_PROCESS_OPTIONS_H_
#define ASYNCPS_CORE_PROCESS_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/bf16.h"
#include "core/compression.h"

namespace asyncps {

inline constexpr uint64_t kDefaultPsMaxVariableBytes = uint64_t{8} << 30;   // 8 GiB
inline constexpr uint64_t kDefaultPsMaxResponseBytes = uint64_t{512} << 20;  // 512 MiB

// Settings every asyncps process takes besides the cluster spec. Each comes from a flag,
// else the environment, else the default — a flag always overrides the environment:
//   --cluster_token=T   ASYNCPS_CLUSTER_TOKEN   shared secret peers must present ("" allowed
//                                               only when every listener is on loopback)
//   --metrics_port=N    ASYNCPS_METRICS_PORT    /metrics port, an integer in [-1, 65535];
//                                               0 picks a free one, -1 disables
//   --metrics_bind_address=A  ASYNCPS_METRICS_BIND_ADDRESS  the address /metrics (and the
//                                               chief's status page) listen on: an IPv4 or
//                                               IPv6 literal, 0.0.0.0 or :: for every
//                                               interface (127.0.0.1)
//   --log_level=L       ASYNCPS_LOG_LEVEL       trace, debug, info, warn, error, critical or
//                                               off (info)
// Parameter-server limits (asyncps_ps, and the ps role of any binary that calls Serve):
//   --ps_max_variable_bytes=N      ASYNCPS_PS_MAX_VARIABLE_BYTES      bytes all variables of one
//                                  PS may hold (values + optimizer slots) (8GiB)
//   --ps_max_response_bytes=N      ASYNCPS_PS_MAX_RESPONSE_BYTES      bytes of tensors one
//                                  ps.Read / ps.Gather answer may carry (512MiB)
//   --allow_nonfinite_gradients    ASYNCPS_ALLOW_NONFINITE_GRADIENTS  apply gradients holding
//                                  NaN or Inf instead of refusing them (false)
//   --ps_inline_small_updates      ASYNCPS_PS_INLINE_SMALL_UPDATES    apply updates and gradients
//                                  of at most 16 KiB on the I/O thread always (false: only
//                                  while the PS is otherwise quiet; see net::Dispatch)
//   --ps_dedup_max_entries=N       ASYNCPS_PS_DEDUP_MAX_ENTRIES       keys the window of applied
//                                  closure updates may hold (ps/update_dedup.h) (1048576)
// Replicated shards (issue 19; ps/replication/):
//   --ps_replicas=N                ASYNCPS_PS_REPLICAS                copies of every shard
//                                  group: a primary and N-1 backups, 1 to 3 (1: unreplicated)
//   --ps_heartbeat_timeout=D       ASYNCPS_PS_HEARTBEAT_TIMEOUT       how long the chief waits
//                                  for a PS's heartbeat answer before it counts the PS as lost
//                                  ("2s", "500ms"; at most 1h) (2s)
//   --ps_lost_after=D              ASYNCPS_PS_LOST_AFTER              how long a PS may stay
//                                  silent (no answer, no refusal) before the chief counts it
//                                  lost and a group with no other copy awaits a restore from
//                                  a checkpoint; until then it is unreachable and nothing of it
//                                  is thrown away. A PS whose address refuses connections or
//                                  answers as a new process is lost at once. (30s)
// Workers (the worker role of any binary that calls Serve):
//   --transport=P                  ASYNCPS_TRANSPORT                  precision of f32 values on
//                                  the wire between a worker and the PS: its pulls (ps.Read and
//                                  the fused push-and-read) and gradient pushes, dense and by
//                                  row: f32 or bf16 (half the bytes; core/bf16.h). The PS keeps
//                                  f32 whatever it is; other requests are f32 (f32)
//   --compression=C                ASYNCPS_COMPRESSION                the form a worker pushes its
//                                  dense f32 gradients in: none, bf16, int8 (per-block scales)
//                                  or topk:FRACTION, the lossy ones with error feedback on the
//                                  worker (core/compression.h). Integer and row gradients are
//                                  never compressed (none)
//   --pull_compression=C           ASYNCPS_PULL_COMPRESSION           the form a worker asks the
//                                  f32 values it pulls in: none (as --transport says), bf16 or
//                                  int8 (a scale per 256 values; no error feedback). Other
//                                  dtypes always come as they are (none)
// The tf.data service (data_service/):
//   --dispatcher_work_dir=D        ASYNCPS_DISPATCHER_WORK_DIR        the directory where the
//                                  dispatcher (its own task, or the chief when the cluster lists
//                                  data workers but no dispatcher) journals registrations and
//                                  jobs, and recovers them from when restarted ("": in memory)
// Elastic membership (issue 37; docs/operations.md, "Scaling a running job"):
//   --elastic                      ASYNCPS_ELASTIC                    the chief serves membership
//                                  on its cluster address (a worker joins by registering, leaves
//                                  by being drained); every worker registers with the chief, and
//                                  on SIGTERM asks to be drained, then exits 0 (false)
//   --initial_ps=N                 ASYNCPS_INITIAL_PS                 elastic parameter
//                                  servers: the job starts on the first N PS the cluster lists
//                                  (its PS slots) and PS join and leave the running job among
//                                  the slots (with --elastic: a PS past the first N registers,
//                                  and a PS asks to be drained on SIGTERM, then exits 0). Any N
//                                  from 1 puts the shard groups under the chief's shard map, as
//                                  --ps_replicas 2 does, also with one copy (0: off, every
//                                  listed PS is a member for good)
// Byte sizes are a positive integer with an optional binary suffix: K, M, G, T, KiB, MiB,
// GiB or TiB ("8GiB", "512M"). Booleans: the bare flag, or 1/0/true/false.
// Limits of every RPC server (ps, worker), each refusal logged and counted in
// asyncps_rpc_server_rejected_total{reason}:
//   --rpc_max_connections=N        ASYNCPS_RPC_MAX_CONNECTIONS        open connections (1024)
//   --rpc_handshake_timeout_ms=N   ASYNCPS_RPC_HANDSHAKE_TIMEOUT_MS   to finish the handshake (5000)
//   --rpc_handshake_max_bytes=N    ASYNCPS_RPC_HANDSHAKE_MAX_BYTES    a frame before it (4096)
//   --rpc_idle_timeout_s=N         ASYNCPS_RPC_IDLE_TIMEOUT_S         idle connection, 0 = never (600)
//   --rpc_max_frame_bytes=N        ASYNCPS_RPC_MAX_FRAME_BYTES        payloads of one frame (2 GiB)
// and of the /metrics endpoint (metrics/http_server.h: one thread, asynchronous connections):
//   --metrics_max_connections=N    ASYNCPS_METRICS_MAX_CONNECTIONS    open HTTP connections (16);
//                                  --metrics_threads / ASYNCPS_METRICS_THREADS, its older name
//                                  (from when each connection held a thread), still set it
//   --metrics_request_timeout_ms=N ASYNCPS_METRICS_REQUEST_TIMEOUT_MS to read a request, and
//                                  again to write the answer (500)
// Unknown arguments are ignored (they belong to the program).
struct ProcessOptions {
  std::string cluster_token;
  int metrics_port = 0;
  std::string metrics_bind_address = "127.0.0.1";
  std::string log_level = "info";
  uint64_t ps_max_variable_bytes = kDefaultPsMaxVariableBytes;
  uint64_t ps_max_response_bytes = kDefaultPsMaxResponseBytes;
  bool allow_nonfinite_gradients = false;
  bool ps_inline_small_updates = false;
  bool elastic = false;
  int64_t ps_dedup_max_entries = int64_t{1} << 20;
  int64_t ps_replicas = 1;
  int64_t initial_ps = 0;
  absl::Duration ps_heartbeat_timeout = absl::Seconds(2);
  absl::Duration ps_lost_after = absl::Seconds(30);
  std::string dispatcher_work_dir;
  WirePrecision transport = WirePrecision::kF32;
  Compression compression = {};
  Compression pull_compression = {};

  int64_t rpc_max_connections = 1024;
  int64_t rpc_handshake_timeout_ms = 5000;
  int64_t rpc_handshake_max_bytes = 4096;
  int64_t rpc_idle_timeout_s = 600;
  int64_t rpc_max_frame_bytes = int64_t{2} << 30;
  int64_t metrics_max_connections = 16;
  int64_t metrics_request_timeout_ms = 500;

  // True when the chief owns a shard map of the PS groups and every client routes by it
  // (ps/replication/): replicated shards, or elastic PS (initial_ps) in a cluster of `num_ps`.
  bool UsesShardMap() const { return ps_replicas >= 2 || initial_ps > 0; }
  // The PS that are members when the job starts: the first initial_ps, or all `num_ps`.
  int InitialPsMembers(int num_ps) const {
    return initial_ps > 0 && initial_ps < num_ps ? static_cast<int>(initial_ps) : num_ps;
  }

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
