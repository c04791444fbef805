#include "examples/fmnist_augment.h"

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps::fmnist {
namespace {

constexpr int64_t kN = 64;

Tensor RandomImages(int64_t n, uint32_t seed) {
  Tensor images(DType::kU8, {n, 28, 28});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < images.num_elements(); ++i)
    images.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 255 + 1);
  return images;
}

// The transform (dx, dy, flip) that makes `out` from `in`, as dx + 3 * dy + 9 * flip in
// 0..17; -1 when none does.
int TransformOf(const uint8_t* in, const uint8_t* out) {
  for (int flip = 0; flip < 2; ++flip) {
    for (int dy = -1; dy <= 1; ++dy) {
      for (int dx = -1; dx <= 1; ++dx) {
        bool same = true;
        for (int y = 0; y < 28 && same; ++y) {
          for (int x = 0; x < 28 && same; ++x) {
            const int sy = y + dy, sx = (flip ? 27 - x : x) + dx;
            const uint8_t want = sy >= 0 && sy < 28 && sx >= 0 && sx < 28 ? in[sy * 28 + sx] : 0;
            same = out[y * 28 + x] == want;
          }
        }
        if (same) return (dx + 1) + 3 * (dy + 1) + 9 * flip;
      }
    }
  }
  return -1;
}

TEST(FmnistAugmentTest, EachImageIsAShiftOrFlipOfItself) {
  const Tensor images = RandomImages(1, 1);
  const Tensor image = *images.Slice(0, 1);
  std::set<int> seen;
  for (int64_t key = 0; key < 200; ++key) {
    Tensor one(DType::kU8, {28, 28});
    std::memcpy(one.raw_data(), image.raw_data(), one.num_bytes());
    auto out = AugmentExample({one, Tensor::Scalar<uint8_t>(3), Tensor::Scalar<int64_t>(key)});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);  // the key is dropped
    const int t = TransformOf(image.data<uint8_t>(), (*out)[0].data<uint8_t>());
    ASSERT_GE(t, 0) << "key " << key;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 18u);  // every shift, flipped and not
  auto bad = AugmentExample(
      {Tensor(DType::kU8, {27, 28}), Tensor::Scalar<int64_t>(0), Tensor::Scalar<int64_t>(0)});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// The augmented images of one pass over a split, by example id.
std::vector<std::vector<uint8_t>> Pass(const data::Dataset& dataset, uint64_t seed) {
  std::vector<std::vector<uint8_t>> by_id(kN);
  auto it = dataset.MakeSinglePassSplitIterator({0, kN, 1}, seed);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return by_id;
  while (true) {
    auto e = (*it)->Next();
    if (!e.ok()) {
      EXPECT_TRUE(data::IsEndOfData(e.status())) << e.status();
      break;
    }
    const int64_t id = *(*e)[1].data<int64_t>();
    const uint8_t* p = (*e)[0].data<uint8_t>();
    by_id[static_cast<size_t>(id)].assign(p, p + 28 * 28);
  }
  return by_id;
}

TEST(FmnistAugmentTest, SameSplitAndSeedSameImagesAnotherSeedOthers) {
  const data::Dataset examples =
      data::Dataset::Zip(
          {data::Dataset::FromTensorSlices({RandomImages(kN, 2)}), data::Dataset::Range(0, kN)})
          .Shuffle(100, 5);
  const data::Dataset augmented = Augmented(examples, kN, 1, 0, 5);
  const auto first = Pass(augmented, 11);
  const auto again = Pass(augmented, 11);
  const auto next_epoch = Pass(augmented, 12);
  int differ = 0;
  for (int64_t id = 0; id < kN; ++id) {
    ASSERT_EQ(first[id].size(), 28u * 28u) << "example " << id << " missing";
    EXPECT_EQ(first[id], again[id]) << "example " << id;
    if (first[id] != next_epoch[id]) ++differ;
  }
  // 17 of 18 draws differ from a given one: nearly every image changes with the seed.
  EXPECT_GT(differ, kN / 2);
}

}  // namespace
}  // namespace asyncps::fmnist
