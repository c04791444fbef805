#ifndef ASYNCPS_WORKER_COORDINATOR_FENCE_H_
#define ASYNCPS_WORKER_COORDINATOR_FENCE_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_set.h"

namespace asyncps {

// Which coordinator a worker serves, told apart by the incarnation each chief process claims
// in its (authenticated) handshake.
//
// A restarted chief is a new incarnation. The worker must then drop what its predecessor set
// up (per-worker resources, the variable directory, running closures): the new chief knows
// nothing of them, would never delete them, and a directory version that happens to match
// its own could hide a different placement. The predecessor may also still be alive (a
// partitioned chief that was replaced): once superseded it is refused, so two chiefs never
// drive one worker by turns, each wiping the other's state.
//
// Incarnations are random, not ordered, so "newer" means "seen later by this worker". A
// superseded incarnation stays refused for as long as this worker remembers it (the last
// kMaxRemembered); incarnation 0 (no claim) is accepted without changing anything.
//
// Not thread-safe: the owner serialises calls (WorkerService calls it under its own mutex,
// together with the drop, so no call of the new chief runs before the drop is done).
class CoordinatorFence {
 public:
  enum class Verdict {
    kCurrent,         // the coordinator this worker serves (or the first one it sees)
    kNewCoordinator,  // a different chief than before: drop the predecessor's state first
    kSuperseded,      // an earlier chief that was replaced: refuse it
  };

  Verdict Admit(uint64_t incarnation);

  // The incarnation served now; 0 before the first call with one.
  uint64_t current() const { return current_; }

  // Whether a call of `incarnation` admitted earlier may still take effect: it is the one
  // served now, or 0 (no claim). False once another chief was admitted since; changes nothing.
  bool Serves(uint64_t incarnation) const { return incarnation == 0 || incarnation == current_; }

  static constexpr size_t kMaxRemembered = 64;

 private:
  uint64_t current_ = 0;
  absl::flat_hash_set<uint64_t> superseded_;
  std::deque<uint64_t> superseded_order_;  // oldest first, for the bound
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_COORDINATOR_FENCE_H_
