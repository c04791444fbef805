#ifndef ASYNCPS_WORKER_WORKER_METRICS_H_
#define ASYNCPS_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace asyncps {

// A worker's own metric families:
//   asyncps_worker_step_seconds{function}       time a step function ran (histogram)
//   asyncps_worker_input_wait_seconds_total     time steps spent waiting in StepContext::Next
//   asyncps_worker_examples_total               examples (rows of the first component of each
//                                               element) steps took from their iterators
//   asyncps_worker_steps_total{function,result} steps run, result "ok" or "error"
//   asyncps_worker_step_phase_seconds_total{function,phase}
//                                               time steps reported spending in each of their
//                                               phases (StepContext::AddPhaseTime)
// `function` comes from the Program's registered names (a fixed, small set), never from the
// request for a name the Program lacks.
//
// Thread-safe. `metrics` must outlive this object.
class WorkerMetrics {
 public:
  explicit WorkerMetrics(metrics::ProcessMetrics& metrics);
  ~WorkerMetrics();

  void RecordStep(const std::string& function, bool ok, double seconds, double input_wait_seconds,
                  int64_t examples);
  // Adds a step's phase times (StepContext::phase_times) to the phase counters.
  void RecordPhases(const std::string& function,
                    const std::vector<std::pair<std::string, absl::Duration>>& phases);

 private:
  struct FunctionChildren;
  FunctionChildren& Children(const std::string& function);

  prometheus::Family<prometheus::Histogram>* step_seconds_;
  prometheus::Family<prometheus::Counter>* steps_;
  prometheus::Counter* input_wait_;
  prometheus::Counter* examples_;
  prometheus::Family<prometheus::Counter>* phase_seconds_;
  Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<FunctionChildren>> children_ ABSL_GUARDED_BY(mu_);
  // By {function, phase}; counters live in the family (never freed while it lives).
  absl::flat_hash_map<std::pair<std::string, std::string>, prometheus::Counter*> phases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_WORKER_METRICS_H_
