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
#include "ps/embedding/embedding_config.h"
#include "worker/variable_directory.h"

namespace asyncps {

// How an embedding table's key gets its first row (a pure function of key and seed, the same on
// every PS and every time the row is created): zeros, constant, uniform (default [-0.05, 0.05]),
// normal or truncated normal.
using EmbeddingInitializer = ps::EmbeddingInitializer;
// When a key gets a row: after min_count training lookups and/or with a probability.
using EmbeddingAdmission = ps::EmbeddingAdmission;

// An embedding table's options beyond its dim, initializer and optimizer.
struct EmbeddingTableOptions {
  EmbeddingAdmission admission;  // default: every key gets a row at its first push
  int64_t ttl_steps = 0;          // rows not updated in this many of the table's pushes are evicted; 0: never
  uint64_t memory_cap_bytes = 0;  // per PS: least recently updated rows are evicted above it; 0: no cap
};

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

  // Creates the hash-keyed embedding table `name` on every PS: rows of `dim` f32, keyed by any
  // int64, created on a key's first training push (after admission), starting from
  // `initializer`'s value for the key, updated by `optimizer` with per-row slots. Keys are spread
  // over the PS by ps::PsForKey. Idempotent for the same config; AlreadyExists (from a PS) for
  // the same name with another config; InvalidArgument for a bad dim (outside 1..65536),
  // initializer, optimizer or options. Waits (up to the process's rpc_timeout) for PS that are
  // still starting. Workers use it through StepContext::LookupEmbeddings/PushEmbeddingGradients
  // (or torch_bridge::EmbeddingBag); a PS that restarted empty gets it again from
  // RecreateVariables.
  absl::Status CreateEmbeddingTable(const std::string& name, int64_t dim, const EmbeddingInitializer& initializer,
                                    const OptimizerConfig& optimizer, const EmbeddingTableOptions& options = {});

  // The names of every embedding table this strategy created (each on every PS), sorted.
  // Automatic PS recovery checks that every PS still holds them.
  std::vector<std::string> EmbeddingTableNames() const;

  // Rows of `keys` (i64 [n], duplicates allowed) of table `name` as f32 [n, dim], for
  // evaluation on the chief: nothing is counted or inserted, and a key without a row reads its
  // initial value, so evaluation sees exactly the model training would use for that key.
  absl::StatusOr<Tensor> LookupEmbeddings(const std::string& name, const Tensor& keys) const;

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
  mutable Mutex mu_;  // serialises placement decisions and claims names
  int next_ps_ ABSL_GUARDED_BY(mu_) = 0;
  // Names whose creation is in progress (claimed under mu_, created on the PS without it).
  absl::flat_hash_set<std::string> creating_ ABSL_GUARDED_BY(mu_);
  // How each created variable was made, for RecreateVariables.
  struct Recipe {
    ps::InitializerSpec init;
    std::optional<OptimizerConfig> optimizer;
  };
  absl::flat_hash_map<std::string, Recipe> recipes_ ABSL_GUARDED_BY(mu_);
  // Every embedding table this strategy created, for RecreateVariables.
  absl::flat_hash_map<std::string, ps::EmbeddingTableConfig> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PARAMETER_SERVER_STRATEGY_H_
