#ifndef ASYNCPS_WORKER_DATASET_RESOURCES_H_
#define ASYNCPS_WORKER_DATASET_RESOURCES_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "data/dataset.h"
#include "worker/program.h"
#include "worker/split_binding.h"

namespace asyncps {

// The per-worker resources behind Program::AddDataset: the dataset a worker built from its
// factory, and iterators over it. Both are rebuilt from the factory when a worker comes back
// after a failure, so an iterator then starts over (TensorFlow's semantics) — except under
// ShardingPolicy::kDynamic, where what a closure reads is bound by the coordinator.

// The sharding policy travels with the resource's creation arguments under this key (the
// factory does not see it).
inline constexpr char kShardingArg[] = "asyncps.sharding";
std::string ShardingArgValue(ShardingPolicy policy);

// What StepContext::Next reads from.
class ElementSource : public Resource {
 public:
  // The next element; absl::OutOfRangeError at the end of the data (data::IsEndOfData).
  virtual absl::StatusOr<data::Element> Next() = 0;
};

// A dataset built on this worker. Holding it checks, at creation, that the factory works here.
class DatasetResource : public Resource {
 public:
  explicit DatasetResource(data::Dataset dataset) : dataset_(std::move(dataset)) {}
  const data::Dataset& dataset() const { return dataset_; }

 private:
  const data::Dataset dataset_;
};

// One iterator over a per-worker dataset (kOff, kData, kFile, kAuto). Thread-safe: closures running at once
// on one worker take elements one after another.
class IteratorResource : public ElementSource {
 public:
  explicit IteratorResource(std::unique_ptr<data::Iterator> iterator) : iterator_(std::move(iterator)) {}

  absl::StatusOr<data::Element> Next() override;

 private:
  Mutex mu_;
  std::unique_ptr<data::Iterator> iterator_ ABSL_GUARDED_BY(mu_);
};

// A dynamically sharded iterator (kDynamic): reads the batch a closure is bound to. Keeps the
// pipelines of the few splits it read last, positioned after the batch it returned, so the
// next batch of a split costs one element, not a rebuild; a later batch is reached by skipping
// forward, and the batches skipped are kept (a few) for the closures bound to them, which run
// at once on this worker and may ask out of order; any other batch is reached by building the
// split's pipeline and skipping to it (so a re-run elsewhere reads the same).
// Thread-safe.
class DynamicIteratorResource : public Resource {
 public:
  explicit DynamicIteratorResource(data::Dataset dataset) : dataset_(std::move(dataset)) {}

  // Element binding.batch of the split's pipeline, and what was found (kMore, kLast; with
  // OutOfRange: kPastEnd or kBeyondSource). Another error is the pipeline's own.
  absl::StatusOr<data::Element> Read(const SplitBinding& binding, SplitOutcome* outcome);

  // Pipelines built so far (for tests of the cache).
  int64_t pipelines_built() const;

 private:
  struct Position {
    int64_t epoch = 0;
    int64_t split = 0;
    int64_t next_batch = 0;  // the batch `peeked` (or the iterator's next element) is
    std::unique_ptr<data::Iterator> iterator;
    std::shared_ptr<std::atomic<bool>> beyond_source;
    std::optional<absl::StatusOr<data::Element>> peeked;
    // Batches skipped over to reach a later one, kept for their closures (closures running at
    // once on this worker ask in any order); at most kMaxSkipped. The position stays while it
    // holds some after its pipeline ended (`iterator` null).
    std::map<int64_t, data::Element> skipped;
    int64_t end_batch = -1;  // the split's number of batches, once its end was seen
    uint64_t last_used = 0;
  };
  static constexpr size_t kMaxPositions = 4;
  static constexpr size_t kMaxSkipped = 8;
  // Splits whose end this worker saw, the last kMaxEnded: a batch at or past the end is
  // PastEnd at once, not a rebuild of the split's pipeline replayed to its end.
  struct EndedSplit {
    int64_t epoch = 0;
    int64_t split = 0;
    int64_t end_batch = 0;
    bool beyond_source = false;
  };
  static constexpr size_t kMaxEnded = 16;
  std::deque<EndedSplit> ended_ ABSL_GUARDED_BY(mu_);

  const data::Dataset dataset_;
  mutable Mutex mu_;
  std::vector<Position> positions_ ABSL_GUARDED_BY(mu_);
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t built_ ABSL_GUARDED_BY(mu_) = 0;
};

// A DynamicIteratorResource bound to one closure's batch: the closure's first Next reads it,
// a second is FailedPrecondition (a dynamically sharded iterator gives one batch per closure).
// Used by one closure's thread.
class BoundSplitIterator : public ElementSource {
 public:
  BoundSplitIterator(std::shared_ptr<DynamicIteratorResource> iterator, SplitBinding binding)
      : iterator_(std::move(iterator)), binding_(binding) {}

  absl::StatusOr<data::Element> Next() override;
  SplitOutcome outcome() const { return outcome_; }

 private:
  const std::shared_ptr<DynamicIteratorResource> iterator_;
  const SplitBinding binding_;
  bool read_ = false;
  SplitOutcome outcome_ = SplitOutcome::kUnread;
};

// Names of the resource factories AddDataset registers for dataset `name`.
std::string DatasetResourceName(const std::string& name);
std::string IteratorResourceName(const std::string& name);

// The two factories for `factory`: one builds the dataset, the other builds it and an iterator
// (an IteratorResource, or a DynamicIteratorResource under kDynamic).
ResourceFactory MakeDatasetResourceFactory(std::string name, DatasetFactory factory);
ResourceFactory MakeIteratorResourceFactory(std::string name, DatasetFactory factory);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_DATASET_RESOURCES_H_
