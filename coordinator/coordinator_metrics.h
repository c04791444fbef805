#ifndef ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_
#define ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_

#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace asyncps {

// The coordinator's own metric families (all asyncps_coordinator_*): closures scheduled,
// completed, failed, retried and cancelled; queue depth and closures in flight; workers up
// and worker failures; closures that found a PS restarted empty; per-worker resources
// (datasets, iterators) rebuilt on workers that came back; closure latency from Schedule to result;
// automatic PS recovery: repairs done, closures whose effects they undid, and whether dispatch
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
  prometheus::Counter& ps_state_lost;
  prometheus::Counter& resources_rebuilt;
  prometheus::Counter& ps_recoveries;
  prometheus::Counter& ps_recovery_steps_lost;
  prometheus::Gauge& dispatch_paused;
  prometheus::Gauge& queue_depth;
  prometheus::Gauge& in_flight;
  prometheus::Gauge& workers_up;
  prometheus::Histogram& closure_seconds;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_COORDINATOR_METRICS_H_
