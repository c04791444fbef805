#ifndef ASYNCPS_COORDINATOR_CHIEF_PROCESS_H_
#define ASYNCPS_COORDINATOR_CHIEF_PROCESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"

namespace asyncps {
class CheckpointMetrics;
class PsMonitor;
class ShardMapCache;
namespace metrics {
class ProcessMetrics;
class RpcMetrics;
class StatusBoard;
}  // namespace metrics
namespace net {
class EventLoop;
class RpcClient;
}  // namespace net
namespace data_service {
class InChiefDispatcher;
class StatusWatch;
}  // namespace data_service

// What the chief (the process that runs the training program) sets up around its
// ParameterServerStrategy and ClusterCoordinator, in one place — the chief's counterpart of
// net::ServerProcess: the /metrics endpoint with the status page (/status, /status.json), RPC
// and checkpoint metrics, the I/O loop, one connection per parameter server, and the PsClient
// that reads and updates variables by name through the VariableDirectory it routes by.
//
// Written out in main, so a reader sees where every setting comes from:
//
//   asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
//   ASSIGN_OR_RETURN(auto chief, asyncps::ChiefProcess::Create(*cluster, {.process = process}));
//   asyncps::ParameterServerStrategy strategy(*chief);
//   asyncps::ClusterCoordinator coordinator(strategy, program);
//
// Destroy in the reverse order: everything built on the process (strategy, coordinator,
// checkpoint manager) before it.
//
// Thread-safe: the accessors and the objects they return may be used from any thread.
class ChiefProcess {
 public:
  // Plain settings; nothing here reads flags or the environment (main does, and passes them).
  struct Options {
    // The cluster token presented to every PS and worker, the /metrics port (-1: no HTTP
    // endpoint; 0: any free port) and its HTTP limits. The ps_* limits do not apply; the
    // rpc_* server limits and dispatcher_work_dir only to a dispatcher the chief runs (the
    // chief serves no other RPC).
    ProcessOptions process;
    // Deadline of each call PsClient (ps()) makes to a parameter server, and of the calls
    // automatic PS recovery makes.
    absl::Duration rpc_timeout = absl::Seconds(60);
  };

  // Sets the process up for `cluster`; connections to the parameter servers are made lazily,
  // by the first call to each. With replicated shards (options.process.ps_replicas >= 2) it
  // also waits for every PS, pushes the first shard map to them (before any variable can be
  // created) and starts watching them (PsMonitor); ps() then routes each request to its
  // group's primary and rides out failovers. Errors:
  //   InvalidArgument: `cluster` is not a chief's spec (its task is neither the chief nor
  //     worker 0 of a cluster without one);
  //   Unavailable: options.process.metrics_port >= 0 and /metrics cannot be served on it (a
  //     port in use is an error, never a silent fallback to no endpoint);
  //   InvalidArgument / Unavailable from PsMonitor::Start with ps_replicas >= 2 (more copies
  //     than PS; a PS that did not take the first map within rpc_timeout).
  // With a tf.data service in the cluster (ClusterSpec::data_service_dispatcher) the status
  // page shows it (data_service::StatusWatch polls the dispatcher). When the cluster lists data
  // workers but no dispatcher, the chief runs the dispatcher itself on its cluster address
  // (data_service::InChiefDispatcher, journaled in options.process.dispatcher_work_dir);
  // errors then also: DataLoss (a corrupt journal), Unavailable (the address cannot be bound).
  static absl::StatusOr<std::unique_ptr<ChiefProcess>> Create(const ClusterSpec& cluster, Options options);

  // Closes the PS connections (operations still in flight on them complete with Cancelled,
  // on this thread or the loop thread, before this returns), stops the I/O loop, then the
  // /metrics endpoint. Call it on a thread that is not the I/O loop's, once nothing uses the
  // process any more.
  ~ChiefProcess();

  ChiefProcess(const ChiefProcess&) = delete;
  ChiefProcess& operator=(const ChiefProcess&) = delete;

  const ClusterSpec& cluster() const { return cluster_; }
  const Options& options() const { return options_; }

  // Variables by name on whichever PS hold them, routed by directory(). Owned by this.
  PsClient& ps() { return *ps_client_; }
  // Where each variable lives, as the strategy placed them; ps() routes by it and the
  // coordinator sends it to workers. Owned by this.
  VariableDirectory& directory() { return directory_; }
  const VariableDirectory& directory() const { return directory_; }
  // The connection to PS `i` (0 <= i < cluster().num_ps()), for services beyond PsClient's
  // (checkpoints, listing variables). Owned by this.
  net::RpcClient& ps_rpc(int i);

  // A new connection (made lazily) to `address`, another task of this cluster, on this
  // process's I/O loop, presenting the cluster token as the chief; its calls are counted in
  // rpc_metrics(). The caller owns it and must destroy it before this process.
  std::unique_ptr<net::RpcClient> Connect(const std::string& address);

  // The I/O thread every connection of this process runs on.
  net::EventLoop& loop() { return *loop_; }
  // The process's metric registry (and /metrics endpoint; port() is 0 without one).
  metrics::ProcessMetrics& process_metrics() { return *metrics_; }
  metrics::RpcMetrics& rpc_metrics() { return *rpc_metrics_; }
  // The status page: cluster members, events, live values and user scalars.
  metrics::StatusBoard& status_board() { return *status_board_; }
  // With ps_replicas >= 2 the chief's copy of the shard map (requests for a group go to its
  // primary: worker/routed_call.h); null otherwise. Owned by this.
  ShardMapCache* shard_map() { return shard_map_.get(); }
  // Every PS connection, by index (for routed calls beyond PsClient's). Owned by this.
  std::vector<net::RpcClient*> ps_rpcs();
  // The watch over the PS and owner of the shard map with ps_replicas >= 2; null otherwise.
  PsMonitor* ps_monitor() { return ps_monitor_.get(); }
  // Checkpoint save metrics; their series exist (at 0) in every chief, whether or not it
  // checkpoints.
  CheckpointMetrics& checkpoint_metrics() { return *checkpoint_metrics_; }

  // Reports a training scalar (loss, accuracy, ...) at `step`: exported as
  // asyncps_scalar{name} and plotted on the status page. InvalidArgument for a name that is
  // not a short identifier ([a-z0-9_]), a non-finite value, or too many names (see
  // metrics::StatusBoard).
  absl::Status ReportScalar(const std::string& name, int64_t step, double value);

 private:
  ChiefProcess(const ClusterSpec& cluster, Options options);
  std::unique_ptr<net::RpcClient> ConnectOn(net::EventLoop& loop, const std::string& address);

  const ClusterSpec cluster_;
  const Options options_;
  // Members are destroyed bottom-up: the PsClient before the connections it uses, the
  // connections before their loop, and the metrics endpoint (whose handlers read the status
  // board) before the board.
  std::unique_ptr<metrics::StatusBoard> status_board_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_;
  std::unique_ptr<metrics::RpcMetrics> rpc_metrics_;
  std::unique_ptr<CheckpointMetrics> checkpoint_metrics_;
  std::unique_ptr<net::EventLoop> loop_;
  std::vector<std::unique_ptr<net::RpcClient>> ps_clients_;
  VariableDirectory directory_;
  std::unique_ptr<ShardMapCache> shard_map_;  // ps_replicas >= 2 only
  std::unique_ptr<PsClient> ps_client_;
  // ps_replicas >= 2 only: the monitor's own loop and connections to the PS (PsMonitor), so
  // its heartbeats never wait behind the chief's other traffic.
  std::unique_ptr<net::EventLoop> monitor_loop_;
  std::vector<std::unique_ptr<net::RpcClient>> monitor_clients_;
  std::unique_ptr<PsMonitor> ps_monitor_;  // ps_replicas >= 2 only; stopped first
  // The tf.data service, when the cluster has one; destroyed before the loop.
  std::unique_ptr<data_service::InChiefDispatcher> dispatcher_;  // no dispatcher task only
  std::unique_ptr<net::RpcClient> data_service_client_;
  std::unique_ptr<data_service::StatusWatch> data_service_watch_;  // stopped first
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CHIEF_PROCESS_H_
