#include "examples/fmnist_augment.h"

#include <utility>

namespace asyncps::fmnist {

absl::StatusOr<data::Element> AugmentExample(data::Element example) {
  const Tensor& image = example[0];
  if (example.size() < 3 || image.dtype() != DType::kU8 || image.rank() != 2 ||
      image.dim(0) != 28 || image.dim(1) != 28 || example.back().dtype() != DType::kI64) {
    return absl::InvalidArgumentError("augment wants {u8 [28, 28] image, label, ..., i64 key}");
  }
  // SplitMix64 of the key: three independent draws.
  uint64_t z = static_cast<uint64_t>(*example.back().data<int64_t>()) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const int dx = static_cast<int>(z % 3) - 1, dy = static_cast<int>(z / 3 % 3) - 1;
  const bool flip = (z >> 32) & 1;
  Tensor out(DType::kU8, {28, 28});  // zero-filled: the padding
  const uint8_t* in = image.data<uint8_t>();
  uint8_t* o = out.data<uint8_t>();
  for (int y = 0; y < 28; ++y) {
    const int sy = y + dy;
    if (sy < 0 || sy >= 28) continue;
    for (int x = 0; x < 28; ++x) {
      const int sx = (flip ? 27 - x : x) + dx;
      if (sx >= 0 && sx < 28) o[y * 28 + x] = in[sy * 28 + sx];
    }
  }
  example[0] = std::move(out);
  example.pop_back();
  return example;
}

data::Dataset Augmented(const data::Dataset& examples, int64_t records, int64_t num_shards,
                        int64_t shard, uint64_t seed) {
  data::Dataset keys = data::Dataset::Range(0, records)
                           .Shard(num_shards, shard)
                           .Shuffle(10'000, seed + 0x5bd1e995ULL);
  return data::Dataset::Zip({examples, keys}).Map(AugmentExample);
}

}  // namespace asyncps::fmnist
