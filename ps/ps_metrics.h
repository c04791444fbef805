#ifndef ASYNCPS_PS_PS_METRICS_H_
#define ASYNCPS_PS_PS_METRICS_H_

#include <cstdint>

#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace asyncps::ps {

// Why a PS refused a request at one of its limits (the `reason` label).
enum class RejectReason {
  kVariableBytes,      // "variable_bytes": creating it would pass --ps_max_variable_bytes
  kResponseBytes,      // "response_bytes": its answer would pass --ps_max_response_bytes
  kNonfiniteGradient,  // "nonfinite_gradient": a gradient held NaN or Inf
  kDedupWindowFull,    // "dedup_window_full": the update window is at --ps_dedup_max_entries
};

// Why an update of a closure was answered "already applied" (the `reason` label; see
// UpdateDedup).
enum class DedupSkip {
  kRepeat,          // "repeat": the same (closure, call, variable) was applied before
  kBelowWatermark,  // "below_watermark": a zombie attempt of a closure already finished
};

// The parameter server's own metric families:
//   asyncps_ps_rejected_requests_total{reason}  requests refused at a limit (RejectReason)
//   asyncps_ps_nonfinite_gradients_total        gradients (one per variable of a push) that
//                                               held NaN or Inf, refused or allowed
//   asyncps_ps_variable_bytes                   bytes the variables hold against the cap
//   asyncps_ps_dedup_skipped_total{reason}      closure updates (one per variable of a
//                                               request) answered "already applied" (DedupSkip)
//   asyncps_ps_dedup_window_entries             keys the update window holds (UpdateDedup)
//   asyncps_ps_variables                        variables this server holds
//   asyncps_ps_rows_updated_total               rows written by pushes and updates (a dense
//                                               update counts every row of its value)
// Replicated shard groups (ps/replication/):
//   asyncps_ps_group_generation{group}          generation of this PS's copy of the group
//   asyncps_ps_group_role{group,copy_role}      1 for the copy's role (primary, backup,
//                                               rebuilding, needs_rebuild, fenced), else 0
//   asyncps_ps_replication_lag{group,backup}    writes applied by this primary not yet
//                                               acknowledged by that copy (as of the latest
//                                               ps.ReplicaStatus)
//   asyncps_ps_replicated_entries_total, asyncps_ps_replicated_bytes_total   writes (and
//                                               their bytes) acknowledged by other copies
//   asyncps_ps_state_transfers_total, asyncps_ps_state_transfer_bytes_total  completed
//                                               transfers sent, and tensor bytes sent
//   asyncps_ps_stale_generation_refusals_total  requests and streams refused for a stale
//                                               shard map generation
// Per-method latency and bytes in/out are the RPC families (metrics/rpc_metrics.h).
//
// Thread-safe. `metrics` must outlive this object.
class PsMetrics {
 public:
  explicit PsMetrics(metrics::ProcessMetrics& metrics);

  void RecordRejected(RejectReason reason);
  void RecordNonfiniteGradient();
  void SetVariableBytes(uint64_t bytes);
  void RecordDedupSkipped(DedupSkip reason, uint64_t updates);
  void SetDedupEntries(uint64_t entries);
  void SetVariables(uint64_t count);
  void AddRowsUpdated(uint64_t rows);

  void SetGroupCopy(uint32_t group, const char* role, uint64_t generation);
  void SetReplicationLag(uint32_t group, int32_t backup, uint64_t lag);
  void RecordReplicated(uint64_t entries, uint64_t bytes);
  void RecordStateTransfer();
  void AddStateTransferBytes(uint64_t bytes);
  void RecordStaleGeneration();

 private:
  prometheus::Counter* rejected_[4];
  prometheus::Counter* dedup_skipped_[2];
  prometheus::Gauge* dedup_entries_;
  prometheus::Counter* nonfinite_;
  prometheus::Gauge* variable_bytes_;
  prometheus::Gauge* variables_;
  prometheus::Counter* rows_updated_;
  prometheus::Family<prometheus::Gauge>* group_generation_;
  prometheus::Family<prometheus::Gauge>* group_role_;
  prometheus::Family<prometheus::Gauge>* replication_lag_;
  prometheus::Counter* replicated_entries_;
  prometheus::Counter* replicated_bytes_;
  prometheus::Counter* state_transfers_;
  prometheus::Counter* state_transfer_bytes_;
  prometheus::Counter* stale_generation_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PS_METRICS_H_
