#include "coordinator/per_worker_dataset.h"

#include "absl/strings/str_cat.h"
#include "coordinator/cluster_coordinator.h"
#include "core/status_macros.h"
#include "worker/dataset_resources.h"

namespace asyncps {

absl::StatusOr<PerWorkerValues> PerWorkerDataset::MakeIterator() const {
  ASSIGN_OR_RETURN(PerWorkerValues iterator, coordinator_->CreatePerWorkerResource(IteratorResourceName(name_), args_));
  if (policy_ == ShardingPolicy::kDynamic) coordinator_->StartEpoch(name_, iterator.id());
  return iterator;
}

absl::StatusOr<PerWorkerDataset> ClusterCoordinator::CreatePerWorkerDataset(const std::string& name,
                                                                            std::map<std::string, std::string> args) {
  return CreatePerWorkerDataset(name, std::move(args), ShardingPolicy::kOff);
}

absl::StatusOr<PerWorkerDataset> ClusterCoordinator::CreatePerWorkerDataset(const std::string& name,
                                                                            std::map<std::string, std::string> args,
                                                                            ShardingPolicy policy,
                                                                            int64_t records_per_split) {
  if (!program_.HasDataset(name)) return absl::NotFoundError(absl::StrCat("unknown dataset '", name, "'"));
  if (records_per_split < 1) {
    return absl::InvalidArgumentError(absl::StrCat("records_per_split must be >= 1, got ", records_per_split));
  }
  if (policy != ShardingPolicy::kOff) args[kShardingArg] = ShardingArgValue(policy);
  // The dataset itself is a per-worker resource too: building it now reports a factory error
  // to the caller, and a worker that restarts rebuilds it (and says so) before any closure.
  RETURN_IF_ERROR(CreatePerWorkerResource(DatasetResourceName(name), args).status());
  if (policy == ShardingPolicy::kDynamic) RegisterDynamicDataset(name, records_per_split);
  return PerWorkerDataset(this, name, std::move(args), policy);
}

}  // namespace asyncps
