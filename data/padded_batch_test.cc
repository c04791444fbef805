// PaddedBatch and Unbatch.

#include "data/dataset.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::DrainDataset;
using testutil::Int64s;

// Element {i64 [n]: 1..n, f32 scalar n}.
absl::StatusOr<Element> Ragged(Element e) {
  const int64_t n = *e[0].data<int64_t>();
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= n; ++i) v.push_back(i);
  return Element{Tensor::FromVector<int64_t>({n}, v), Tensor::Scalar<float>(n)};
}

TEST(PaddedBatchTest, PadsToTheLargestInTheBatch) {
  auto got = DrainDataset(Dataset::Range(1, 4).Map(Ragged).PaddedBatch(2));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_TRUE((*got)[0][0].Equals(Tensor::FromVector<int64_t>({2, 2}, {1, 0, 1, 2})));
  EXPECT_TRUE((*got)[0][1].Equals(Tensor::FromVector<float>({2}, {1, 2})));
  EXPECT_TRUE((*got)[1][0].Equals(Tensor::FromVector<int64_t>({1, 3}, {1, 2, 3})));
}

TEST(PaddedBatchTest, FixedShapesAndPaddingValues) {
  PaddedBatchOptions options;
  options.padded_shapes = {{4}, {}};
  options.padding_values = {-1};
  options.drop_remainder = true;
  auto got = DrainDataset(Dataset::Range(0, 5).Map(Ragged).PaddedBatch(2, options));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);  // the fifth element is dropped
  EXPECT_TRUE(
      (*got)[0][0].Equals(Tensor::FromVector<int64_t>({2, 4}, {-1, -1, -1, -1, 1, -1, -1, -1})));
  EXPECT_TRUE(
      (*got)[1][0].Equals(Tensor::FromVector<int64_t>({2, 4}, {1, 2, -1, -1, 1, 2, 3, -1})));
}

TEST(PaddedBatchTest, TwoDimensionalWithAnUnknownDimension) {
  Element a{Tensor::FromVector<float>({1, 2}, {1, 2})};
  Element b{Tensor::FromVector<float>({2, 1}, {3, 4})};
  PaddedBatchOptions options;
  options.padded_shapes = {{3, -1}};
  options.padding_values = {9};
  auto got = DrainDataset(Dataset::FromElements({a, b}).PaddedBatch(2, options));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE((*got)[0][0].Equals(
      Tensor::FromVector<float>({2, 3, 2}, {1, 2, 9, 9, 9, 9, 3, 9, 4, 9, 9, 9})));
}

TEST(PaddedBatchTest, BadInputIsInvalidArgument) {
  const Dataset ragged = Dataset::Range(1, 4).Map(Ragged);
  EXPECT_EQ(ragged.PaddedBatch(0).MakeIterator().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ragged.PaddedBatch(-1).MakeIterator().status().code(),
            absl::StatusCode::kInvalidArgument);
  auto code = [](const Dataset& d) { return DrainDataset(d).status().code(); };
  PaddedBatchOptions small;
  small.padded_shapes = {{2}, {}};  // element 3 has 3 values
  EXPECT_EQ(code(ragged.PaddedBatch(3, small)), absl::StatusCode::kInvalidArgument);
  PaddedBatchOptions wrong_count;
  wrong_count.padded_shapes = {{5}};
  EXPECT_EQ(code(ragged.PaddedBatch(3, wrong_count)), absl::StatusCode::kInvalidArgument);
  PaddedBatchOptions wrong_rank;
  wrong_rank.padded_shapes = {{5, 1}, {}};
  EXPECT_EQ(code(ragged.PaddedBatch(3, wrong_rank)), absl::StatusCode::kInvalidArgument);
  PaddedBatchOptions below;
  below.padded_shapes = {{-2}, {}};
  EXPECT_EQ(code(ragged.PaddedBatch(3, below)), absl::StatusCode::kInvalidArgument);
  Element v{Tensor::FromVector<float>({1}, {1})};
  Element m{Tensor::FromVector<float>({1, 1}, {1})};
  Element i{Tensor::FromVector<int64_t>({1}, {1})};
  EXPECT_EQ(code(Dataset::FromElements({v, m}).PaddedBatch(2)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Dataset::FromElements({v, i}).PaddedBatch(2)), absl::StatusCode::kInvalidArgument);
}

TEST(UnbatchTest, InvertsBatch) {
  auto got = DrainDataset(Dataset::Range(0, 10).Batch(3).Unbatch());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto two = DrainDataset(Dataset::Range(1, 4).Map(Ragged).PaddedBatch(3).Unbatch());
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 3u);
  EXPECT_TRUE((*two)[0][0].Equals(Tensor::FromVector<int64_t>({3}, {1, 0, 0})));
  EXPECT_TRUE((*two)[2][1].Equals(Tensor::Scalar<float>(3)));
}

TEST(UnbatchTest, EmptyRowsSkippedBadElementsRejected) {
  Element empty{Tensor::FromVector<int64_t>({0}, std::vector<int64_t>{})};
  Element one{Tensor::FromVector<int64_t>({1}, {7})};
  auto got = DrainDataset(Dataset::FromElements({empty, one, empty}).Unbatch());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{7}));
  EXPECT_EQ(DrainDataset(Dataset::Range(0, 2).Unbatch()).status().code(),
            absl::StatusCode::kInvalidArgument);  // scalars
  Element mismatched{Tensor::FromVector<int64_t>({2}, {1, 2}),
                     Tensor::FromVector<int64_t>({1}, {1})};
  EXPECT_EQ(DrainDataset(Dataset::FromElements({mismatched}).Unbatch()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace asyncps::data
