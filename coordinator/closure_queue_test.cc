#include "coordinator/closure_queue.h"

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/barrier.h"
#include "core/sync.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

// Ports the spirit of TensorFlow's coordinator_test.py ClosureQueue tests. Blocking is
// observed through notifications, never through sleeps: "it returned" waits up to kEventually
// (only reached if the code is broken), "it is still blocked" watches for kBriefly, which a
// correct queue can never fail however slow the machine is.

namespace asyncps {
namespace {

constexpr absl::Duration kEventually = absl::Seconds(30);
constexpr absl::Duration kBriefly = absl::Milliseconds(50);

std::shared_ptr<Closure> MakeClosure(uint64_t id) {
  auto closure = std::make_shared<Closure>();
  closure->id = id;
  closure->function = "train_step";
  return closure;
}

// Runs `fn` on its own thread and lets the test observe whether it has returned.
template <typename T>
class Async {
 public:
  explicit Async(std::function<T()> fn)
      : thread_([this, fn = std::move(fn)] {
          result_ = fn();
          returned_.Notify();
        }) {}
  ~Async() { thread_.join(); }

  bool ReturnedWithin(absl::Duration timeout) {
    return returned_.WaitForNotificationWithTimeout(timeout);
  }
  // Only after ReturnedWithin() said true.
  const T& result() const { return *result_; }

 private:
  Notification returned_;
  std::optional<T> result_;
  std::thread thread_;  // last, so it starts after the members it uses exist
};

absl::StatusCode FetchCode(const std::shared_ptr<Closure>& closure) {
  return closure->output.Fetch(kEventually).status().code();
}

TEST(ClosureQueueTest, BasicPutGetFinishWait) {
  ClosureQueue queue(10);
  EXPECT_EQ(queue.Done().value(), true);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  EXPECT_EQ(queue.queued(), 2u);
  EXPECT_EQ(queue.Done().value(), false);

  std::shared_ptr<Closure> first = queue.Get();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->id, 1u);  // FIFO
  EXPECT_EQ(queue.queued(), 1u);
  EXPECT_EQ(queue.in_flight(), 1u);

  first->output.SetReady({});
  queue.MarkFinished();
  std::shared_ptr<Closure> second = queue.Get();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->id, 2u);
  EXPECT_EQ(queue.Done().value(), false);
  second->output.SetReady({});
  queue.MarkFinished();

  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(queue.Done().value(), true);
  EXPECT_EQ(queue.queued(), 0u);
  EXPECT_EQ(queue.in_flight(), 0u);
}

TEST(ClosureQueueTest, GetTimesOutWhenEmpty) {
  ClosureQueue queue(10);
  EXPECT_EQ(queue.Get(absl::Milliseconds(1)), nullptr);
  EXPECT_EQ(queue.in_flight(), 0u);
}

TEST(ClosureQueueTest, PutBlocksWhenFullUntilGetFreesASlot) {
  ClosureQueue queue(2);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());

  Async<absl::Status> put([&] { return queue.Put(MakeClosure(3)); });
  EXPECT_FALSE(put.ReturnedWithin(kBriefly));
  EXPECT_EQ(queue.queued(), 2u);

  std::shared_ptr<Closure> got = queue.Get();
  ASSERT_NE(got, nullptr);
  ASSERT_TRUE(put.ReturnedWithin(kEventually));
  EXPECT_TRUE(put.result().ok());
  EXPECT_EQ(queue.queued(), 2u);
  queue.MarkFinished();
}

TEST(ClosureQueueTest, WaitBlocksUntilAllFinished) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);

  Async<absl::Status> wait([&] { return queue.Wait(); });
  EXPECT_FALSE(wait.ReturnedWithin(kBriefly));  // one queued, one in flight

  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFinished();
  EXPECT_FALSE(wait.ReturnedWithin(kBriefly));  // one still in flight

  queue.MarkFinished();
  ASSERT_TRUE(wait.ReturnedWithin(kEventually));
  EXPECT_TRUE(wait.result().ok());
}

TEST(ClosureQueueTest, FirstErrorRaisedOnceByWaitThenCleared) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  std::shared_ptr<Closure> got = queue.Get();
  ASSERT_NE(got, nullptr);
  got->output.SetFailed(absl::InternalError("boom"));
  queue.MarkFailed(absl::InternalError("boom"));

  EXPECT_EQ(queue.Wait(), absl::InternalError("boom"));
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(queue.Done().value(), true);
}

TEST(ClosureQueueTest, SecondErrorWhilePendingIsDropped) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("first"));
  queue.MarkFailed(absl::InvalidArgumentError("second"));

  EXPECT_EQ(queue.Wait(), absl::InternalError("first"));
  EXPECT_TRUE(queue.Wait().ok());
}

TEST(ClosureQueueTest, QueuedClosuresCancelledOnError) {
  ClosureQueue queue(10);
  std::vector<std::shared_ptr<Closure>> closures;
  for (uint64_t id = 1; id <= 4; ++id) {
    closures.push_back(MakeClosure(id));
    ASSERT_TRUE(queue.Put(closures.back()).ok());
  }
  std::shared_ptr<Closure> failing = queue.Get();
  ASSERT_EQ(failing, closures[0]);
  failing->output.SetFailed(absl::InternalError("boom"));
  queue.MarkFailed(absl::InternalError("boom"));

  // Cancelled as soon as the error happened, before anyone raised it.
  EXPECT_EQ(queue.queued(), 0u);
  for (size_t i = 1; i < closures.size(); ++i) {
    EXPECT_EQ(closures[i]->output.state(), RemoteValue::State::kCancelled);
    absl::Status status = closures[i]->output.Fetch().status();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
    EXPECT_NE(status.message().find("boom"), absl::string_view::npos) << status;
  }
  EXPECT_EQ(closures[0]->output.Fetch().status(), absl::InternalError("boom"));
  EXPECT_EQ(queue.Wait(), absl::InternalError("boom"));
}

TEST(ClosureQueueTest, WaitWithErrorWaitsForClosuresInFlight) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("boom"));

  Async<absl::Status> wait([&] { return queue.Wait(); });
  EXPECT_FALSE(wait.ReturnedWithin(kBriefly));  // the other closure is still running
  queue.MarkFinished();
  ASSERT_TRUE(wait.ReturnedWithin(kEventually));
  EXPECT_EQ(wait.result(), absl::InternalError("boom"));
}

TEST(ClosureQueueTest, ConcurrentWaitersRaiseTheErrorExactlyOnce) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("boom"));
  {
    Async<absl::Status> a([&] { return queue.Wait(); });
    Async<absl::Status> b([&] { return queue.Wait(); });
    queue.MarkFinished();
    ASSERT_TRUE(a.ReturnedWithin(kEventually));
    ASSERT_TRUE(b.ReturnedWithin(kEventually));
    EXPECT_EQ(a.result().ok() + b.result().ok(), 1);
    EXPECT_EQ(a.result().ok() ? b.result() : a.result(), absl::InternalError("boom"));
  }
}

TEST(ClosureQueueTest, DoneReportsProgressThenRaisesErrorOnceAndClears) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);
  EXPECT_EQ(queue.Done().value(), false);
  queue.MarkFailed(absl::InternalError("boom"));

  Async<absl::StatusOr<bool>> done([&] { return queue.Done(); });
  EXPECT_FALSE(done.ReturnedWithin(kBriefly));  // raises only when nothing is in flight
  queue.MarkFinished();
  ASSERT_TRUE(done.ReturnedWithin(kEventually));
  EXPECT_EQ(done.result().status(), absl::InternalError("boom"));

  absl::StatusOr<bool> again = queue.Done();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again);
}

TEST(ClosureQueueTest, PutWithPendingErrorReturnsItAndCancelsTheClosure) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("boom"));

  std::shared_ptr<Closure> late = MakeClosure(2);
  EXPECT_EQ(queue.Put(late), absl::InternalError("boom"));
  EXPECT_EQ(FetchCode(late), absl::StatusCode::kCancelled);
  EXPECT_EQ(queue.queued(), 0u);

  // The error was cleared: the next Put queues normally and Wait has nothing to raise.
  std::shared_ptr<Closure> next = MakeClosure(3);
  ASSERT_TRUE(queue.Put(next).ok());
  EXPECT_EQ(queue.queued(), 1u);
  ASSERT_EQ(queue.Get(), next);
  queue.MarkFinished();
  EXPECT_TRUE(queue.Wait().ok());
}

TEST(ClosureQueueTest, PutWithPendingErrorWaitsForClosuresInFlight) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue.Put(MakeClosure(2)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("boom"));

  std::shared_ptr<Closure> late = MakeClosure(3);
  Async<absl::Status> put([&] { return queue.Put(late); });
  EXPECT_FALSE(put.ReturnedWithin(kBriefly));
  queue.MarkFinished();
  ASSERT_TRUE(put.ReturnedWithin(kEventually));
  EXPECT_EQ(put.result(), absl::InternalError("boom"));
  EXPECT_EQ(FetchCode(late), absl::StatusCode::kCancelled);
}

TEST(ClosureQueueTest, PutBackRequeuesAtFrontAndSetsAborted) {
  ClosureQueue queue(10);
  std::shared_ptr<Closure> a = MakeClosure(1);
  std::shared_ptr<Closure> b = MakeClosure(2);
  ASSERT_TRUE(queue.Put(a).ok());
  ASSERT_TRUE(queue.Put(b).ok());
  ASSERT_EQ(queue.Get(), a);

  queue.PutBack(a);
  EXPECT_EQ(a->attempts, 1);
  EXPECT_EQ(a->output.state(), RemoteValue::State::kAborted);
  EXPECT_EQ(queue.queued(), 2u);
  EXPECT_EQ(queue.in_flight(), 0u);
  EXPECT_EQ(queue.Done().value(), false);

  ASSERT_EQ(queue.Get(), a);  // ahead of b
  EXPECT_EQ(a->output.state(), RemoteValue::State::kPending);  // running again
  a->output.SetReady({});
  queue.MarkFinished();
  ASSERT_EQ(queue.Get(), b);
  b->output.SetReady({});
  queue.MarkFinished();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(a->output.state(), RemoteValue::State::kReady);
}

TEST(ClosureQueueTest, PutBackIgnoresCapacity) {
  ClosureQueue queue(1);
  std::shared_ptr<Closure> a = MakeClosure(1);
  std::shared_ptr<Closure> b = MakeClosure(2);
  ASSERT_TRUE(queue.Put(a).ok());
  ASSERT_EQ(queue.Get(), a);
  ASSERT_TRUE(queue.Put(b).ok());  // queue full again

  queue.PutBack(a);  // must not block the dispatcher
  EXPECT_EQ(queue.queued(), 2u);
  ASSERT_EQ(queue.Get(), a);
  ASSERT_EQ(queue.Get(), b);
  queue.MarkFinished();
  queue.MarkFinished();
  EXPECT_TRUE(queue.Wait().ok());
}

TEST(ClosureQueueTest, PutBackGivesEachClosureExactlyOneRunWithTwoThreads) {
  constexpr uint64_t kClosures = 20;
  ClosureQueue queue(kClosures);
  std::vector<std::shared_ptr<Closure>> closures;
  for (uint64_t id = 0; id < kClosures; ++id) {
    closures.push_back(MakeClosure(id));
    ASSERT_TRUE(queue.Put(closures.back()).ok());
  }

  Mutex mu;
  std::map<uint64_t, int> completions;
  // Both workers hold their first closure before either puts it back, so two closures are
  // aborted at once (the case where TF's queue once lost or duplicated work).
  auto* both_got_first = new absl::Barrier(2);
  auto worker = [&] {
    std::shared_ptr<Closure> first = queue.Get();
    if (both_got_first->Block()) delete both_got_first;
    if (first == nullptr) return;
    queue.PutBack(first);  // simulated worker failure
    while (std::shared_ptr<Closure> closure = queue.Get()) {
      {
        MutexLock lock(&mu);
        ++completions[closure->id];
      }
      closure->output.SetReady({});
      queue.MarkFinished();
    }
  };
  std::thread w1(worker);
  std::thread w2(worker);
  EXPECT_TRUE(queue.Wait().ok());
  queue.Stop();  // lets the workers' Get return nullptr
  w1.join();
  w2.join();

  MutexLock lock(&mu);
  EXPECT_EQ(completions.size(), kClosures);
  int put_back = 0;
  for (const auto& closure : closures) {
    EXPECT_EQ(completions[closure->id], 1) << "closure " << closure->id;
    EXPECT_EQ(closure->output.state(), RemoteValue::State::kReady);
    put_back += closure->attempts;
  }
  EXPECT_EQ(put_back, 2);
}

TEST(ClosureQueueTest, PutBackWhileErrorPendingCancels) {
  ClosureQueue queue(10);
  std::shared_ptr<Closure> a = MakeClosure(1);
  std::shared_ptr<Closure> b = MakeClosure(2);
  ASSERT_TRUE(queue.Put(a).ok());
  ASSERT_TRUE(queue.Put(b).ok());
  ASSERT_EQ(queue.Get(), a);
  ASSERT_EQ(queue.Get(), b);
  b->output.SetFailed(absl::InternalError("boom"));
  queue.MarkFailed(absl::InternalError("boom"));

  queue.PutBack(a);
  EXPECT_EQ(queue.queued(), 0u);
  EXPECT_EQ(queue.in_flight(), 0u);
  EXPECT_EQ(FetchCode(a), absl::StatusCode::kCancelled);
  EXPECT_EQ(queue.Wait(), absl::InternalError("boom"));
}

TEST(ClosureQueueTest, StopWakesGetAndCancelsQueued) {
  ClosureQueue queue(10);
  Async<std::shared_ptr<Closure>> get([&] { return queue.Get(); });
  EXPECT_FALSE(get.ReturnedWithin(kBriefly));
  queue.Stop();
  ASSERT_TRUE(get.ReturnedWithin(kEventually));
  EXPECT_EQ(get.result(), nullptr);

  // Stop on a queue with work cancels it; later Puts are refused.
  ClosureQueue other(10);
  std::shared_ptr<Closure> queued = MakeClosure(1);
  ASSERT_TRUE(other.Put(queued).ok());
  other.Stop();
  EXPECT_EQ(FetchCode(queued), absl::StatusCode::kCancelled);
  EXPECT_EQ(other.Get(absl::ZeroDuration()), nullptr);
  std::shared_ptr<Closure> late = MakeClosure(2);
  EXPECT_EQ(other.Put(late).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(FetchCode(late), absl::StatusCode::kCancelled);
  EXPECT_TRUE(other.Wait().ok());
}

TEST(ClosureQueueTest, StopWakesBlockedPut) {
  ClosureQueue queue(1);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  std::shared_ptr<Closure> blocked = MakeClosure(2);
  Async<absl::Status> put([&] { return queue.Put(blocked); });
  EXPECT_FALSE(put.ReturnedWithin(kBriefly));
  queue.Stop();
  ASSERT_TRUE(put.ReturnedWithin(kEventually));
  EXPECT_EQ(put.result().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(FetchCode(blocked), absl::StatusCode::kCancelled);
}

TEST(ClosureQueueTest, StopLetsInFlightClosuresReportAndCancelsPutBack) {
  ClosureQueue queue(10);
  std::shared_ptr<Closure> a = MakeClosure(1);
  std::shared_ptr<Closure> b = MakeClosure(2);
  ASSERT_TRUE(queue.Put(a).ok());
  ASSERT_TRUE(queue.Put(b).ok());
  ASSERT_EQ(queue.Get(), a);
  ASSERT_EQ(queue.Get(), b);
  queue.Stop();

  Async<absl::Status> wait([&] { return queue.Wait(); });
  EXPECT_FALSE(wait.ReturnedWithin(kBriefly));
  a->output.SetReady({});
  queue.MarkFinished();
  queue.PutBack(b);
  ASSERT_TRUE(wait.ReturnedWithin(kEventually));
  EXPECT_TRUE(wait.result().ok());
  EXPECT_EQ(a->output.state(), RemoteValue::State::kReady);
  EXPECT_EQ(FetchCode(b), absl::StatusCode::kCancelled);
}

TEST(ClosureQueueTest, InFlightCancelHookRunsOncePerErrorWithoutLock) {
  ClosureQueue queue(10);
  std::atomic<int> calls{0};
  std::atomic<size_t> in_flight_seen{0};
  queue.SetInFlightCancellationHook([&] {
    ++calls;
    in_flight_seen = queue.in_flight();  // would self-deadlock if the lock were held
  });
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(queue.Put(MakeClosure(id)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  ASSERT_NE(queue.Get(), nullptr);

  queue.MarkFailed(absl::InternalError("first"));
  EXPECT_EQ(calls.load(), 1);
  // The closure still running, and the failed one until the hook returns.
  EXPECT_EQ(in_flight_seen.load(), 2u);
  queue.MarkFailed(absl::InternalError("second"));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(queue.Wait(), absl::InternalError("first"));

  // A new error after the last one was raised starts a new cancellation.
  ASSERT_TRUE(queue.Put(MakeClosure(4)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::InternalError("third"));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(queue.Done().status(), absl::InternalError("third"));
}

// The hook picks which running closures to cancel; if the error could be raised before it
// ran, a closure scheduled after the raise could be running by then and be cancelled too.
TEST(ClosureQueueTest, ErrorIsRaisedOnlyAfterTheCancellationHookReturned) {
  ClosureQueue queue(10);
  Notification in_hook;
  Notification release;
  queue.SetInFlightCancellationHook([&] {
    in_hook.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  Async<bool> fail([&] {
    queue.MarkFailed(absl::InternalError("boom"));
    return true;
  });
  ASSERT_TRUE(in_hook.WaitForNotificationWithTimeout(kEventually));
  Async<absl::Status> wait([&] { return queue.Wait(); });
  EXPECT_FALSE(wait.ReturnedWithin(kBriefly));
  release.Notify();
  ASSERT_TRUE(wait.ReturnedWithin(kEventually));
  EXPECT_EQ(wait.result(), absl::InternalError("boom"));
  ASSERT_TRUE(fail.ReturnedWithin(kEventually));
}

TEST(ClosureQueueTest, MarkFailedWithOkStatusIsRecordedAsInternal) {
  ClosureQueue queue(10);
  ASSERT_TRUE(queue.Put(MakeClosure(1)).ok());
  ASSERT_NE(queue.Get(), nullptr);
  queue.MarkFailed(absl::OkStatus());
  EXPECT_EQ(queue.Wait().code(), absl::StatusCode::kInternal);
}

TEST(ClosureQueueTest, PauseHoldsGetUntilResume) {
  ClosureQueue queue(10);
  queue.Pause();
  std::shared_ptr<Closure> a = MakeClosure(1);
  ASSERT_TRUE(queue.Put(a).ok());
  EXPECT_EQ(queue.Get(absl::Milliseconds(1)), nullptr);

  Async<std::shared_ptr<Closure>> get([&] { return queue.Get(); });
  EXPECT_FALSE(get.ReturnedWithin(kBriefly));
  queue.Resume();
  ASSERT_TRUE(get.ReturnedWithin(kEventually));
  EXPECT_EQ(get.result(), a);
  queue.MarkFinished();
  EXPECT_TRUE(queue.Wait().ok());
}

TEST(ClosureQueueTest, TenThreadsPutGetFinishConcurrently) {
  constexpr int kProducers = 5;
  constexpr int kConsumers = 5;
  constexpr uint64_t kPerProducer = 400;
  constexpr uint64_t kTotal = kProducers * kPerProducer;
  ClosureQueue queue(8);  // small, so producers really block on a full queue

  std::vector<std::shared_ptr<Closure>> closures;
  for (uint64_t id = 0; id < kTotal; ++id) closures.push_back(MakeClosure(id));

  Mutex mu;
  std::vector<int> completions(kTotal, 0);
  std::atomic<int> put_backs{0};

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        EXPECT_TRUE(queue.Put(closures[p * kPerProducer + i]).ok());
      }
    });
  }
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      while (std::shared_ptr<Closure> closure = queue.Get()) {
        // Every seventh closure's first run "loses its worker".
        if (closure->id % 7 == 0 && closure->attempts == 0) {
          ++put_backs;
          queue.PutBack(std::move(closure));
          continue;
        }
        {
          MutexLock lock(&mu);
          ++completions[closure->id];
        }
        closure->output.SetReady({});
        queue.MarkFinished();
      }
    });
  }
  for (int p = 0; p < kProducers; ++p) threads[p].join();
  EXPECT_TRUE(queue.Wait().ok());
  EXPECT_EQ(queue.queued(), 0u);
  EXPECT_EQ(queue.in_flight(), 0u);
  queue.Stop();
  for (size_t t = kProducers; t < threads.size(); ++t) threads[t].join();

  MutexLock lock(&mu);
  for (uint64_t id = 0; id < kTotal; ++id) {
    EXPECT_EQ(completions[id], 1) << "closure " << id;
    EXPECT_EQ(closures[id]->output.state(), RemoteValue::State::kReady);
  }
  EXPECT_EQ(put_backs.load(), static_cast<int>((kTotal + 6) / 7));
}

}  // namespace
}  // namespace asyncps
