#include "coordinator/coordinator_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "metrics/rpc_metrics.h"

namespace asyncps {
namespace {

std::map<std::string, std::string> Labels(metrics::ProcessMetrics& m) {
  return {{"role", m.role()}, {"task", m.task()}};
}

prometheus::Counter& Counter(metrics::ProcessMetrics& m, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Labels(Labels(m)).Register(m.registry()).Add({});
}

prometheus::Gauge& Gauge(metrics::ProcessMetrics& m, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Labels(Labels(m)).Register(m.registry()).Add({});
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(metrics::ProcessMetrics& m)
    : scheduled(Counter(m, "asyncps_coordinator_closures_scheduled_total", "Closures accepted by Schedule")),
      completed(Counter(m, "asyncps_coordinator_closures_completed_total", "Closures that returned a value")),
      failed(Counter(m, "asyncps_coordinator_closures_failed_total", "Closures whose function or PS failed")),
      retried(Counter(m, "asyncps_coordinator_closures_retried_total",
                      "Closures put back on the queue because their worker failed")),
      cancelled(Counter(m, "asyncps_coordinator_closures_cancelled_total", "Closures cancelled by an error")),
      worker_failures(Counter(m, "asyncps_coordinator_worker_failures_total", "Times a worker was marked down")),
      ps_state_lost(Counter(m, "asyncps_coordinator_ps_state_lost_total",
                            "Closures that failed because a PS no longer held a variable (it restarted empty)")),
      resources_rebuilt(Counter(m, "asyncps_coordinator_resources_rebuilt_total",
                                "Per-worker resources (datasets, iterators) rebuilt on restarted workers")),
      ps_recoveries(Counter(m, "asyncps_coordinator_ps_recoveries_total",
                            "Automatic PS recoveries that restored a checkpoint or re-initialised lost variables")),
      ps_recovery_steps_lost(Counter(m, "asyncps_coordinator_ps_recovery_steps_lost_total",
                                     "Completed closures whose effects automatic PS recoveries undid")),
      dispatch_paused(Gauge(m, "asyncps_coordinator_dispatch_paused",
                            "1 while dispatch is held for automatic PS recovery")),
      queue_depth(Gauge(m, "asyncps_coordinator_queue_depth", "Closures waiting for a worker")),
      in_flight(Gauge(m, "asyncps_coordinator_closures_in_flight", "Closures running on workers")),
      workers_up(Gauge(m, "asyncps_coordinator_workers_up", "Workers ready for closures")),
      closure_seconds(prometheus::BuildHistogram()
                          .Name("asyncps_coordinator_closure_seconds")
                          .Help("Time from Schedule to the closure's result")
                          .Labels(Labels(m))
                          .Register(m.registry())
                          .Add({}, metrics::LatencyBuckets())) {}

}  // namespace asyncps
