#ifndef ASYNCPS_INCLUDE_ASYNCPS_COORDINATOR_H_
#define ASYNCPS_INCLUDE_ASYNCPS_COORDINATOR_H_

// Public API: scheduling step functions onto workers: asyncps::ClusterCoordinator,
// asyncps::RemoteValue, asyncps::ClosureArg, PerWorkerValues, PerWorkerDataset.
// Contracts are on each declaration.

#include "coordinator/cluster_coordinator.h"  // IWYU pragma: export
#include "coordinator/remote_value.h"  // IWYU pragma: export
#include "coordinator/closure_arg.h"  // IWYU pragma: export
#include "coordinator/per_worker_dataset.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_COORDINATOR_H_
