#include "coordinator/remote_value.h"

#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/sync.h"

namespace asyncps {
namespace {

// Starts at 1 so that 0 can mean "no value" in logs and maps kept by callers.
std::atomic<uint64_t> next_id{1};

bool IsFinal(RemoteValue::State state) {
  return state == RemoteValue::State::kReady || state == RemoteValue::State::kFailed ||
         state == RemoteValue::State::kCancelled;
}

}  // namespace

struct RemoteValue::Shared {
  const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);

  mutable Mutex mu;
  State state ABSL_GUARDED_BY(mu) = State::kPending;
  Values values ABSL_GUARDED_BY(mu);
  // The error for kFailed, the Cancelled status for kCancelled; OK otherwise.
  absl::Status status ABSL_GUARDED_BY(mu);

  bool Final() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return IsFinal(state); }

  absl::StatusOr<Values> Result() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (state == State::kReady) return values;
    return status;
  }
};

RemoteValue::RemoteValue() : shared_(std::make_shared<Shared>()) {}

uint64_t RemoteValue::id() const { return shared_->id; }

RemoteValue::State RemoteValue::state() const {
  MutexLock lock(&shared_->mu);
  return shared_->state;
}

bool RemoteValue::done() const {
  MutexLock lock(&shared_->mu);
  return shared_->Final();
}

absl::StatusOr<Values> RemoteValue::Fetch() const {
  Shared* s = shared_.get();
  MutexLock lock(&s->mu, absl::Condition(s, &Shared::Final));
  return s->Result();
}

absl::StatusOr<Values> RemoteValue::Fetch(absl::Duration timeout) const {
  Shared* s = shared_.get();
  MutexLock lock(&s->mu);
  if (!s->mu.AwaitWithTimeout(absl::Condition(s, &Shared::Final), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("remote value ", s->id, " still ",
                                                    RemoteValueStateName(s->state), " after ",
                                                    absl::FormatDuration(timeout)));
  }
  return s->Result();
}

bool RemoteValue::SetReady(Values values) {
  MutexLock lock(&shared_->mu);
  if (shared_->Final()) return false;
  shared_->state = State::kReady;
  shared_->values = std::move(values);
  return true;
}

bool RemoteValue::SetFailed(absl::Status error) {
  if (error.ok()) error = absl::InternalError("RemoteValue::SetFailed called with an OK status");
  MutexLock lock(&shared_->mu);
  if (shared_->Final()) return false;
  shared_->state = State::kFailed;
  shared_->status = std::move(error);
  return true;
}

bool RemoteValue::SetCancelled(std::string why) {
  MutexLock lock(&shared_->mu);
  if (shared_->Final()) return false;
  shared_->state = State::kCancelled;
  shared_->status = absl::CancelledError(why);
  return true;
}

bool RemoteValue::SetAborted() {
  MutexLock lock(&shared_->mu);
  if (shared_->Final() || shared_->state == State::kAborted) return false;
  shared_->state = State::kAborted;
  return true;
}

bool RemoteValue::SetPending() {
  MutexLock lock(&shared_->mu);
  if (shared_->Final() || shared_->state == State::kPending) return false;
  shared_->state = State::kPending;
  return true;
}

absl::string_view RemoteValueStateName(RemoteValue::State state) {
  switch (state) {
    case RemoteValue::State::kPending:
      return "pending";
    case RemoteValue::State::kAborted:
      return "aborted";
    case RemoteValue::State::kReady:
      return "ready";
    case RemoteValue::State::kFailed:
      return "failed";
    case RemoteValue::State::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

}  // namespace asyncps
