#ifndef ASYNCPS_COORDINATOR_CLOSURE_QUEUE_H_
#define ASYNCPS_COORDINATOR_CLOSURE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "absl/time/time.h"
#include "coordinator/remote_value.h"

namespace asyncps {

// One scheduled function call.
struct Closure {
  uint64_t id = 0;
  std::string function;
  // The call's arguments. Opaque here so the queue does not depend on how the coordinator
  // represents them (it casts back with std::static_pointer_cast).
  std::shared_ptr<const void> payload;
  RemoteValue output;
  // How many times the closure was put back because its worker failed, so the dispatch in
  // progress is attempt `attempts + 1`. Written by the queue only while it owns the closure.
  int attempts = 0;
};

// The coordinator's queue of scheduled closures (TF's `_CoordinatedClosureQueue`).
//
// Producers (Schedule) Put closures; dispatcher threads Get them, run them on a worker and
// report exactly one of MarkFinished, MarkFailed or PutBack per closure they got. The queue
// counts closures "in flight" between Get and that report, which is what Wait/Done need to
// promise that nothing is still running when they return.
//
// Errors: the first MarkFailed since the last raise becomes the pending error. It cancels
// every queued closure at once and asks workers (through the in-flight cancellation hook) to
// abort the ones running. While it is pending no closure is queued: Put and PutBack cancel
// theirs. The next Put, Wait or Done waits until nothing is in flight, then returns the error
// and clears it, so it is raised exactly once. Later errors while one is pending are dropped.
//
// Unlike TF, cancellation starts when the error happens rather than when the user next calls
// into the coordinator, so workers stop spending time on doomed closures.
//
// Thread-safe. Queue operations are O(1) (plus O(queued) to cancel); no lock is held while the
// hook runs.
class ClosureQueue {
 public:
  // `capacity` bounds how many closures Put admits (0 is treated as 1).
  explicit ClosureQueue(size_t capacity);
  ClosureQueue(const ClosureQueue&) = delete;
  ClosureQueue& operator=(const ClosureQueue&) = delete;

  // Queues `closure` at the back, blocking while the queue is full.
  // If an error is pending, the closure is not queued: waits until nothing is in flight,
  // cancels the closure's output, clears the error and returns it.
  // After Stop(), cancels the closure's output and returns Cancelled.
  absl::Status Put(std::shared_ptr<Closure> closure);

  // Blocks until a closure is queued and processing is not paused, pops it and counts it in
  // flight. The caller must then report it with exactly one of MarkFinished, MarkFailed or
  // PutBack. Returns nullptr after `timeout` or once Stop() was called.
  std::shared_ptr<Closure> Get(absl::Duration timeout = absl::InfiniteDuration());

  // A closure from Get completed; the caller has already set its output.
  void MarkFinished();

  // The worker running `closure` (from Get) failed before returning a result. Unless an error
  // is pending or the queue is stopped (then the closure is cancelled), the closure goes back
  // to the FRONT of the queue — even beyond capacity, as it was admitted once already — its
  // output becomes kAborted and `attempts` is incremented.
  void PutBack(std::shared_ptr<Closure> closure);

  // A closure from Get failed with `error` (the caller has set its output failed). If no
  // error is pending, `error` becomes the pending error: queued closures are cancelled and
  // the in-flight cancellation hook runs before this returns. Otherwise `error` is dropped.
  // An OK `error` is recorded as Internal.
  void MarkFailed(absl::Status error);

  // Called, without the queue lock, each time an error starts cancellation, so the dispatcher
  // can ask workers to abort closures in flight. The failed closure counts as in flight until
  // the hook returns, so the error is raised (and later closures dispatched) only after it.
  // Set it before dispatch starts.
  void SetInFlightCancellationHook(std::function<void()> hook);

  // Join: blocks until nothing is queued or in flight, or an error is pending. With a pending
  // error, waits until nothing is in flight, then returns the error and clears it. Else OK.
  // Blocks indefinitely while paused with closures queued.
  absl::Status Wait();

  // With a pending error: waits until nothing is in flight, returns the error and clears it.
  // Otherwise returns whether nothing is queued or in flight, without blocking.
  absl::StatusOr<bool> Done();

  // While paused Get hands out nothing (its callers keep waiting); Put, PutBack and reports
  // still work. Lets the coordinator hold dispatch while it repairs a parameter server.
  void Pause();
  void Resume();

  // Shuts dispatch down for good: Get returns nullptr from now on (waiting callers wake),
  // queued closures are cancelled, and later Put/PutBack cancel their closure. Closures in
  // flight are still reported normally, so Wait returns once they are.
  void Stop();

  // Blocks until no closure is in flight or `timeout` passes; true when none is.
  bool WaitUntilNoneInFlight(absl::Duration timeout) const;

  // For metrics.
  size_t queued() const;
  size_t in_flight() const;

  // True from MarkFailed until the error is returned. A dispatcher that got a closure checks
  // this after registering it as running: if an error is pending, cancellation has started
  // (or is about to ask for running closures), so the closure must not be started at all.
  bool error_pending() const;

 private:
  // Await predicates.
  bool CanPut() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanGet() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleOrError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ErrorRaisable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NoneInFlight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void DecrementInFlight() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelQueued(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until the pending error (if any) can be raised, i.e. nothing is in flight. Returns
  // false if another caller raised it first.
  bool AwaitRaisableError() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string CancelReason() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;

  mutable Mutex mu_;
  std::deque<std::shared_ptr<Closure>> queue_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // OK when no error is pending
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> cancellation_hook_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLOSURE_QUEUE_H_
