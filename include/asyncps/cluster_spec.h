#ifndef ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_
#define ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_

// Public API: the cluster a program runs in, and which task it is. asyncps::ClusterSpec
// resolves it from TF_CONFIG, a Slurm job step (SLURM_* variables cut into roles by the
// --slurm_* flags, so `srun` can start a job) and explicit cluster flags, in that order of
// precedence from lowest to highest (ClusterSpec::FromEnvOrFlags); asyncps::TaskType;
// asyncps::ResolveSlurmCluster and the Slurm list parsers; asyncps::ProcessOptions.
// Contracts are on each declaration.

#include "core/cluster_spec.h"  // IWYU pragma: export
#include "core/process_options.h"  // IWYU pragma: export
#include "core/slurm_cluster.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_CLUSTER_SPEC_H_
