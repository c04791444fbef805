// Interleave and FlatMap: tf.data's order, the parallel form's identical order, errors in
// place, bad arguments, sharding of the input only, and shutdown mid-flight.

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>

#include "core/sync.h"
#include "data/dataset.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace interleave_test_internal {
namespace {

using testutil::DrainDataset;
using testutil::Int64s;

int64_t Value(const Element& e) { return *e[0].data<int64_t>(); }

// x -> x repeated `times` times.
std::function<absl::StatusOr<Dataset>(Element)> Repeated(int64_t times) {
  return [times](Element e) -> absl::StatusOr<Dataset> {
    return Dataset::FromElements({e}).Repeat(times);
  };
}
// x -> 0, 1, ..., x - 1.
absl::StatusOr<Dataset> Upto(Element e) { return Dataset::Range(0, Value(e)); }

TEST(InterleaveTest, TfDataDocumentationExample) {
  // tf.data.Dataset.range(1, 6).interleave(lambda x: from_tensors(x).repeat(6), 2, 4)
  auto got = DrainDataset(Dataset::Range(1, 6).Interleave(Repeated(6), 2, 4));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3,
                                                3, 4, 4, 4, 4, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5}));
}

TEST(InterleaveTest, ParallelGivesTheSequentialOrder) {
  // Inner datasets of lengths 0..11, so slots end and refill at different times.
  for (int64_t cycle : {1, 2, 3, 5}) {
    for (int64_t block : {1, 2, 4}) {
      auto expected = DrainDataset(Dataset::Range(0, 12).Interleave(Upto, cycle, block));
      ASSERT_TRUE(expected.ok());
      ASSERT_EQ(expected->size(), 66u);
      for (int64_t p : {int64_t{1}, int64_t{2}, kAutotune}) {
        auto got = DrainDataset(Dataset::Range(0, 12).Interleave(Upto, cycle, block, p));
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(Int64s(*got), Int64s(*expected))
            << "cycle " << cycle << " block " << block << " parallel " << p;
      }
    }
  }
}

TEST(InterleaveTest, FlatMapConcatenates) {
  auto got = DrainDataset(Dataset::Range(0, 4).FlatMap(Upto));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{0, 0, 1, 0, 1, 2}));
}

TEST(InterleaveTest, FunctionErrorsAreReturnedInPlace) {
  auto fn = [](Element e) -> absl::StatusOr<Dataset> {
    if (Value(e) == 1) return absl::NotFoundError("no file 1");
    if (Value(e) == 2) throw std::runtime_error("two");
    if (Value(e) == 3) return absl::OutOfRangeError("three");
    return Dataset::FromElements({e}).Repeat(2);
  };
  for (int64_t p : {int64_t{0}, int64_t{2}}) {
    auto it = Dataset::Range(0, 5).Interleave(fn, 1, 1, p).MakeIterator();
    ASSERT_TRUE(it.ok());
    EXPECT_EQ(Value(*(*it)->Next()), 0);
    EXPECT_EQ(Value(*(*it)->Next()), 0);
    EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kInternal);
    EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kInternal);  // not an end
    EXPECT_EQ(Value(*(*it)->Next()), 4);
    EXPECT_EQ(Value(*(*it)->Next()), 4);
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(IsEndOfData((*it)->Next().status()));
  }
}

TEST(InterleaveTest, InnerErrorsAreReturnedInPlace) {
  auto fn = [](Element e) -> absl::StatusOr<Dataset> {
    const int64_t x = Value(e);
    return Dataset::Range(0, 3).Map([x](Element i) -> absl::StatusOr<Element> {
      if (x == 1 && Value(i) == 1) return absl::DataLossError("bad record");
      return Element{Tensor::Scalar<int64_t>(10 * x + Value(i))};
    });
  };
  for (int64_t p : {int64_t{0}, int64_t{1}, int64_t{2}}) {
    auto it = Dataset::Range(0, 2).Interleave(fn, 2, 1, p).MakeIterator();
    ASSERT_TRUE(it.ok());
    std::vector<int64_t> seen;
    int errors = 0;
    while (true) {
      absl::StatusOr<Element> e = (*it)->Next();
      if (IsEndOfData(e.status())) break;
      if (!e.ok()) {
        EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
        ++errors;
        continue;
      }
      seen.push_back(Value(*e));
    }
    EXPECT_EQ(errors, 1);
    // The error takes no place in the block: slot 1 gives 12 right after it.
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 10, 1, 12, 2})) << "parallel " << p;
  }
}

TEST(InterleaveTest, BadArgumentsFailMakeIterator) {
  const Dataset in = Dataset::Range(0, 3);
  for (auto d : {in.Interleave(Upto, 0), in.Interleave(Upto, -3), in.Interleave(Upto, 2, 0),
                 in.Interleave(Upto, 2, -1), in.Interleave(Upto, 2, 1, -5),
                 in.Interleave(nullptr, 2), in.FlatMap(nullptr)}) {
    EXPECT_EQ(d.MakeIterator().status().code(), absl::StatusCode::kInvalidArgument);
  }
  auto got = DrainDataset(in.Interleave(Upto, kAutotune, 1, kAutotune));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 3u);  // 0 + 1 + 2 elements
}

// A split shards the input (the list of files, typically), never the inner datasets.
TEST(InterleaveTest, SplitAppliesToTheInputOnly) {
  auto it = Dataset::Range(0, 5).FlatMap(Upto).MakeSplitIterator({1, 5, 2});
  ASSERT_TRUE(it.ok());
  auto got = testutil::Drain(**it);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{0, 0, 1, 2}));  // inputs 1 and 3
}

TEST(InterleaveTest, DestroyedWhileInnerReadsBlock) {
  auto gate = std::make_shared<Notification>();
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto fn = [=](Element e) -> absl::StatusOr<Dataset> {
    return Dataset::FromElements({e}).Repeat().Map([=](Element x) -> absl::StatusOr<Element> {
      if (calls->fetch_add(1) >= 8) gate->WaitForNotification();
      return x;
    });
  };
  auto it = Dataset::Range(0, 100).Interleave(fn, 4, 2, 3).MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE((*it)->Next().ok());
  std::thread destroyer([&it] { it->reset(); });
  gate->Notify();
  destroyer.join();
  EXPECT_GE(calls->load(), 1);
}

TEST(InterleaveTest, DestroyedBeforeAnyNext) {
  for (int i = 0; i < 10; ++i) {
    auto it = Dataset::Range(0, 1000).Interleave(Repeated(-1), 4, 2, 4).MakeIterator();
    ASSERT_TRUE(it.ok());
  }
}

}  // namespace
}  // namespace interleave_test_internal
}  // namespace asyncps::data
