#ifndef ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_
#define ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "coordinator/chief_process.h"
#include "coordinator/initializers.h"
#include "coordinator/sharded_variable.h"
#include "core/cluster_spec.h"
#include "core/optimizer_config.h"
#include "core/sync.h"
#include "partitioners/partitioner.h"
#include "worker/variable_directory.h"

namespace asyncps {

// Places variables on the cluster's parameter servers, as TensorFlow's
// ParameterServerStrategy does:
//   * without a partitioner (or when it answers 1 partition) a variable is plain and goes to
//     the next PS round-robin, in creation order;
//   * otherwise axis 0 is split with the "div" strategy (13 rows over 5 shards -> 3,3,3,2,2;
//     never more shards than rows), shard i is named "name/part_i", and the shards take the
//     next PS round-robin. One counter advances for every plain variable and every shard.
// Invalid partitioner results (empty, a first entry below 1, any other axis split) are
// errors. Each shard is initialised on its PS (see VariableInit).
//
// Places through a ChiefProcess (its PS connections and the directory its PsClient routes
// by), which it does not own: the process must outlive the strategy and everything made from it
// (ShardedVariables, coordinators, checkpoint managers).
//
// Thread-safe.
class ParameterServerStrategy {
 public:
  explicit ParameterServerStrategy(ChiefProcess& process, std::shared_ptr<const Partitioner> partitioner = nullptr);

  // Creates `name` (idempotent on the PS: an existing variable of the same dtype and shape
  // keeps its value). AlreadyExists when `name` was created through this process before;
  // concurrent creates of one name place and create it once (the others wait, then get
  // AlreadyExists). `optimizer` is the server-side optimizer gradients go through. Waits (up to
  // the process's rpc_timeout) for PS that are still starting.
  absl::StatusOr<ShardedVariable> CreateVariable(const std::string& name, const VariableInit& init,
                                                 std::optional<OptimizerConfig> optimizer = std::nullopt);

  // Creates again, on its PS, every variable this strategy created that a PS no longer holds
  // (it restarted empty), from the variable's initializer and optimizer. Variables a PS still
  // holds keep their values: creation is idempotent on the PS. Automatic PS recovery uses
  // this when there is no checkpoint to restore. Keeping the initializers means a variable
  // made with init::FromTensor keeps a reference to that tensor for the strategy's lifetime.
  absl::Status RecreateVariables();

  // The variable created as `name`; NotFound otherwise.
  absl::StatusOr<ShardedVariable> GetVariable(const std::string& name) const;

  // The process this strategy places through (its PS client, directory, metrics, status page).
  ChiefProcess& process() const { return process_; }
  const ClusterSpec& cluster() const { return process_.cluster(); }

 private:
  absl::StatusOr<VariablePlacement> Place(const std::string& name, const VariableInit& init)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ChiefProcess& process_;
  const std::shared_ptr<const Partitioner> partitioner_;
  Mutex mu_;  // serialises placement decisions and claims names
  int next_ps_ ABSL_GUARDED_BY(mu_) = 0;
  // Names whose creation is in progress (claimed under mu_, created on the PS without it).
  absl::flat_hash_set<std::string> creating_ ABSL_GUARDED_BY(mu_);
  // How each created variable was made, for RecreateVariables.
  struct Recipe {
    ps::InitializerSpec init;
    std::optional<OptimizerConfig> optimizer;
  };
  absl::flat_hash_map<std::string, Recipe> recipes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_
