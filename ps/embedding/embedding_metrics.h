#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_METRICS_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_METRICS_H_

#include <cstdint>

#include "core/sync.h"
#include "metrics/process_metrics.h"
#include "ps/embedding/embedding_table.h"

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace asyncps::ps {

// The embedding tables' metric families, summed over the tables of this PS:
//   asyncps_ps_embedding_rows                     rows held now
//   asyncps_ps_embedding_memory_bytes             bytes the tables allocated (rows, slots,
//                                                 index, sketch)
//   asyncps_ps_embedding_admitted_total           rows created (re-creations included)
//   asyncps_ps_embedding_evicted_total{reason}    rows evicted: "ttl" or "memory_cap"
//   asyncps_ps_embedding_dropped_gradients_total  pushed keys not admitted
//
// Thread-safe. `metrics` must outlive this object.
class EmbeddingMetrics {
 public:
  explicit EmbeddingMetrics(metrics::ProcessMetrics& metrics);

  // Publishes `total`, the sum of every table's Stats() now (counters advance by the growth
  // since the last call; they never go back).
  void Publish(const EmbeddingTableStats& total);

 private:
  prometheus::Gauge* rows_;
  prometheus::Gauge* memory_bytes_;
  prometheus::Counter* admitted_;
  prometheus::Counter* evicted_ttl_;
  prometheus::Counter* evicted_cap_;
  prometheus::Counter* dropped_;
  Mutex mu_;
  EmbeddingTableStats published_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_METRICS_H_
