#include "ps/embedding/embedding_service.h"

#include <spdlog/spdlog.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_checkpoint.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/ps_wire.h"
#include "ps/variable.h"

namespace asyncps::ps {
namespace {

UpdateDedup::Options DedupOptions(const EmbeddingService::Options& options) {
  UpdateDedup::Options o;
  o.max_entries = options.dedup_max_entries;
  o.metrics = options.ps_metrics;
  return o;
}

absl::Status Named(const std::string& table, absl::Status status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("embedding table '", table, "': ", status.message()));
}

// The keys of a lookup or push: i64 [n].
absl::StatusOr<Tensor> Keys(const net::InMessage& request, wire::TensorRef::Reader ref, const std::string& table) {
  auto keys = request.TensorAt(ref);
  if (!keys.ok()) return Named(table, keys.status());
  if (keys->dtype() != DType::kI64 || keys->rank() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", table, "': keys are ",
                                                   DTypeName(keys->dtype()), " of rank ", keys->rank(),
                                                   "; want i64 [n]"));
  }
  return *std::move(keys);
}

}  // namespace

EmbeddingService::EmbeddingService(EmbeddingStore& store, Options options)
    : store_(store), options_(options), dedup_(DedupOptions(options)) {}

void EmbeddingService::RegisterWith(net::MethodTable& server) {
  auto bind = [this](absl::Status (EmbeddingService::*method)(const net::InMessage&, net::OutMessage*)) {
    return [this, method](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
      return (this->*method)(req, resp);
    };
  };
  server.Register<wire::CreateEmbeddingTableRequest>(kCreateEmbeddingTableMethod, net::PsCallers(),
                                                     bind(&EmbeddingService::CreateTable));
  server.Register<wire::EmbeddingLookupRequest>(kEmbeddingLookupMethod, net::PsReaders(),
                                                bind(&EmbeddingService::Lookup));
  server.Register<wire::EmbeddingPushRequest>(kEmbeddingPushMethod, net::PsCallers(), bind(&EmbeddingService::Push));
  server.Register<wire::EmbeddingStatsRequest>(kEmbeddingStatsMethod, net::PsReaders(),
                                               bind(&EmbeddingService::Stats));
  server.Register<wire::SaveEmbeddingTablesRequest>("ps.SaveEmbeddingTables", net::ChiefOnly(),
                                                    bind(&EmbeddingService::Save));
  server.Register<wire::RestoreEmbeddingTablesRequest>("ps.RestoreEmbeddingTables", net::ChiefOnly(),
                                                       bind(&EmbeddingService::Restore));
}

absl::Status EmbeddingService::Reject(RejectReason reason, absl::Status status) const {
  if (options_.ps_metrics != nullptr) options_.ps_metrics->RecordRejected(reason);
  // The RPC server logs InvalidArgument itself; the rest would go unlogged.
  if (status.code() != absl::StatusCode::kInvalidArgument) spdlog::warn("refused: {}", status.ToString());
  return status;
}

void EmbeddingService::PublishMetrics(const EmbeddingStore& store) const {
  if (options_.metrics == nullptr) return;
  EmbeddingTableStats total;
  for (const EmbeddingTable* t : store.List()) {
    const EmbeddingTableStats s = t->Stats();
    total.rows += s.rows;
    total.admitted += s.admitted;
    total.evicted_ttl += s.evicted_ttl;
    total.evicted_cap += s.evicted_cap;
    total.dropped_gradients += s.dropped_gradients;
    total.memory_bytes += s.memory_bytes;
  }
  options_.metrics->Publish(total);
}

absl::Status EmbeddingService::CreateTable(const net::InMessage& request, net::OutMessage* response) {
  return CreateTableIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::CreateTableIn(Shard shard, const net::InMessage& /*request*/, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  ASSIGN_OR_RETURN(EmbeddingTableConfig config,
                   EmbeddingTableConfigFromWire(request_body.getAs<wire::CreateEmbeddingTableRequest>()));
  ASSIGN_OR_RETURN(auto table, shard.store->Create(config));
  if (table.second) {
    spdlog::info("embedding table '{}' created: dim {}, {} optimizer, memory cap {}", config.name, config.dim,
                 OptimizerKindName(config.optimizer.kind),
                 config.memory_cap_bytes == 0
                     ? std::string("none")
                     : absl::StrCat(config.memory_cap_bytes, " bytes (", EmbeddingTable::kStripes, " x ",
                                    table.first->max_rows_per_stripe(), " rows)"));
  }
  response->InitResponseBody<wire::CreateEmbeddingTableResponse>().setCreated(table.second);
  PublishMetrics(*shard.store);
  return absl::OkStatus();
}

absl::Status EmbeddingService::Lookup(const net::InMessage& request, net::OutMessage* response) {
  return LookupIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::LookupIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  auto req = request_body.getAs<wire::EmbeddingLookupRequest>();
  auto lookups = req.getLookups();
  std::vector<std::pair<EmbeddingTable*, Tensor>> resolved;
  uint64_t bytes = 0;
  for (auto l : lookups) {
    const std::string name = l.getTable().cStr();
    ASSIGN_OR_RETURN(EmbeddingTable * table, shard.store->Find(name));
    ASSIGN_OR_RETURN(Tensor keys, Keys(request, l.getKeys(), name));
    bytes += static_cast<uint64_t>(keys.num_elements()) * static_cast<uint64_t>(table->dim()) * sizeof(float);
    resolved.emplace_back(table, std::move(keys));
  }
  if (bytes > options_.max_response_bytes) {
    return Reject(RejectReason::kResponseBytes,
                  absl::ResourceExhaustedError(absl::StrCat(
                      "ps.EmbeddingLookup would answer ", bytes, " bytes, over this parameter server's cap of ",
                      options_.max_response_bytes, " response bytes (--ps_max_response_bytes); ask for less at once")));
  }
  auto body = response->InitResponseBody<wire::EmbeddingLookupResponse>();
  auto values = body.initValues(static_cast<unsigned>(resolved.size()));
  auto missing = body.initMissing(static_cast<unsigned>(resolved.size()));
  for (unsigned i = 0; i < resolved.size(); ++i) {
    auto& [table, keys] = resolved[i];
    // Every row of the answer is written (a row or an initial value): no zero fill first.
    std::shared_ptr<void> block = AllocateAlignedUninitialized(static_cast<size_t>(keys.num_elements()) *
                                                               static_cast<size_t>(table->dim()) * sizeof(float));
    Tensor out = Tensor::View(DType::kF32, {keys.num_elements(), table->dim()}, block, block.get());
    const uint64_t n = table->Lookup(keys.flat<int64_t>(), req.getTrain(), out.data<float>());
    missing.set(i, static_cast<uint32_t>(std::min<uint64_t>(n, std::numeric_limits<uint32_t>::max())));
    response->AddTensor(out, values[i]);
  }
  return absl::OkStatus();
}

absl::Status EmbeddingService::Push(const net::InMessage& request, net::OutMessage* response) {
  return PushIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::PushIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  auto req = request_body.getAs<wire::EmbeddingPushRequest>();
  struct Prepared {
    EmbeddingTable* table;
    Tensor keys;
    Tensor gradients;
  };
  std::vector<Prepared> prepared;
  for (auto p : req.getPushes()) {
    const std::string name = p.getTable().cStr();
    ASSIGN_OR_RETURN(EmbeddingTable * table, shard.store->Find(name));
    ASSIGN_OR_RETURN(Tensor keys, Keys(request, p.getKeys(), name));
    auto gradients = request.TensorAt(p.getGradients());
    if (!gradients.ok()) return Named(name, gradients.status());
    if (gradients->dtype() != DType::kF32 || gradients->shape() != Shape{keys.num_elements(), table->dim()}) {
      return absl::InvalidArgumentError(absl::StrCat(
          "embedding table '", name, "': gradients are ", DTypeName(gradients->dtype()), ShapeString(gradients->shape()),
          "; want f32[", keys.num_elements(), ",", table->dim(), "] (", keys.num_elements(),
          " keys of dim ", table->dim(), ")"));
    }
    if (!AllFinite(*gradients, options_.apply_pool)) {
      if (options_.ps_metrics != nullptr) options_.ps_metrics->RecordNonfiniteGradient();
      if (!options_.allow_nonfinite_gradients) {
        return Reject(RejectReason::kNonfiniteGradient,
                      absl::InvalidArgumentError(absl::StrCat(
                          "gradient for embedding table '", name,
                          "' holds NaN or Inf; nothing of this push was applied "
                          "(--allow_nonfinite_gradients applies such gradients)")));
      }
    }
    RETURN_IF_ERROR(table->CheckPush(keys.flat<int64_t>()));
    prepared.push_back({table, std::move(keys), *std::move(gradients)});
  }
  UpdateDedup::Admission admission;
  if (req.hasTag()) {
    const UpdateTag tag = UpdateTagFromWire(req.getTag());
    if (tag.tagged()) {
      std::vector<UpdateDedup::Target> targets;
      for (const Prepared& p : prepared) targets.push_back({p.table->name(), p.table->restores()});
      auto admitted = shard.dedup->Admit(tag, targets);
      if (!admitted.ok()) {
        if (admitted.status().code() == absl::StatusCode::kResourceExhausted) {
          return Reject(RejectReason::kDedupWindowFull, admitted.status());
        }
        return admitted.status();
      }
      admission = *std::move(admitted);
    }
  }
  uint64_t created = 0, dropped = 0;
  for (size_t i = 0; i < prepared.size(); ++i) {
    if (!admission.apply(i)) continue;
    const Prepared& p = prepared[i];
    ASSIGN_OR_RETURN(EmbeddingTable::PushResult r, p.table->Push(p.keys.flat<int64_t>(), p.gradients.data<float>()));
    created += r.created;
    dropped += r.dropped;
    if (options_.ps_metrics != nullptr) options_.ps_metrics->AddRowsUpdated(p.keys.num_elements() - r.dropped);
  }
  admission.Commit();
  auto body = response->InitResponseBody<wire::EmbeddingPushResponse>();
  body.setAlreadyApplied(admission.already_applied());
  body.setCreated(created);
  body.setDropped(dropped);
  PublishMetrics(*shard.store);
  return absl::OkStatus();
}

absl::Status EmbeddingService::Stats(const net::InMessage& request, net::OutMessage* response) {
  return StatsIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::StatsIn(Shard shard, const net::InMessage& /*request*/, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  std::vector<EmbeddingTable*> tables;
  auto names = request_body.getAs<wire::EmbeddingStatsRequest>().getTables();
  if (names.size() == 0) {
    tables = shard.store->List();
  } else {
    for (auto n : names) {
      ASSIGN_OR_RETURN(EmbeddingTable * t, shard.store->Find(n.cStr()));
      tables.push_back(t);
    }
  }
  auto out = response->InitResponseBody<wire::EmbeddingStatsResponse>().initTables(static_cast<unsigned>(tables.size()));
  for (unsigned i = 0; i < tables.size(); ++i) {
    const EmbeddingTableStats s = tables[i]->Stats();
    out[i].setName(tables[i]->name());
    out[i].setDim(tables[i]->dim());
    out[i].setRows(s.rows);
    out[i].setStep(s.step);
    out[i].setAdmitted(s.admitted);
    out[i].setEvictedTtl(s.evicted_ttl);
    out[i].setEvictedCap(s.evicted_cap);
    out[i].setDroppedGradients(s.dropped_gradients);
    out[i].setMemoryBytes(s.memory_bytes);
    out[i].setMemoryCapBytes(tables[i]->config().memory_cap_bytes);
  }
  PublishMetrics(*shard.store);
  return absl::OkStatus();
}

absl::Status EmbeddingService::Save(const net::InMessage& request, net::OutMessage* response) {
  return SaveIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::SaveIn(Shard shard, const net::InMessage& /*request*/, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  auto req = request_body.getAs<wire::SaveEmbeddingTablesRequest>();
  std::vector<std::string> tables;
  for (auto t : req.getTables()) tables.emplace_back(t.cStr());
  auto saved = SaveEmbeddingTables(*shard.store, req.getDirectory().cStr(), req.getFileName().cStr(), tables, req.getStep(),
                                   static_cast<int>(req.getNumPs()), static_cast<int>(req.getPsIndex()));
  if (!saved.ok()) {
    spdlog::error("embedding checkpoint save of step {} failed: {}", req.getStep(), saved.status().ToString());
    return saved.status();
  }
  auto out = response->InitResponseBody<wire::SaveEmbeddingTablesResponse>();
  out.setFileName(req.getFileName());
  out.setBytes(saved->bytes);
  out.setCrc32(saved->crc32);
  out.setRows(saved->rows);
  return absl::OkStatus();
}

absl::Status EmbeddingService::Restore(const net::InMessage& request, net::OutMessage* response) {
  return RestoreIn(default_shard(), request, request.envelope().getRequest().getBody(), response);
}

absl::Status EmbeddingService::RestoreIn(Shard shard, const net::InMessage& /*request*/, capnp::AnyPointer::Reader request_body,
                                      net::OutMessage* response) {
  auto req = request_body.getAs<wire::RestoreEmbeddingTablesRequest>();
  std::vector<std::string> files;
  for (auto f : req.getFiles()) files.emplace_back(f.cStr());
  auto rows = RestoreEmbeddingTables(*shard.store, req.getDirectory().cStr(), files, static_cast<int>(req.getNumPs()),
                                     static_cast<int>(req.getPsIndex()));
  if (!rows.ok()) {
    spdlog::error("embedding checkpoint restore failed: {}", rows.status().ToString());
    return rows.status();
  }
  auto out = response->InitResponseBody<wire::RestoreEmbeddingTablesResponse>();
  out.setTables(static_cast<uint32_t>(shard.store->List().size()));
  out.setRows(*rows);
  PublishMetrics(*shard.store);
  return absl::OkStatus();
}

}  // namespace asyncps::ps
