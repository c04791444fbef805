#ifndef ASYNCPS_PS_PS_METRICS_H_
#define ASYNCPS_PS_PS_METRICS_H_

#include <cstdint>

#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace asyncps::ps {

// Why a PS refused a request at one of its limits (the `reason` label).
enum class RejectReason {
  kVariableBytes,      // "variable_bytes": creating it would pass --ps_max_variable_bytes
  kResponseBytes,      // "response_bytes": its answer would pass --ps_max_response_bytes
  kNonfiniteGradient,  // "nonfinite_gradient": a gradient held NaN or Inf
};

// The parameter server's own metric families:
//   asyncps_ps_rejected_requests_total{reason}  requests refused at a limit (RejectReason)
//   asyncps_ps_nonfinite_gradients_total        gradients (one per variable of a push) that
//                                               held NaN or Inf, refused or allowed
//   asyncps_ps_variable_bytes                   bytes the variables hold against the cap
//
// Thread-safe. `metrics` must outlive this object.
class PsMetrics {
 public:
  explicit PsMetrics(metrics::ProcessMetrics& metrics);

  void RecordRejected(RejectReason reason);
  void RecordNonfiniteGradient();
  void SetVariableBytes(uint64_t bytes);

 private:
  prometheus::Counter* rejected_[3];
  prometheus::Counter* nonfinite_;
  prometheus::Gauge* variable_bytes_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PS_METRICS_H_
