#include "examples/fmnist_augment.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace asyncps::fmnist {

void AugmentImage(const uint8_t* in, int64_t key, uint8_t* out) {
  // SplitMix64 of the key: three independent draws.
  uint64_t z = static_cast<uint64_t>(key) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const int dx = static_cast<int>(z % 3) - 1, dy = static_cast<int>(z / 3 % 3) - 1;
  const bool flip = (z >> 32) & 1;
  // Output column x reads source column (flip ? 27 - x : x) + dx; the columns that fall outside
  // the source are padding. Row by row without a test per pixel: the pipeline runs this for
  // every training example.
  const int x_begin = std::max(0, -dx),
            x_end = std::min(28, 28 - dx);  // unflipped: x + dx in [0, 28)
  const int f_begin = std::max(0, dx),
            f_end = std::min(28, 28 + dx);  // flipped: 27 - x + dx in [0, 28)
  for (int y = 0; y < 28; ++y) {
    const int sy = y + dy;
    uint8_t* row = out + y * 28;
    if (sy < 0 || sy >= 28) {
      std::memset(row, 0, 28);  // the padding
      continue;
    }
    const uint8_t* src = in + sy * 28;
    std::memset(row, 0, 28);
    if (!flip) {
      std::memcpy(row + x_begin, src + x_begin + dx, static_cast<size_t>(x_end - x_begin));
    } else {
      for (int x = f_begin; x < f_end; ++x) row[x] = src[27 - x + dx];
    }
  }
}

absl::StatusOr<data::Element> AugmentExample(data::Element example) {
  const Tensor& image = example[0];
  if (example.size() < 3 || image.dtype() != DType::kU8 || image.rank() != 2 ||
      image.dim(0) != 28 || image.dim(1) != 28 || example.back().dtype() != DType::kI64) {
    return absl::InvalidArgumentError("augment wants {u8 [28, 28] image, label, ..., i64 key}");
  }
  Tensor out(DType::kU8, {28, 28});
  AugmentImage(image.data<uint8_t>(), *example.back().data<int64_t>(), out.data<uint8_t>());
  example[0] = std::move(out);
  example.pop_back();
  return example;
}

data::Dataset AugmentKeys(int64_t records, int64_t num_shards, int64_t shard, uint64_t seed) {
  return data::Dataset::Range(0, records)
      .Shard(num_shards, shard)
      .Shuffle(10'000, seed + 0x5bd1e995ULL);
}

data::Dataset Augmented(const data::Dataset& examples, int64_t records, int64_t num_shards,
                        int64_t shard, uint64_t seed) {
  return data::Dataset::Zip({examples, AugmentKeys(records, num_shards, shard, seed)})
      .Map(AugmentExample);
}

}  // namespace asyncps::fmnist
