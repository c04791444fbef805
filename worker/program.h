#ifndef ASYNCPS_WORKER_PROGRAM_H_
#define ASYNCPS_WORKER_PROGRAM_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "data/dataset.h"

namespace asyncps {

class StepContext;

// Something a worker keeps between closures (an iterator, a counter, a generator), created
// on every worker from a factory in the Program and rebuilt when a worker comes back after
// a failure. Closures reach it through a PerWorkerValues argument.
//
// A resource may be used by several closures at once when more than one closure is in flight
// per worker: make its methods thread-safe.
class Resource {
 public:
  virtual ~Resource() = default;
};

// What a resource factory is given.
class ResourceContext {
 public:
  ResourceContext(int worker_index, int num_workers, const std::map<std::string, std::string>& args)
      : worker_index_(worker_index), num_workers_(num_workers), args_(args) {}

  int worker_index() const { return worker_index_; }
  int num_workers() const { return num_workers_; }
  // Named string argument given at creation; NotFound when absent.
  absl::StatusOr<std::string> Arg(const std::string& name) const;
  // The argument parsed as an integer; InvalidArgument when it is not one.
  absl::StatusOr<int64_t> IntArg(const std::string& name) const;
  const std::map<std::string, std::string>& args() const { return args_; }

 private:
  int worker_index_;
  int num_workers_;
  const std::map<std::string, std::string>& args_;
};

using StepFunction = std::function<absl::StatusOr<Values>(StepContext&)>;
using ResourceFactory = std::function<absl::StatusOr<std::unique_ptr<Resource>>(const ResourceContext&)>;

// How a per-worker dataset's records are divided between workers
// (ClusterCoordinator::CreatePerWorkerDataset).
enum class ShardingPolicy {
  // Every worker reads every record, in the order its factory makes (seed a Shuffle by
  // worker index to make the orders differ). TensorFlow's default.
  kOff,
  // Worker i of n reads records i, i + n, i + 2n, ... of each source (a static shard, taken
  // at the sources, before any transform).
  kData,
  // The coordinator hands out the data: each closure is bound, when dispatched, to one batch
  // of one split of the sources and reads exactly that batch, also when it runs again on
  // another worker after a failure; one epoch per iterator. The factory must build the same
  // pipeline on every worker, so it runs as worker 0 of 1; the pipeline may not Repeat, and
  // each split's Shuffle is seeded by (epoch, split). See coordinator/per_worker_dataset.h.
  kDynamic,
  // tf.distribute's FILE auto-sharding: worker i of n reads files i, i + n, ... of each file
  // reader (data::AutoShardPolicy::kFile). Fewer files than workers is InvalidArgument when the
  // dataset is created.
  kFile,
  // tf.distribute's AUTO: kFile when every file reader has at least as many files as there are
  // workers, else kData.
  kAuto,
};

// What a dataset factory is given: worker index, number of workers, the creation arguments.
using DatasetContext = ResourceContext;
// Builds a worker's own input pipeline (typically sharded or seeded by the worker index). Runs
// on the worker when the coordinator creates the dataset or an iterator over it, and again
// when the worker comes back after a failure. An error reaches the caller of
// ClusterCoordinator::CreatePerWorkerDataset.
using DatasetFactory = std::function<absl::StatusOr<data::Dataset>(const DatasetContext&)>;

// The user's program: named step functions and named resource factories. Built the same way
// in every process of the binary; the coordinator sends names and arguments and each worker
// resolves them here. No global registry: main builds one Program and passes it on.
//
// Build it before serving; afterwards it is read-only and safe to share between threads.
class Program {
 public:
  // Registering the same name twice replaces the earlier entry.
  Program& AddFunction(const std::string& name, StepFunction fn);
  Program& AddResource(const std::string& name, ResourceFactory factory);
  // A per-worker dataset. Implemented as two per-worker resources (see
  // worker/dataset_resources.h): the dataset itself, and iterators over it.
  Program& AddDataset(const std::string& name, DatasetFactory factory);

  // Null when unknown.
  const StepFunction* FindFunction(const std::string& name) const;
  const ResourceFactory* FindResource(const std::string& name) const;
  bool HasDataset(const std::string& name) const { return datasets_.contains(name); }

 private:
  absl::flat_hash_map<std::string, StepFunction> functions_;
  absl::flat_hash_map<std::string, ResourceFactory> resources_;
  absl::flat_hash_set<std::string> datasets_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_PROGRAM_H_
