#ifndef ASYNCPS_WORKER_CLOSURE_CANCELLATION_H_
#define ASYNCPS_WORKER_CLOSURE_CANCELLATION_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "core/sync.h"

namespace asyncps {

// The cancellation flags of the closures a worker is running, one per attempt.
//
// The coordinator cancels by closure id, but one closure can have more than one attempt on
// the same worker at once: its connection dropped, the coordinator put it back, and it was
// dispatched here again while the first attempt still ran. Keying flags by closure id alone
// let the first attempt's end remove the second's flag (so a later cancel was lost), or the
// second's start replace the first's. Each attempt therefore owns its own entry; a cancel
// sets the flag of every attempt of that closure.
//
// A cancel can also overtake its Run (Cancel is answered on the I/O thread, Run on the
// handler pool): cancelled ids are remembered, bounded, and an attempt that starts later is
// cancelled from the start. A cancelled closure is never dispatched again, so remembering
// an id cannot cancel work that should run.
//
// Thread-safe.
class ClosureCancellation {
 public:
  // One attempt at running a closure. `cancelled` is what the step function polls.
  struct Attempt {
    uint64_t closure_id = 0;
    uint64_t token = 0;
    std::shared_ptr<std::atomic<bool>> cancelled;
  };

  // Registers an attempt at `closure_id`; its flag is already set if the closure was
  // cancelled before. Pair with Finish.
  Attempt Start(uint64_t closure_id);
  // Unregisters `attempt` only (other attempts of the same closure keep their flags).
  void Finish(const Attempt& attempt);
  // Sets the flag of every running attempt of each id and remembers the ids.
  void Cancel(absl::Span<const uint64_t> closure_ids);
  // Sets the flag of every attempt running now (their coordinator was replaced); returns how
  // many. Remembers no ids: attempts that start later are not affected.
  size_t CancelAll();

  // Attempts registered now (for tests and metrics).
  size_t running() const;

  // How many cancelled ids are remembered for attempts that have not started yet.
  static constexpr size_t kMaxRememberedCancels = 4096;

 private:
  mutable Mutex mu_;
  uint64_t next_token_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<uint64_t, std::shared_ptr<std::atomic<bool>>>> running_
      ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> cancelled_order_ ABSL_GUARDED_BY(mu_);  // oldest first, for the bound
  absl::flat_hash_set<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_CLOSURE_CANCELLATION_H_
