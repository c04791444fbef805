#ifndef ASYNCPS_DATA_SERVICE_SERVERS_H_
#define ASYNCPS_DATA_SERVICE_SERVERS_H_

#include <string>

#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "data_service/element_server.h"

namespace asyncps::data_service {

// The dispatcher role, until SIGINT/SIGTERM; returns the exit code. Serves
//   dispatcher.RegisterDataset, .GetDataset, .GetOrCreateJob  (registrations and jobs, journaled
//       in `work_dir` when it is not empty: see DispatcherState)
//   dispatcher.Heartbeat  (a data worker registers and stays listed while it heartbeats)
//   dispatcher.GetWorkers (the data workers heard from in the last few seconds)
// and /metrics. A corrupt journal stops it at start with the error (exit code of DataLoss).
int RunDispatcher(const ClusterSpec& cluster, const ProcessOptions& options, const std::string& work_dir);

// The data_worker role, until SIGINT/SIGTERM. Heartbeats to the cluster's dispatcher, builds
// the datasets consumers ask for with `builder` (looked up by id at the dispatcher) and serves
// data_worker.GetElement (ElementServer) and /metrics.
int RunDataWorker(const ClusterSpec& cluster, const ProcessOptions& options, DatasetBuilder builder);

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_SERVERS_H_
