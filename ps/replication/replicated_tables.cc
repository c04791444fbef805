#include "ps/replication/replicated_tables.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_store.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/update_dedup.h"

namespace asyncps::ps {
namespace {

constexpr char kRestoreMethod[] = "ps.RestoreEmbeddingTables";

// A table being received by a state transfer.
struct PendingTable {
  EmbeddingTableConfig config;
  int64_t rows_total = 0;
  int64_t filled = 0;
  uint64_t restores = 0;
  int64_t next_sweep = 0;
  EmbeddingTableState state;
};

// One copy's tables: its own store and window, or (the PS's default copy) the service's.
class TablesState : public CopyExtensionState {
 public:
  TablesState(EmbeddingService::Shard shared) : shard(shared) {}
  explicit TablesState(const UpdateDedup::Options& dedup)
      : own_store(std::make_unique<EmbeddingStore>()), own_dedup(std::make_unique<UpdateDedup>(dedup)) {
    shard = {own_store.get(), own_dedup.get()};
  }

  const std::unique_ptr<EmbeddingStore> own_store;
  const std::unique_ptr<UpdateDedup> own_dedup;
  EmbeddingService::Shard shard;
  // State transfer in progress (calls come under the copy's write lock, one at a time).
  std::map<std::string, PendingTable> pending;
};

TablesState& Tables(CopyExtensionState& state) { return static_cast<TablesState&>(state); }

// One table of a snapshot.
struct SnapshotTable {
  EmbeddingTableConfig config;
  uint64_t restores = 0;
  int64_t next_sweep = 0;
  EmbeddingTableState state;
  uint64_t row_bytes = 0;
};

Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  absl::StatusOr<Tensor> slice = t.Slice(begin, end);
  return slice.ok() ? *std::move(slice) : t;
}

class TablesSnapshot : public CopyExtensionSnapshot {
 public:
  TablesSnapshot(std::vector<SnapshotTable> tables, std::vector<UpdateDedup::ExportedSpace> dedup)
      : tables_(std::move(tables)), dedup_(std::move(dedup)) {}

  uint64_t bytes() const override {
    uint64_t total = 0;
    for (const auto& t : tables_) total += t.row_bytes * static_cast<uint64_t>(t.state.keys.num_elements());
    return total;
  }

  size_t Chunks(uint64_t chunk_bytes) override {
    chunks_.assign(1, {});
    uint64_t in_chunk = 0;
    for (size_t t = 0; t < tables_.size(); ++t) {
      const int64_t rows = tables_[t].state.keys.num_elements();
      int64_t begin = 0;
      do {
        const uint64_t room = chunk_bytes > in_chunk ? chunk_bytes - in_chunk : 0;
        const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(room / std::max<uint64_t>(1, tables_[t].row_bytes)));
        const int64_t end = std::min(rows, begin + n);
        chunks_.back().push_back({t, begin, end});
        in_chunk += static_cast<uint64_t>(end - begin) * tables_[t].row_bytes;
        begin = end;
        if (in_chunk >= chunk_bytes) {
          chunks_.emplace_back();
          in_chunk = 0;
        }
      } while (begin < rows);
    }
    if (chunks_.size() > 1 && chunks_.back().empty()) chunks_.pop_back();
    return chunks_.size();
  }

  uint64_t WriteChunk(size_t i, capnp::AnyPointer::Builder out, net::OutMessage& message) override {
    auto chunk = out.initAs<wire::EmbeddingStateChunk>();
    const auto& pieces = chunks_.at(i);
    auto list = chunk.initPieces(static_cast<unsigned>(pieces.size()));
    uint64_t sent = 0;
    for (unsigned k = 0; k < pieces.size(); ++k) {
      const Piece& p = pieces[k];
      const SnapshotTable& t = tables_[p.table];
      auto w = list[k];
      EmbeddingTableConfigToWire(t.config, w.initConfig());
      w.setRowBegin(p.begin);
      w.setRowsTotal(t.state.keys.num_elements());
      w.setStep(t.state.step);
      w.setRestores(t.restores);
      w.setNextSweep(t.next_sweep);
      auto add = [&](const Tensor& whole, wire::TensorRef::Builder ref) {
        Tensor rows = Rows(whole, p.begin, p.end);
        sent += rows.num_bytes();
        message.AddTensor(rows, ref);
      };
      add(t.state.keys, w.initKeys());
      add(t.state.last_update, w.initLastUpdate());
      add(t.state.values, w.initValues());
      auto slots = w.initSlots(static_cast<unsigned>(t.state.slots.size()));
      for (unsigned j = 0; j < t.state.slots.size(); ++j) add(t.state.slots[j], slots[j]);
      if (p.begin == 0 && t.state.sketch.num_elements() > 0) {
        w.setHasSketch(true);
        message.AddTensor(t.state.sketch, w.initSketch());
        sent += t.state.sketch.num_bytes();
      }
    }
    if (i + 1 == chunks_.size()) {
      auto spaces = chunk.initDedup(static_cast<unsigned>(dedup_.size()));
      for (unsigned s = 0; s < dedup_.size(); ++s) {
        spaces[s].setCoordinator(dedup_[s].coordinator);
        spaces[s].setWatermark(dedup_[s].watermark);
        const unsigned n = static_cast<unsigned>(dedup_[s].keys.size());
        auto closures = spaces[s].initClosures(n);
        auto sequences = spaces[s].initSequences(n);
        auto variables = spaces[s].initVariables(n);
        for (unsigned k = 0; k < n; ++k) {
          closures.set(k, dedup_[s].keys[k].closure);
          sequences.set(k, dedup_[s].keys[k].sequence);
          variables.set(k, dedup_[s].keys[k].variable);
        }
      }
    }
    return sent;
  }

 private:
  struct Piece {
    size_t table;
    int64_t begin, end;
  };
  std::vector<SnapshotTable> tables_;
  std::vector<UpdateDedup::ExportedSpace> dedup_;
  std::vector<std::vector<Piece>> chunks_;
};

UpdateDedup::Options DedupOptions(const EmbeddingService::Options& o) {
  UpdateDedup::Options d;
  d.max_entries = o.dedup_max_entries;
  d.metrics = o.ps_metrics;
  return d;
}

// Copies rows [begin, begin + piece rows) of `piece` into `whole`.
absl::Status CopyRows(const Tensor& piece, Tensor& whole, int64_t begin, const char* what) {
  if (piece.dtype() != whole.dtype() || piece.rank() != whole.rank() || piece.rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("table piece: ", what, " has the wrong dtype or rank"));
  }
  const int64_t rows = piece.shape()[0];
  if (begin + rows > whole.shape()[0]) {
    return absl::InvalidArgumentError(absl::StrCat("table piece: ", what, " overruns the table"));
  }
  const size_t row_bytes = whole.num_bytes() / static_cast<size_t>(std::max<int64_t>(1, whole.shape()[0]));
  if (piece.num_bytes() != row_bytes * static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError(absl::StrCat("table piece: ", what, " rows do not fit"));
  }
  std::memcpy(static_cast<char*>(whole.raw_data()) + static_cast<size_t>(begin) * row_bytes, piece.raw_data(),
              piece.num_bytes());
  return absl::OkStatus();
}

}  // namespace

ReplicatedTables::ReplicatedTables(EmbeddingService& service) : service_(service) {}
ReplicatedTables::~ReplicatedTables() = default;

EmbeddingService::Shard ReplicatedTables::ShardOf(CopyExtensionState& state) { return Tables(state).shard; }

std::shared_ptr<CopyExtensionState> ReplicatedTables::NewState(uint32_t) {
  return std::make_shared<TablesState>(DedupOptions(service_.options()));
}

std::shared_ptr<CopyExtensionState> ReplicatedTables::DefaultState() {
  return std::make_shared<TablesState>(service_.default_shard());
}

bool ReplicatedTables::IsWrite(const std::string& method) const {
  return method == kCreateEmbeddingTableMethod || method == kEmbeddingPushMethod ||
         method == kEmbeddingLookupMethod || method == kRestoreMethod;
}

absl::Status ReplicatedTables::ForEachTensorRef(const std::string& method, capnp::AnyPointer::Reader body,
                                                const std::function<void(wire::TensorRef::Reader)>& fn) const {
  if (method == kEmbeddingPushMethod) {
    for (auto p : body.getAs<wire::EmbeddingPushRequest>().getPushes()) {
      fn(p.getKeys());
      fn(p.getGradients());
    }
  } else if (method == kEmbeddingLookupMethod) {
    for (auto l : body.getAs<wire::EmbeddingLookupRequest>().getLookups()) fn(l.getKeys());
  } else if (!IsWrite(method)) {
    return absl::InvalidArgumentError(absl::StrCat("'", method, "' is not a replicated embedding write"));
  }
  return absl::OkStatus();
}

void ReplicatedTables::ForEachTensorRef(const std::string& method, capnp::AnyPointer::Builder body,
                                        const std::function<void(wire::TensorRef::Builder)>& fn) const {
  if (method == kEmbeddingPushMethod) {
    for (auto p : body.getAs<wire::EmbeddingPushRequest>().getPushes()) {
      fn(p.getKeys());
      fn(p.getGradients());
    }
  } else if (method == kEmbeddingLookupMethod) {
    for (auto l : body.getAs<wire::EmbeddingLookupRequest>().getLookups()) fn(l.getKeys());
  }
}

absl::Status ReplicatedTables::ApplyReplicated(CopyExtensionState& state, const std::string& method,
                                               const net::InMessage& frame, capnp::AnyPointer::Reader body) {
  const net::InMessage& request = frame;  // the ps.Replicate frame: it holds the entry's tensors
  net::OutMessage scratch;
  EmbeddingService::Shard shard = Tables(state).shard;
  if (method == kEmbeddingPushMethod) return service_.PushIn(shard, request, body, &scratch);
  if (method == kEmbeddingLookupMethod) return service_.LookupIn(shard, request, body, &scratch);
  if (method == kCreateEmbeddingTableMethod) return service_.CreateTableIn(shard, request, body, &scratch);
  if (method == kRestoreMethod) return service_.RestoreIn(shard, request, body, &scratch);
  return absl::InvalidArgumentError(absl::StrCat("'", method, "' is not a replicated embedding write"));
}

std::unique_ptr<CopyExtensionSnapshot> ReplicatedTables::Snapshot(CopyExtensionState& state) {
  EmbeddingService::Shard shard = Tables(state).shard;
  std::vector<SnapshotTable> tables;
  for (EmbeddingTable* t : shard.store->List()) {
    SnapshotTable s;
    s.config = t->config();
    s.restores = t->restores();
    s.next_sweep = t->next_sweep();
    s.state = t->Export();
    s.row_bytes = static_cast<uint64_t>(t->dim()) * sizeof(float) * (1 + static_cast<uint64_t>(t->num_slots())) +
                  2 * sizeof(int64_t);
    tables.push_back(std::move(s));
  }
  return std::make_unique<TablesSnapshot>(std::move(tables), shard.dedup->Export());
}

absl::Status ReplicatedTables::Install(CopyExtensionState& state, const net::InMessage& frame,
                                       capnp::AnyPointer::Reader chunk, bool last) {
  TablesState& tables = Tables(state);
  if (!chunk.isNull()) {
    auto c = chunk.getAs<wire::EmbeddingStateChunk>();
    for (auto p : c.getPieces()) {
      ASSIGN_OR_RETURN(EmbeddingTableConfig config, EmbeddingTableConfigFromWire(p.getConfig()));
      PendingTable& t = tables.pending[config.name];
      if (p.getRowBegin() == 0) {
        t = PendingTable();
        t.config = config;
        t.rows_total = p.getRowsTotal();
        t.restores = p.getRestores();
        t.next_sweep = p.getNextSweep();
        t.state.step = p.getStep();
        const int64_t n = t.rows_total;
        if (n < 0) return absl::InvalidArgumentError("table piece: negative row count");
        t.state.keys = Tensor(DType::kI64, {n});
        t.state.last_update = Tensor(DType::kI64, {n});
        t.state.values = Tensor(DType::kF32, {n, config.dim});
        // The slots' count is checked against the optimizer's by Import.
        for (unsigned k = 0; k < p.getSlots().size(); ++k) t.state.slots.emplace_back(DType::kF32, Shape{n, config.dim});
        if (p.getHasSketch()) {
          ASSIGN_OR_RETURN(Tensor sketch, frame.TensorAt(p.getSketch()));
          t.state.sketch = sketch.Clone();
        }
      }
      if (p.getRowBegin() != t.filled || p.getSlots().size() != t.state.slots.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("embedding table '", config.name, "' rows arrive out of order in the state transfer"));
      }
      ASSIGN_OR_RETURN(Tensor keys, frame.TensorAt(p.getKeys()));
      ASSIGN_OR_RETURN(Tensor last_update, frame.TensorAt(p.getLastUpdate()));
      ASSIGN_OR_RETURN(Tensor values, frame.TensorAt(p.getValues()));
      RETURN_IF_ERROR(CopyRows(keys, t.state.keys, t.filled, "keys"));
      RETURN_IF_ERROR(CopyRows(last_update, t.state.last_update, t.filled, "last-update steps"));
      RETURN_IF_ERROR(CopyRows(values, t.state.values, t.filled, "values"));
      for (unsigned j = 0; j < p.getSlots().size(); ++j) {
        ASSIGN_OR_RETURN(Tensor slot, frame.TensorAt(p.getSlots()[j]));
        RETURN_IF_ERROR(CopyRows(slot, t.state.slots[j], t.filled, "slot"));
      }
      t.filled += keys.num_elements();
      if (t.filled == t.rows_total) {
        ASSIGN_OR_RETURN(auto created, tables.shard.store->Create(t.config));
        const EmbeddingTableState* parts[] = {&t.state};
        RETURN_IF_ERROR(created.first->Import(parts, [](int64_t) { return true; }));
        created.first->SetReplicaCounters(t.restores, t.next_sweep);
        tables.pending.erase(config.name);
      }
    }
    if (last) {
      std::vector<UpdateDedup::ExportedSpace> spaces;
      for (auto d : c.getDedup()) {
        UpdateDedup::ExportedSpace e;
        e.coordinator = d.getCoordinator();
        e.watermark = d.getWatermark();
        const unsigned n = d.getClosures().size();
        if (d.getSequences().size() != n || d.getVariables().size() != n) {
          return absl::InvalidArgumentError("malformed embedding update window");
        }
        for (unsigned k = 0; k < n; ++k) e.keys.push_back({d.getClosures()[k], d.getSequences()[k], d.getVariables()[k]});
        spaces.push_back(std::move(e));
      }
      tables.shard.dedup->Import(spaces);
    }
  }
  if (last && !tables.pending.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tables.pending.size(), " embedding tables incomplete at the transfer's last chunk"));
  }
  if (last && chunk.isNull()) return absl::InvalidArgumentError("the transfer's last chunk holds no embedding state");
  return absl::OkStatus();
}

namespace {

// Registers `method`, a write of the tables, answered once every backup acknowledged it with no
// thread waiting for that (ReplicatedPs::RoutedWriteThen): `apply(state, request, response)`.
template <typename Request, typename ApplyFn>
void RegisterTablesWrite(net::MethodTable& server, ReplicatedPs* rp, const char* method, net::PeerRoles callers,
                         ApplyFn apply) {
  server.RegisterDeferred<Request>(
      method, std::move(callers),
      [rp, method, apply](const net::RequestContext& ctx, const net::InMessage& req, net::DeferredResponse answer) {
        auto body = req.RequestBody<Request>();
        auto response = std::make_shared<net::OutMessage>();
        rp->RoutedWriteThen(
            ctx, method, req, body.hasRoute(), body.getRoute(),
            [&](PsService::ShardState s) { return apply(s, req, response.get()); },
            [answer = std::move(answer), response](const absl::Status& status) {
              answer.Send(status, std::move(*response));
            });
      });
}

}  // namespace

void ReplicatedTables::RegisterWith(net::MethodTable& server, ReplicatedPs& replicated) {
  EmbeddingService& service = service_;
  ReplicatedPs* rp = &replicated;
  RegisterTablesWrite<wire::CreateEmbeddingTableRequest>(
      server, rp, kCreateEmbeddingTableMethod, net::PsCallers(),
      [&service](PsService::ShardState s, const net::InMessage& req, net::OutMessage* resp) {
        return service.CreateTableIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(), resp);
      });
  RegisterTablesWrite<wire::EmbeddingPushRequest>(
      server, rp, kEmbeddingPushMethod, net::PsCallers(),
      [&service](PsService::ShardState s, const net::InMessage& req, net::OutMessage* resp) {
        return service.PushIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(), resp);
      });
  server.RegisterDeferred<wire::EmbeddingLookupRequest>(
      kEmbeddingLookupMethod, net::PsReaders(),
      [rp, &service](const net::RequestContext& ctx, const net::InMessage& req, net::DeferredResponse answer) {
        auto body = req.RequestBody<wire::EmbeddingLookupRequest>();
        auto response = std::make_shared<net::OutMessage>();
        // A training lookup of a table with an admission sketch changes it (counts): a write.
        // Any other lookup is a read at the primary, answered at once.
        bool counts = false;
        const absl::Status read =
            rp->RoutedRead(body.hasRoute(), body.getRoute(), kEmbeddingLookupMethod, [&](PsService::ShardState s) {
              EmbeddingService::Shard shard = Tables(*s.extension).shard;
              if (body.getTrain()) {
                for (auto l : body.getLookups()) {
                  auto t = shard.store->Find(l.getTable().cStr());
                  if (t.ok() && (*t)->counts_lookups()) counts = true;
                }
              }
              if (counts) return absl::OkStatus();
              return service.LookupIn(shard, req, req.envelope().getRequest().getBody(), response.get());
            });
        if (!read.ok() || !counts) return answer.Send(read, std::move(*response));
        rp->RoutedWriteThen(
            ctx, kEmbeddingLookupMethod, req, body.hasRoute(), body.getRoute(),
            [&](PsService::ShardState s) {
              return service.LookupIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(),
                                      response.get());
            },
            [answer = std::move(answer), response](const absl::Status& status) {
              answer.Send(status, std::move(*response));
            });
      });
  server.Register<wire::EmbeddingStatsRequest>(
      kEmbeddingStatsMethod, net::PsReaders(),
      [rp, &service](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        auto body = req.RequestBody<wire::EmbeddingStatsRequest>();
        return rp->RoutedRead(body.hasRoute(), body.getRoute(), kEmbeddingStatsMethod, [&](PsService::ShardState s) {
          return service.StatsIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(), resp);
        });
      });
  server.Register<wire::SaveEmbeddingTablesRequest>(
      "ps.SaveEmbeddingTables", net::ChiefOnly(),
      [rp, &service](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        auto body = req.RequestBody<wire::SaveEmbeddingTablesRequest>();
        return rp->RoutedRead(body.hasRoute(), body.getRoute(), "ps.SaveEmbeddingTables",
                              [&](PsService::ShardState s) {
                                return service.SaveIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(), resp);
                              });
      });
  RegisterTablesWrite<wire::RestoreEmbeddingTablesRequest>(
      server, rp, kRestoreMethod, net::ChiefOnly(),
      [&service](PsService::ShardState s, const net::InMessage& req, net::OutMessage* resp) {
        return service.RestoreIn(Tables(*s.extension).shard, req, req.envelope().getRequest().getBody(), resp);
      });
}

std::string EmbeddingShardBytes(const EmbeddingService::Shard& shard) {
  std::string out;
  for (EmbeddingTable* t : shard.store->List()) {
    const EmbeddingTableState s = t->Export();
    out += t->name() + ":step " + std::to_string(s.step) + ":restores " + std::to_string(t->restores()) +
           ":sweep " + std::to_string(t->next_sweep()) + ":rows " + std::to_string(s.keys.num_elements()) + ":";
    const int64_t n = s.keys.num_elements();
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    const int64_t* keys = s.keys.data<int64_t>();
    std::sort(order.begin(), order.end(), [keys](int64_t a, int64_t b) { return keys[a] < keys[b]; });
    const size_t row = static_cast<size_t>(t->dim()) * sizeof(float);
    for (int64_t r : order) {
      out.append(reinterpret_cast<const char*>(&keys[r]), sizeof(int64_t));
      out.append(reinterpret_cast<const char*>(&s.last_update.data<int64_t>()[r]), sizeof(int64_t));
      out.append(reinterpret_cast<const char*>(s.values.data<float>() + r * t->dim()), row);
      for (const Tensor& slot : s.slots) out.append(reinterpret_cast<const char*>(slot.data<float>() + r * t->dim()), row);
    }
    if (s.sketch.num_elements() > 0) out.append(static_cast<const char*>(s.sketch.raw_data()), s.sketch.num_bytes());
  }
  auto spaces = shard.dedup->Export();
  std::sort(spaces.begin(), spaces.end(), [](const auto& a, const auto& b) { return a.coordinator < b.coordinator; });
  for (const auto& s : spaces) {
    out += "|" + std::to_string(s.coordinator) + "@" + std::to_string(s.watermark);
    for (const auto& k : s.keys) {
      out += "," + std::to_string(k.closure) + "/" + std::to_string(k.sequence) + "/" + std::to_string(k.variable);
    }
  }
  return out;
}

}  // namespace asyncps::ps
