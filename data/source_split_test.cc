// Source splits: the records each split reads, alignment of zipped sources, the single-pass
// rules of dynamic sharding (no Repeat, no Cache replay, seeded shuffles).

#include <atomic>
#include <memory>
#include <set>

#include "data/dataset.h"
#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::Drain;
using testutil::Int64s;
using ::testing::ElementsAre;

std::vector<int64_t> SplitValues(const Dataset& d, const SourceSplit& split) {
  auto it = d.MakeSplitIterator(split);
  EXPECT_TRUE(it.ok()) << it.status();
  if (!it.ok()) return {};
  auto elements = Drain(**it);
  EXPECT_TRUE(elements.ok()) << elements.status();
  return elements.ok() ? Int64s(*elements) : std::vector<int64_t>{};
}

TEST(SourceSplitTest, ReadsOnlyTheSplitsRecords) {
  const Dataset d = Dataset::Range(100, 110);
  EXPECT_THAT(SplitValues(d, {2, 5, 1}), ElementsAre(102, 103, 104));
  EXPECT_THAT(SplitValues(d, {1, 100, 3}), ElementsAre(101, 104, 107));  // static shard 1 of 3
  EXPECT_THAT(SplitValues(d, {8, 20, 1}), ElementsAre(108, 109));
  EXPECT_THAT(SplitValues(d, {12, 20, 1}), ElementsAre());
}

TEST(SourceSplitTest, TransformsApplyWithinTheSplit) {
  const Dataset d = Dataset::Range(0, 100).Map([](Element e) -> absl::StatusOr<Element> {
    e[0] = Tensor::Scalar<int64_t>(e[0].data<int64_t>()[0] * 2);
    return e;
  });
  EXPECT_THAT(SplitValues(d, {10, 13, 1}), ElementsAre(20, 22, 24));
  auto batches = Dataset::Range(0, 100).Batch(4).MakeSplitIterator({10, 20, 1});
  ASSERT_TRUE(batches.ok());
  auto all = Drain(**batches);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);  // 4 + 4 + 2 records
  EXPECT_EQ((*all)[2][0].dim(0), 2);
}

TEST(SourceSplitTest, ZippedSourcesStayAligned) {
  const Dataset d = Dataset::Zip({Dataset::Range(0, 50), Dataset::Range(1000, 1050)});
  auto it = d.MakeSplitIterator({7, 9, 1});
  ASSERT_TRUE(it.ok());
  auto all = Drain(**it);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0][0].data<int64_t>()[0], 7);
  EXPECT_EQ((*all)[0][1].data<int64_t>()[0], 1007);
  EXPECT_EQ((*all)[1][1].data<int64_t>()[0], 1008);
}

TEST(SourceSplitTest, BadSplitsAreInvalidArgument) {
  const Dataset d = Dataset::Range(0, 10);
  EXPECT_EQ(d.MakeSplitIterator({-1, 5, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.MakeSplitIterator({5, 4, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(d.MakeSplitIterator({0, 4, 0}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SourceSplitTest, BeyondSourceIsReportedOnlyPastTheData) {
  const Dataset d = Dataset::Range(0, 10);
  auto beyond = std::make_shared<std::atomic<bool>>(false);
  auto inside = d.MakeSinglePassSplitIterator({5, 8, 1}, 0, beyond);
  ASSERT_TRUE(inside.ok());
  EXPECT_EQ(Drain(**inside)->size(), 3u);
  EXPECT_FALSE(beyond->load());
  auto tail = d.MakeSinglePassSplitIterator({8, 12, 1}, 0, beyond);  // partly inside
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(Drain(**tail)->size(), 2u);
  EXPECT_FALSE(beyond->load());
  auto past = d.MakeSinglePassSplitIterator({10, 14, 1}, 0, beyond);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(Drain(**past)->size(), 0u);
  EXPECT_TRUE(beyond->load());
}

TEST(SourceSplitTest, SinglePassRefusesRepeatAndBypassesCache) {
  EXPECT_EQ(Dataset::Range(0, 10).Repeat().MakeSinglePassSplitIterator({0, 5, 1}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A static split may repeat (each worker loops over its shard).
  auto repeated = Dataset::Range(0, 10).Repeat(2).MakeSplitIterator({0, 10, 5});
  ASSERT_TRUE(repeated.ok());
  EXPECT_THAT(Int64s(*Drain(**repeated)), ElementsAre(0, 5, 0, 5));

  const Dataset cached = Dataset::Range(0, 10).Cache();
  auto first = cached.MakeSinglePassSplitIterator({0, 3, 1}, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(Int64s(*Drain(**first)), ElementsAre(0, 1, 2));
  auto second = cached.MakeSinglePassSplitIterator({3, 6, 1}, 0);
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(Int64s(*Drain(**second)), ElementsAre(3, 4, 5));
}

TEST(SourceSplitTest, ShuffleOrderFollowsTheSeedAndIsReproducible) {
  const Dataset d = Dataset::Range(0, 200).Shuffle(200, /*seed=*/1);
  auto order = [&](uint64_t seed) {
    auto it = d.MakeSinglePassSplitIterator({0, 200, 1}, seed);
    EXPECT_TRUE(it.ok());
    return Int64s(*Drain(**it));
  };
  const std::vector<int64_t> a = order(7);
  EXPECT_EQ(order(7), a);  // another worker re-running the split reads the same order
  EXPECT_NE(order(8), a);
  EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 200u);
}

}  // namespace
}  // namespace asyncps::data
