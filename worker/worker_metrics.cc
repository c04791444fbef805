#include "worker/worker_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>

#include "metrics/rpc_metrics.h"

namespace asyncps {

struct WorkerMetrics::FunctionChildren {
  prometheus::Histogram* seconds;
  prometheus::Counter* ok;
  prometheus::Counter* error;
};

WorkerMetrics::WorkerMetrics(metrics::ProcessMetrics& m) {
  const std::map<std::string, std::string> labels = {{"role", m.role()}, {"task", m.task()}};
  step_seconds_ = &prometheus::BuildHistogram()
                       .Name("asyncps_worker_step_seconds")
                       .Help("Time a step function ran on this worker")
                       .Labels(labels)
                       .Register(m.registry());
  steps_ = &prometheus::BuildCounter()
                .Name("asyncps_worker_steps_total")
                .Help("Step functions run on this worker, by result")
                .Labels(labels)
                .Register(m.registry());
  input_wait_ = &prometheus::BuildCounter()
                     .Name("asyncps_worker_input_wait_seconds_total")
                     .Help("Time steps spent waiting for their next input element")
                     .Labels(labels)
                     .Register(m.registry())
                     .Add({});
  examples_ = &prometheus::BuildCounter()
                   .Name("asyncps_worker_examples_total")
                   .Help("Examples (rows of each input element's first component) steps consumed")
                   .Labels(labels)
                   .Register(m.registry())
                   .Add({});
  phase_seconds_ = &prometheus::BuildCounter()
                        .Name("asyncps_worker_step_phase_seconds_total")
                        .Help("Time steps reported spending in each phase of their own (e.g. pull, compute, push)")
                        .Labels(labels)
                        .Register(m.registry());
}

WorkerMetrics::~WorkerMetrics() = default;

WorkerMetrics::FunctionChildren& WorkerMetrics::Children(const std::string& function) {
  MutexLock lock(&mu_);
  auto& slot = children_[function];
  if (slot == nullptr) {
    slot = std::make_unique<FunctionChildren>();
    slot->seconds = &step_seconds_->Add({{"function", function}}, metrics::LatencyBuckets());
    slot->ok = &steps_->Add({{"function", function}, {"result", "ok"}});
    slot->error = &steps_->Add({{"function", function}, {"result", "error"}});
  }
  return *slot;
}

void WorkerMetrics::RecordStep(const std::string& function, bool ok, double seconds, double input_wait_seconds,
                               int64_t examples) {
  FunctionChildren& c = Children(function);
  c.seconds->Observe(seconds);
  (ok ? c.ok : c.error)->Increment();
  if (input_wait_seconds > 0) input_wait_->Increment(input_wait_seconds);
  if (examples > 0) examples_->Increment(static_cast<double>(examples));
}

void WorkerMetrics::RecordPhases(const std::string& function,
                                 const std::vector<std::pair<std::string, absl::Duration>>& phases) {
  if (phases.empty()) return;
  MutexLock lock(&mu_);
  for (const auto& [phase, time] : phases) {
    prometheus::Counter*& counter = phases_[{function, phase}];
    if (counter == nullptr) counter = &phase_seconds_->Add({{"function", function}, {"phase", phase}});
    const double seconds = absl::ToDoubleSeconds(time);
    if (seconds > 0) counter->Increment(seconds);
  }
}

}  // namespace asyncps
