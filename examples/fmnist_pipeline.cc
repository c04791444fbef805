#include "examples/fmnist_pipeline.h"

#include <cstring>
#include <memory>
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
  if (options.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("batch must be >= 1, got ", options.batch));
  // The shard, decoded once per process and read from memory by every epoch and every split:
  // the same examples in the same order as IdxFile(path).Shard(...). Streaming the gzipped
  // files instead cost a dynamic split's pipeline (a data worker's, or a worker's under
  // --sharding dynamic) the inflation of every record before its split began (a source split
  // skips to its first record): about 5 ms of CPU per batch of 128 over an epoch, 10x the
  // in-memory pipeline (docs/performance.md, "The tf.data service: where the time goes").
  ASSIGN_OR_RETURN(Tensor images, ReadIdxShard(options.images, options.num_shards, options.shard));
  ASSIGN_OR_RETURN(Tensor labels, ReadIdxShard(options.labels, options.num_shards, options.shard));
  return TrainPipelineFrom(std::move(images), std::move(labels), options);
}

absl::StatusOr<data::Dataset> TrainPipelineFrom(Tensor images, Tensor labels,
                                                const TrainPipelineOptions& options) {
  if (options.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("batch must be >= 1, got ", options.batch));
  if (images.rank() < 1 || labels.rank() < 1 || images.dim(0) != labels.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("images ", ShapeString(images.shape()),
                                                   " and labels ", ShapeString(labels.shape()),
                                                   " differ in their first dimension"));
  }
  if (options.augment && (images.dtype() != DType::kU8 || images.rank() != 3 ||
                          images.dim(1) != 28 || images.dim(2) != 28)) {
    return absl::InvalidArgumentError(
        absl::StrCat("augment wants u8 [n, 28, 28] images, got ", ShapeString(images.shape())));
  }
  const int64_t n = images.dim(0);
  const uint64_t seed = options.seed + static_cast<uint64_t>(options.shard);
  // The records' indices go through the shuffle (and meet their augmentation keys) one by one,
  // and a batch of indices is gathered from the shard in one pass: the same batches as slicing
  // the examples, shuffling them, augmenting each into a tensor of its own and stacking them
  // (TrainPipelineTest), without an image tensor, an element and a copy per example on the way.
  // The shuffle's order depends only on its seed and the number of records, so shuffling the
  // indices orders the records as shuffling the examples did.
  data::Dataset records = data::Dataset::Range(0, n).Shuffle(10'000, seed);
  if (options.augment) {
    records = data::Dataset::Zip(
        {records, AugmentKeys(kTrainExamples, options.num_shards, options.shard, seed)});
  }
  if (options.repeat) records = records.Repeat();
  records = records.Batch(options.batch, /*drop_remainder=*/true);
  struct Shard {
    Tensor images;
    Tensor labels;
    int64_t num_shards;
    int64_t shard;
    bool ids;
    bool augment;
  };
  auto shard =
      std::make_shared<const Shard>(Shard{std::move(images), std::move(labels), options.num_shards,
                                          options.shard, options.ids, options.augment});
  data::Dataset batches =
      records.Map([shard](data::Element batch) -> absl::StatusOr<data::Element> {
        const Tensor& index = batch[0];
        const int64_t b = index.dim(0);
        const int64_t n = shard->images.dim(0);
        const size_t image_bytes = shard->images.num_bytes() / static_cast<size_t>(n);
        const size_t label_bytes = shard->labels.num_bytes() / static_cast<size_t>(n);
        Shape image_shape = shard->images.shape();
        image_shape[0] = b;
        Shape label_shape = shard->labels.shape();
        label_shape[0] = b;
        Tensor images(shard->images.dtype(), std::move(image_shape));
        Tensor labels(shard->labels.dtype(), std::move(label_shape));
        const auto* image_in = static_cast<const uint8_t*>(shard->images.raw_data());
        const auto* label_in = static_cast<const uint8_t*>(shard->labels.raw_data());
        auto* image_out = static_cast<uint8_t*>(images.raw_data());
        auto* label_out = static_cast<uint8_t*>(labels.raw_data());
        const int64_t* records = index.data<int64_t>();
        const int64_t* keys = shard->augment ? batch[1].data<int64_t>() : nullptr;
        for (int64_t i = 0; i < b; ++i) {
          const int64_t r = records[i];
          if (r < 0 || r >= n)
            return absl::InternalError(absl::StrCat("record ", r, " outside the shard's ", n));
          const uint8_t* image = image_in + static_cast<size_t>(r) * image_bytes;
          uint8_t* out = image_out + static_cast<size_t>(i) * image_bytes;
          if (keys != nullptr) {
            AugmentImage(image, keys[i], out);
          } else {
            std::memcpy(out, image, image_bytes);
          }
          std::memcpy(label_out + static_cast<size_t>(i) * label_bytes,
                      label_in + static_cast<size_t>(r) * label_bytes, label_bytes);
        }
        data::Element out = {std::move(images), std::move(labels)};
        if (shard->ids) {
          // Each example's index in the files (its id): Options::count_examples.
          Tensor ids(DType::kI64, {b});
          int64_t* id = ids.data<int64_t>();
          for (int64_t i = 0; i < b; ++i) id[i] = shard->shard + records[i] * shard->num_shards;
          out.push_back(std::move(ids));
        }
        return out;
      });
  return options.prefetch ? batches.Prefetch(4) : batches;
}

}  // namespace asyncps::fmnist
