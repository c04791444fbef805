#ifndef ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_
#define ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/closure_arg.h"

namespace asyncps {

class ClusterCoordinator;

// A dataset built on every worker from the factory named in the Program
// (ClusterCoordinator::CreatePerWorkerDataset). Like TensorFlow's per-worker dataset, it is
// consumed through iterators: MakeIterator creates one on every worker, and each call gives
// fresh iterators that start from the beginning (TF's iter()).
//
// A worker that comes back after a failure gets the dataset and every iterator rebuilt before
// it runs a closure; its iterators start over.
//
// Cheap to copy. Valid while its coordinator lives. Thread-safe.
class PerWorkerDataset {
 public:
  PerWorkerDataset(ClusterCoordinator* coordinator, std::string name, std::map<std::string, std::string> args)
      : coordinator_(coordinator), name_(std::move(name)), args_(std::move(args)) {}

  const std::string& name() const { return name_; }

  // New iterators, one per worker, as a Schedule argument: a step function takes the next
  // element with StepContext::Next(i). Errors: the factory's or iterator's own error on some
  // worker (the caller's mistake, not retried).
  absl::StatusOr<PerWorkerValues> MakeIterator() const;

 private:
  ClusterCoordinator* coordinator_;
  std::string name_;
  std::map<std::string, std::string> args_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_
