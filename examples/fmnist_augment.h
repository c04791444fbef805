#ifndef ASYNCPS_EXAMPLES_FMNIST_AUGMENT_H_
#define ASYNCPS_EXAMPLES_FMNIST_AUGMENT_H_

// The main job's data augmentation (fmnist::Options::augment): a random crop of each training
// image padded by one pixel (a shift of -1, 0 or +1 pixels each way) and a left-right flip with
// probability 1/2. Deterministic for a split and seed, so that a split read again after a
// failure (on any worker or tf.data service data worker) holds the same augmented images, and
// exactly-once training still holds. No LibTorch here.

#include <cstdint>

#include "absl/status/statusor.h"
#include "asyncps/datasets.h"

namespace asyncps::fmnist {

// `examples` (elements {u8 [28, 28] image, label, ...} over `records` source records, shard
// `shard` of `num_shards`, shuffled with `seed` before this) with every image augmented. Each
// example's draw comes from a key: the element beside it in a second shuffle of the same
// records with another seed, so it changes with the split's shuffle seed (every epoch under
// dynamic sharding, every pass of a Repeat) and is the same wherever the split is read again,
// unlike a draw from a generator that iterators share.
data::Dataset Augmented(const data::Dataset& examples, int64_t records, int64_t num_shards,
                        int64_t shard, uint64_t seed);

// The keys Augmented zips with the examples ({i64 key} elements, one per example of the shard):
// for pipelines that apply AugmentImage themselves and must draw exactly as Augmented does.
data::Dataset AugmentKeys(int64_t records, int64_t num_shards, int64_t shard, uint64_t seed);

// Image `in` (u8 28 x 28, row-major) augmented with the draw `key` selects into `out` (28 x 28,
// every byte written: the padding zero). AugmentExample's transform, for pipelines that fill a
// batch in place.
void AugmentImage(const uint8_t* in, int64_t key, uint8_t* out);

// One example {u8 [28, 28] image, label, ..., i64 key} augmented with the draw `key` selects,
// the key dropped. InvalidArgument for another shape.
absl::StatusOr<data::Element> AugmentExample(data::Element example);

}  // namespace asyncps::fmnist

#endif  // ASYNCPS_EXAMPLES_FMNIST_AUGMENT_H_
