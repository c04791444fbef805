#ifndef ASYNCPS_PS_UPDATE_TAG_H_
#define ASYNCPS_PS_UPDATE_TAG_H_

#include <cstdint>

namespace asyncps::ps {

// Which closure attempt made an update or a gradient push, so that a parameter server applies
// it at most once (see UpdateDedup). Travels in ps.Update / ps.PushGradients (UpdateTag in
// ps.capnp).
//
// Closure ids are unique across coordinators: each ClusterCoordinator starts its ids at a
// random 62-bit number and counts up from there in schedule order, and that first id is its
// identity (`coordinator`). So the PS keys its window by (coordinator, closure id), and a
// restarted coordinator, whose ids start elsewhere, never collides with its predecessor.
struct UpdateTag {
  uint64_t coordinator = 0;  // 0: not made by a closure (the chief's own updates): not tagged
  uint64_t closure = 0;      // >= coordinator
  uint64_t sequence = 0;     // the call's number within the attempt, from 1; a deterministic
                             // step numbers its calls the same on every attempt
  uint64_t watermark = 0;    // every closure of `coordinator` with a lower id has finished

  bool tagged() const { return coordinator != 0; }
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_UPDATE_TAG_H_
