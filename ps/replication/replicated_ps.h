#ifndef ASYNCPS_PS_REPLICATION_REPLICATED_PS_H_
#define ASYNCPS_PS_REPLICATION_REPLICATED_PS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "net/method_table.h"
#include "net/rpc_client.h"
#include "net/wire_check.h"
#include "ps/checkpoint_service.h"
#include "ps/ps_metrics.h"
#include "ps/ps_service.h"
#include "ps/replication/copy_extension.h"
#include "ps/replication/group_copy.h"
#include "ps/replication/shard_map.h"

namespace asyncps::ps {

// The PS side of replicated shard groups (issue 19; /work contract in ps/ps.capnp): one copy
// per group this PS holds, requests routed to a copy by their Route, fencing by generation,
// the primary's ordered forwarding to the other copies, and state transfer to a rebuilding one.
//
// Methods (registered over PsService's, which run against the routed copy):
//   ps.CreateVariable / ps.Update / ps.PushGradients   writes: at the group's primary only;
//       under the copy's write lock given the next sequence number, queued for every other
//       copy and applied (ps.Update and ps.PushGradients are queued, and sent, before they are
//       applied here, so the backups apply them alongside: ForwardsBeforeApply), and answered
//       (net::DeferredResponse: no thread waits) once every backup of the map acknowledged
//       it (or Unavailable after write_timeout; the write stays applied here: tagged writes
//       retried by the client are then applied once, by the replicated update window).
//   ps.Read / ps.Gather / ps.ListVariables   reads at the primary.
//   ps.SaveCheckpoint (chief)   from the routed primary; ps.RestoreCheckpoint (chief) a
//       write, replicated like the others (with Options::checkpoints).
//   ps.SetShardMap (chief)    installs a map: a lower generation than the one held is
//       FailedPrecondition; copies of groups newly listed here are created (rebuilding),
//       copies no longer listed dropped.
//   ps.GetShardMap (chief, worker, evaluator, ps)   the map held (generation 0: none).
//   ps.ReplicaStatus (chief)  per copy: role, generation, sequence, the primary's view of the
//       other copies (acked sequence, lag, in sync, transfer progress).
//   ps.Replicate, ps.InstallState (ps)   the primary's stream and state transfer.
// A routed request that is not for the primary of its group at exactly the generation held is
// refused with StaleShardMapError. Without a map (none ever installed) every request is served
// from the PS's default store exactly as PsService alone serves it.
//
// Thread-safe; the methods run on the server's handler threads.
class ReplicatedPs {
 public:
  struct Options {
    int32_t ps_index = 0;
    int num_ps = 1;
    // ps_replicas. Writes are dispatched as PsService dispatches them at any value: a write
    // is answered later (net::DeferredResponse) by the stream that receives the last
    // acknowledgement, so no thread waits for the backups.
    int replicas = 1;
    uint64_t dedup_max_entries = UpdateDedup::kDefaultMaxEntries;
    absl::Duration write_timeout = absl::Seconds(30);
    uint64_t max_batch_bytes = uint64_t{64} << 20;
    uint64_t transfer_chunk_bytes = uint64_t{16} << 20;
    uint64_t transfer_whole_max_bytes = uint64_t{1} << 30;  // BackupStream::Options
    PsMetrics* metrics = nullptr;  // optional; not owned
    // Optional (not owned): ps.SaveCheckpoint is then served from the routed primary, and
    // ps.RestoreCheckpoint is a replicated write (every copy reads the same shared files).
    CheckpointService* checkpoints = nullptr;
    // Makes a client this PS calls PS `index` with (role "ps", the cluster token), one per
    // stream. Its event
    // loop should not be the server's: a write answered on the I/O thread would then block
    // the loop that delivers its acknowledgement until the write times out.
    std::function<std::unique_ptr<net::RpcClient>(int32_t index)> connect;
    // Optional (not owned, outlives this object): state every copy holds beside its variables
    // (the PS's embedding tables, ReplicatedTables), replicated with them: its writes go
    // through RoutedWriteThen, its state through the state transfer.
    CopyExtension* extension = nullptr;
  };

  // `service` (its default store is group ps_index's copy until a map says otherwise) must
  // outlive this object. Every copy's variables count against the default store's cap
  // (--ps_max_variable_bytes is per process, shared by the copies it holds).
  ReplicatedPs(PsService& service, Options options);
  ~ReplicatedPs();

  // Registers every method above (replacing PsService's registrations of the same names).
  void RegisterWith(net::MethodTable& server);

  // For tests and the checkpoint methods: the copy of `group` (null when not held).
  std::shared_ptr<GroupCopy> CopyOf(uint32_t group) const;
  // The map held (generation 0: none).
  ShardMap map() const;

  // For the methods of Options::extension (which registers them): `apply` runs against the
  // state of the copy `route` names (state.extension set) exactly as the variables' writes
  // and reads do — fenced by generation, a write applied at the primary under the copy's write
  // lock, logged (the extension's IsWrite methods only) and answered once every backup applied
  // it; without a map, against the PS's default state.
  using StateFn = std::function<absl::Status(PsService::ShardState)>;
  absl::Status RoutedRead(bool has_route, wire::Route::Reader route, const char* method, const StateFn& read);
  // A write: `done` runs exactly once, from any thread (never under this object's or the
  // copy's locks), with the write's status once every backup acknowledged it (WriteThen). The
  // extension registers its writes with net::MethodTable::RegisterDeferred, so that no handler
  // thread waits for acknowledgements: two PS whose every handler thread waited for the
  // other's ps.Replicate could serve neither (each the other's backup), a deadlock broken only
  // by the clients' deadlines (found by scripts/nemesis.py with embedding pushes).
  void RoutedWriteThen(const net::RequestContext& context, const char* method, const net::InMessage& request,
                       bool has_route, wire::Route::Reader route, const StateFn& apply, GroupCopy::AnswerFn done);

 private:
  // The copy a request for `route` goes to, and the generation it was routed with (0: none).
  struct Routed {
    std::shared_ptr<GroupCopy> copy;  // null: no map held, serve the default state directly
    uint64_t generation = 0;
  };
  absl::StatusOr<Routed> Route(bool has_route, wire::Route::Reader route, const char* method);
  // Under copy.mu: the stale-map refusal unless the copy is this group's serving primary at
  // `generation` (0: unchecked). A restoring primary serves only `restore_write`s (the chief's
  // ps.RestoreCheckpoint / ps.CreateVariable) and refuses the rest with RestorePendingError.
  absl::Status CheckServing(const GroupCopy& copy, uint64_t generation, const char* method,
                            bool restore_write) const ABSL_SHARED_LOCKS_REQUIRED(copy.mu);

  using WriteFn = std::function<absl::Status(PsService::ShardState)>;
  // Applies a write at the routed primary, queues it for the other copies and returns at
  // once; `done` runs exactly once, from any thread (never under this object's or the copy's
  // locks): with a refusal, or with OK once every counted backup acknowledged it, or
  // Unavailable at the write's deadline (see the class comment).
  // `response` (may be null): where `apply` writes its answer, read for the update window's
  // decision that the streams compare with each copy's (LoggedWrite::skipped).
  void WriteThen(const net::RequestContext& context, const char* method, const net::InMessage& request,
                 bool has_route, wire::Route::Reader route, const WriteFn& apply, GroupCopy::AnswerFn done,
                 net::OutMessage* response = nullptr);
  // A write method answered by WriteThen: `apply(state, request, body, response)`.
  template <typename Request, typename ApplyFn>
  void RegisterWrite(net::MethodTable& server, const char* method, net::PeerRoles callers, net::Dispatch dispatch,
                     ApplyFn apply);
  using ReadFn = std::function<absl::Status(PsService::ShardState)>;
  absl::Status ReadAt(bool has_route, wire::Route::Reader route, const char* method, const ReadFn& read);

  absl::Status SetShardMap(const net::InMessage& request);
  absl::Status GetShardMap(net::OutMessage* response);
  absl::Status ReplicaStatus(net::OutMessage* response);
  absl::Status Replicate(const net::InMessage& request, net::OutMessage* response);
  // Applies one stream entry; `skipped`: as LoggedWrite::skipped, for this copy's apply.
  absl::Status ApplyEntry(GroupCopy& copy, const net::InMessage& frame, wire::ReplicatedEntry::Reader entry,
                          uint32_t* skipped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.write_mu);
  absl::Status InstallState(const net::InMessage& request);
  absl::Status InstallChunk(GroupCopy& copy, const net::InMessage& frame, wire::InstallStateRequest::Reader req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.write_mu);
  // Marks `copy` needs_rebuild with `why` and returns FailedPrecondition(why).
  absl::Status NeedsRebuild(GroupCopy& copy, const std::string& why);
  // A copy for a stream from PS `from` at `generation`: the generation check of ps.Replicate
  // and ps.InstallState. Stale (which fences the sender) only when the map held here names
  // another primary; when `from` is still the primary, it has just not installed this map
  // yet (maps reach the PS in any order): Unavailable, the sender retries.
  absl::StatusOr<std::shared_ptr<GroupCopy>> StreamTarget(uint32_t group, uint64_t generation, int32_t from,
                                                          const char* method);

  // Reconciles the streams of the primary copy `copy` with `entry` (under copy.write_mu).
  void ReconcileStreams(GroupCopy& copy, const GroupEntry& entry,
                        std::vector<std::unique_ptr<class BackupStream>>* retired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.write_mu);
  std::shared_ptr<GroupCopy> NewCopy(uint32_t group) const;
  void PublishCopyMetrics(const GroupCopy& copy);

  // The service's default state, with the extension's default state.
  PsService::ShardState DefaultState() const;

  PsService& service_;
  const Options options_;
  std::shared_ptr<CopyExtensionState> default_extension_;
  const net::WireChecker create_check_, update_check_, push_check_, restore_check_;

  // Serialises map installs (which create and drop copies and streams).
  Mutex install_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  ShardMap map_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, std::shared_ptr<GroupCopy>> copies_ ABSL_GUARDED_BY(mu_);

  // Answers the writes whose deadline passed unacknowledged (every kReapPeriod).
  void Reap();
  Mutex reap_mu_;
  bool stopping_ ABSL_GUARDED_BY(reap_mu_) = false;
  std::thread reaper_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_REPLICATED_PS_H_
