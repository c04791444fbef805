#ifndef ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_
#define ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>

#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace asyncps {

// The coordinator's own metric families (all asyncps_coordinator_*): closures scheduled,
// completed, failed, retried and cancelled; queue depth and closures in flight; workers up
// and worker failures; workers recovered (admitted again after being down); closures that
// found a PS restarted empty; per-worker resources (datasets, iterators) rebuilt on workers
// that came back; closure latency from Schedule to result; automatic PS recovery: repairs
// done, closures whose effects they undid, batches handed out again by the split cursors
// they rolled back, datasets whose cursor a restored checkpoint lacked, and whether dispatch
// is paused for one now.
//
// Thread-safe. `metrics` must outlive this object.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(metrics::ProcessMetrics& metrics);

  prometheus::Counter& scheduled;
  prometheus::Counter& completed;
  prometheus::Counter& failed;
  prometheus::Counter& retried;
  prometheus::Counter& cancelled;
  prometheus::Counter& worker_failures;
  prometheus::Counter& worker_recoveries;
  // Elastic membership: workers that joined a running job, and that left it by a drain (a
  // departure is not a failure, even when the worker dies while draining).
  prometheus::Counter& worker_joins;
  prometheus::Counter& worker_departures;
  prometheus::Counter& ps_state_lost;
  prometheus::Counter& resources_rebuilt;
  prometheus::Counter& ps_recoveries;
  prometheus::Counter& ps_recovery_steps_lost;
  prometheus::Counter& ps_recovery_batches_redone;
  prometheus::Counter& ps_recovery_cursor_missing;
  prometheus::Gauge& dispatch_paused;
  prometheus::Gauge& queue_depth;
  prometheus::Gauge& in_flight;
  prometheus::Gauge& workers_up;
  prometheus::Histogram& closure_seconds;
};

// Checkpoint saves of the chief (asyncps_checkpoint_*): saves committed and failed, how long a
// committed save took, its bytes and its step.
//
// Thread-safe. `metrics` must outlive this object.
class CheckpointMetrics {
 public:
  explicit CheckpointMetrics(metrics::ProcessMetrics& metrics);

  void RecordSaved(double seconds, uint64_t bytes, int64_t step);
  void RecordFailed();

 private:
  prometheus::Counter& saved_;
  prometheus::Counter& failed_;
  prometheus::Histogram& seconds_;
  prometheus::Gauge& bytes_;
  prometheus::Gauge& last_step_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_
