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
    // push counts the elements of its distinct rows). Measured on the 2-core VM (load 2-3): a
    // ParallelFor costs its caller 3-14 us (median) to hand out, a helper starts its first
    // part 30-55 us after (median), and in over a tenth of the calls not within 0.8 ms (the
    // caller then runs the parts itself: parts are claimed, not assigned; a helper preempted
    // after claiming one still holds up the caller for that part). A dense Adam part of
    // 128k elements is ~0.2 ms, so a 4 MiB dense push (1M elements) is split in 8: with 1 PS
    // its median time through ps_bench was 1.5-20% lower in 5 of 6 paired A/B sets (6-8
    // pairs each, load 2-5; 4% higher in the sixth), with 2 PS (two PS processes on two
    // cores) indistinguishable. The training model's arrays (the MLP's largest, 784x256 = 200k
    // elements) stay whole: there the workers keep every core busy. Rows stay at 1M: 10k-row
    // pushes (640k elements) split in 5 parts measured within 4% of whole ones (1 PS and 2
    // PS, 6 paired runs), and earlier at load 5-6 SGD ones slower. Tests lower these to
    // split small arrays.
    int64_t min_dense_elements = int64_t{1} << 17;
    int64_t min_row_elements = int64_t{1} << 20;
    // The finiteness check reads each element once and does little else: twice the dense
    // part, so it is split for a 4 MiB gradient too but not for a 200k-element one.
    int64_t min_check_elements = int64_t{1} << 18;
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
