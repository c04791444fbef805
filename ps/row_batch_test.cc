#include "ps/row_batch.h"

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps::ps {
namespace {

Tensor Ids64(std::vector<int64_t> ids) { return Tensor::FromVector(ids); }
Tensor Ids32(std::vector<int32_t> ids) { return Tensor::FromVector(ids); }

TEST(CheckRowIdsTest, AcceptsIdsInRangeOfEitherWidth) {
  EXPECT_TRUE(CheckRowIds(Ids64({0, 4, 2, 4}), 5, "t").ok());
  EXPECT_TRUE(CheckRowIds(Ids32({0, 4, 2, 4}), 5, "t").ok());
  EXPECT_TRUE(CheckRowIds(Ids64({}), 0, "t").ok());
  // i32 ids against a table of more rows than an i32 can name.
  EXPECT_TRUE(CheckRowIds(Ids32({std::numeric_limits<int32_t>::max()}), int64_t{1} << 40, "t").ok());
}

// The vectorised check runs over fixed-length chunks and a scalar tail: a bad id is found in
// either, wherever it sits, for both widths and both signs.
TEST(CheckRowIdsTest, FindsABadIdAnywhereAndNamesIt) {
  constexpr int64_t kRows = 1000;
  for (int64_t n : {1, 31, 32, 33, 100, 257}) {
    for (int64_t at = 0; at < n; at += 7) {
      for (int64_t bad : {kRows, int64_t{-1}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
        std::vector<int64_t> ids(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 37) % kRows;
        ids[static_cast<size_t>(at)] = bad;
        const absl::Status s = CheckRowIds(Ids64(ids), kRows, "emb");
        EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << "n " << n << " at " << at << " id " << bad;
        EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s;
        EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
      }
      for (int32_t bad : {int32_t{kRows}, int32_t{-1}, std::numeric_limits<int32_t>::min()}) {
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37) % kRows);
        ids[static_cast<size_t>(at)] = bad;
        EXPECT_EQ(CheckRowIds(Ids32(ids), kRows, "emb").code(), absl::StatusCode::kOutOfRange)
            << "n " << n << " at " << at << " id " << bad;
      }
    }
  }
  EXPECT_EQ(CheckRowIds(Ids64({0}), 0, "t").code(), absl::StatusCode::kOutOfRange);
}

TEST(CheckRowIdsTest, RejectsIdsOfAnotherDtypeOrRank) {
  EXPECT_EQ(CheckRowIds(Tensor::FromVector<float>({1}, {0.0f}), 5, "t").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckRowIds(Tensor(DType::kI64, {1, 1}), 5, "t").code(), absl::StatusCode::kInvalidArgument);
}

TEST(RowIdsTest, ViewsI64AndWidensI32) {
  const Tensor wide = Ids64({3, 1, 3});
  const RowIds a(wide);
  EXPECT_EQ(a.span().data(), wide.data<int64_t>());
  EXPECT_EQ(std::vector<int64_t>(a.span().begin(), a.span().end()), (std::vector<int64_t>{3, 1, 3}));
  const RowIds b(Ids32({7, -0, 2}));
  EXPECT_EQ(std::vector<int64_t>(b.span().begin(), b.span().end()), (std::vector<int64_t>{7, 0, 2}));
}

TEST(StripeGroupsTest, GroupsPositionsByStripeKeepingRequestOrder) {
  const std::vector<int64_t> rows = {kRowStripes + 1, 1, 0, 2 * kRowStripes + 1, 1, kRowStripes};
  const StripeGroups g(rows);
  EXPECT_EQ(g.begin[0], 0u);
  EXPECT_EQ(g.begin[kRowStripes], rows.size());
  // Stripe 0: positions 2 and 5; stripe 1: positions 0, 1, 3, 4 in that order.
  EXPECT_EQ(std::vector<uint32_t>(g.order.begin() + g.begin[0], g.order.begin() + g.begin[1]),
            (std::vector<uint32_t>{2, 5}));
  EXPECT_EQ(std::vector<uint32_t>(g.order.begin() + g.begin[1], g.order.begin() + g.begin[2]),
            (std::vector<uint32_t>{0, 1, 3, 4}));
  for (int s = 2; s < kRowStripes; ++s) EXPECT_EQ(g.begin[s], g.begin[s + 1]);
}

// Against a plain reference (std::map, sums in request order), over batches from all-distinct
// to all-equal, including sizes where the open-addressing table fills and wraps around.
TEST(SummedRowGradientsTest, SumsDuplicatesInRequestOrderAndGroupsByStripe) {
  constexpr int64_t kWidth = 5;
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t n : {0, 1, 2, 15, 16, 17, 1000, 5000}) {
    for (int64_t distinct_ids : {int64_t{1}, int64_t{3}, n / 2 + 1, 4 * n + 1}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " over " << distinct_ids << " ids");
      std::uniform_int_distribution<int64_t> pick(0, distinct_ids - 1);
      std::vector<int64_t> rows(static_cast<size_t>(n));
      // Spread over a wide id space (and sequential runs) so the hash sees both.
      for (int64_t i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = i % 3 == 0 ? i / 3 : pick(rng) * 7919;
      std::vector<float> grads(static_cast<size_t>(n * kWidth));
      for (float& x : grads) x = value(rng);

      std::map<int64_t, std::vector<float>> want;
      for (int64_t i = 0; i < n; ++i) {
        auto [it, fresh] = want.try_emplace(rows[static_cast<size_t>(i)]);
        const float* g = grads.data() + i * kWidth;
        if (fresh) {
          it->second.assign(g, g + kWidth);
        } else {
          for (int64_t k = 0; k < kWidth; ++k) it->second[static_cast<size_t>(k)] += g[k];
        }
      }

      const SummedRowGradients summed(rows, grads.data(), kWidth);
      EXPECT_EQ(summed.num_distinct(), want.size());
      std::set<int64_t> seen;
      for (int s = 0; s < kRowStripes; ++s) {
        ASSERT_EQ(summed.rows(s).size(), summed.grads(s).size());
        for (size_t j = 0; j < summed.rows(s).size(); ++j) {
          const int64_t row = summed.rows(s)[j];
          EXPECT_EQ(row % kRowStripes, s);
          EXPECT_TRUE(seen.insert(row).second) << "row " << row << " listed twice";
          ASSERT_EQ(want.count(row), 1u) << row;
          const float* g = summed.grads(s)[j];
          // Bit-exact: the same additions in the same order.
          EXPECT_EQ(std::vector<float>(g, g + kWidth), want[row]) << "row " << row;
        }
      }
      EXPECT_EQ(seen.size(), want.size());
    }
  }
}

// A row that occurs once is applied from the request's own bytes, not a copy.
TEST(SummedRowGradientsTest, SingleOccurrencesPointIntoTheRequest) {
  const std::vector<int64_t> rows = {4, 9, 4};
  const std::vector<float> grads = {1, 2, 3, 4, 5, 6};
  const SummedRowGradients summed(rows, grads.data(), 2);
  ASSERT_EQ(summed.rows(9 % kRowStripes).size(), 1u);
  EXPECT_EQ(summed.grads(9 % kRowStripes)[0], grads.data() + 2);
  ASSERT_EQ(summed.rows(4).size(), 1u);
  EXPECT_EQ(std::vector<float>(summed.grads(4)[0], summed.grads(4)[0] + 2), (std::vector<float>{6, 8}));
}

// The dedup pass checks every float for NaN and infinity: in a row that occurs once, in either
// occurrence of a repeated row, in a row's tail past the vectorised chunks; extreme finite
// values and subnormals pass.
TEST(SummedRowGradientsTest, FindsNonFiniteFloatsInAnyOccurrence) {
  constexpr int64_t kWidth = 19;  // one chunk of 16 and a tail of 3
  const std::vector<int64_t> rows = {5, 40, 5, 7, 5};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> clean(rows.size() * kWidth, 1.0f);
  clean[3] = std::numeric_limits<float>::max();
  clean[kWidth + 4] = -std::numeric_limits<float>::max();
  clean[2 * kWidth + 5] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(SummedRowGradients(rows, clean.data(), kWidth).all_finite());
  for (size_t position : {size_t{0}, size_t{1}, size_t{2}, size_t{4}}) {
    for (int64_t column : {int64_t{0}, int64_t{15}, int64_t{16}, kWidth - 1}) {
      for (float bad : {nan, inf, -inf, -nan}) {
        SCOPED_TRACE(testing::Message() << "position " << position << " column " << column << " value " << bad);
        std::vector<float> grads = clean;
        grads[position * kWidth + static_cast<size_t>(column)] = bad;
        const SummedRowGradients summed(rows, grads.data(), kWidth);
        EXPECT_FALSE(summed.all_finite());
        // Still summed as usual (a PS that allows non-finite gradients applies them).
        EXPECT_EQ(summed.num_distinct(), 3u);
      }
    }
  }
}

// A batch keeps the request's tensors alive and sums as SummedRowGradients does, from i32 ids too.
TEST(RowGradientBatchTest, OwnsItsViewsAndWidensI32Ids) {
  const float* data = nullptr;
  std::unique_ptr<RowGradientBatch> batch;
  {
    Tensor grads = Tensor::FromVector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
    data = grads.data<float>();
    batch = std::make_unique<RowGradientBatch>(Ids32({4, 9, 4}), grads, 2);
  }
  EXPECT_TRUE(batch->all_finite());
  EXPECT_EQ(batch->width(), 2);
  const SummedRowGradients& summed = batch->summed();
  EXPECT_EQ(summed.num_distinct(), 2u);
  ASSERT_EQ(summed.rows(9).size(), 1u);
  EXPECT_EQ(summed.grads(9)[0], data + 2);  // the request's own row, still alive
  EXPECT_EQ(std::vector<float>(summed.grads(9)[0], summed.grads(9)[0] + 2), (std::vector<float>{3, 4}));
  ASSERT_EQ(summed.rows(4).size(), 1u);
  EXPECT_EQ(std::vector<float>(summed.grads(4)[0], summed.grads(4)[0] + 2), (std::vector<float>{6, 8}));
}

}  // namespace
}  // namespace asyncps::ps
