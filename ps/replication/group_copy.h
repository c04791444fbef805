#ifndef ASYNCPS_PS_REPLICATION_GROUP_COPY_H_
#define ASYNCPS_PS_REPLICATION_GROUP_COPY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/replication/copy_extension.h"
#include "ps/update_dedup.h"
#include "ps/variable.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

class BackupStream;

// What a copy of a group is to this PS (reported by ps.ReplicaStatus as wire::CopyRole).
enum class CopyRole {
  kPrimary,       // serves reads and writes, streams writes to the other copies
  kBackup,        // applies the primary's stream in sequence order; serves nothing
  kRebuilding,    // receiving (or waiting for) a state transfer; serves nothing
  kNeedsRebuild,  // refused a gap or out-of-order stream, or its transfer was cut: serves
                  // nothing until a new map makes it rebuilding and a transfer completes
  kFenced,        // a primary whose stream was refused for its generation: serves nothing
  kRestoring,     // the primary of a group that lost every copy (GroupEntry::restore_pending):
                  // takes only the chief's restore (ps.RestoreCheckpoint, ps.CreateVariable and
                  // their embedding-table twins),
                  // streamed to the other copies like any write, and refuses everything else
                  // (RestorePendingError) until a map clears restore_pending
};
const char* CopyRoleName(CopyRole role);
wire::CopyRole CopyRoleToWire(CopyRole role);

// A variable being received by a state transfer (its rows arrive over several chunks).
struct PendingVariable {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::unique_ptr<OptimizerConfig> optimizer;
  Variable::State state;
  uint64_t restores = 0;
  int64_t rows_filled = 0;
};

// One PS's copy of one shard group: its variables and update window, and where it stands in
// the group's replication. Shared (shared_ptr) between the replication service's table and the
// handlers running against it; a copy that restarts a state transfer is a new object.
//
// Locking: `write_mu` orders the copy's writes (apply, take a sequence number, queue for the
// streams: one write at a time, so every copy applies them in one order); `mu` guards the
// replication state below and is what writers wait on for acknowledgements. Lock order:
// write_mu, then mu, then a stream's own lock.
struct GroupCopy {
  // A copy with its own (new, empty) store and window, and `extension` (may be null: the
  // state beside the variables, e.g. embedding tables; state.extension points at it).
  GroupCopy(uint32_t group, uint64_t max_variable_bytes, const UpdateDedup::Options& dedup_options,
            std::shared_ptr<CopyExtensionState> extension = nullptr);
  // The same, with variable bytes counting against `budget`'s cap (not owned; outlives the
  // copy): the copies of one PS share its cap.
  GroupCopy(uint32_t group, VariableStore* budget, const UpdateDedup::Options& dedup_options,
            std::shared_ptr<CopyExtensionState> extension = nullptr);
  // A copy over the PS's default store and window (not owned; they outlive it).
  GroupCopy(uint32_t group, PsService::ShardState shared, std::shared_ptr<CopyExtensionState> extension = nullptr);
  ~GroupCopy();  // stops the streams
  GroupCopy(const GroupCopy&) = delete;
  GroupCopy& operator=(const GroupCopy&) = delete;

  const uint32_t group;
  const std::unique_ptr<VariableStore> owned_store;
  const std::unique_ptr<UpdateDedup> owned_dedup;
  const std::shared_ptr<CopyExtensionState> extension;
  const PsService::ShardState state;

  Mutex write_mu ABSL_ACQUIRED_BEFORE(mu);
  mutable Mutex mu;
  CopyRole role ABSL_GUARDED_BY(mu) = CopyRole::kRebuilding;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;
  uint64_t sequence ABSL_GUARDED_BY(mu) = 0;  // the last write applied here
  int32_t primary ABSL_GUARDED_BY(mu) = -1;   // the group's primary in the map held
  std::string why_not_serving ABSL_GUARDED_BY(mu);  // for needs_rebuild / fenced
  // A primary's streams to the other copies of the group.
  std::vector<std::unique_ptr<BackupStream>> streams ABSL_GUARDED_BY(mu);

  // A primary's writes applied and queued whose writers are not answered yet: each is
  // answered (AnswerDue) once every counted stream acknowledged its sequence (OK), when this
  // copy stops serving (stale shard map), or at its deadline (Unavailable: applied here, not
  // acknowledged in time). Sequences ascend.
  using AnswerFn = std::function<void(const absl::Status&)>;
  struct PendingAnswer {
    uint64_t sequence;
    absl::Time deadline;
    const char* method;  // a string literal
    AnswerFn done;
    // The primary's own result (a ForwardsBeforeApply write it refused is answered with its
    // refusal, once acknowledged like any write).
    absl::Status applied;
  };
  std::deque<PendingAnswer> answers ABSL_GUARDED_BY(mu);
  // Under mu: moves the answers that are due at `now` (see `answers`) into `due`, each with
  // the status to answer (run them outside mu: they send on sockets and wake writers).
  void TakeDueAnswers(absl::Time now, std::vector<std::pair<AnswerFn, absl::Status>>* due)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Answers what is due now (takes mu). Call after anything that can make answers due: an
  // acknowledgement, a role or stream change, a deadline passing.
  void AnswerDue();
  // Answers every pending write with `status` (a copy dropped from the map).
  void AnswerAll(const absl::Status& status);

  // A backup's last applied stream entries (sequence, digest of method and body), newest last,
  // at most kRecentDigests: a ps.Replicate resent after its reply was lost repeats sequences
  // already applied, which are acknowledged without applying them again when they match.
  static constexpr size_t kRecentDigests = 1024;
  std::deque<std::pair<uint64_t, uint64_t>> recent_digests ABSL_GUARDED_BY(write_mu);
  // The digest recorded for `sequence`, or nullopt when it is not among the recent ones.
  std::optional<uint64_t> RecentDigest(uint64_t sequence) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu) {
    for (const std::pair<uint64_t, uint64_t>& d : recent_digests) {
      if (d.first == sequence) return d.second;
    }
    return std::nullopt;
  }

  // A copy receiving a state transfer (ps.InstallState), guarded by write_mu.
  struct Receive {
    uint64_t transfer = 0;
    uint32_t next_chunk = 0;
    bool complete = false;
    uint64_t bytes_copied = 0;
    uint64_t bytes_total = 0;
    absl::flat_hash_map<std::string, PendingVariable> pending;
  };
  Receive receive ABSL_GUARDED_BY(write_mu);
  // Copies of receive.bytes_* for ps.ReplicaStatus (which must not wait for a write).
  uint64_t receive_bytes_copied ABSL_GUARDED_BY(mu) = 0;
  uint64_t receive_bytes_total ABSL_GUARDED_BY(mu) = 0;
  bool receive_complete ABSL_GUARDED_BY(mu) = false;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_GROUP_COPY_H_
