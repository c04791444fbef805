#ifndef ASYNCPS_CORE_SLURM_CLUSTER_H_
#define ASYNCPS_CORE_SLURM_CLUSTER_H_

// The cluster of a Slurm job step, resolved from the variables Slurm gives every task, the way
// TensorFlow's SlurmClusterResolver does it: `srun` starts one process per task and each one
// works out the same cluster and its own place in it.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cluster_spec.h"

namespace asyncps {

// How many tasks of the step play each role (TensorFlow's `jobs`), and where ports start.
struct SlurmLayout {
  int chief = 1;         // 0 or 1; with 0, worker 0 acts as chief (ClusterSpec's rule)
  int evaluator = 0;     // 0 or 1
  int ps = 1;            // at least 1
  int workers = -1;      // at least 1; -1 means every task the other roles leave
  int port_base = 8888;  // TensorFlow's default; a node's k-th task listens on port_base + k
};

// What a step resolves to: every job's addresses and the task this process is.
struct SlurmCluster {
  std::map<TaskType, std::vector<std::string>> jobs;
  TaskType task_type = TaskType::kWorker;
  int task_index = 0;
};

// The most tasks (and expanded node names) a step may have; more is a typo, not a cluster.
inline constexpr int kMaxSlurmTasks = 65536;

// Expands a Slurm host list: "node[01-03,07],gpu-a[1-2]" -> node01 node02 node03 node07 gpu-a1
// gpu-a2. Order is kept and nothing is deduplicated. A bracket holds comma-separated numbers or
// ranges "lo-hi" (lo <= hi); a range whose lo has a leading zero is zero-padded to lo's width.
// Several brackets in one name expand as a product, the leftmost varying slowest. Empty lists
// or names, unbalanced brackets, reversed ranges, characters outside [A-Za-z0-9._-] and more
// than kMaxSlurmTasks names are InvalidArgument naming `variable`.
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodeList(absl::string_view list,
                                                             absl::string_view variable);

// Expands Slurm's tasks-per-node list: "2(x3),1" -> 2 2 2 1. Each count is at least 1; a total
// over kMaxSlurmTasks or anything else malformed is InvalidArgument naming `variable`.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view list,
                                                         absl::string_view variable);

// Resolves the cluster of the job step described by `env` (TensorFlow's SlurmClusterResolver,
// with Slurm's own node order). Reads:
//   SLURM_PROCID                                      this task's rank (required)
//   SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST      the nodes, in Slurm's order (required)
//   SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE   tasks on each node (required)
//   SLURM_STEP_NUM_TASKS, else SLURM_NTASKS           total tasks (optional; checked if set)
//   SLURMD_NODENAME, SLURM_LOCALID                    this task's node and rank on it
//                                                     (optional; checked if set)
// Ranks are laid out as Slurm's default block distribution does: the first node's tasks are
// ranks 0..k-1, and the node's j-th task gets "node:port_base+j". Roles take the ranks in
// order chief, evaluator, ps, worker (TensorFlow sorts job names the same way), so with the
// default layout rank 0 is the chief, ranks 1..ps are the parameter servers and the rest are
// workers. The layout must add up to the step's task count. Every error is InvalidArgument
// and names the variable or flag at fault; a task whose node or local rank disagrees with
// SLURMD_NODENAME / SLURM_LOCALID (a non-block distribution) is an error, not a wrong cluster.
absl::StatusOr<SlurmCluster> ResolveSlurmCluster(const EnvMap& env, const SlurmLayout& layout);

// The variable names ResolveSlurmCluster reads, for building an EnvMap from the environment.
inline constexpr absl::string_view kSlurmEnvironmentVariables[] = {
    "SLURM_PROCID",         "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",   "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",         "SLURMD_NODENAME",
    "SLURM_LOCALID"};

}  // namespace asyncps

#endif  // ASYNCPS_CORE_SLURM_CLUSTER_H_
