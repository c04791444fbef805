#ifndef ASYNCPS_PS_REPLICATION_BACKUP_STREAM_H_
#define ASYNCPS_PS_REPLICATION_BACKUP_STREAM_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "core/sync.h"
#include "net/rpc_client.h"
#include "ps/replication/group_copy.h"
#include "ps/replication/logged_write.h"

namespace asyncps::ps {

class PsMetrics;

// A primary's stream of writes to one other copy of its group, on its own thread: everything
// queued while the previous ps.Replicate was in flight goes in the next one (batching), in
// sequence order, and each acknowledgement is published in the copy's state so that waiting
// writers see it. A stream to a rebuilding copy first pushes a state transfer (a snapshot taken
// under the copy's write lock at sequence S, in chunks of ps.InstallState), then the writes
// after S; once the copy has acknowledged everything applied here it is in sync and counted.
//
// Refusals: a stale generation fences the primary (GroupCopy::role = kFenced: its waiting
// writes fail "stale shard map"); an unreachable copy is retried (writes wait: only the chief
// removes a copy); any other refusal (the copy found a gap, or needs a rebuild) stops the
// stream, reported by ps.ReplicaStatus until a new map replaces it.
//
// Fast path: once the copy is in sync, batches go out with CallAsync from the thread that
// queues a write (when none is in flight) or from the loop thread that receives the previous
// batch's acknowledgement, which also answers the writers it completes: no thread hand-off
// on either side. One batch is in flight at a time (a resend after a lost reply starts at the
// same sequence). A failed batch hands the stream back to its thread (retries, fencing).
class BackupStream {
 public:
  struct Options {
    int32_t from_ps = 0;
    absl::Duration call_timeout = absl::Seconds(30);
    uint64_t max_batch_bytes = uint64_t{64} << 20;
    uint64_t transfer_chunk_bytes = uint64_t{16} << 20;
    // A variable (value and slots) larger than a chunk and at most this goes whole in one
    // ps.InstallState (received without a copy); larger ones in pieces of a chunk. Must stay
    // under the target's frame limit (--rpc_max_frame_bytes).
    uint64_t transfer_whole_max_bytes = uint64_t{1} << 30;
    PsMetrics* metrics = nullptr;  // optional; not owned
    CopyExtension* extension = nullptr;  // optional; not owned: its state is transferred too
  };

  // Streams `copy`'s writes after `start_after` (ignored with `transfer`) to PS `target`
  // through `client` (its own: stopping the stream drops its connection, which must not fail
  // another stream's call in flight). `counted`: the map lists the target as a backup (writes wait for it).
  // Must be made under copy.write_mu and copy.mu (so no write slips between start_after and
  // the first Enqueue). `copy` must outlive the stream.
  BackupStream(GroupCopy& copy, int32_t target, std::unique_ptr<net::RpcClient> client, bool counted, bool transfer,
               uint64_t start_after, Options options);
  ~BackupStream();  // stops and joins; never call with copy.write_mu or copy.mu held

  int32_t target() const { return target_; }
  bool transfers() const { return transfer_; }

  // Queues the write of `sequence` (the next one), and sends it at once (from this thread)
  // when the stream is in sync and no batch is in flight. Called under copy.mu, with the
  // copy's `generation`.
  void Enqueue(uint64_t sequence, std::shared_ptr<const LoggedWrite> write, uint64_t generation);

  // Everything below is guarded by the copy's mu (ABSL cannot name it here).
  bool counted = false;      // writes wait for this copy's acknowledgement
  bool in_sync = false;      // acknowledged everything (after its transfer, if any)
  bool broken = false;       // stopped on a refusal (see error)
  std::string error;
  uint64_t acked = 0;        // the copy applied every write up to this one
  uint64_t bytes_copied = 0;  // state transfer progress
  uint64_t bytes_total = 0;

 private:
  void Run();
  absl::Status Transfer();
  // Fills `request` with the queued writes from next_ (at most max_batch_bytes, at least
  // one): their first sequence, count and bytes.
  void BuildBatchLocked(uint64_t generation, net::OutMessage& request, uint64_t* first, size_t* count,
                        uint64_t* bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Sends the next batch with CallAsync when in async mode with something queued and
  // nothing in flight. Never under queue_mu_.
  void MaybeSendAsync(uint64_t generation) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // The reply to an async batch (on the client's loop thread).
  void OnAsyncReply(uint64_t first, size_t count, uint64_t bytes, absl::StatusOr<net::InMessage> reply);
  // How many writes of the batch [first, first + count) the copy acknowledged in `reply`: the
  // whole batch, or up to a ForwardsBeforeApply write it refused (it acknowledges one short of
  // such a write), which the primary must have refused too (else FailedPrecondition: the
  // copies diverged). A batch resent after a lost reply is acknowledged whole, so a refusal in
  // it goes uncompared. Never under the copy's locks.
  absl::StatusOr<size_t> Acknowledged(uint64_t first, size_t count, const net::InMessage& reply);
  // FailedPrecondition when the copy's update window skipped a different number of a write's
  // updates as already applied than the primary's did (ReplicateResponse.skipped): the windows
  // diverged, and a repeat the primary refused was applied there, or the other way round. The
  // stream then stops and the copy is rebuilt (the chief's NeedsRebuild), never left to serve
  // what the primary does not hold. Never under the copy's locks.
  absl::Status CompareSkips(uint64_t first, size_t count, const net::InMessage& reply);
  // Records that the copy applied the first `count` writes from `first`, and answers the
  // writers that completes.
  void Acknowledge(uint64_t first, size_t count, uint64_t bytes);
  // Sends the writes queued from `first`: OK once acknowledged.
  absl::Status SendBatch();
  void CheckInSync();
  bool WaitStop(absl::Duration d);

  GroupCopy& copy_;
  const int32_t target_;
  const std::unique_ptr<net::RpcClient> client_;
  const bool transfer_;
  const Options options_;

  Mutex queue_mu_;
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  uint64_t next_ ABSL_GUARDED_BY(queue_mu_) = 1;  // sequence of queue_.front()
  std::deque<std::shared_ptr<const LoggedWrite>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool async_ ABSL_GUARDED_BY(queue_mu_) = false;    // the fast path sends (in sync, no failure)
  bool sending_ ABSL_GUARDED_BY(queue_mu_) = false;  // an async batch is in flight
  absl::Status async_error_ ABSL_GUARDED_BY(queue_mu_);  // why the fast path stopped
  // What an async call's reply reaches: the stream until its destructor clears it (which
  // waits for a reply being handled).
  struct Link {
    // Set unlocked: nothing else can reach a new link (locking it here, under the copy's mu,
    // would order the two mutexes against the reply's link-then-copy order).
    explicit Link(BackupStream* s) : stream(s) {}
    Mutex mu;
    BackupStream* stream ABSL_GUARDED_BY(mu);
  };
  const std::shared_ptr<Link> link_;
  std::thread thread_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_BACKUP_STREAM_H_
