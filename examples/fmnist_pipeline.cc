#include "examples/fmnist_pipeline.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "asyncps/status.h"
#include "examples/fmnist_augment.h"
#include "examples/fmnist_idx_shard.h"

namespace asyncps::fmnist {
namespace {

constexpr int64_t kTrainExamples = 60'000;

}  // namespace

absl::StatusOr<data::Dataset> TrainPipeline(const TrainPipelineOptions& options) {
  if (options.batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch must be >= 1, got ", options.batch));
  // The shard, decoded once per process and read from memory by every epoch and every split:
  // the same examples in the same order as IdxFile(path).Shard(...). Streaming the gzipped
  // files instead cost a dynamic split's pipeline (a data worker's, or a worker's under
  // --sharding dynamic) the inflation of every record before its split began (a source split
  // skips to its first record): about 5 ms of CPU per batch of 128 over an epoch, 10x the
  // in-memory pipeline (docs/performance.md, "The tf.data service: where the time goes").
  ASSIGN_OR_RETURN(Tensor images, ReadIdxShard(options.images, options.num_shards, options.shard));
  ASSIGN_OR_RETURN(Tensor labels, ReadIdxShard(options.labels, options.num_shards, options.shard));
  std::vector<Tensor> components = {std::move(images), std::move(labels)};
  if (options.ids) {
    // Each example's index in the files (its id), sliced with it (Options::count_examples).
    const int64_t n = components[0].dim(0);
    Tensor id(DType::kI64, {n});
    int64_t* out = id.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) out[i] = options.shard + i * options.num_shards;
    components.push_back(std::move(id));
  }
  const uint64_t seed = options.seed + static_cast<uint64_t>(options.shard);
  data::Dataset examples = data::Dataset::FromTensorSlices(std::move(components)).Shuffle(10'000, seed);
  if (options.augment) examples = Augmented(examples, kTrainExamples, options.num_shards, options.shard, seed);
  if (options.repeat) examples = examples.Repeat();
  examples = examples.Batch(options.batch, /*drop_remainder=*/true);
  return options.prefetch ? examples.Prefetch(4) : examples;
}

}  // namespace asyncps::fmnist
