#ifndef ASYNCPS_DATA_DATASET_H_
#define ASYNCPS_DATA_DATASET_H_

// Input pipelines in the manner of tf.data: a Dataset is an immutable description (sources
// and transforms); MakeIterator() starts one pass over it.
//
//   ASSIGN_OR_RETURN(auto it,
//       Dataset::Zip({Dataset::IdxFile(images), Dataset::IdxFile(labels)})
//           .Shuffle(10'000, /*seed=*/worker_index).Repeat().Batch(128).Prefetch(2)
//           .MakeIterator());
//   ASSIGN_OR_RETURN(Element batch, it->Next());   // {u8 [128, 28, 28], u8 [128]}
//
// Invalid arguments (a zero batch size, a shard index out of range, ...) are reported by
// MakeIterator() as InvalidArgument, so building a pipeline never fails by itself.

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace asyncps::data {

// One element of a dataset: a tuple of tensors. Elements produced by sources may share
// storage with the source's tensors (FromTensorSlices gives views): treat them as read-only
// and Clone() before writing in place.
using Element = std::vector<Tensor>;

// For a parallelism argument (Map's num_parallel_calls, Interleave's cycle_length and
// num_parallel_calls): let the iterator choose (see each transform).
inline constexpr int64_t kAutotune = -1;

// PaddedBatch's options. Component c of every element is padded, at the end of each dimension,
// up to padded_shapes[c] (a dimension of -1: the largest in the batch); an empty padded_shapes
// pads every component to the largest in the batch. padding_values[c] (converted to the
// component's dtype; 0 when absent) fills the padding.
struct PaddedBatchOptions {
  std::vector<std::vector<int64_t>> padded_shapes;
  std::vector<double> padding_values;
  bool drop_remainder = false;
};

// True for the status that marks the end of the data (absl::OutOfRangeError). Every other
// non-OK status is an error.
bool IsEndOfData(const absl::Status& s);

// One pass over a dataset. Used by one thread at a time (it may move between threads).
class Iterator {
 public:
  virtual ~Iterator() = default;
  // The next element; OutOfRange at the end (and on every later call); other codes are errors.
  // Errors from files (corrupt, truncated) are sticky: later calls return them again.
  virtual absl::StatusOr<Element> Next() = 0;

  // The iterator's position, as compact bytes: Dataset::RestoreIterator(state) on the same
  // dataset gives an iterator whose next element is this one's next. Supported by the sources
  // and every transform but Cache; an iterator that cannot save says Unimplemented, naming
  // itself. Stages that buffer (Shuffle, Interleave, Prefetch, parallel Map) save where their
  // input stood when they started and how far they went, and restoring replays that far (it
  // costs reading the input again, never a wrong position). Not while another thread is in
  // Next().
  virtual absl::StatusOr<std::string> SaveState() const;
  // Moves a fresh iterator to `state`: use Dataset::RestoreIterator, which makes one whose
  // threads wait for the first Next() (a started Prefetch or parallel Map has read ahead and
  // says FailedPrecondition). InvalidArgument for a state saved from another pipeline.
  virtual absl::Status RestoreState(absl::string_view state);
};

namespace internal {
class DatasetNode;
}  // namespace internal

// Which records of each source a pass reads (static and dynamic sharding): records begin,
// begin + stride, begin + 2 * stride, ... below end, counted from the source's first record
// (for a file list, across its files). Every source of the pipeline reads the same positions,
// so Zip-ped sources (images and labels) stay aligned. Transforms apply within the split: a
// Shuffle shuffles the split's records, a Batch batches them.
struct SourceSplit {
  int64_t begin = 0;
  int64_t end = std::numeric_limits<int64_t>::max();
  int64_t stride = 1;
};

// tf.distribute's auto-shard policies: how a pipeline read by several workers is divided
// between them (Dataset::MakeShardedIterator).
enum class AutoShardPolicy {
  // Every worker reads everything.
  kOff,
  // Worker i of n reads files i, i + n, ... of every file reader (TFRecord, TextLines, IdxFile,
  // LibSvm). A reader with fewer files than workers, or a pipeline without one, is
  // InvalidArgument ("fewer files than workers").
  kFile,
  // Worker i of n reads records i, i + n, ... of every source (MakeSplitIterator).
  kData,
  // kFile when every file reader has at least as many files as workers, else kData.
  kAuto,
};

// A cheap-to-copy handle on a shared, immutable pipeline description. Copying, transforming
// and calling MakeIterator() are thread-safe; every iterator is independent. Functions given
// to Map/Filter are shared by all iterators of the dataset and may run concurrently (and on
// a Prefetch thread), so they must be thread-safe.
class Dataset {
 public:
  // A dataset whose MakeIterator() fails with FailedPrecondition (a placeholder to assign to).
  Dataset();
  // For pipeline stages defined outside this module.
  explicit Dataset(std::shared_ptr<const internal::DatasetNode> node);

  // ---- Sources ----
  // {i64 scalar} for start, start+step, ... while < stop (> stop for a negative step).
  // step 0 is InvalidArgument.
  static Dataset Range(int64_t start, int64_t stop, int64_t step = 1);
  // Element i is {components[0][i], components[1][i], ...} (axis 0 sliced away, views that
  // share storage). All components need rank >= 1 and the same dim(0).
  static Dataset FromTensorSlices(std::vector<Tensor> components);
  // The given elements, in order.
  static Dataset FromElements(std::vector<Element> elements);
  // An IDX file (MNIST format), plain or gzipped, streamed: one element {tensor} per record,
  // shaped as the IDX dims minus the first (images u8 [28, 28], labels a u8 scalar). IDX
  // types map to u8 (0x08), i32 (0x09 i8, 0x0B i16 widened; 0x0C), f32 (0x0D), f64 (0x0E).
  // A bad header, a truncated record or trailing bytes is DataLoss naming file and offset.
  static Dataset IdxFile(std::string path);
  // Records of TFRecord files (plain or gzipped), in order: {u8 [n] record bytes}. Length and
  // data CRC32Cs are both checked; a corrupt or truncated record is DataLoss naming the file
  // and the record's byte offset.
  static Dataset TFRecord(std::vector<std::string> paths);
  // Lines of text files (plain or gzipped): {u8 [n] line bytes}, without '\n' or "\r\n".
  static Dataset TextLines(std::vector<std::string> paths);
  // libsvm / svmlight text ("label idx:value ...", 1-based indices, '#' comments, qid:
  // ignored): {f32 [num_features] dense features, f32 scalar label}. An index outside
  // 1..num_features or a malformed line is InvalidArgument naming file and line.
  static Dataset LibSvm(std::string path, int64_t num_features);
  // Elements of all datasets concatenated into one tuple; ends with the shortest input.
  static Dataset Zip(std::vector<Dataset> datasets);

  // ---- Transforms ----
  // fn's error status is returned by Next() for that element; iteration can go on after it.
  // An exception thrown by fn becomes an Internal error (likewise for Filter).
  Dataset Map(std::function<absl::StatusOr<Element>(Element)> fn) const;
  // Map on `num_parallel_calls` threads (>= 1, or kAutotune), in the same order as the
  // sequential Map: element i's result (or error) is returned i-th, and the end of the data
  // comes after every element. Up to num_parallel_calls elements are read ahead. kAutotune
  // starts with one thread and adds one (up to the machine's cores) whenever Next() has to wait
  // while the function's mean cost is at least 50 us (cheaper functions gain less than the
  // hand-off between threads costs). The threads are stopped and joined when the iterator is
  // destroyed, after the calls in flight return. A num_parallel_calls of 0 or below (other than
  // kAutotune) is InvalidArgument.
  Dataset Map(std::function<absl::StatusOr<Element>(Element)> fn, int64_t num_parallel_calls) const;
  // Keeps the elements for which pred returns true.
  Dataset Filter(std::function<absl::StatusOr<bool>(const Element&)> pred) const;
  // Uniform shuffle through a buffer of `buffer_size` elements (>= 1). Deterministic for a
  // seed; each pass of an enclosing Repeat uses a different order (the seed is mixed with the
  // pass number). Separate MakeIterator() calls give the same order.
  Dataset Shuffle(int64_t buffer_size, uint64_t seed) const;
  // Repeats the input `count` times (-1: forever). Ends when an input pass yields nothing.
  Dataset Repeat(int64_t count = -1) const;
  // Stacks `batch_size` consecutive elements per component on a new axis 0. The last, smaller
  // batch is kept unless drop_remainder. Shapes/dtypes that differ within a batch are
  // InvalidArgument.
  Dataset Batch(int64_t batch_size, bool drop_remainder = false) const;
  // Every num_shards-th element starting at element `index` (0 <= index < num_shards).
  Dataset Shard(int64_t num_shards, int64_t index) const;
  // The first n elements (all when n < 0).
  Dataset Take(int64_t n) const;
  // All but the first n elements (none when n < 0).
  Dataset Skip(int64_t n) const;
  // Keeps the first complete pass over the input in memory; iterators made after it (and
  // later passes of an enclosing Repeat) replay it without reading the input again. A pass
  // that stops early or fails caches nothing. Put Shuffle after Cache: a cached shuffle
  // replays one order.
  Dataset Cache() const;
  // Fills a buffer of up to `buffer_size` (>= 1) elements from a background thread, so
  // producing the next element overlaps with the caller's work. The thread is stopped and
  // joined when the iterator is destroyed (after the input's Next() in flight, if any, returns).
  Dataset Prefetch(int64_t buffer_size) const;

  // The elements of fn(e)'s dataset for each input element e, one dataset after another. An
  // error from fn (or an exception: Internal) is returned for that input element; iteration
  // can go on after it. The inner datasets are read whole: a split (sharding) applies to the
  // input (the list of files, say), never to the inner datasets.
  Dataset FlatMap(std::function<absl::StatusOr<Dataset>(Element)> fn) const;
  // tf.data's interleave: keeps `cycle_length` inner datasets fn(e) open and takes
  // `block_length` elements from each in turn; an ended inner dataset is replaced by the next
  // input element's (in its place in the cycle). num_parallel_calls 0 reads on the caller's
  // thread; >= 1 (or kAutotune: min(cycle_length, cores)) threads read ahead into a buffer of
  // block_length elements per open dataset. The order is the same either way. cycle_length
  // kAutotune is the number of cores. Other values below 1 are InvalidArgument.
  Dataset Interleave(std::function<absl::StatusOr<Dataset>(Element)> fn, int64_t cycle_length,
                     int64_t block_length = 1, int64_t num_parallel_calls = 0) const;
  // Splits every element along axis 0: component c of output row r is row r of component c.
  // Every component needs rank >= 1 and the same dim(0), else InvalidArgument from Next().
  // The rows share storage with the input element.
  Dataset Unbatch() const;
  // Batch for elements whose shapes differ: each component is padded (see PaddedBatchOptions)
  // to a common shape, then stacked. Ranks or dtypes that differ within a batch, or a
  // dimension larger than its fixed padded size, are InvalidArgument from Next(); a
  // padded_shapes whose size or rank does not match the elements' likewise.
  Dataset PaddedBatch(int64_t batch_size, PaddedBatchOptions options = {}) const;

  // Starts a pass. Files are opened here: a missing or unreadable file is an error naming it.
  absl::StatusOr<std::unique_ptr<Iterator>> MakeIterator() const;

  // A pass that continues where the iterator that saved `state` (Iterator::SaveState) stood:
  // its first element is that iterator's next. Made by MakeIterator(), so use the same
  // dataset (same sources, transforms, arguments and seeds). InvalidArgument for a state of
  // another pipeline; Unimplemented (naming it) when a stage cannot restore.
  absl::StatusOr<std::unique_ptr<Iterator>> RestoreIterator(absl::string_view state) const;

  // Starts a pass over `split` of the sources (static sharding: {worker, max, num_workers}).
  // InvalidArgument when begin < 0, end < begin or stride < 1.
  absl::StatusOr<std::unique_ptr<Iterator>> MakeSplitIterator(const SourceSplit& split) const;

  // Starts worker `worker_index`'s pass of `num_workers` under `policy`; *applied (if given)
  // says which policy was used (kAuto becomes kFile or kData). Files of another worker's
  // share are not opened. Readers inside an Interleave/FlatMap are not file-sharded: there the
  // input (the list of file names) is what kData shards. InvalidArgument for a worker_index
  // outside [0, num_workers).
  absl::StatusOr<std::unique_ptr<Iterator>> MakeShardedIterator(
      AutoShardPolicy policy, int64_t worker_index, int64_t num_workers,
      AutoShardPolicy* applied = nullptr) const;

  // One pass over one split of dynamic sharding: like MakeSplitIterator, but `seed` is mixed
  // into every Shuffle (so each split of each epoch has its own, reproducible order), a Repeat
  // in the pipeline is InvalidArgument (the coordinator makes the epochs; a repeated split
  // would never end) and Cache is bypassed. The same pipeline, split and seed give the same
  // elements in the same order on every machine. When a source ends before `split.begin`,
  // *beyond_source (if given) becomes true: the split lies past the end of the data.
  absl::StatusOr<std::unique_ptr<Iterator>> MakeSinglePassSplitIterator(
      const SourceSplit& split, uint64_t seed,
      std::shared_ptr<std::atomic<bool>> beyond_source = nullptr) const;

  const std::shared_ptr<const internal::DatasetNode>& node() const { return node_; }

 private:
  std::shared_ptr<const internal::DatasetNode> node_;
};

}  // namespace asyncps::data

#endif  // ASYNCPS_DATA_DATASET_H_
