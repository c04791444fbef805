// Sources in memory and every transform except Prefetch (prefetch_test.cc) and the file
// readers (their own tests).

#include "data/dataset.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::Drain;
using testutil::DrainDataset;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testutil::Int64s;

std::vector<int64_t> Values(const Dataset& d) {
  auto elements = DrainDataset(d);
  EXPECT_TRUE(elements.ok()) << elements.status();
  return elements.ok() ? Int64s(*elements) : std::vector<int64_t>{};
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

absl::Status IteratorError(const Dataset& d) {
  auto it = d.MakeIterator();
  return it.status();
}

TEST(DatasetTest, EndOfDataIsOutOfRangeAndRepeats) {
  auto it = Dataset::Range(0, 1).MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE((*it)->Next().ok());
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Element> e = (*it)->Next();
    EXPECT_TRUE(IsEndOfData(e.status())) << e.status();
  }
  EXPECT_FALSE(IsEndOfData(absl::InvalidArgumentError("x")));
  EXPECT_FALSE(IsEndOfData(absl::OkStatus()));
}

TEST(DatasetTest, Range) {
  EXPECT_THAT(Values(Dataset::Range(0, 5)), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(Values(Dataset::Range(3, 10, 3)), ElementsAre(3, 6, 9));
  EXPECT_THAT(Values(Dataset::Range(5, 0, -2)), ElementsAre(5, 3, 1));
  EXPECT_THAT(Values(Dataset::Range(5, 5)), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(INT64_MAX - 1, INT64_MAX, 5)), ElementsAre(INT64_MAX - 1));
  auto e = DrainDataset(Dataset::Range(0, 1));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)[0][0].dtype(), DType::kI64);
  EXPECT_EQ((*e)[0][0].rank(), 0);
  EXPECT_EQ(IteratorError(Dataset::Range(0, 5, 0)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, FromTensorSlicesSlicesAxisZero) {
  Tensor x = Tensor::FromVector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor y = Tensor::FromVector<int64_t>({7, 8, 9});
  auto elements = DrainDataset(Dataset::FromTensorSlices({x, y}));
  ASSERT_TRUE(elements.ok()) << elements.status();
  ASSERT_EQ(elements->size(), 3u);
  EXPECT_TRUE((*elements)[1][0].Equals(Tensor::FromVector<float>({2}, {3, 4})));
  EXPECT_TRUE((*elements)[2][1].Equals(Tensor::Scalar<int64_t>(9)));
}

TEST(DatasetTest, FromTensorSlicesRejectsMismatchedRowsAndScalars) {
  absl::Status s = IteratorError(
      Dataset::FromTensorSlices({Tensor(DType::kF32, {3, 2}), Tensor(DType::kF32, {4})}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("4 rows"));
  EXPECT_EQ(IteratorError(Dataset::FromTensorSlices({Tensor::Scalar<float>(1)})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(IteratorError(Dataset::FromTensorSlices({})).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, DefaultConstructedDatasetFailsClearly) {
  Dataset d;
  EXPECT_EQ(IteratorError(d).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(IteratorError(d.Map([](Element e) { return e; }).Repeat(2)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DatasetTest, IteratorOutlivesTheDatasetHandles) {
  std::unique_ptr<Iterator> it;
  {
    Tensor x = Tensor::FromVector<int64_t>({10, 11, 12});
    auto made = Dataset::FromTensorSlices({x})
                    .Map([](Element e) -> absl::StatusOr<Element> { return e; })
                    .Repeat(2)
                    .Shuffle(2, 1)
                    .Batch(2)
                    .MakeIterator();
    ASSERT_TRUE(made.ok());
    it = *std::move(made);
  }
  auto all = Drain(*it);
  ASSERT_TRUE(all.ok());
  int64_t sum = 0;
  for (const Element& e : *all) {
    for (int64_t v : e[0].flat<int64_t>()) sum += v;
  }
  EXPECT_EQ(sum, 2 * (10 + 11 + 12));
}

TEST(DatasetTest, ZipConcatenatesAndEndsWithTheShortest) {
  auto elements = DrainDataset(Dataset::Zip(
      {Dataset::Range(0, 5), Dataset::Range(10, 13).Map([](Element e) -> absl::StatusOr<Element> {
         e.push_back(Tensor::Scalar<float>(0.5f));
         return e;
       })}));
  ASSERT_TRUE(elements.ok());
  ASSERT_EQ(elements->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Element& e = (*elements)[i];
    ASSERT_EQ(e.size(), 3u);
    EXPECT_EQ(*e[0].data<int64_t>(), i);
    EXPECT_EQ(*e[1].data<int64_t>(), 10 + i);
    EXPECT_EQ(*e[2].data<float>(), 0.5f);
  }
  EXPECT_EQ(IteratorError(Dataset::Zip({})).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, MapTransformsAndItsErrorsPassThroughWithoutEndingIteration) {
  Dataset d = Dataset::Range(0, 4).Map([](Element e) -> absl::StatusOr<Element> {
    int64_t v = *e[0].data<int64_t>();
    if (v == 2) return absl::InvalidArgumentError("two is bad");
    return Element{Tensor::Scalar<int64_t>(v * 10)};
  });
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(*(*(*it)->Next())[0].data<int64_t>(), 0);
  EXPECT_EQ(*(*(*it)->Next())[0].data<int64_t>(), 10);
  absl::StatusOr<Element> bad = (*it)->Next();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*(*(*it)->Next())[0].data<int64_t>(), 30);
  EXPECT_TRUE(IsEndOfData((*it)->Next().status()));
}

TEST(DatasetTest, MapReturningOutOfRangeIsAnErrorNotASilentEnd) {
  Dataset d = Dataset::Range(0, 3).Map(
      [](Element) -> absl::StatusOr<Element> { return absl::OutOfRangeError("index 9"); });
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::Status s = (*it)->Next().status();
  EXPECT_FALSE(IsEndOfData(s));
  EXPECT_THAT(s.message(), HasSubstr("index 9"));
}

TEST(DatasetTest, ExceptionsFromUserFunctionsBecomeErrors) {
  Dataset mapped = Dataset::Range(0, 2).Map([](Element e) -> absl::StatusOr<Element> {
    if (*e[0].data<int64_t>() == 0) throw std::runtime_error("shape mismatch in torch");
    return e;
  });
  auto it = mapped.MakeIterator();
  ASSERT_TRUE(it.ok());
  absl::Status s = (*it)->Next().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("shape mismatch in torch"));
  EXPECT_TRUE((*it)->Next().ok());  // the next element is unaffected
  auto filtered = DrainDataset(Dataset::Range(0, 2).Filter(
      [](const Element&) -> absl::StatusOr<bool> { throw std::logic_error("pred threw"); }));
  EXPECT_EQ(filtered.status().code(), absl::StatusCode::kInternal);
  // Through a Prefetch thread too: the process must not terminate.
  auto prefetched = DrainDataset(mapped.Prefetch(2));
  EXPECT_EQ(prefetched.status().code(), absl::StatusCode::kInternal);
}

TEST(DatasetTest, Filter) {
  auto even = [](const Element& e) -> absl::StatusOr<bool> {
    return *e[0].data<int64_t>() % 2 == 0;
  };
  EXPECT_THAT(Values(Dataset::Range(0, 9).Filter(even)), ElementsAre(0, 2, 4, 6, 8));
  auto failing = [](const Element&) -> absl::StatusOr<bool> { return absl::DataLossError("pred"); };
  EXPECT_EQ(DrainDataset(Dataset::Range(0, 9).Filter(failing)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(DatasetTest, TakeAndSkip) {
  EXPECT_THAT(Values(Dataset::Range(0, 10).Take(3)), ElementsAre(0, 1, 2));
  EXPECT_THAT(Values(Dataset::Range(0, 2).Take(5)), ElementsAre(0, 1));
  EXPECT_THAT(Values(Dataset::Range(0, 4).Take(-1)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Values(Dataset::Range(0, 4).Take(0)), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(0, 10).Skip(7)), ElementsAre(7, 8, 9));
  EXPECT_THAT(Values(Dataset::Range(0, 3).Skip(5)), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(0, 3).Skip(-1)), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(0, 3).Skip(0)), ElementsAre(0, 1, 2));
}

TEST(DatasetTest, ShardsPartitionTheInput) {
  std::vector<int64_t> all;
  for (int i = 0; i < 3; ++i) {
    std::vector<int64_t> shard = Values(Dataset::Range(0, 10).Shard(3, i));
    for (size_t k = 0; k < shard.size(); ++k) EXPECT_EQ(shard[k], i + 3 * static_cast<int>(k));
    all.insert(all.end(), shard.begin(), shard.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, Iota(10));
  EXPECT_THAT(Values(Dataset::Range(0, 4).Shard(1, 0)), ElementsAre(0, 1, 2, 3));
  for (auto [n, i] : {std::pair{0, 0}, {3, 3}, {3, -1}}) {
    EXPECT_EQ(IteratorError(Dataset::Range(0, 4).Shard(n, i)).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

TEST(DatasetTest, Repeat) {
  EXPECT_THAT(Values(Dataset::Range(0, 3).Repeat(2)), ElementsAre(0, 1, 2, 0, 1, 2));
  EXPECT_THAT(Values(Dataset::Range(0, 3).Repeat(0)), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(0, 2).Repeat().Take(7)), ElementsAre(0, 1, 0, 1, 0, 1, 0));
  // Forever over nothing ends instead of spinning.
  EXPECT_THAT(Values(Dataset::Range(0, 0).Repeat()), ElementsAre());
  EXPECT_THAT(Values(Dataset::Range(0, 5)
                         .Filter([](const Element&) -> absl::StatusOr<bool> { return false; })
                         .Repeat()),
              ElementsAre());
}

// Counts how often the input is read; a Map in front of Cache.
Dataset Counted(int64_t n, std::shared_ptr<std::atomic<int>> reads, int64_t fail_at = -1) {
  return Dataset::Range(0, n).Map([reads, fail_at](Element e) -> absl::StatusOr<Element> {
    reads->fetch_add(1);
    if (*e[0].data<int64_t>() == fail_at) return absl::DataLossError("bad");
    return e;
  });
}

TEST(DatasetTest, CacheReadsTheInputOnceAcrossPassesAndIterators) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  Dataset cached = Counted(5, reads).Cache();
  EXPECT_THAT(Values(cached.Repeat(3)), ElementsAre(0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4));
  EXPECT_THAT(Values(cached), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(reads->load(), 5);
}

TEST(DatasetTest, CacheKeepsNothingFromPartialOrFailedPasses) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  Dataset cached = Counted(5, reads).Cache();
  EXPECT_THAT(Values(cached.Take(2)), ElementsAre(0, 1));  // stops early: nothing cached
  EXPECT_THAT(Values(cached), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(reads->load(), 2 + 5);
  EXPECT_THAT(Values(cached), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(reads->load(), 7);

  auto failing_reads = std::make_shared<std::atomic<int>>(0);
  Dataset failing = Counted(4, failing_reads, /*fail_at=*/2).Cache();
  auto it = failing.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_FALSE(Drain(**it).ok());
  EXPECT_FALSE(DrainDataset(failing).ok());  // the error is not cached away
  EXPECT_EQ(failing_reads->load(), 6);
}

TEST(DatasetTest, CacheFilledAndReadFromSeveralThreads) {
  auto reads = std::make_shared<std::atomic<int>>(0);
  Dataset cached = Counted(100, reads).Cache().Repeat(3);
  std::vector<std::vector<int64_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = Values(cached); });
  for (auto& t : threads) t.join();
  std::vector<int64_t> expected;
  for (int pass = 0; pass < 3; ++pass) {
    for (int64_t v : Iota(100)) expected.push_back(v);
  }
  for (int t = 0; t < 4; ++t) EXPECT_EQ(got[t], expected);
  EXPECT_GE(reads->load(), 100);
  EXPECT_LE(reads->load(), 400);  // at most one filling pass per thread
}

TEST(DatasetTest, BatchStacksComponents) {
  Tensor x = Tensor::FromVector<float>({5, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Tensor y = Tensor::FromVector<int64_t>({0, 1, 2, 3, 4});
  auto batches = DrainDataset(Dataset::FromTensorSlices({x, y}).Batch(2));
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 3u);
  EXPECT_TRUE((*batches)[0][0].Equals(Tensor::FromVector<float>({2, 2}, {0, 1, 2, 3})));
  EXPECT_TRUE((*batches)[1][1].Equals(Tensor::FromVector<int64_t>({2, 3})));
  EXPECT_TRUE((*batches)[2][0].Equals(Tensor::FromVector<float>({1, 2}, {8, 9})));  // remainder
  EXPECT_EQ((*batches)[2][1].shape(), Shape({1}));

  auto dropped = DrainDataset(Dataset::FromTensorSlices({x, y}).Batch(2, true));
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(dropped->size(), 2u);
  EXPECT_EQ(DrainDataset(Dataset::Range(0, 3).Batch(4, true))->size(), 0u);
  EXPECT_EQ(IteratorError(Dataset::Range(0, 3).Batch(0)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, BatchOfMismatchedShapesOrDtypesIsInvalidArgument) {
  auto shapes = DrainDataset(
      Dataset::FromElements({{Tensor(DType::kF32, {2})}, {Tensor(DType::kF32, {3})}}).Batch(2));
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shapes.status().message(), HasSubstr("[3]"));
  auto dtypes = DrainDataset(
      Dataset::FromElements({{Tensor(DType::kF32, {2})}, {Tensor(DType::kI32, {2})}}).Batch(2));
  EXPECT_EQ(dtypes.status().code(), absl::StatusCode::kInvalidArgument);
  auto arity =
      DrainDataset(Dataset::FromElements({{Tensor(DType::kF32, {2})},
                                          {Tensor(DType::kF32, {2}), Tensor(DType::kF32, {2})}})
                       .Batch(2));
  EXPECT_EQ(arity.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, ShuffleIsAPermutationDeterministicForASeed) {
  std::vector<int64_t> a = Values(Dataset::Range(0, 100).Shuffle(30, 7));
  std::vector<int64_t> b = Values(Dataset::Range(0, 100).Shuffle(30, 7));
  std::vector<int64_t> c = Values(Dataset::Range(0, 100).Shuffle(30, 8));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, Iota(100));
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, Iota(100));
  // A buffer of one is the identity.
  EXPECT_EQ(Values(Dataset::Range(0, 20).Shuffle(1, 3)), Iota(20));
  EXPECT_EQ(IteratorError(Dataset::Range(0, 3).Shuffle(0, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DatasetTest, ShuffleReshufflesEachRepeatPassDeterministically) {
  const int n = 50, passes = 4;
  std::vector<int64_t> all = Values(Dataset::Range(0, n).Shuffle(n, 42).Repeat(passes));
  ASSERT_EQ(all.size(), static_cast<size_t>(n * passes));
  std::set<std::vector<int64_t>> orders;
  for (int p = 0; p < passes; ++p) {
    std::vector<int64_t> pass(all.begin() + p * n, all.begin() + (p + 1) * n);
    orders.insert(pass);
    std::sort(pass.begin(), pass.end());
    EXPECT_EQ(pass, Iota(n)) << "pass " << p << " is not a permutation";
  }
  EXPECT_EQ(orders.size(), static_cast<size_t>(passes)) << "a pass repeated an earlier order";
  EXPECT_EQ(Values(Dataset::Range(0, n).Shuffle(n, 42).Repeat(passes)), all);
}

// A full-buffer shuffle of 5 elements: every element lands in every position sometimes.
TEST(DatasetTest, ShuffleReachesEveryPosition) {
  std::set<std::pair<int64_t, size_t>> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<int64_t> v = Values(Dataset::Range(0, 5).Shuffle(5, seed));
    for (size_t i = 0; i < v.size(); ++i) seen.insert({v[i], i});
  }
  EXPECT_EQ(seen.size(), 25u);
}

TEST(DatasetTest, ConcurrentIteratorsOfOneDatasetAreIndependent) {
  std::atomic<int> calls{0};
  Dataset d = Dataset::Range(0, 1000)
                  .Map([&calls](Element e) -> absl::StatusOr<Element> {
                    calls.fetch_add(1, std::memory_order_relaxed);
                    return e;
                  })
                  .Shuffle(100, 5)
                  .Batch(10);
  std::vector<std::vector<int64_t>> sums(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Dataset copy = d;  // copies are cheap and share the description
      auto batches = DrainDataset(copy);
      ASSERT_TRUE(batches.ok());
      for (const Element& b : *batches) {
        int64_t s = 0;
        for (int64_t v : b[0].flat<int64_t>()) s += v;
        sums[t].push_back(s);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 4000);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(sums[t], sums[0]);
  EXPECT_EQ(std::accumulate(sums[0].begin(), sums[0].end(), int64_t{0}), 999 * 1000 / 2);
}

}  // namespace
}  // namespace asyncps::data
