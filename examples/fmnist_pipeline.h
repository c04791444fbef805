#ifndef ASYNCPS_EXAMPLES_FMNIST_PIPELINE_H_
#define ASYNCPS_EXAMPLES_FMNIST_PIPELINE_H_

// The main job's training input pipeline (examples/fashion_mnist), shared by the job (its
// per-worker dataset "fmnist_train", built by the workers or by the tf.data service's data
// workers) and bench/data_service_bench, which measures it in-process and through the service.
// No LibTorch here.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "asyncps/datasets.h"

namespace asyncps::fmnist {

struct TrainPipelineOptions {
  std::string images;  // IDX files, plain or gzipped
  std::string labels;
  int64_t batch = 128;
  uint64_t seed = 0;
  // The static shard (records shard, shard + num_shards, ...); dynamic sharding: 0 of 1.
  int64_t num_shards = 1;
  int64_t shard = 0;
  bool repeat = true;    // false under dynamic sharding: the coordinator makes the epochs
  bool ids = false;      // a third component: each example's index in the files
  bool augment = false;  // a random crop of the padded image and a flip (fmnist_augment.h)
  // A thread making the next 4 batches while the trainer computes. The tf.data service's data
  // workers go without (the job registers its dataset with "prefetch" 0): their consumers
  // fetch ahead, which keeps the next batches in the making already, and a hand-off between
  // threads per batch is CPU the data worker spends beyond the batch itself.
  bool prefetch = true;
};

// {images u8 [batch, 28, 28], labels u8 [batch] (, ids i64 [batch])} batches, full ones only:
// the shard decoded once per process into memory (ReadIdxShard), shuffled with a 10,000-record
// buffer, augmented, repeated, batched and (`prefetch`) prefetched (4 batches)
// (TrainPipelineFrom). Read through a split
// (Dataset::MakeSinglePassSplitIterator) it gives the split's records, from memory: no record
// before the split is decoded to reach it. Errors: ReadIdxShard's, InvalidArgument for a batch
// below 1.
absl::StatusOr<data::Dataset> TrainPipeline(const TrainPipelineOptions& options);

// The same pipeline over a shard already in memory (`images` [n, ...] and `labels` [n, ...] of
// any dtype, u8 [n, 28, 28] images with `augment`; options.images and labels unused). The
// examples are shuffled as indices and each batch gathered from the shard in one pass (and
// augmented in place): the same batches as slicing, shuffling, augmenting and batching the
// examples one by one, for a fraction of the allocations and copies. InvalidArgument for
// shapes that do not fit.
absl::StatusOr<data::Dataset> TrainPipelineFrom(Tensor images, Tensor labels,
                                                const TrainPipelineOptions& options);

}  // namespace asyncps::fmnist

#endif  // ASYNCPS_EXAMPLES_FMNIST_PIPELINE_H_
