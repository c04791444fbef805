#ifndef ASYNCPS_PS_REPLICATION_REPLICATED_TABLES_H_
#define ASYNCPS_PS_REPLICATION_REPLICATED_TABLES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "net/method_table.h"
#include "ps/embedding/embedding_service.h"
#include "ps/replication/copy_extension.h"
#include "ps/replication/replicated_ps.h"

namespace asyncps::ps {

// Embedding tables replicated like the variables of their shard group (issue 21): the keys
// PsForKey(key, num_ps) gives PS g belong to group g, so every copy of group g holds its own
// EmbeddingStore and update window (the PS's EmbeddingService's own for the default copy).
//
// Methods (registered over EmbeddingService's, each routed by its request's `route` exactly as
// the variables' methods are, ReplicatedPs::RoutedWriteThen / RoutedRead):
//   writes, applied at the primary and streamed in order to every other copy:
//     ps.CreateEmbeddingTable, ps.EmbeddingPush (row creation, admission and eviction are
//     deterministic functions of the table and the push, so every copy ends with the same
//     rows, slots, sketch and step), ps.RestoreEmbeddingTables, and a *training*
//     ps.EmbeddingLookup of a table with an admission sketch (the counts are state);
//   reads at the primary: other lookups, ps.EmbeddingStats, ps.SaveEmbeddingTables.
// A tagged push is deduplicated by the copy's window, which the stream and the state transfer
// carry, so a push retried against a promoted backup applies once.
// State transfer (CopyExtension::Snapshot / Install): every table of the copy (config, rows
// with slots and last-update steps, sketch, step, restores, next TTL sweep) in pieces of
// InstallStateRequest.extension (EmbeddingStateChunk), then the window.
//
// Thread-safe. `service` must outlive this object; ReplicatedPs is given it as
// Options::extension.
class ReplicatedTables : public CopyExtension {
 public:
  explicit ReplicatedTables(EmbeddingService& service);
  ~ReplicatedTables() override;

  // Registers the methods above (replacing EmbeddingService's registrations) over `replicated`,
  // which must be made with this object as its extension and outlive the server.
  void RegisterWith(net::MethodTable& server, ReplicatedPs& replicated);

  // The tables and window of a copy's state (tests: compare copies).
  static EmbeddingService::Shard ShardOf(CopyExtensionState& state);

  // CopyExtension.
  std::shared_ptr<CopyExtensionState> NewState(uint32_t group) override;
  std::shared_ptr<CopyExtensionState> DefaultState() override;
  bool IsWrite(const std::string& method) const override;
  absl::Status ForEachTensorRef(const std::string& method, capnp::AnyPointer::Reader body,
                                const std::function<void(wire::TensorRef::Reader)>& fn) const override;
  void ForEachTensorRef(const std::string& method, capnp::AnyPointer::Builder body,
                        const std::function<void(wire::TensorRef::Builder)>& fn) const override;
  absl::Status ApplyReplicated(CopyExtensionState& state, const std::string& method, const net::InMessage& frame,
                               capnp::AnyPointer::Reader body) override;
  std::unique_ptr<CopyExtensionSnapshot> Snapshot(CopyExtensionState& state) override;
  absl::Status Install(CopyExtensionState& state, const net::InMessage& frame, capnp::AnyPointer::Reader chunk,
                       bool last) override;

 private:
  EmbeddingService& service_;
};

// Every table of `shard` as bytes, sorted by key (values, slots, last-update steps), with the
// step, restores, next TTL sweep and sketch of each table, then the update window: equal for
// two copies that hold the same state whatever the rows' places in memory (tests).
std::string EmbeddingShardBytes(const EmbeddingService::Shard& shard);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_REPLICATED_TABLES_H_
