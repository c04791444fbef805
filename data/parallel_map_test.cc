// Parallel Map: the sequential Map's order, errors in place, parallelism that really runs
// concurrently, autotuning, and shutdown with calls in flight (run under TSan too).

#include <atomic>
#include <memory>
#include <stdexcept>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "data/dataset.h"
#include "data/dataset_node.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace parallel_map_test_internal {
namespace {

using testutil::DrainDataset;
using testutil::Int64s;

constexpr absl::Duration kDeadline = absl::Seconds(30);

int64_t Value(const Element& e) { return *e[0].data<int64_t>(); }

// Tracks calls in flight: how many at once at most, and a rendezvous of n calls.
class Concurrency {
 public:
  void Enter() {
    MutexLock lock(&mu_);
    ++now_;
    ++calls_;
    max_ = std::max(max_, now_);
  }
  void Leave() {
    MutexLock lock(&mu_);
    --now_;
  }
  // True once n calls are in flight together (false after the deadline).
  bool AwaitInFlight(int n) {
    MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return now_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kDeadline);
  }
  // True once n calls have entered (false after the deadline). A barrier on arrivals: a
  // barrier on calls in flight would strand the others once the first one leaves.
  bool AwaitCalls(int n) {
    MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kDeadline);
  }
  int max() {
    MutexLock lock(&mu_);
    return max_;
  }
  int calls() {
    MutexLock lock(&mu_);
    return calls_;
  }

 private:
  Mutex mu_;
  int now_ ABSL_GUARDED_BY(mu_) = 0;
  int max_ ABSL_GUARDED_BY(mu_) = 0;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// Work that varies per element, so calls finish out of order.
void Spin(int64_t units) {
  volatile int64_t x = 0;
  for (int64_t i = 0; i < units * 2000; ++i) x = x + i;
}

TEST(ParallelMapTest, SameOrderAsSequentialMap) {
  auto fn = [](Element e) -> absl::StatusOr<Element> {
    const int64_t v = Value(e);
    Spin((v * 7) % 5);
    return Element{Tensor::Scalar<int64_t>(v * v)};
  };
  auto expected = DrainDataset(Dataset::Range(0, 300).Map(fn));
  ASSERT_TRUE(expected.ok());
  for (int64_t p : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{16}, kAutotune}) {
    auto got = DrainDataset(Dataset::Range(0, 300).Map(fn, p));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(Int64s(*got), Int64s(*expected)) << "num_parallel_calls " << p;
  }
}

TEST(ParallelMapTest, ErrorsAndEndOfDataInOrder) {
  Dataset d = Dataset::Range(0, 9).Map(
      [](Element e) -> absl::StatusOr<Element> {
        const int64_t v = Value(e);
        if (v == 2) return absl::DataLossError("two");
        if (v == 4) throw std::runtime_error("four");
        if (v == 6) return absl::OutOfRangeError("six");
        Spin(9 - v);
        return e;
      },
      4);
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  for (int64_t v = 0; v < 9; ++v) {
    absl::StatusOr<Element> e = (*it)->Next();
    if (v == 2) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
    } else if (v == 4) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
      EXPECT_NE(e.status().message().find("four"), absl::string_view::npos);
    } else if (v == 6) {
      EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);  // not a silent end
    } else {
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ(Value(*e), v);
    }
  }
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(IsEndOfData((*it)->Next().status()));
}

TEST(ParallelMapTest, InputErrorsPassInOrder) {
  Dataset d = Dataset::Range(0, 5)
                  .Map([](Element e) -> absl::StatusOr<Element> {
                    if (Value(e) == 1) return absl::DataLossError("bad record");
                    return e;
                  })
                  .Map([](Element e) -> absl::StatusOr<Element> { return e; }, 3);
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_EQ(Value(*(*it)->Next()), 0);
  EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kDataLoss);
  for (int64_t v = 2; v < 5; ++v) EXPECT_EQ(Value(*(*it)->Next()), v);
  EXPECT_TRUE(IsEndOfData((*it)->Next().status()));
}

TEST(ParallelMapTest, BadArgumentsFailMakeIterator) {
  auto id = [](Element e) -> absl::StatusOr<Element> { return e; };
  for (int64_t p : {int64_t{0}, int64_t{-2}, int64_t{-100}}) {
    EXPECT_EQ(Dataset::Range(0, 3).Map(id, p).MakeIterator().status().code(),
              absl::StatusCode::kInvalidArgument)
        << p;
  }
  EXPECT_EQ(Dataset::Range(0, 3).Map(nullptr, 2).MakeIterator().status().code(),
            absl::StatusCode::kInvalidArgument);
  // The input's own error comes through too.
  EXPECT_EQ(Dataset::Range(0, 3, 0).Map(id, 2).MakeIterator().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DrainDataset(Dataset::Range(0, 0).Map(id, 4))->empty());
}

// num_parallel_calls calls really run at once: each of the first four waits for the other three.
TEST(ParallelMapTest, RunsNumParallelCallsAtOnce) {
  auto c = std::make_shared<Concurrency>();
  Dataset d = Dataset::Range(0, 8).Map(
      [c](Element e) -> absl::StatusOr<Element> {
        c->Enter();
        const bool together = Value(e) >= 4 || c->AwaitCalls(4);
        c->Leave();
        if (!together) return absl::DeadlineExceededError("calls did not overlap");
        return e;
      },
      4);
  auto got = DrainDataset(d);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Int64s(*got), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_LE(c->max(), 4);
}

// A costly function that keeps the caller waiting gets a second thread: element 40 cannot
// finish until element 41's call has started beside it.
TEST(ParallelMapTest, AutotuneAddsThreadsForACostlyFunction) {
  if (internal::HardwareThreads() < 2) GTEST_SKIP() << "one hardware thread";
  auto c = std::make_shared<Concurrency>();
  Dataset d = Dataset::Range(0, 60).Map(
      [c](Element e) -> absl::StatusOr<Element> {
        const int64_t v = Value(e);
        c->Enter();
        bool ok = true;
        if (v == 40) {
          ok = c->AwaitCalls(42);  // element 41's call has started
        } else {
          const absl::Time until = absl::Now() + absl::Microseconds(200);  // a costly call
          while (absl::Now() < until) {
          }
        }
        c->Leave();
        if (!ok) return absl::DeadlineExceededError("no second thread");
        return e;
      },
      kAutotune);
  auto got = DrainDataset(d);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 60u);
  EXPECT_LE(c->max(), internal::HardwareThreads());
}

// A function far below the cost floor stays on one thread: no two calls ever overlap.
TEST(ParallelMapTest, AutotuneKeepsACheapFunctionOnOneThread) {
  auto c = std::make_shared<Concurrency>();
  Dataset d = Dataset::Range(0, 2000).Map(
      [c](Element e) -> absl::StatusOr<Element> {
        c->Enter();
        c->Leave();
        return e;
      },
      kAutotune);
  auto got = DrainDataset(d);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 2000u);
  EXPECT_EQ(c->max(), 1);
}

TEST(ParallelMapTest, DestroyedBeforeAnyNext) {
  for (int i = 0; i < 20; ++i) {
    auto it = Dataset::Range(0, 1)
                  .Repeat()
                  .Map([](Element e) -> absl::StatusOr<Element> { return e; }, 4)
                  .MakeIterator();
    ASSERT_TRUE(it.ok());
  }
}

// Destroyed while every thread is inside the function: destruction waits for the calls, and
// reads no more than num_parallel_calls elements ahead.
TEST(ParallelMapTest, DestroyedWithCallsInFlight) {
  auto c = std::make_shared<Concurrency>();
  auto gate = std::make_shared<Notification>();
  auto finished = std::make_shared<std::atomic<int>>(0);
  Dataset d = Dataset::Range(0, 1).Repeat().Map(
      [=](Element e) -> absl::StatusOr<Element> {
        c->Enter();
        gate->WaitForNotification();
        c->Leave();
        finished->fetch_add(1);
        return e;
      },
      3);
  auto it = d.MakeIterator();
  ASSERT_TRUE(it.ok());
  ASSERT_TRUE(c->AwaitInFlight(3));
  std::thread destroyer([&it] { it->reset(); });
  gate->Notify();
  destroyer.join();
  EXPECT_EQ(finished->load(), c->calls());
  EXPECT_EQ(c->calls(), 3);
}

TEST(ParallelMapTest, InsidePrefetchShuffleBatchPipelines) {
  auto fn = [](Element e) -> absl::StatusOr<Element> { return e; };
  Dataset a = Dataset::Range(0, 50).Map(fn, 3).Shuffle(8, 1).Repeat(2).Batch(4).Prefetch(2);
  Dataset b = Dataset::Range(0, 50).Map(fn).Shuffle(8, 1).Repeat(2).Batch(4).Prefetch(2);
  auto x = DrainDataset(a);
  auto y = DrainDataset(b);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_EQ(x->size(), y->size());
  for (size_t i = 0; i < x->size(); ++i) EXPECT_TRUE((*x)[i][0].Equals((*y)[i][0]));
}

}  // namespace
}  // namespace parallel_map_test_internal
}  // namespace asyncps::data
