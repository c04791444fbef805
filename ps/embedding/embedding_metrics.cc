#include "ps/embedding/embedding_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

namespace asyncps::ps {

EmbeddingMetrics::EmbeddingMetrics(metrics::ProcessMetrics& metrics) {
  auto& registry = metrics.registry();
  const std::map<std::string, std::string> labels = {{"role", metrics.role()}, {"task", metrics.task()}};
  rows_ = &prometheus::BuildGauge()
               .Name("asyncps_ps_embedding_rows")
               .Help("Rows held by this parameter server's embedding tables")
               .Labels(labels)
               .Register(registry)
               .Add({});
  memory_bytes_ = &prometheus::BuildGauge()
                       .Name("asyncps_ps_embedding_memory_bytes")
                       .Help("Bytes allocated by this parameter server's embedding tables (rows, slots, index, sketch)")
                       .Labels(labels)
                       .Register(registry)
                       .Add({});
  admitted_ = &prometheus::BuildCounter()
                   .Name("asyncps_ps_embedding_admitted_total")
                   .Help("Embedding rows created (a key admitted, or re-created after eviction)")
                   .Labels(labels)
                   .Register(registry)
                   .Add({});
  auto& evicted = prometheus::BuildCounter()
                      .Name("asyncps_ps_embedding_evicted_total")
                      .Help("Embedding rows evicted, by reason (ttl, memory_cap)")
                      .Labels(labels)
                      .Register(registry);
  evicted_ttl_ = &evicted.Add({{"reason", "ttl"}});
  evicted_cap_ = &evicted.Add({{"reason", "memory_cap"}});
  dropped_ = &prometheus::BuildCounter()
                  .Name("asyncps_ps_embedding_dropped_gradients_total")
                  .Help("Pushed embedding keys not admitted yet: their gradients changed nothing")
                  .Labels(labels)
                  .Register(registry)
                  .Add({});
}

void EmbeddingMetrics::Publish(const EmbeddingTableStats& total) {
  MutexLock lock(&mu_);
  auto advance = [](prometheus::Counter* c, uint64_t now, uint64_t& seen) {
    if (now > seen) c->Increment(static_cast<double>(now - seen));
    if (now > seen) seen = now;
  };
  advance(admitted_, total.admitted, published_.admitted);
  advance(evicted_ttl_, total.evicted_ttl, published_.evicted_ttl);
  advance(evicted_cap_, total.evicted_cap, published_.evicted_cap);
  advance(dropped_, total.dropped_gradients, published_.dropped_gradients);
  rows_->Set(static_cast<double>(total.rows));
  memory_bytes_->Set(static_cast<double>(total.memory_bytes));
}

}  // namespace asyncps::ps
