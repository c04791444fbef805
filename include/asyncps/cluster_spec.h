#ifndef ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_
#define ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_

// Public API: the cluster a program runs in (TF_CONFIG / flags): asyncps::ClusterSpec,
// asyncps::TaskType, asyncps::ProcessOptions. Contracts are on each declaration.

#include "core/cluster_spec.h"  // IWYU pragma: export
#include "core/process_options.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_
