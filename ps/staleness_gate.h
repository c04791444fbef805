#ifndef ASYNCPS_PS_STALENESS_GATE_H_
#define ASYNCPS_PS_STALENESS_GATE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sync.h"
#include "ps/variable.h"

namespace asyncps::ps {

// Where a PS enforces OptimizerConfig::max_staleness and computes the staleness-aware learning
// rate for one ps.PushGradients or ps.Update request (docs/staleness.md).
//
// Enter takes Variable::write_order_mu of every variable of the request whose optimizer bounds
// staleness (each once, in address order, so two requests never wait on each other), then
// checks every gradient that names a base version against its variable's bound (an entry
// applied after earlier entries of the same variable in the request is that many versions
// staler: the version it is applied at is what counts). The locks
// are held until the gate is destroyed, i.e. until the request's updates are applied: so a
// push admitted with staleness s is applied with staleness s, never more (with max_staleness
// 0, no update computed from an older version than the current one is ever applied). Requests
// that touch no bounded variable take no lock.
//
// Refusal is all or nothing: one gradient over its bound refuses the whole request before any
// of it is applied. Refuse-and-recompute rather than wait: a stale gradient can never become
// fresh by waiting (the version only grows), and a worker that waited would hold its closure,
// its model and its batch while the others advance.
//
// Not thread-safe; used by one request on one thread. Must not outlive the variables.
class StalenessGate {
 public:
  struct Entry {
    const Variable* variable = nullptr;
    // False for an update the exactly-once window answers "already applied": it is neither
    // checked nor locked (a closure re-run after a refusal is not refused for what it already
    // applied).
    bool applies = true;
    // The version the gradient was computed from (>= 0); absent for a gradient that names none
    // and for ps.Update's updates (not checked, not scaled; they are locked, as writes).
    std::optional<int64_t> base_version;
  };

  // Requests of at most this many entries count a variable's earlier entries by a scan; longer
  // ones use a map (both give the same staleness).
  static constexpr size_t kScannedEntries = 16;

  StalenessGate() = default;
  StalenessGate(const StalenessGate&) = delete;
  StalenessGate& operator=(const StalenessGate&) = delete;
  ~StalenessGate();

  // Locks and checks `entries` as described above. On refusal returns StaleGradientError for
  // the first entry over its bound and holds no lock. Call at most once.
  absl::Status Enter(absl::Span<const Entry> entries) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // After a successful Enter, for entry i: its staleness (-1 when it named no base version or
  // does not apply) and its learning-rate factor (UpdateRule::LearningRateScale; 1 for -1).
  int64_t staleness(size_t i) const { return staleness_[i]; }
  float lr_scale(size_t i) const { return lr_scale_[i]; }

 private:
  void Release() ABSL_NO_THREAD_SAFETY_ANALYSIS;

  std::vector<Mutex*> held_;
  std::vector<int64_t> staleness_;
  std::vector<float> lr_scale_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_STALENESS_GATE_H_
