#include "ps/ps_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
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
  group_generation_ = &prometheus::BuildGauge()
                           .Name("asyncps_ps_group_generation")
                           .Help("Shard map generation of this parameter server's copy of each group")
                           .Labels(labels)
                           .Register(registry);
  group_role_ = &prometheus::BuildGauge()
                     .Name("asyncps_ps_group_role")
                     .Help("1 for the role of this parameter server's copy of each group")
                     .Labels(labels)
                     .Register(registry);
  replication_lag_ = &prometheus::BuildGauge()
                          .Name("asyncps_ps_replication_lag")
                          .Help("Writes applied by this primary and not yet acknowledged by a copy")
                          .Labels(labels)
                          .Register(registry);
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(registry).Add({});
  };
  replicated_entries_ =
      counter("asyncps_ps_replicated_entries_total", "Writes acknowledged by the other copies of their group");
  replicated_bytes_ = counter("asyncps_ps_replicated_bytes_total", "Bytes of the writes acknowledged by other copies");
  state_transfers_ = counter("asyncps_ps_state_transfers_total", "State transfers this parameter server completed");
  state_transfer_bytes_ =
      counter("asyncps_ps_state_transfer_bytes_total", "Tensor bytes this parameter server sent in state transfers");
  stale_generation_ = counter("asyncps_ps_stale_generation_refusals_total",
                              "Requests and replication streams refused for a stale shard map generation");
}

void PsMetrics::SetGroupCopy(uint32_t group, const char* role, uint64_t generation) {
  const std::string g = std::to_string(group);
  group_generation_->Add({{"group", g}}).Set(static_cast<double>(generation));
  for (const char* r : {"primary", "backup", "rebuilding", "needs_rebuild", "fenced"}) {
    group_role_->Add({{"group", g}, {"copy_role", r}}).Set(std::string(r) == role ? 1 : 0);
  }
}

void PsMetrics::SetReplicationLag(uint32_t group, int32_t backup, uint64_t lag) {
  replication_lag_->Add({{"group", std::to_string(group)}, {"backup", std::to_string(backup)}})
      .Set(static_cast<double>(lag));
}

void PsMetrics::RecordReplicated(uint64_t entries, uint64_t bytes) {
  replicated_entries_->Increment(static_cast<double>(entries));
  replicated_bytes_->Increment(static_cast<double>(bytes));
}

void PsMetrics::RecordStateTransfer() { state_transfers_->Increment(); }
void PsMetrics::AddStateTransferBytes(uint64_t bytes) { state_transfer_bytes_->Increment(static_cast<double>(bytes)); }
void PsMetrics::RecordStaleGeneration() { stale_generation_->Increment(); }

void PsMetrics::RecordRejected(RejectReason reason) { rejected_[static_cast<int>(reason)]->Increment(); }

void PsMetrics::RecordNonfiniteGradient() { nonfinite_->Increment(); }

void PsMetrics::SetVariableBytes(uint64_t bytes) { variable_bytes_->Set(static_cast<double>(bytes)); }

void PsMetrics::RecordDedupSkipped(DedupSkip reason, uint64_t updates) {
  dedup_skipped_[static_cast<int>(reason)]->Increment(static_cast<double>(updates));
}

void PsMetrics::SetDedupEntries(uint64_t entries) { dedup_entries_->Set(static_cast<double>(entries)); }
void PsMetrics::SetVariables(uint64_t count) { variables_->Set(static_cast<double>(count)); }

void PsMetrics::AddRowsUpdated(uint64_t rows) { rows_updated_->Increment(static_cast<double>(rows)); }

}  // namespace asyncps::ps
