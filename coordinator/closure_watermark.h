#ifndef ASYNCPS_COORDINATOR_CLOSURE_WATERMARK_H_
#define ASYNCPS_COORDINATOR_CLOSURE_WATERMARK_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

#include "coordinator/closure_queue.h"
#include "core/sync.h"

namespace asyncps {

// A coordinator's closure ids, and the watermark below which every closure has finished —
// what the parameter servers need to apply each closure's updates exactly once and still
// forget about it eventually (ps/update_dedup.h).
//
// Ids: the first is a random number below 2^62, drawn per ClusterCoordinator; the others
// count up from it in schedule order. So ids grow within one coordinator (a watermark means
// something), and two coordinators — a restarted one, or two in one process — do not share
// ids (the chance that two runs of n closures overlap is about 2n / 2^62). The first id is
// the coordinator's identity on the parameter servers (UpdateTag::coordinator).
//
// Finished: a closure is finished once nothing holds it any more. The coordinator holds a
// closure while it is queued or being dispatched, and lets go only after its result, error
// or cancellation is recorded; a closure nobody holds can never be dispatched again. So the
// watermark — the lowest id among closures still held — needs no hook on every path where a
// closure ends, and any attempt of a closure below it is a zombie. (Whoever keeps a Closure
// alive, e.g. to bind data to it, holds the watermark back until it lets go.)
//
// Memory: one entry per closure between the oldest unfinished one and the newest; finished
// entries behind an unfinished one are compacted away, so it stays proportional to the
// closures held.
//
// Thread-safe.
class ClosureWatermark {
 public:
  ClosureWatermark();  // a random first id
  explicit ClosureWatermark(uint64_t first_id);  // first_id > 0

  // The first id: this coordinator's identity on the parameter servers.
  uint64_t first_id() const { return first_id_; }

  // Gives `closure` the next id and watches it.
  void Assign(const std::shared_ptr<Closure>& closure);

  // The lowest id of a closure still held; the next id to assign when none is. Never
  // decreases.
  uint64_t Watermark();

  // Entries kept now (for tests).
  size_t tracked() const;

 private:
  // Drops finished closures at the front, and all of them once the entries doubled.
  void Prune() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t first_id_;
  mutable Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_);
  // In id order.
  std::deque<std::pair<uint64_t, std::weak_ptr<const Closure>>> live_ ABSL_GUARDED_BY(mu_);
  size_t compact_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLOSURE_WATERMARK_H_
