// Prefetch: order, errors, and shutdown while the producer is blocked (run under ASan and
// TSan by scripts/run_tests.sh).

#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/time.h"
#include "core/sync.h"
#include "data/dataset.h"
#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::DrainDataset;
using testutil::Int64s;

constexpr absl::Duration kDeadline = absl::Seconds(30);

// Counts calls of a Map function; tests wait on the count with a deadline.
class CallCounter {
 public:
  void Add() {
    MutexLock lock(&mu_);
    ++calls_;
  }
  // True once at least n calls were made (false after a generous deadline).
  bool WaitFor(int n) {
    MutexLock lock(&mu_);
    target_ = n;
    return mu_.AwaitWithTimeout(absl::Condition(this, &CallCounter::Reached), kDeadline);
  }
  int calls() {
    MutexLock lock(&mu_);
    return calls_;
  }

 private:
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= target_; }

  Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(PrefetchTest, KeepsOrderAndEveryElement) {
  for (int buffer : {1, 2, 16}) {
    auto elements = DrainDataset(Dataset::Range(0, 500).Prefetch(buffer));
    ASSERT_TRUE(elements.ok()) << elements.status();
    std::vector<int64_t> values = Int64s(*elements);
    ASSERT_EQ(values.size(), 500u);
    for (int64_t i = 0; i < 500; ++i) ASSERT_EQ(values[i], i);
  }
  EXPECT_EQ(DrainDataset(Dataset::Range(0, 3).Prefetch(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PrefetchTest, EndOfDataRepeatsAndErrorsPassInOrder) {
  Dataset d = Dataset::Range(0, 4)
                  .Map([](Element e) -> absl::StatusOr<Element> {
                    if (*e[0].data<int64_t>() == 1) return absl::DataLossError("one");
                    return e;
                  })
                  .Prefetch(8);
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_TRUE((*it)->Next().ok());
  EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(*(*(*it)->Next())[0].data<int64_t>(), 2);
  EXPECT_EQ(*(*(*it)->Next())[0].data<int64_t>(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(IsEndOfData((*it)->Next().status()));
}

TEST(PrefetchTest, PrefetchInsideRepeatAndBatchPipelines) {
  Dataset d = Dataset::Range(0, 10).Prefetch(3).Shuffle(4, 9).Repeat(3).Batch(5).Prefetch(2);
  auto a = DrainDataset(d);
  auto b = DrainDataset(d);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 6u);
  for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE((*a)[i][0].Equals((*b)[i][0]));
}

TEST(PrefetchTest, DestroyedBeforeAnyNext) {
  for (int i = 0; i < 20; ++i) {
    auto it = Dataset::Range(0, 1000).Repeat().Prefetch(4).MakeIterator();
    ASSERT_TRUE(it.ok());
  }
}

// The producer fills the buffer from an endless source and then waits for room; destroying
// the iterator must wake and join it.
TEST(PrefetchTest, DestroyedWhileProducerBlocksOnAFullBuffer) {
  auto counter = std::make_shared<CallCounter>();
  Dataset d = Dataset::Range(0, 1).Repeat().Map([counter](Element e) -> absl::StatusOr<Element> {
    counter->Add();
    return e;
  });
  auto it = d.Prefetch(3).MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE((*it)->Next().ok());  // one taken: the producer refills to 3 and blocks
  ASSERT_TRUE(counter->WaitFor(4));
  it->reset();
  // It never asked the input for more than the buffer could hold.
  EXPECT_EQ(counter->calls(), 4);
}

// The producer is inside a slow input Next() when the iterator is destroyed: destruction
// waits for that call to return, and no further call starts.
TEST(PrefetchTest, DestroyedWhileTheSourceIsSlow) {
  auto counter = std::make_shared<CallCounter>();
  auto gate = std::make_shared<Notification>();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  Dataset d = Dataset::Range(0, 100).Map([=](Element e) -> absl::StatusOr<Element> {
    counter->Add();
    gate->WaitForNotification();
    finished->store(true);
    return e;
  });
  auto it = d.Prefetch(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE(counter->WaitFor(1));  // the producer is inside the slow call
  std::thread destroyer([&it] { it->reset(); });
  gate->Notify();
  destroyer.join();
  EXPECT_TRUE(finished->load());
  EXPECT_LE(counter->calls(), 3);  // at most the in-flight call plus a buffer's worth
}

TEST(PrefetchTest, ConsumerOnAnotherThreadThanTheCreator) {
  auto it = Dataset::Range(0, 200).Batch(7).Prefetch(2).MakeIterator();
  ASSERT_TRUE(it.ok());
  int64_t sum = 0;
  std::thread consumer([&] {
    while (true) {
      absl::StatusOr<Element> e = (*it)->Next();
      if (!e.ok()) break;
      for (int64_t v : (*e)[0].flat<int64_t>()) sum += v;
    }
  });
  consumer.join();
  EXPECT_EQ(sum, 199 * 200 / 2);
}

}  // namespace
}  // namespace asyncps::data
