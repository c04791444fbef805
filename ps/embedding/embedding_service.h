#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_SERVICE_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_SERVICE_H_

#include <cstdint>

#include <capnp/any.h>

#include "core/process_options.h"
#include "net/method_table.h"
#include "ps/embedding/embedding_metrics.h"
#include "ps/embedding/embedding_store.h"
#include "ps/parallel_apply.h"
#include "ps/ps_metrics.h"
#include "ps/update_dedup.h"

namespace asyncps::ps {

// The embedding methods of a parameter server (messages in ps/embedding/embedding.capnp):
//   ps.CreateEmbeddingTable  CreateEmbeddingTableRequest -> CreateEmbeddingTableResponse
//                            (idempotent for the same dim, dtype, initializer, optimizer kind)
//   ps.EmbeddingLookup       EmbeddingLookupRequest -> EmbeddingLookupResponse (never inserts)
//   ps.EmbeddingPush         EmbeddingPushRequest -> EmbeddingPushResponse
//   ps.EmbeddingStats        EmbeddingStatsRequest -> EmbeddingStatsResponse
//   ps.SaveEmbeddingTables   SaveEmbeddingTablesRequest -> SaveEmbeddingTablesResponse (chief)
//   ps.RestoreEmbeddingTables RestoreEmbeddingTablesRequest -> RestoreEmbeddingTablesResponse
//                            (chief; see embedding_checkpoint.h)
// Semantics of lookups, pushes, admission and eviction: EmbeddingTable.
//
// Validation, before anything of a request is applied (the PS keeps serving; each error names
// the table): unknown table (NotFound); keys not i64 [n]; gradients not f32 [n, dim] — a dim or
// dtype mismatch — (InvalidArgument); a gradient holding NaN or Inf (InvalidArgument, counted
// as rejected{reason="nonfinite_gradient"}, unless allow_nonfinite_gradients); a push with more
// keys of one stripe than the table's memory cap allows (ResourceExhausted); a lookup answer
// over max_response_bytes (ResourceExhausted). Creation: dim outside 1..65536, a dtype other
// than f32, bad initializer or optimizer parameters, a memory cap below the table's minimum
// (InvalidArgument); the same name with another config (AlreadyExists).
//
// Exactly once: a push tagged by a closure (UpdateTag) applies each table's part at most once
// per (closure, call), through its own UpdateDedup window keyed by (table name, restores), as
// ps.PushGradients does for variables.
//
// `store` and the metrics must outlive the server the service is registered with.
class EmbeddingService {
 public:
  struct Options {
    uint64_t max_response_bytes = kDefaultPsMaxResponseBytes;
    bool allow_nonfinite_gradients = false;
    uint64_t dedup_max_entries = UpdateDedup::kDefaultMaxEntries;
    PsMetrics* ps_metrics = nullptr;              // optional; not owned (rejections, dedup)
    EmbeddingMetrics* metrics = nullptr;          // optional; not owned
    // Splits the finiteness check of a large push over its threads (ps/parallel_apply.h).
    // Optional (null: one pass on the caller); not owned.
    ApplyPool* apply_pool = nullptr;
  };

  EmbeddingService(EmbeddingStore& store, Options options);

  void RegisterWith(net::MethodTable& server);

  // The handlers, callable directly (tests, benchmarks): `request` holds the method's request
  // body, `response` receives the answer's.
  absl::Status CreateTable(const net::InMessage& request, net::OutMessage* response);
  absl::Status Lookup(const net::InMessage& request, net::OutMessage* response);
  absl::Status Push(const net::InMessage& request, net::OutMessage* response);
  absl::Status Stats(const net::InMessage& request, net::OutMessage* response);
  absl::Status Save(const net::InMessage& request, net::OutMessage* response);
  absl::Status Restore(const net::InMessage& request, net::OutMessage* response);

  // The tables and update window a request runs against: the service's own (default_shard()),
  // or a replicated group copy's (ps/replication/replicated_tables.h), which calls the *In
  // handlers below with its copy's shard. Both must outlive the call. `body` is the method's
  // request body, read from `request` (its tensors' frame: the request itself, or the
  // ps.Replicate frame that carries a replicated entry).
  struct Shard {
    EmbeddingStore* store = nullptr;
    UpdateDedup* dedup = nullptr;
  };
  Shard default_shard() { return {&store_, &dedup_}; }
  absl::Status CreateTableIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);
  absl::Status LookupIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);
  absl::Status PushIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);
  absl::Status StatsIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);
  absl::Status SaveIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);
  absl::Status RestoreIn(Shard shard, const net::InMessage& request, capnp::AnyPointer::Reader body,
                      net::OutMessage* response);

  const Options& options() const { return options_; }
  const UpdateDedup& dedup() const { return dedup_; }

 private:
  absl::Status Reject(RejectReason reason, absl::Status status) const;
  void PublishMetrics(const EmbeddingStore& store) const;

  EmbeddingStore& store_;
  const Options options_;
  UpdateDedup dedup_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_SERVICE_H_
