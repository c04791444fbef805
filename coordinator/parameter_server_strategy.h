#ifndef ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_
#define ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/initializers.h"
#include "coordinator/sharded_variable.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/sync.h"
#include "partitioners/partitioner.h"
#include "core/optimizer_config.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"

namespace asyncps {
class CheckpointMetrics;
namespace metrics {
class ProcessMetrics;
class RpcMetrics;
class StatusBoard;
}  // namespace metrics
namespace net {
class EventLoop;
class RpcClient;
}  // namespace net

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
// Owns the coordinator process's network runtime (I/O loop, PS connections, metrics).
// Thread-safe.
class ParameterServerStrategy {
 public:
  struct Options {
    absl::Duration rpc_timeout = absl::Seconds(60);
    // How long CreateVariable waits for a PS that is still starting.
    absl::Duration startup_timeout = absl::Seconds(120);
    ProcessOptions process = ProcessOptions::FromEnvAndFlags(0, nullptr);
  };

  explicit ParameterServerStrategy(const ClusterSpec& cluster,
                                   std::shared_ptr<const Partitioner> partitioner = nullptr);
  ParameterServerStrategy(const ClusterSpec& cluster, std::shared_ptr<const Partitioner> partitioner,
                          Options options);
  ~ParameterServerStrategy();

  // Creates `name` (idempotent on the PS: an existing variable of the same dtype and shape
  // keeps its value). AlreadyExists when the strategy created `name` before; concurrent
  // creates of one name place and create it once (the others wait, then get AlreadyExists). `optimizer` is the server-side optimizer gradients go through.
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

  const ClusterSpec& cluster() const { return cluster_; }
  const Options& options() const { return options_; }
  PsClient& ps() { return *ps_client_; }
  const VariableDirectory& directory() const { return directory_; }
  net::EventLoop& loop() { return *loop_; }
  metrics::ProcessMetrics& process_metrics() { return *metrics_; }
  metrics::RpcMetrics& rpc_metrics() { return *rpc_metrics_; }
  // The chief's status page (/status, /status.json beside /metrics): members, events, scalars.
  metrics::StatusBoard& status_board() { return *status_board_; }
  // Checkpoint save metrics, created with the strategy so that their series exist (at 0) in
  // every chief, whether or not it checkpoints.
  CheckpointMetrics& checkpoint_metrics() { return *checkpoint_metrics_; }

  // Reports a training scalar (loss, accuracy, ...) at `step`: exported as
  // asyncps_scalar{name} and plotted on the status page. InvalidArgument for a name that is
  // not a short identifier ([a-z0-9_]), a non-finite value, or too many names (see
  // metrics::StatusBoard). Thread-safe.
  absl::Status ReportScalar(const std::string& name, int64_t step, double value);
  // The connection to PS `i` (0 <= i < cluster().num_ps()), for services beyond PsClient's
  // (checkpoints).
  net::RpcClient& ps_rpc(int i);

 private:
  absl::StatusOr<VariablePlacement> Place(const std::string& name, const VariableInit& init)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClusterSpec cluster_;
  const std::shared_ptr<const Partitioner> partitioner_;
  const Options options_;
  // Declared before metrics_ so that it outlives the HTTP server whose handlers use it.
  std::unique_ptr<metrics::StatusBoard> status_board_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_;
  std::unique_ptr<metrics::RpcMetrics> rpc_metrics_;
  std::unique_ptr<CheckpointMetrics> checkpoint_metrics_;
  std::unique_ptr<net::EventLoop> loop_;
  std::vector<std::unique_ptr<net::RpcClient>> ps_clients_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> ps_client_;
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
