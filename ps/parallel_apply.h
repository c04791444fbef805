#ifndef ASYNCPS_PS_PARALLEL_APPLY_H_
#define ASYNCPS_PS_PARALLEL_APPLY_H_

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace asyncps::ps {

// Splits one large apply (a dense gradient through its optimizer, the rows of a large sparse
// push, the finiteness check of a large gradient) over the calling thread and a few helper
// threads the PS keeps for this.
//
// Why: these loops are bound by what one core can keep in flight to memory (measured on the
// 2-core VM: a 64 MiB Adam step 24 ms on one thread, 12.6 ms on two; a 10k-row Adam push
// 1.2 ms against 0.8 ms), and while a push is applied the client that sent it waits, so another
// core is usually idle.
//
// ParallelFor(parts, fn) calls fn(p) once for every p in [0, parts), each from some thread, and
// returns when all have returned. The caller runs parts itself: parts are claimed one at a
// time by the caller and by helpers that have woken, so when every helper is busy (or there
// are none) the caller simply runs them all, and a caller never waits for a part that no
// thread has started. fn must not block on anything a part of the same call holds, and must
// not call ParallelFor itself. Parts run concurrently: they must touch disjoint memory (or
// take their own locks); the caller's locks cover them (it holds them until every part is
// done). Everything a part wrote is visible to the caller when ParallelFor returns.
//
// Thread-safe.
void ParallelFor(int parts, absl::FunctionRef<void(int)> fn);

// How many parts a loop of `work` units is worth splitting into, given that a part should be
// at least `min_part_work` units (below that the hand-off costs more than it saves): 1 without
// helpers, else between 1 and kMaxParallelParts (a few per thread, so that the threads that
// are running share out the parts of one that was preempted).
int ParallelParts(int64_t work, int64_t min_part_work);
inline constexpr int kMaxParallelParts = 16;

// The threads an apply may use: the caller plus the helpers (1 when the machine has one CPU),
// at most 4.
int ParallelApplyThreads();

// For tests: the helper count from now on, at most 3 (0 makes every ParallelFor serial on
// the caller), and a divisor of every minimum part size ParallelParts is given (so that a
// test splits arrays much smaller than the PS would). Not to be called while a ParallelFor
// runs.
void SetParallelApplyHelpersForTesting(int helpers, int64_t min_part_divisor = 1);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PARALLEL_APPLY_H_
