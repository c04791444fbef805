#ifndef ASYNCPS_DATA_DATASET_NODE_H_
#define ASYNCPS_DATA_DATASET_NODE_H_

// The internal side of Dataset: each source or transform is a DatasetNode that makes
// iterators. Only data/ and pipeline stages defined elsewhere include this.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "data/dataset.h"

namespace asyncps::data::internal {

// FILE auto-sharding: file readers read files index, index + count, ... of their list.
struct FileShard {
  int64_t index = 0;
  int64_t count = 1;
};

// What the file readers of a pipeline reported while its iterator was made under a FileShard
// (the fewest files any of them has; how many there are). Filled by MakeIteratorOf; threads
// that start later passes (Repeat inside Prefetch) may add to it.
struct FileShardReport {
  Mutex mu;
  int64_t file_sources ABSL_GUARDED_BY(mu) = 0;
  int64_t min_files ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
};

// Passed down the pipeline when iterators are made.
struct IteratorContext {
  // Which pass of the enclosing Repeat(s) this iterator serves, hashed; Shuffle mixes it into
  // its seed so each pass has its own order.
  uint64_t epoch_key = 0;
  // When set, every source reads only these records (Dataset::MakeSplitIterator).
  std::optional<SourceSplit> split;
  // Set true by a source that ends before split->begin: the split lies beyond the data.
  std::shared_ptr<std::atomic<bool>> beyond_source;
  // A split read once for dynamic sharding: Repeat is refused (the coordinator makes the
  // epochs) and Cache is bypassed (its one cached pass would be one split's records).
  bool single_pass = false;
  // When set, file readers read only their share of files (Dataset::MakeShardedIterator,
  // kFile) and say so in *file_report (if given). Not passed into Interleave's inner datasets.
  std::optional<FileShard> file_shard;
  std::shared_ptr<FileShardReport> file_report;
  // Made to be restored (Dataset::RestoreIterator): stages with threads start them at the
  // first Next(), so RestoreState finds their input untouched. Otherwise they start at once.
  bool defer_threads = false;
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  // Thread-safe: nodes are immutable and shared by every iterator.
  virtual absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator(
      const IteratorContext& ctx) const = 0;
  // True for nodes that read records (Range, files, ...): MakeIteratorOf restricts their
  // iterators to IteratorContext::split. Transforms leave it false.
  virtual bool is_source() const { return false; }
  // The number of files of a file reader (TFRecord, TextLines, IdxFile, LibSvm); -1 for
  // every other node. A reader with a list reads FilesOfShard(its list, ctx).
  virtual int64_t num_files() const { return -1; }
};

// The files of `paths` this iterator reads: all of them, or under ctx.file_shard its share.
std::vector<std::string> FilesOfShard(const std::vector<std::string>& paths,
                                      const IteratorContext& ctx);

// A well-mixed 64-bit hash of (a, b) (splitmix64 finaliser), for seeds.
uint64_t MixSeed(uint64_t a, uint64_t b);

// Makes the iterator of `dataset` with `ctx` (a default-constructed Dataset fails).
absl::StatusOr<std::unique_ptr<Iterator>> MakeIteratorOf(const Dataset& dataset,
                                                         const IteratorContext& ctx);

// `source`'s records restricted to `split` (skipping what lies outside it); sets
// *beyond_source (if given) when the source ends before split.begin.
std::unique_ptr<Iterator> MakeSourceSplitIterator(std::unique_ptr<Iterator> source,
                                                  const SourceSplit& split,
                                                  std::shared_ptr<std::atomic<bool>> beyond_source);

// An iterator that returns `status` on every call.
std::unique_ptr<Iterator> MakeErrorIterator(absl::Status status);

// Runs a Map function on one element: an exception becomes Internal, and so does the
// function's own OutOfRange (it would read as a silent end of data).
absl::StatusOr<Element> CallMapFn(const std::function<absl::StatusOr<Element>(Element)>& fn,
                                  Element element);

// The number of hardware threads (at least 1), for kAutotune.
int64_t HardwareThreads();

// Node factories, one per source or transform (defined in the file named for each).
std::shared_ptr<const DatasetNode> MakeRangeNode(int64_t start, int64_t stop, int64_t step);
std::shared_ptr<const DatasetNode> MakeTensorSlicesNode(std::vector<Tensor> components);
std::shared_ptr<const DatasetNode> MakeElementsNode(std::vector<Element> elements);
std::shared_ptr<const DatasetNode> MakeIdxFileNode(std::string path);
std::shared_ptr<const DatasetNode> MakeTFRecordNode(std::vector<std::string> paths);
std::shared_ptr<const DatasetNode> MakeTextLinesNode(std::vector<std::string> paths);
std::shared_ptr<const DatasetNode> MakeLibSvmNode(std::string path, int64_t num_features);
std::shared_ptr<const DatasetNode> MakeZipNode(std::vector<Dataset> inputs);
std::shared_ptr<const DatasetNode> MakeMapNode(Dataset input,
                                               std::function<absl::StatusOr<Element>(Element)> fn);
std::shared_ptr<const DatasetNode> MakeParallelMapNode(
    Dataset input, std::function<absl::StatusOr<Element>(Element)> fn, int64_t num_parallel_calls);
std::shared_ptr<const DatasetNode> MakeInterleaveNode(
    Dataset input, std::function<absl::StatusOr<Dataset>(Element)> fn, int64_t cycle_length,
    int64_t block_length, int64_t num_parallel_calls);
std::shared_ptr<const DatasetNode> MakeUnbatchNode(Dataset input);
std::shared_ptr<const DatasetNode> MakePaddedBatchNode(Dataset input, int64_t batch_size,
                                                       PaddedBatchOptions options);
std::shared_ptr<const DatasetNode> MakeFilterNode(
    Dataset input, std::function<absl::StatusOr<bool>(const Element&)> pred);
std::shared_ptr<const DatasetNode> MakeShuffleNode(Dataset input, int64_t buffer_size,
                                                   uint64_t seed);
std::shared_ptr<const DatasetNode> MakeRepeatNode(Dataset input, int64_t count);
std::shared_ptr<const DatasetNode> MakeBatchNode(Dataset input, int64_t batch_size,
                                                 bool drop_remainder);

// Stacks the rows of one batch into one element; Batch and PaddedBatch differ only in this.
using StackFn = std::function<absl::StatusOr<Element>(const std::vector<Element>& rows)>;
// A node reading up to `batch_size` elements of `input` per output element and stacking them
// with `stack` (never called with no rows). The last partial batch is dropped when
// `drop_remainder`. `name` prefixes its errors and tags its saved iterator states, so it must stay
// stable across versions.
std::shared_ptr<const DatasetNode> MakeBatchingNode(Dataset input, int64_t batch_size,
                                                    bool drop_remainder, std::string name,
                                                    StackFn stack);
std::shared_ptr<const DatasetNode> MakeShardNode(Dataset input, int64_t num_shards, int64_t index);
std::shared_ptr<const DatasetNode> MakeTakeNode(Dataset input, int64_t n);
std::shared_ptr<const DatasetNode> MakeSkipNode(Dataset input, int64_t n);
std::shared_ptr<const DatasetNode> MakeCacheNode(Dataset input);
std::shared_ptr<const DatasetNode> MakePrefetchNode(Dataset input, int64_t buffer_size);

}  // namespace asyncps::data::internal

#endif  // ASYNCPS_DATA_DATASET_NODE_H_
