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
      worker_recoveries(Counter(m, "asyncps_coordinator_worker_recoveries_total",
                                "Times a worker that was down was rebuilt and admitted again")),
      worker_joins(Counter(m, "asyncps_coordinator_worker_joins_total",
                           "Workers that joined the running job by registering (elastic membership)")),
      worker_departures(Counter(m, "asyncps_coordinator_worker_departures_total",
                                "Workers that left the running job by being drained (not failures)")),
      ps_state_lost(Counter(m, "asyncps_coordinator_ps_state_lost_total",
                            "Closures that failed because a PS no longer held a variable (it restarted empty)")),
      resources_rebuilt(Counter(m, "asyncps_coordinator_resources_rebuilt_total",
                                "Per-worker resources (datasets, iterators) rebuilt on restarted workers")),
      ps_recoveries(Counter(m, "asyncps_coordinator_ps_recoveries_total",
                            "Automatic PS recoveries that restored a checkpoint or re-initialised lost variables")),
      ps_recovery_steps_lost(Counter(m, "asyncps_coordinator_ps_recovery_steps_lost_total",
                                     "Completed closures whose effects automatic PS recoveries undid")),
      ps_recovery_batches_redone(
          Counter(m, "asyncps_coordinator_ps_recovery_batches_redone_total",
                  "Dynamically sharded batches handed out again after automatic PS recoveries "
                  "rolled their split cursors back to the restored checkpoint")),
      ps_recovery_cursor_missing(
          Counter(m, "asyncps_coordinator_ps_recovery_cursor_missing_total",
                  "Datasets whose split cursor a checkpoint restored by automatic PS recovery "
                  "lacked (examples read since it may be skipped)")),
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

CheckpointMetrics::CheckpointMetrics(metrics::ProcessMetrics& m)
    : saved_(Counter(m, "asyncps_checkpoint_saves_total", "Checkpoints committed")),
      failed_(Counter(m, "asyncps_checkpoint_save_failures_total", "Checkpoint saves that did not commit")),
      seconds_(prometheus::BuildHistogram()
                   .Name("asyncps_checkpoint_save_seconds")
                   .Help("Time a committed checkpoint save took")
                   .Labels(Labels(m))
                   .Register(m.registry())
                   .Add({}, metrics::LatencyBuckets())),
      bytes_(Gauge(m, "asyncps_checkpoint_last_bytes", "Bytes of the last committed checkpoint")),
      last_step_(Gauge(m, "asyncps_checkpoint_last_step", "Step of the last committed checkpoint")) {}

void CheckpointMetrics::RecordSaved(double seconds, uint64_t bytes, int64_t step) {
  saved_.Increment();
  seconds_.Observe(seconds);
  bytes_.Set(static_cast<double>(bytes));
  last_step_.Set(static_cast<double>(step));
}

void CheckpointMetrics::RecordFailed() { failed_.Increment(); }

}  // namespace asyncps
