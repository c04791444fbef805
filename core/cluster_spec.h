#ifndef ASYNCPS_CORE_CLUSTER_SPEC_H_
#define ASYNCPS_CORE_CLUSTER_SPEC_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// Which job a process plays. "master" (legacy) parses as kChief.
// kDispatcher and kDataWorker are the tf.data service's processes (data_service/): at most one
// dispatcher, any number of data workers; neither is part of the training cluster's counts.
enum class TaskType { kChief, kPs, kWorker, kEvaluator, kDispatcher, kDataWorker };

// Environment variables by name: what FromEnvAndFlags reads instead of the real environment.
using EnvMap = std::map<std::string, std::string, std::less<>>;

absl::string_view TaskTypeName(TaskType type);  // "chief", "ps", "worker", "evaluator",
                                                // "dispatcher", "data_worker"
absl::StatusOr<TaskType> TaskTypeFromName(absl::string_view name);  // accepts "master"

// The addresses of every task in a cluster plus which task this process is, in TensorFlow's
// TF_CONFIG shape:
//   {"cluster": {"chief": ["h:p"], "ps": [...], "worker": [...], "evaluator": [...]},
//    "task": {"type": "worker", "index": 0}, "environment": "cloud"}
//
// Rules (TensorFlow / Kubeflow TFJob): "master" is the legacy name of "chief"; with no chief,
// worker 0 is the chief (its task type reads as kChief for this process when the task is
// worker 0, and the worker list keeps it, so `workers()` still lists it); a cluster has at least
// one ps and one worker, at most one chief, at most one evaluator and at most one dispatcher. The evaluator is not part
// of the training cluster: an evaluator task also accepts a cluster without ps and workers
// (TensorFlow's side-car form, {"evaluator": [..]}) or without an evaluator job (what Kubeflow's
// TFJob operator injects; its self_address() is then empty). Unknown job names, a task
// index out of range, a task type with no job in the cluster, duplicate addresses, or
// addresses that are not "host:port" with a port in 1..65535 are errors. Hosts without a port
// get the default port 2222.
//
// A ClusterSpec is an immutable value; safe to read from any thread.
class ClusterSpec {
 public:
  // Parses a TF_CONFIG JSON document. Every error is InvalidArgument and names the field.
  static absl::StatusOr<ClusterSpec> FromTfConfig(absl::string_view json);

  // Resolves the cluster from up to three sources, each later one laid over the earlier ones
  // field by field (a job a later source names replaces that job; jobs only an earlier source
  // names are kept, so the result is their union; a later task type or index wins):
  //   1. TF_CONFIG, when set and not blank.
  //   2. Slurm, when any --slurm_* flag is given: the job step's SLURM_* variables cut into
  //      roles by ResolveSlurmCluster (core/slurm_cluster.h), which also sets the task from
  //      SLURM_PROCID. Layout flags:
  //        --slurm_ps=N (1)  --slurm_workers=M (the rest)  --slurm_chief=0|1 (1)
  //        --slurm_evaluator=0|1 (0)  --slurm_port_base=P (8888)
  //      e.g. `srun --ntasks=6 prog --slurm_ps=2`: rank 0 chief, ranks 1-2 ps, 3-5 workers.
  //   3. Explicit cluster flags:
  //        --ps_hosts=h:p,h:p  --worker_hosts=h:p,...  --chief_host=h:p  --evaluator_host=h:p
  //        --dispatcher_host=h:p  --data_worker_hosts=h:p,...
  //        --job_name=ps|worker|chief|evaluator|dispatcher|data_worker  --task_index=N
  // So flags beat Slurm, which beats TF_CONFIG. Both "--flag=value" and "--flag value" forms
  // are accepted; arguments after "--" and those that are not one of these flags are ignored
  // (they belong to the program) and left in `argv` untouched. Fails (InvalidArgument) when a
  // source is malformed or the sources together do not give a complete, valid spec.
  // Reads the real environment: call it before any thread may call setenv.
  static absl::StatusOr<ClusterSpec> FromEnvOrFlags(int argc, char** argv);

  // FromEnvOrFlags with the environment given as `env` (TF_CONFIG and the SLURM_* variables
  // are looked up in it); for tests and launchers.
  static absl::StatusOr<ClusterSpec> FromEnvAndFlags(const EnvMap& env,
                                                     const std::vector<std::string>& args);

  // FromEnvAndFlags with TF_CONFIG as the only variable (empty = unset).
  static absl::StatusOr<ClusterSpec> FromTfConfigAndFlags(absl::string_view tf_config,
                                                          const std::vector<std::string>& args);

  // Builds and validates a spec directly.
  static absl::StatusOr<ClusterSpec> Create(std::map<TaskType, std::vector<std::string>> jobs,
                                            TaskType task_type, int task_index);

  TaskType task_type() const { return task_type_; }
  int task_index() const { return task_index_; }
  bool is_chief() const { return task_type_ == TaskType::kChief; }
  int num_ps() const { return static_cast<int>(ps_.size()); }
  int num_workers() const { return static_cast<int>(workers_.size()); }

  const std::vector<std::string>& ps() const { return ps_; }
  const std::vector<std::string>& workers() const { return workers_; }
  // Empty when the cluster has no chief entry (then worker 0 acts as chief).
  const std::string& chief() const { return chief_; }
  const std::string& evaluator() const { return evaluator_; }
  // The tf.data service: empty / no entries when the cluster lists none.
  const std::string& dispatcher() const { return dispatcher_; }
  const std::vector<std::string>& data_workers() const { return data_workers_; }
  int num_data_workers() const { return static_cast<int>(data_workers_.size()); }
  // Where the tf.data service's dispatcher serves: the dispatcher task when the cluster lists
  // one; else, when it lists data workers, the chief's own address (the chief runs the
  // dispatcher, TensorFlow's "the dispatcher may run in the coordinator"; worker 0's address
  // when worker 0 is the chief); else empty (no service).
  const std::string& data_service_dispatcher() const;
  // True when the chief runs the dispatcher (data workers listed, no dispatcher task).
  bool dispatcher_in_chief() const { return dispatcher_.empty() && !data_workers_.empty(); }

  // This task's own "host:port" (empty for an evaluator the cluster does not list).
  const std::string& self_address() const;

  // Serialises back to TF_CONFIG JSON for the given task (used by the local launcher).
  std::string ToTfConfig(TaskType type, int index) const;

  // "worker:1" style label for logs.
  std::string TaskLabel() const;

 private:
  std::vector<std::string> ps_;
  std::vector<std::string> workers_;
  std::string chief_;
  std::string evaluator_;
  std::string dispatcher_;
  std::vector<std::string> data_workers_;
  TaskType task_type_ = TaskType::kWorker;
  int task_index_ = 0;
  // Set when there is no chief and this task is worker 0.
  bool worker_zero_is_chief_ = false;
};

// Splits "host:port" into its parts; InvalidArgument when malformed.
absl::Status ParseHostPort(absl::string_view address, std::string* host, int* port);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_CLUSTER_SPEC_H_
