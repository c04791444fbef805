#ifndef ASYNCPS_WORKER_GRADIENT_RESIDUALS_H_
#define ASYNCPS_WORKER_GRADIENT_RESIDUALS_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "core/sync.h"

namespace asyncps {

// Error feedback for lossy gradient compression (core/compression.h; docs/performance.md,
// "Gradient compression"): per variable shard, what this worker's applied pushes did not send.
// A push of shard s sends C(g + r) and keeps r' = g + r - C(g + r) for the next one, so that
// over many steps every coordinate's gradient reaches the PS, only later.
//
// A push takes the shard's residual out (Take) while it is in flight, so that two pushes of the
// same shard at once (closures running together on one worker) never both send it, and gives
// back (Give) what stays: r' when the PS applied the push; r itself — its own gradient dropped —
// when the PS skipped it as applied before (a closure's re-run: the first attempt's update is
// the one the PS keeps) or the push failed (the closure is re-run and computes its gradient
// again). Residuals live in this worker's memory only: a worker that dies loses them, which
// costs the model what a lost in-flight gradient costs, never an update applied twice.
//
// Thread-safe.
class GradientResiduals {
 public:
  // The residual of `shard`, taken out (the store holds none for it until Give); nullopt when
  // it has none, or one of another size than `n` (the shard changed shape: dropped).
  std::optional<std::vector<float>> Take(const std::string& shard, size_t n);
  // Adds `residual` into what the store holds for `shard` (pushes that finished meanwhile may
  // have given theirs), or stores it.
  void Give(const std::string& shard, std::vector<float> residual);
  // A copy of the residual held for `shard` (empty when none): for tests and metrics.
  std::vector<float> Peek(const std::string& shard) const;
  // How many shards hold a residual.
  size_t size() const;

  // A buffer of `n` floats whose values are unspecified: one given to Recycle before when one
  // of that size is kept, else a new one. A push's residual is the size of its shard (a 784x256
  // layer is 800 KB); a fresh one per push costs an allocation and its page faults each step.
  std::vector<float> Buffer(size_t n);
  // Keeps `buffer` for Buffer (at most kSpareBuffers of them; others are freed).
  void Recycle(std::vector<float> buffer);
  static constexpr size_t kSpareBuffers = 16;

 private:
  // core/sync.h, not absl::Mutex: TSan cannot see the uninstrumented libabsl's hand-offs.
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::vector<float>> residuals_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> spare_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_GRADIENT_RESIDUALS_H_
