#include "examples/fmnist_pipeline.h"

#include <cstring>
#include <random>
#include <vector>

#include "examples/fmnist_augment.h"
#include "gtest/gtest.h"

namespace asyncps::fmnist {
namespace {

// The pipeline as it was written before batches were gathered (issue 39): the examples sliced,
// shuffled, augmented one by one (Augmented) and stacked. TrainPipelineFrom must give the same
// batches, so a split read again (a closure re-run, another data worker) and every exactly-once
// argument built on the old pipeline stay as they were.
data::Dataset SlicedPipeline(const Tensor& images, const Tensor& labels,
                             const TrainPipelineOptions& o) {
  std::vector<Tensor> components = {images, labels};
  if (o.ids) {
    const int64_t n = images.dim(0);
    Tensor id(DType::kI64, {n});
    for (int64_t i = 0; i < n; ++i) id.data<int64_t>()[i] = o.shard + i * o.num_shards;
    components.push_back(std::move(id));
  }
  const uint64_t seed = o.seed + static_cast<uint64_t>(o.shard);
  data::Dataset examples =
      data::Dataset::FromTensorSlices(std::move(components)).Shuffle(10'000, seed);
  if (o.augment) examples = Augmented(examples, 60'000, o.num_shards, o.shard, seed);
  if (o.repeat) examples = examples.Repeat();
  return examples.Batch(o.batch, /*drop_remainder=*/true);
}

std::pair<Tensor, Tensor> RandomShard(int64_t n, uint32_t seed) {
  Tensor images(DType::kU8, {n, 28, 28});
  Tensor labels(DType::kU8, {n});
  std::mt19937 rng(seed);
  for (int64_t i = 0; i < images.num_elements(); ++i)
    images.data<uint8_t>()[i] = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n; ++i) labels.data<uint8_t>()[i] = static_cast<uint8_t>(rng() % 10);
  return {images, labels};
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.num_bytes()) == 0;
}

// Reads both iterators to their end (or `limit` batches) and expects the same batches.
void ExpectSameBatches(data::Iterator& want, data::Iterator& got, int64_t limit, int64_t expected) {
  int64_t batches = 0;
  for (; batches < limit; ++batches) {
    absl::StatusOr<data::Element> w = want.Next();
    absl::StatusOr<data::Element> g = got.Next();
    ASSERT_EQ(w.ok(), g.ok()) << "batch " << batches << ": " << w.status() << " / " << g.status();
    if (!w.ok()) {
      ASSERT_TRUE(data::IsEndOfData(w.status())) << w.status();
      ASSERT_TRUE(data::IsEndOfData(g.status())) << g.status();
      break;
    }
    ASSERT_EQ(w->size(), g->size()) << "batch " << batches;
    for (size_t c = 0; c < w->size(); ++c) {
      ASSERT_TRUE(SameTensor((*w)[c], (*g)[c])) << "batch " << batches << " component " << c;
    }
  }
  EXPECT_EQ(batches, expected);
}

struct Case {
  bool augment;
  bool ids;
  int64_t num_shards;
  int64_t shard;
};

TEST(TrainPipelineTest, GatheredBatchesAreTheSlicedPipelinesStaticShards) {
  // More records than the shuffle's 10,000-record buffer, so its window moves.
  constexpr int64_t kRecords = 12'000;
  for (const Case c : {Case{false, false, 1, 0}, Case{true, false, 1, 0}, Case{true, true, 2, 1},
                       Case{false, true, 3, 2}}) {
    SCOPED_TRACE(testing::Message() << "augment " << c.augment << " ids " << c.ids << " shard "
                                    << c.shard << " of " << c.num_shards);
    auto [images, labels] = RandomShard(kRecords / c.num_shards, 7);
    TrainPipelineOptions o;
    o.batch = 32;
    o.seed = 11;
    o.num_shards = c.num_shards;
    o.shard = c.shard;
    o.ids = c.ids;
    o.augment = c.augment;
    o.repeat = true;
    o.prefetch = false;
    auto gathered = TrainPipelineFrom(images, labels, o);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    auto want = SlicedPipeline(images, labels, o).MakeIterator();
    auto got = gathered->MakeIterator();
    ASSERT_TRUE(want.ok() && got.ok());
    // Past the first pass: the Repeat's second pass reshuffles alike.
    const int64_t limit = 2 * (kRecords / c.num_shards) / o.batch + 3;
    ExpectSameBatches(**want, **got, limit, limit);
  }
}

TEST(TrainPipelineTest, GatheredBatchesAreTheSlicedPipelinesInEverySplit) {
  // Dynamic sharding: shard 0 of 1, no Repeat, each split read on its own with its own seed
  // (as a data worker reads it), the last split shorter and one past the records' end.
  constexpr int64_t kRecords = 3'000;
  auto [images, labels] = RandomShard(kRecords, 3);
  for (const bool augment : {false, true}) {
    for (const bool ids : {false, true}) {
      SCOPED_TRACE(testing::Message() << "augment " << augment << " ids " << ids);
      TrainPipelineOptions o;
      o.batch = 16;
      o.seed = 5;
      o.ids = ids;
      o.augment = augment;
      o.repeat = false;
      o.prefetch = false;
      auto gathered = TrainPipelineFrom(images, labels, o);
      ASSERT_TRUE(gathered.ok()) << gathered.status();
      const data::Dataset sliced = SlicedPipeline(images, labels, o);
      constexpr int64_t kSplit = 16 * 59;
      for (int64_t begin = 0; begin < kRecords + kSplit; begin += kSplit) {
        const data::SourceSplit split{begin, begin + kSplit, 1};
        const uint64_t seed = 1000 + static_cast<uint64_t>(begin);
        auto want = sliced.MakeSinglePassSplitIterator(split, seed);
        auto got = gathered->MakeSinglePassSplitIterator(split, seed);
        ASSERT_TRUE(want.ok() && got.ok());
        const int64_t records = std::max<int64_t>(0, std::min(kRecords, begin + kSplit) - begin);
        ExpectSameBatches(**want, **got, 1000, records / o.batch);
      }
    }
  }
}

TEST(TrainPipelineTest, ShapesThatDoNotFitAreRefused) {
  TrainPipelineOptions o;
  o.augment = true;
  EXPECT_EQ(TrainPipelineFrom(Tensor(DType::kU8, {4, 27, 28}), Tensor(DType::kU8, {4}), o)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  o.augment = false;
  EXPECT_EQ(TrainPipelineFrom(Tensor(DType::kU8, {4, 28, 28}), Tensor(DType::kU8, {5}), o)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  o.batch = 0;
  EXPECT_EQ(TrainPipelineFrom(Tensor(DType::kU8, {4, 28, 28}), Tensor(DType::kU8, {4}), o)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace asyncps::fmnist
