#include "ps/ps_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

namespace asyncps::ps {

PsMetrics::PsMetrics(metrics::ProcessMetrics& metrics) {
  auto& registry = metrics.registry();
  const std::map<std::string, std::string> labels = {{"role", metrics.role()}, {"task", metrics.task()}};
  auto& rejected = prometheus::BuildCounter()
                       .Name("asyncps_ps_rejected_requests_total")
                       .Help("Requests a parameter server refused at one of its limits, by reason")
                       .Labels(labels)
                       .Register(registry);
  // Every reason is created up front so each series exists (at 0) from the start.
  rejected_[static_cast<int>(RejectReason::kVariableBytes)] = &rejected.Add({{"reason", "variable_bytes"}});
  rejected_[static_cast<int>(RejectReason::kResponseBytes)] = &rejected.Add({{"reason", "response_bytes"}});
  rejected_[static_cast<int>(RejectReason::kNonfiniteGradient)] = &rejected.Add({{"reason", "nonfinite_gradient"}});
  rejected_[static_cast<int>(RejectReason::kDedupWindowFull)] = &rejected.Add({{"reason", "dedup_window_full"}});
  rejected_[static_cast<int>(RejectReason::kStaleGradient)] = &rejected.Add({{"reason", "stale_gradient"}});
  nonfinite_ = &prometheus::BuildCounter()
                    .Name("asyncps_ps_nonfinite_gradients_total")
                    .Help("Pushed gradients holding NaN or Inf (refused unless --allow_nonfinite_gradients)")
                    .Labels(labels)
                    .Register(registry)
                    .Add({});
  variable_bytes_ = &prometheus::BuildGauge()
                         .Name("asyncps_ps_variable_bytes")
                         .Help("Bytes held by this parameter server's variables and their optimizer slots")
                         .Labels(labels)
                         .Register(registry)
                         .Add({});
  auto& skipped = prometheus::BuildCounter()
                      .Name("asyncps_ps_dedup_skipped_total")
                      .Help("Closure updates (one per variable of a request) answered as already applied, by reason")
                      .Labels(labels)
                      .Register(registry);
  dedup_skipped_[static_cast<int>(DedupSkip::kRepeat)] = &skipped.Add({{"reason", "repeat"}});
  dedup_skipped_[static_cast<int>(DedupSkip::kBelowWatermark)] = &skipped.Add({{"reason", "below_watermark"}});
  dedup_entries_ = &prometheus::BuildGauge()
                        .Name("asyncps_ps_dedup_window_entries")
                        .Help("Keys (closure, call, variable) held by this parameter server's update window")
                        .Labels(labels)
                        .Register(registry)
                        .Add({});
  variables_ = &prometheus::BuildGauge()
                    .Name("asyncps_ps_variables")
                    .Help("Variables held by this parameter server")
                    .Labels(labels)
                    .Register(registry)
                    .Add({});
  rows_updated_ = &prometheus::BuildCounter()
                       .Name("asyncps_ps_rows_updated_total")
                       .Help("Rows written by gradient pushes and updates (dense ones count every row)")
                       .Labels(labels)
                       .Register(registry)
                       .Add({});
  // Staleness is a count of versions: 0 and 1 are the common values with a few workers,
  // powers of two past that.
  staleness_ = &prometheus::BuildHistogram()
                    .Name("asyncps_ps_gradient_staleness")
                    .Help("Staleness (versions the variable moved since the gradient's read) of applied gradients")
                    .Labels(labels)
                    .Register(registry)
                    .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32, 64, 128});
}

void PsMetrics::RecordRejected(RejectReason reason) { rejected_[static_cast<int>(reason)]->Increment(); }

void PsMetrics::RecordNonfiniteGradient() { nonfinite_->Increment(); }

void PsMetrics::SetVariableBytes(uint64_t bytes) { variable_bytes_->Set(static_cast<double>(bytes)); }

void PsMetrics::RecordDedupSkipped(DedupSkip reason, uint64_t updates) {
  dedup_skipped_[static_cast<int>(reason)]->Increment(static_cast<double>(updates));
}

void PsMetrics::SetDedupEntries(uint64_t entries) { dedup_entries_->Set(static_cast<double>(entries)); }
void PsMetrics::SetVariables(uint64_t count) { variables_->Set(static_cast<double>(count)); }

void PsMetrics::AddRowsUpdated(uint64_t rows) { rows_updated_->Increment(static_cast<double>(rows)); }

void PsMetrics::ObserveStaleness(int64_t staleness) { staleness_->Observe(static_cast<double>(staleness)); }

}  // namespace asyncps::ps
