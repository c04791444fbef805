#ifndef ASYNCPS_WORKER_DATASET_RESOURCES_H_
#define ASYNCPS_WORKER_DATASET_RESOURCES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "data/dataset.h"
#include "worker/program.h"

namespace asyncps {

// The per-worker resources behind Program::AddDataset: the dataset a worker built from its
// factory, and iterators over it. Both are rebuilt from the factory when a worker comes back
// after a failure, so an iterator then starts over (TensorFlow's semantics).

// A dataset built on this worker. Holding it checks, at creation, that the factory works here.
class DatasetResource : public Resource {
 public:
  explicit DatasetResource(data::Dataset dataset) : dataset_(std::move(dataset)) {}
  const data::Dataset& dataset() const { return dataset_; }

 private:
  const data::Dataset dataset_;
};

// One iterator over a per-worker dataset. Thread-safe: closures running at once on one worker
// take elements one after another.
class IteratorResource : public Resource {
 public:
  explicit IteratorResource(std::unique_ptr<data::Iterator> iterator) : iterator_(std::move(iterator)) {}

  // The next element; absl::OutOfRangeError at the end of the data (data::IsEndOfData).
  absl::StatusOr<data::Element> Next();

 private:
  Mutex mu_;
  std::unique_ptr<data::Iterator> iterator_ ABSL_GUARDED_BY(mu_);
};

// Names of the resource factories AddDataset registers for dataset `name`.
std::string DatasetResourceName(const std::string& name);
std::string IteratorResourceName(const std::string& name);

// The two factories for `factory`: one builds the dataset, the other builds it and an iterator.
ResourceFactory MakeDatasetResourceFactory(std::string name, DatasetFactory factory);
ResourceFactory MakeIteratorResourceFactory(std::string name, DatasetFactory factory);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_DATASET_RESOURCES_H_
