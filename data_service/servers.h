#ifndef ASYNCPS_DATA_SERVICE_SERVERS_H_
#define ASYNCPS_DATA_SERVICE_SERVERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "data_service/element_server.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "net/event_loop.h"

namespace asyncps::data_service {

// The dispatcher role, until SIGINT/SIGTERM; returns the exit code. Serves
//   dispatcher.RegisterDataset, .GetDataset, .GetOrCreateJob  (registrations and jobs, journaled
//       in options.dispatcher_work_dir when it is not empty: see DispatcherState)
//   dispatcher.Heartbeat  (a data worker registers and stays listed while it heartbeats; the
//       answer carries the dispatcher's generation)
//   dispatcher.GetWorkers (the data workers heard from in the last few seconds)
//   dispatcher.GetStatus  (the chief's status page: data workers, their state, recent jobs)
// and /metrics. A corrupt journal stops it at start with the error (exit code of DataLoss).
int RunDispatcher(const ClusterSpec& cluster, const ProcessOptions& options);

// The dispatcher inside the chief (TensorFlow's "the dispatcher may run in the coordinator"),
// for a cluster that lists data workers but no dispatcher (ClusterSpec::dispatcher_in_chief):
// the same service as RunDispatcher's, on an RPC server of its own at the chief's cluster
// address, on the chief's I/O loop, journaled in options.dispatcher_work_dir. Destroy it before
// the loop, the metrics and the RPC metrics it was given.
class InChiefDispatcher {
 public:
  // Errors: the journal is corrupt (DataLoss), the address cannot be bound (Unavailable).
  static absl::StatusOr<std::unique_ptr<InChiefDispatcher>> Start(const ClusterSpec& cluster,
                                                                  const ProcessOptions& options,
                                                                  net::EventLoop& loop,
                                                                  metrics::ProcessMetrics& metrics,
                                                                  metrics::RpcMetrics* rpc_metrics);
  ~InChiefDispatcher();  // stops serving

  InChiefDispatcher(const InChiefDispatcher&) = delete;
  InChiefDispatcher& operator=(const InChiefDispatcher&) = delete;

  struct Impl;

 private:
  explicit InChiefDispatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The data_worker role, until SIGINT/SIGTERM. Heartbeats to the cluster's dispatcher
// (ClusterSpec::data_service_dispatcher: the chief when it runs it), builds the datasets
// consumers ask for with `builder` (looked up by id at the dispatcher) and serves
// data_worker.GetElement (ElementServer) and /metrics. When the dispatcher's generation
// changes (it restarted without a journal) the data worker drops its datasets and jobs.
int RunDataWorker(const ClusterSpec& cluster, const ProcessOptions& options, DatasetBuilder builder);

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_SERVERS_H_
