#ifndef ASYNCPS_PS_PARALLEL_APPLY_H_
#define ASYNCPS_PS_PARALLEL_APPLY_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"

namespace asyncps {
class ThreadPool;
}  // namespace asyncps

namespace asyncps::ps {

// A few helper threads that split one large apply (a dense gradient through its optimizer, the
// rows of a large sparse push, the finiteness check of a large gradient) with the calling
// thread. A PS process owns one (ps/ps_server.cc) and hands it down by pointer: to its
// VariableStore, whose variables and checks use it; a null pool means one pass on the caller.
//
// Why: these loops are bound by what one core can keep in flight to memory (measured on the
// 2-core VM: a 64 MiB Adam step 24 ms on one thread, 12.6 ms on two; a 10k-row Adam push
// 1.2 ms against 0.8 ms), and while a push is applied the client that sent it waits, so another
// core is usually idle.
//
// Thread-safe. The destructor joins the helpers: no ParallelFor may run then.
class ApplyPool {
 public:
  // The most parts one loop is split into (a few per thread).
  static constexpr int kMaxParts = 16;
  // Beyond a few threads these memory-bound loops gain little, and a PS shares its machine.
  static constexpr int kMaxHelpers = 3;

  struct Options {
    // Helper threads besides the caller, at most kMaxHelpers; negative: the machine's CPUs
    // less one (0 on one CPU, which makes every loop one pass on the caller).
    int helpers = -1;
    // The smallest share of a loop worth handing to another thread, in f32 elements (a sparse
    // push counts the elements of its distinct rows). Not the hand-off cost (tens of
    // microseconds) but preemption sets it: a helper that claimed a part and is then
    // preempted on a busy machine makes the caller wait a scheduler slice (milliseconds), so
    // only parts of several milliseconds of work are handed out. On the 2-core VM at load
    // 5-6, 10k-row pushes (2.5 MB of rows, 8 parts of ~0.3 ms) measured no faster and SGD
    // ones slower (ps_bench 0.27-0.30x against 0.31-0.40x), so a push of that size stays
    // whole; a 4 MiB part of dense Adam is ~1.5 ms. Tests lower these to split small arrays.
    int64_t min_dense_elements = int64_t{1} << 20;
    int64_t min_row_elements = int64_t{1} << 20;
    // The finiteness check reads each element once and does little else.
    int64_t min_check_elements = int64_t{1} << 21;
  };

  explicit ApplyPool(Options options);
  ApplyPool() : ApplyPool(Options()) {}
  ~ApplyPool();
  ApplyPool(const ApplyPool&) = delete;
  ApplyPool& operator=(const ApplyPool&) = delete;

  const Options& options() const { return options_; }
  // The threads a loop may use: the caller plus the helpers.
  int threads() const { return 1 + options_.helpers; }

  // How many parts a loop of `work` units is worth splitting into, given that a part should be
  // at least `min_part_work` units (one of the options): 1 without helpers, else between 1
  // and kMaxParts (a few per thread, so that the threads that are running share out the parts
  // of one that was preempted).
  int Parts(int64_t work, int64_t min_part_work) const;

  // Calls fn(p) once for every p in [0, parts), each from some thread, and returns when all
  // have returned. The caller runs parts itself: parts are claimed one at a time by the
  // caller and by helpers that have woken, so when every helper is busy the caller simply
  // runs them all, and a caller never waits for a part that no thread has started. fn must
  // not block on anything a part of the same call holds, and must not call ParallelFor
  // itself. Parts run concurrently: they must touch disjoint memory (or take their own
  // locks); the caller's locks cover them (it holds them until every part is done).
  // Everything a part wrote is visible to the caller when ParallelFor returns.
  void ParallelFor(int parts, absl::FunctionRef<void(int)> fn);

 private:
  const Options options_;
  std::unique_ptr<ThreadPool> helpers_;  // null without helpers
};

// Parts and ParallelFor on `pool`, or one part run on the caller when `pool` is null.
// `min_part` names the option that bounds a part of this loop (e.g.
// &ApplyPool::Options::min_dense_elements).
inline int ApplyParts(const ApplyPool* pool, int64_t work, int64_t ApplyPool::Options::*min_part) {
  return pool == nullptr ? 1 : pool->Parts(work, pool->options().*min_part);
}
void ApplyInParts(ApplyPool* pool, int parts, absl::FunctionRef<void(int)> fn);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PARALLEL_APPLY_H_
