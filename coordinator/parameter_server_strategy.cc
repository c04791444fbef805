#include "coordinator/parameter_server_strategy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "partitioners/div_partition.h"
#include "worker/embedding_client.h"
#include "worker/ps_client.h"

namespace asyncps {

ParameterServerStrategy::ParameterServerStrategy(ChiefProcess& process,
                                                 std::shared_ptr<const Partitioner> partitioner)
    : process_(process), partitioner_(std::move(partitioner)) {}

absl::StatusOr<VariablePlacement> ParameterServerStrategy::Place(const std::string& name,
                                                                 const VariableInit& init) {
  VariablePlacement p;
  p.name = name;
  p.dtype = init.dtype;
  p.shape = init.shape;
  int shards = 1;
  if (partitioner_ != nullptr && !init.shape.empty()) {
    ASSIGN_OR_RETURN(std::vector<int> partitions, partitioner_->Partition(init.shape, init.dtype));
    RETURN_IF_ERROR(ValidatePartitions(partitions, init.shape));
    shards = partitions[0];
  }
  const int num_ps = process_.cluster().num_ps();
  if (shards <= 1) {
    p.shards.push_back({name, next_ps_++ % num_ps, 0, init.shape.empty() ? 1 : init.shape[0]});
    return p;
  }
  const std::vector<RowRange> ranges = DivPartition(init.shape[0], shards);
  for (size_t i = 0; i < ranges.size(); ++i) {
    p.shards.push_back({absl::StrCat(name, "/part_", i), next_ps_++ % num_ps, ranges[i].begin, ranges[i].end});
  }
  return p;
}

absl::StatusOr<ShardedVariable> ParameterServerStrategy::CreateVariable(
    const std::string& name, const VariableInit& init, std::optional<OptimizerConfig> optimizer) {
  if (name.empty()) return absl::InvalidArgumentError("variable name is empty");
  RETURN_IF_ERROR(ValidateShape(init.shape, init.dtype));
  if (init.spec.kind == "tensor" && (init.spec.tensor.shape() != init.shape || init.spec.tensor.dtype() != init.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("initial value of '", name, "' does not match its shape"));
  }
  VariablePlacement placement;
  {
    // Check and claim the name atomically: without the claim, two concurrent creates of one
    // name could both pass the check and both place and create it (on different PS). A
    // create of a name being created by another thread waits for that one's outcome.
    MutexLock lock(&mu_);
    struct Claim {
      const absl::flat_hash_set<std::string>* creating;
      const std::string* name;
    } claim{&creating_, &name};
    mu_.Await(absl::Condition(+[](Claim* c) { return !c->creating->contains(*c->name); }, &claim));
    if (process_.directory().Find(name).ok()) {
      return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' exists"));
    }
    ASSIGN_OR_RETURN(placement, Place(name, init));
    creating_.insert(name);
  }
  absl::Status created = process_.ps().CreateVariable(placement, init.spec, optimizer ? &*optimizer : nullptr,
                                                      /*wait_for_ready=*/true);
  {
    MutexLock lock(&mu_);
    if (created.ok()) {
      process_.directory().Add(placement);
      recipes_[name] = Recipe{init.spec, optimizer};
    }
    creating_.erase(name);
  }
  RETURN_IF_ERROR(created);
  ASSIGN_OR_RETURN(auto stored, process_.directory().Find(name));
  return ShardedVariable(std::move(stored), &process_.ps());
}

absl::Status ParameterServerStrategy::RecreateVariables() {
  std::vector<std::pair<std::shared_ptr<const VariablePlacement>, Recipe>> todo;
  {
    MutexLock lock(&mu_);
    for (const auto& placement : process_.directory().All()) {
      auto it = recipes_.find(placement->name);
      if (it != recipes_.end()) todo.emplace_back(placement, it->second);
    }
  }
  for (const auto& [placement, recipe] : todo) {
    RETURN_IF_ERROR(process_.ps().CreateVariable(*placement, recipe.init,
                                                 recipe.optimizer ? &*recipe.optimizer : nullptr,
                                                 /*wait_for_ready=*/false));
  }
  std::vector<ps::EmbeddingTableConfig> tables;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, config] : tables_) tables.push_back(config);
  }
  EmbeddingClient embeddings(process_.ps().connections(), process_.ps().timeout(), process_.shard_map());
  for (const ps::EmbeddingTableConfig& config : tables) {
    RETURN_IF_ERROR(embeddings.CreateTable(config, /*wait_for_ready=*/false));
  }
  return absl::OkStatus();
}

absl::Status ParameterServerStrategy::CreateEmbeddingTable(const std::string& name, int64_t dim,
                                                           const EmbeddingInitializer& initializer,
                                                           const OptimizerConfig& optimizer,
                                                           const EmbeddingTableOptions& options) {
  ps::EmbeddingTableConfig config;
  config.name = name;
  config.dim = dim;
  config.initializer = initializer;
  config.optimizer = optimizer;
  config.admission = options.admission;
  config.ttl_steps = options.ttl_steps;
  config.memory_cap_bytes = options.memory_cap_bytes;
  EmbeddingClient embeddings(process_.ps().connections(), process_.ps().timeout(), process_.shard_map());
  RETURN_IF_ERROR(embeddings.CreateTable(config, /*wait_for_ready=*/true));
  MutexLock lock(&mu_);
  tables_.insert_or_assign(name, std::move(config));
  return absl::OkStatus();
}

std::vector<std::string> ParameterServerStrategy::EmbeddingTableNames() const {
  std::vector<std::string> names;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, config] : tables_) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Tensor> ParameterServerStrategy::LookupEmbeddings(const std::string& name, const Tensor& keys) const {
  return EmbeddingClient(process_.ps().connections(), process_.ps().timeout(), process_.shard_map()).Lookup(name, keys, /*train=*/false);
}

absl::StatusOr<ShardedVariable> ParameterServerStrategy::GetVariable(const std::string& name) const {
  ASSIGN_OR_RETURN(auto placement, process_.directory().Find(name));
  return ShardedVariable(std::move(placement), &process_.ps());
}

}  // namespace asyncps
