#include "worker/dataset_resources.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps {

absl::StatusOr<data::Element> IteratorResource::Next() {
  MutexLock lock(&mu_);
  return iterator_->Next();
}

std::string DatasetResourceName(const std::string& name) { return absl::StrCat("dataset:", name); }
std::string IteratorResourceName(const std::string& name) { return absl::StrCat("iterator:", name); }

namespace {

absl::StatusOr<data::Dataset> Build(const std::string& name, const DatasetFactory& factory,
                                    const ResourceContext& ctx) {
  absl::StatusOr<data::Dataset> dataset = factory(ctx);
  if (!dataset.ok()) {
    // The user's factory failed: say which dataset, keep the code.
    return absl::Status(dataset.status().code(), absl::StrCat("dataset '", name, "' on worker ", ctx.worker_index(),
                                                              ": ", dataset.status().message()));
  }
  return dataset;
}

}  // namespace

ResourceFactory MakeDatasetResourceFactory(std::string name, DatasetFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](
             const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    ASSIGN_OR_RETURN(data::Dataset dataset, Build(name, factory, ctx));
    // Files are opened (and arguments checked) when an iterator starts: start one now so a
    // missing file is the caller's error at creation, not the first closure's.
    absl::StatusOr<std::unique_ptr<data::Iterator>> probe = dataset.MakeIterator();
    if (!probe.ok()) {
      return absl::Status(probe.status().code(), absl::StrCat("dataset '", name, "' on worker ", ctx.worker_index(),
                                                              ": ", probe.status().message()));
    }
    spdlog::info("per-worker dataset '{}' built on worker {} of {}", name, ctx.worker_index(), ctx.num_workers());
    return std::make_unique<DatasetResource>(std::move(dataset));
  };
}

ResourceFactory MakeIteratorResourceFactory(std::string name, DatasetFactory factory) {
  return [name = std::move(name), factory = std::move(factory)](
             const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    // Datasets are cheap descriptions: building it again here keeps each iterator independent
    // of the DatasetResource's lifetime.
    ASSIGN_OR_RETURN(data::Dataset dataset, Build(name, factory, ctx));
    absl::StatusOr<std::unique_ptr<data::Iterator>> iterator = dataset.MakeIterator();
    if (!iterator.ok()) {
      return absl::Status(iterator.status().code(), absl::StrCat("iterator over dataset '", name, "' on worker ",
                                                                 ctx.worker_index(), ": ", iterator.status().message()));
    }
    spdlog::info("per-worker iterator over dataset '{}' built on worker {} (starts at the beginning)", name,
                 ctx.worker_index());
    return std::make_unique<IteratorResource>(std::move(*iterator));
  };
}

}  // namespace asyncps
