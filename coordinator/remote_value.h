#ifndef ASYNCPS_COORDINATOR_REMOTE_VALUE_H_
#define ASYNCPS_COORDINATOR_REMOTE_VALUE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/tensor.h"

namespace asyncps {

// The output of one scheduled closure, filled in asynchronously (TF's `RemoteValue`).
//
// A RemoteValue is a handle: copies are cheap and share one state, so the coordinator keeps a
// copy to fill in while the user keeps another to Fetch from.
//
// Life cycle:
//
//   kPending ──SetAborted──▶ kAborted ──SetPending──▶ kPending
//       │                        │
//       └────────┬───────────────┘
//                ▼
//   kReady | kFailed | kCancelled      (final)
//
// Once final, the value never changes again: later Set* calls are ignored and return false.
// That is what makes a value fetched once stay available, and stops a result that arrives
// after cancellation (a worker that finished late) from overwriting the Cancelled status the
// user may already have seen.
//
// Thread-safe.
class RemoteValue {
 public:
  enum class State {
    kPending,    // not run yet, or running
    kAborted,    // its worker died; it has been put back and will run again
    kReady,      // the function returned values
    kFailed,     // the function's own error, or Unavailable
    kCancelled,  // will not run: an earlier closure failed, or the coordinator stopped
  };

  // Fresh pending state with a new id.
  RemoteValue();

  // Unique among all RemoteValues created by this process (copies share it). Never 0.
  uint64_t id() const;

  State state() const;

  // True once the state is final (ready, failed or cancelled). Never blocks.
  bool done() const;

  // Blocks until the value is final, then returns the values, the function's error, or a
  // Cancelled status. An aborted value keeps waiting: the closure will run again.
  absl::StatusOr<Values> Fetch() const;

  // Like Fetch() but gives up after `timeout` with DeadlineExceeded (the value stays pending
  // and can be fetched again).
  absl::StatusOr<Values> Fetch(absl::Duration timeout) const;

  // Producer side (the coordinator). Each returns true if the state changed; false if the
  // value was already final (or, for SetAborted/SetPending, already in that state).

  bool SetReady(Values values);
  // `error` must not be OK; an OK status is recorded as an Internal error so the value can
  // never be "failed with success".
  bool SetFailed(absl::Status error);
  // Fetch will return absl::CancelledError(why).
  bool SetCancelled(std::string why);
  bool SetAborted();
  // Back to pending, e.g. when an aborted closure is dispatched again.
  bool SetPending();

 private:
  struct Shared;

  std::shared_ptr<Shared> shared_;
};

// "pending", "aborted", "ready", "failed", "cancelled" — for logs and messages.
absl::string_view RemoteValueStateName(RemoteValue::State state);

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_REMOTE_VALUE_H_
