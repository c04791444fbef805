#include "data/dataset.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"
#include "data/iterator_state.h"

namespace asyncps::data {

using internal::DatasetNode;
using internal::IteratorContext;

bool IsEndOfData(const absl::Status& s) { return absl::IsOutOfRange(s); }

absl::StatusOr<std::string> Iterator::SaveState() const {
  return absl::UnimplementedError("this iterator cannot save its position");
}
absl::Status Iterator::RestoreState(absl::string_view) {
  return absl::UnimplementedError("this iterator cannot restore a position");
}

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::RestoreIterator(absl::string_view state) const {
  IteratorContext ctx;
  ctx.defer_threads = true;
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> it, internal::MakeIteratorOf(*this, ctx));
  RETURN_IF_ERROR(it->RestoreState(state));
  return it;
}

namespace internal {

uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace {

class ErrorIterator : public Iterator {
 public:
  explicit ErrorIterator(absl::Status status) : status_(std::move(status)) {}
  absl::StatusOr<Element> Next() override { return status_; }
  absl::StatusOr<std::string> SaveState() const override {
    return StateWriter("Error").Finish();
  }
  absl::Status RestoreState(absl::string_view state) override {
    return StateReader::Open(state, "Error").status();
  }

 private:
  const absl::Status status_;
};

}  // namespace

std::unique_ptr<Iterator> MakeErrorIterator(absl::Status status) {
  return std::make_unique<ErrorIterator>(std::move(status));
}

absl::StatusOr<std::unique_ptr<Iterator>> MakeIteratorOf(const Dataset& dataset,
                                                         const IteratorContext& ctx) {
  if (dataset.node() == nullptr) {
    return absl::FailedPreconditionError("MakeIterator on a default-constructed Dataset");
  }
  const int64_t files = dataset.node()->num_files();
  if (ctx.file_shard.has_value() && files >= 0) {
    if (ctx.file_report != nullptr) {
      MutexLock lock(&ctx.file_report->mu);
      ++ctx.file_report->file_sources;
      ctx.file_report->min_files = std::min(ctx.file_report->min_files, files);
    }
    if (files < ctx.file_shard->count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FILE sharding: a source has ", files, " file(s), fewer files than workers (",
          ctx.file_shard->count, "); use the DATA or AUTO policy, or OFF"));
    }
  }
  if (!ctx.split.has_value() || !dataset.node()->is_source()) return dataset.node()->MakeIterator(ctx);
  ASSIGN_OR_RETURN(std::unique_ptr<Iterator> source, dataset.node()->MakeIterator(ctx));
  return MakeSourceSplitIterator(std::move(source), *ctx.split, ctx.beyond_source);
}

std::vector<std::string> FilesOfShard(const std::vector<std::string>& paths,
                                      const IteratorContext& ctx) {
  if (!ctx.file_shard.has_value()) return paths;
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(ctx.file_shard->index); i < paths.size();
       i += static_cast<size_t>(ctx.file_shard->count)) {
    mine.push_back(paths[i]);
  }
  return mine;
}

}  // namespace internal

Dataset::Dataset() = default;
Dataset::Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {}

Dataset Dataset::Range(int64_t start, int64_t stop, int64_t step) {
  return Dataset(internal::MakeRangeNode(start, stop, step));
}
Dataset Dataset::FromTensorSlices(std::vector<Tensor> components) {
  return Dataset(internal::MakeTensorSlicesNode(std::move(components)));
}
Dataset Dataset::FromElements(std::vector<Element> elements) {
  return Dataset(internal::MakeElementsNode(std::move(elements)));
}
Dataset Dataset::IdxFile(std::string path) {
  return Dataset(internal::MakeIdxFileNode(std::move(path)));
}
Dataset Dataset::TFRecord(std::vector<std::string> paths) {
  return Dataset(internal::MakeTFRecordNode(std::move(paths)));
}
Dataset Dataset::TextLines(std::vector<std::string> paths) {
  return Dataset(internal::MakeTextLinesNode(std::move(paths)));
}
Dataset Dataset::LibSvm(std::string path, int64_t num_features) {
  return Dataset(internal::MakeLibSvmNode(std::move(path), num_features));
}
Dataset Dataset::Zip(std::vector<Dataset> datasets) {
  return Dataset(internal::MakeZipNode(std::move(datasets)));
}
Dataset Dataset::Map(std::function<absl::StatusOr<Element>(Element)> fn) const {
  return Dataset(internal::MakeMapNode(*this, std::move(fn)));
}
Dataset Dataset::Map(std::function<absl::StatusOr<Element>(Element)> fn,
                     int64_t num_parallel_calls) const {
  return Dataset(internal::MakeParallelMapNode(*this, std::move(fn), num_parallel_calls));
}
Dataset Dataset::FlatMap(std::function<absl::StatusOr<Dataset>(Element)> fn) const {
  return Dataset(internal::MakeInterleaveNode(*this, std::move(fn), 1, 1, 0));
}
Dataset Dataset::Interleave(std::function<absl::StatusOr<Dataset>(Element)> fn,
                            int64_t cycle_length, int64_t block_length,
                            int64_t num_parallel_calls) const {
  return Dataset(internal::MakeInterleaveNode(*this, std::move(fn), cycle_length, block_length,
                                              num_parallel_calls));
}
Dataset Dataset::Unbatch() const { return Dataset(internal::MakeUnbatchNode(*this)); }
Dataset Dataset::PaddedBatch(int64_t batch_size, PaddedBatchOptions options) const {
  return Dataset(internal::MakePaddedBatchNode(*this, batch_size, std::move(options)));
}
Dataset Dataset::Filter(std::function<absl::StatusOr<bool>(const Element&)> pred) const {
  return Dataset(internal::MakeFilterNode(*this, std::move(pred)));
}
Dataset Dataset::Shuffle(int64_t buffer_size, uint64_t seed) const {
  return Dataset(internal::MakeShuffleNode(*this, buffer_size, seed));
}
Dataset Dataset::Repeat(int64_t count) const {
  return Dataset(internal::MakeRepeatNode(*this, count));
}
Dataset Dataset::Batch(int64_t batch_size, bool drop_remainder) const {
  return Dataset(internal::MakeBatchNode(*this, batch_size, drop_remainder));
}
Dataset Dataset::Shard(int64_t num_shards, int64_t index) const {
  return Dataset(internal::MakeShardNode(*this, num_shards, index));
}
Dataset Dataset::Take(int64_t n) const { return Dataset(internal::MakeTakeNode(*this, n)); }
Dataset Dataset::Skip(int64_t n) const { return Dataset(internal::MakeSkipNode(*this, n)); }
Dataset Dataset::Cache() const { return Dataset(internal::MakeCacheNode(*this)); }
Dataset Dataset::Prefetch(int64_t buffer_size) const {
  return Dataset(internal::MakePrefetchNode(*this, buffer_size));
}

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::MakeIterator() const {
  return internal::MakeIteratorOf(*this, IteratorContext{});
}

namespace {

absl::Status CheckSplit(const SourceSplit& split) {
  if (split.begin < 0 || split.end < split.begin || split.stride < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad source split: begin ", split.begin, ", end ", split.end,
                                                   ", stride ", split.stride));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::MakeSplitIterator(const SourceSplit& split) const {
  RETURN_IF_ERROR(CheckSplit(split));
  IteratorContext ctx;
  ctx.split = split;
  return internal::MakeIteratorOf(*this, ctx);
}

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::MakeSinglePassSplitIterator(
    const SourceSplit& split, uint64_t seed, std::shared_ptr<std::atomic<bool>> beyond_source) const {
  RETURN_IF_ERROR(CheckSplit(split));
  IteratorContext ctx;
  ctx.epoch_key = seed;
  ctx.split = split;
  ctx.beyond_source = std::move(beyond_source);
  ctx.single_pass = true;
  return internal::MakeIteratorOf(*this, ctx);
}

absl::StatusOr<std::unique_ptr<Iterator>> Dataset::MakeShardedIterator(
    AutoShardPolicy policy, int64_t worker_index, int64_t num_workers,
    AutoShardPolicy* applied) const {
  if (num_workers < 1 || worker_index < 0 || worker_index >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("auto-sharding: need num_workers >= 1 and 0 <= worker_index < num_workers, got ",
                     worker_index, " of ", num_workers));
  }
  if (applied != nullptr) *applied = policy;
  switch (policy) {
    case AutoShardPolicy::kOff:
      return MakeIterator();
    case AutoShardPolicy::kData:
      return MakeSplitIterator(
          {worker_index, std::numeric_limits<int64_t>::max(), num_workers});
    case AutoShardPolicy::kFile:
    case AutoShardPolicy::kAuto:
      break;
  }
  IteratorContext ctx;
  ctx.file_shard = internal::FileShard{worker_index, num_workers};
  ctx.file_report = std::make_shared<internal::FileShardReport>();
  absl::StatusOr<std::unique_ptr<Iterator>> it = internal::MakeIteratorOf(*this, ctx);
  int64_t sources, min_files;
  {
    MutexLock lock(&ctx.file_report->mu);
    sources = ctx.file_report->file_sources;
    min_files = ctx.file_report->min_files;
  }
  const bool by_file = sources > 0 && min_files >= num_workers;
  if (policy == AutoShardPolicy::kAuto && !by_file) {
    // AUTO: too few files (or none) to give every worker its own; shard the records instead.
    if (it.ok()) it->reset();  // ends the probe before the real pass
    if (applied != nullptr) *applied = AutoShardPolicy::kData;
    return MakeShardedIterator(AutoShardPolicy::kData, worker_index, num_workers);
  }
  if (applied != nullptr) *applied = AutoShardPolicy::kFile;
  if (!it.ok()) return it.status();
  if (sources == 0) {
    return absl::InvalidArgumentError(
        "FILE sharding: the pipeline reads no files (TFRecord, TextLines, IdxFile, LibSvm "
        "outside an Interleave/FlatMap); use the DATA or AUTO policy, or OFF");
  }
  return it;
}

}  // namespace asyncps::data
