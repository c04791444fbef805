#include "coordinator/per_worker_dataset.h"

#include "absl/strings/str_cat.h"
#include "coordinator/cluster_coordinator.h"
#include "core/status_macros.h"
#include "worker/dataset_resources.h"

namespace asyncps {

absl::StatusOr<PerWorkerValues> PerWorkerDataset::MakeIterator() const {
  return coordinator_->CreatePerWorkerResource(IteratorResourceName(name_), args_);
}

absl::StatusOr<PerWorkerDataset> ClusterCoordinator::CreatePerWorkerDataset(const std::string& name,
                                                                            std::map<std::string, std::string> args) {
  if (!program_.HasDataset(name)) return absl::NotFoundError(absl::StrCat("unknown dataset '", name, "'"));
  // The dataset itself is a per-worker resource too: building it now reports a factory error
  // to the caller, and a worker that restarts rebuilds it (and says so) before any closure.
  RETURN_IF_ERROR(CreatePerWorkerResource(DatasetResourceName(name), args).status());
  return PerWorkerDataset(this, name, std::move(args));
}

}  // namespace asyncps
