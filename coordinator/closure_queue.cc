#include "core/sync.h"
#include "coordinator/closure_queue.h"

#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"

namespace asyncps {

ClosureQueue::ClosureQueue(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

absl::Status ClosureQueue::Put(std::shared_ptr<Closure> closure) {
  MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(this, &ClosureQueue::CanPut));
    if (stopped_) {
      closure->output.SetCancelled(CancelReason());
      return absl::CancelledError("closure queue stopped");
    }
    if (error_.ok()) break;
    // Raise only once nothing is in flight, so the caller sees a quiet cluster (TF's "when
    // schedule raises, no function is still being executed"). Another caller may raise the
    // error while we wait; then this closure is queued normally.
    if (AwaitRaisableError()) {
      closure->output.SetCancelled(CancelReason());
      return std::exchange(error_, absl::OkStatus());
    }
  }
  queue_.push_back(std::move(closure));
  return absl::OkStatus();
}

std::shared_ptr<Closure> ClosureQueue::Get(absl::Duration timeout) {
  MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &ClosureQueue::CanGet), timeout) || stopped_) {
    return nullptr;
  }
  std::shared_ptr<Closure> closure = std::move(queue_.front());
  queue_.pop_front();
  ++in_flight_;
  // A put-back closure is running again; kPending is "not run yet or running".
  if (closure->attempts > 0) closure->output.SetPending();
  return closure;
}

void ClosureQueue::MarkFinished() {
  MutexLock lock(&mu_);
  DecrementInFlight();
}

void ClosureQueue::PutBack(std::shared_ptr<Closure> closure) {
  MutexLock lock(&mu_);
  DecrementInFlight();
  if (stopped_ || !error_.ok()) {
    closure->output.SetCancelled(CancelReason());
    return;
  }
  ++closure->attempts;
  closure->output.SetAborted();
  // The front, so a closure that already waited its turn does not wait behind everything
  // scheduled since; and past capacity, because blocking a dispatcher thread here could
  // deadlock it against the producers it would be waiting for.
  queue_.push_front(std::move(closure));
}

void ClosureQueue::MarkFailed(absl::Status error) {
  if (error.ok()) error = absl::InternalError("ClosureQueue::MarkFailed called with an OK status");
  std::function<void()> hook;
  {
    MutexLock lock(&mu_);
    if (error_.ok()) {  // the first error wins
      error_ = std::move(error);
      CancelQueued(CancelReason());
      hook = cancellation_hook_;
    }
    if (!hook) {
      DecrementInFlight();
      return;
    }
  }
  // Outside the lock: the hook talks to workers and may call back into the queue. This
  // closure stays in flight until the hook has returned, so the error cannot be raised —
  // and a closure scheduled after that be running — while the hook picks what to cancel.
  hook();
  MutexLock lock(&mu_);
  DecrementInFlight();
}

void ClosureQueue::SetInFlightCancellationHook(std::function<void()> hook) {
  MutexLock lock(&mu_);
  cancellation_hook_ = std::move(hook);
}

absl::Status ClosureQueue::Wait() {
  MutexLock lock(&mu_);
  for (;;) {
    mu_.Await(absl::Condition(this, &ClosureQueue::IdleOrError));
    if (error_.ok()) return absl::OkStatus();
    if (AwaitRaisableError()) return std::exchange(error_, absl::OkStatus());
    // Another caller raised the error first; wait for quiescence again.
  }
}

absl::StatusOr<bool> ClosureQueue::Done() {
  MutexLock lock(&mu_);
  if (!error_.ok() && AwaitRaisableError()) return std::exchange(error_, absl::OkStatus());
  return Idle();
}

void ClosureQueue::Pause() {
  MutexLock lock(&mu_);
  paused_ = true;
}

void ClosureQueue::Resume() {
  MutexLock lock(&mu_);
  paused_ = false;
}

void ClosureQueue::Stop() {
  MutexLock lock(&mu_);
  stopped_ = true;
  CancelQueued(CancelReason());
}

bool ClosureQueue::WaitUntilNoneInFlight(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &ClosureQueue::NoneInFlight), timeout);
}

size_t ClosureQueue::queued() const {
  MutexLock lock(&mu_);
  return queue_.size();
}

bool ClosureQueue::error_pending() const {
  MutexLock lock(&mu_);
  return !error_.ok();
}

size_t ClosureQueue::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_;
}

bool ClosureQueue::CanPut() const {
  return stopped_ || !error_.ok() || queue_.size() < capacity_;
}

bool ClosureQueue::CanGet() const { return stopped_ || (!paused_ && !queue_.empty()); }

bool ClosureQueue::Idle() const { return queue_.empty() && in_flight_ == 0; }

bool ClosureQueue::IdleOrError() const { return !error_.ok() || Idle(); }

bool ClosureQueue::NoneInFlight() const { return in_flight_ == 0; }

bool ClosureQueue::ErrorRaisable() const { return error_.ok() || in_flight_ == 0; }

void ClosureQueue::DecrementInFlight() {
  // Reporting a closure that was never handed out is a dispatcher bug; never let the count
  // wrap around, which would make Wait block forever.
  assert(in_flight_ > 0 && "closure reported without a matching Get");
  if (in_flight_ > 0) --in_flight_;
}

void ClosureQueue::CancelQueued(const std::string& why) {
  // Cancelling under the lock makes every cancellation visible before Wait/Done/Put can
  // raise the error; the RemoteValue lock is a leaf, so this cannot deadlock.
  for (const std::shared_ptr<Closure>& closure : queue_) closure->output.SetCancelled(why);
  queue_.clear();
}

bool ClosureQueue::AwaitRaisableError() {
  mu_.Await(absl::Condition(this, &ClosureQueue::ErrorRaisable));
  return !error_.ok();
}

std::string ClosureQueue::CancelReason() const {
  if (!error_.ok()) return absl::StrCat("cancelled because an earlier closure failed: ",
                                        error_.ToString());
  return "closure queue stopped";
}

}  // namespace asyncps
