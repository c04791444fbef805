#ifndef ASYNCPS_COORDINATOR_PS_MONITOR_H_
#define ASYNCPS_COORDINATOR_PS_MONITOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "ps/replication/shard_map.h"

namespace asyncps {
class ShardMapCache;
class ShardMapOwner;
namespace metrics {
class ProcessMetrics;
class StatusBoard;
}  // namespace metrics
namespace net {
class RpcClient;
}  // namespace net

// The chief's watch over its parameter servers with replicated shards (ps_replicas >= 2,
// issue 19), and the owner of the shard map they serve by.
//
// Start pushes the map (the ring map at generation 1, or the newest map a PS already holds
// when the chief restarted; a PS then holding no map restarted empty meanwhile, and is lost
// and rebuilt as below) to every PS before any variable is created. Then one thread sends
// ps.ReplicaStatus to every PS every `heartbeat_interval` and decides (ShardMapOwner):
//   * a PS that has left a heartbeat unanswered for `heartbeat_timeout` (counted from the
//     first heartbeat sent since its last answer, so time the monitor itself did not run is
//     not held against the PS) is *unreachable*, not lost: silence proves nothing (a
//     partition, a paused process and a dead host look alike). Its groups fail over to
//     backups that answer, it leaves the backup lists of groups whose primary answers (their
//     writes stop waiting for it), and a group none of whose copies answers is left as it is
//     (ShardMapOwner::Unreachable), generations rise, and the new map goes to every PS that
//     answers (and to `cache`, the chief's own client). Answering again, it rebuilds what it
//     left; a group it still leads it serves again with the state it kept;
//   * a PS is *lost* (ShardMapOwner::Lost: a group left with no copy awaits a restore) only on
//     evidence that its state is gone (it answers with another incarnation: it restarted
//     empty; or its address refuses connections: no process serves there, net/peer_absent.h),
//     or once it has been silent for `lost_after`;
//   * a gray failure: workers report, in their answers to the coordinator's heartbeats
//     (WorkerView), how long each PS has owed them an answer without a word; a primary the
//     chief hears but some workers have not heard for `heartbeat_timeout` fails over to a
//     backup that fewer of them are cut from and the chief reaches, and is fenced and rebuilds
//     (ShardMapOwner::WorkersCannotReach). A worker that hears from fewer than half of the PS
//     is taken for cut off itself and not counted; a view older than `worker_view_ttl` is not
//     counted either (its worker stopped answering);
//   * a chief that hears from fewer than half of its PS at once suspects that it is the one
//     cut off: it changes nothing on silence (no failover, no loss, however long it lasts) and
//     acts only on evidence, until half of them answer again; then it goes on where it was,
//     and the PS that have not answered yet get a fresh heartbeat timeout on a new connection
//     (the old one may sit in TCP's retransmission backoff for seconds after the heal);
//   * a PS that the map names primary of a group, and that reports (at the map's generation)
//     a copy of it that cannot serve (needs-rebuild, rebuilding, fenced), is a lost copy of
//     that group: an in-sync backup is promoted (the PS rebuilds), or with none the group has
//     no live copy and awaits a restore (below);
//   * a lost PS that answers again (restarted, or resumed after a stall) rebuilds its ring
//     groups by state transfer (rebuilding) and becomes a backup when its primary reports it in
//     sync; a backup that refused its stream goes back to rebuilding;
//   * a PS whose map is older than the chief's gets it again (a push it missed);
//   * a group that lost every copy is marked restore_pending: the first of its ring PS to
//     return becomes its empty primary, which takes only the chief's restore. While any group
//     awaits one, the restore listener (automatic PS recovery) is told at every heartbeat
//     round; once it restored the groups (Restored) they serve again in a new map.
// Each PS's state (up, down, rebuilding), each group's primary, backups, generation and
// replication lag, failovers, state transfers and bytes copied are shown on the status board
// and exported as metrics; every decision is an event on the board and a log line.
//
// Heartbeats must not queue behind other work, or a busy chief declares live PS lost: `ps`
// should be connections that carry only the monitor's calls, on an EventLoop of their own
// (ChiefProcess makes both), not the chief's connections to the PS (which carry its variable
// writes, restores and checkpoints) nor its loop (which carries every worker's closures). The
// answers are taken on that loop under a lock of their own, never the monitor's.
//
// Thread-safe. The RPC clients, `cache`, `metrics` and `board` are not owned and must outlive
// the monitor.
class PsMonitor {
 public:
  struct Options {
    int replicas = 2;
    absl::Duration heartbeat_interval = absl::Milliseconds(200);
    absl::Duration heartbeat_timeout = absl::Seconds(2);
    // How long a silent PS stays unreachable before it is lost (see the class comment).
    absl::Duration lost_after = absl::Seconds(30);
    // How long Start waits for every PS to take the first map.
    absl::Duration start_timeout = absl::Seconds(60);
    // How long a worker's view (WorkerView) counts: about two of the coordinator's heartbeat
    // intervals (500 ms), each answer bringing a new one. Between two, the silences it
    // reported are taken to grow with the time since.
    absl::Duration worker_view_ttl = absl::Seconds(1);
    // Elastic PS (ProcessOptions::initial_ps): the PS that are members at the start, the first
    // this many of the cluster's PS slots (-1: all). The others hold nothing, are neither
    // waited for nor watched until they join (AdmitPs).
    int initial_members = -1;
  };

  PsMonitor(std::vector<net::RpcClient*> ps, std::vector<std::string> addresses, ShardMapCache& cache,
            metrics::ProcessMetrics& metrics, metrics::StatusBoard& board, Options options);
  // Stops the heartbeat thread.
  ~PsMonitor();

  PsMonitor(const PsMonitor&) = delete;
  PsMonitor& operator=(const PsMonitor&) = delete;

  // Pushes the first map to every PS (waiting for PS that are still starting, up to
  // start_timeout) and starts watching. InvalidArgument when the replicas do not fit the
  // cluster (k > num_ps); Unavailable when a PS does not take the map in time.
  absl::Status Start();

  // What the monitor has done so far.
  struct Stats {
    int64_t failovers = 0;        // groups whose primary moved to a backup
    int64_t ps_lost = 0;          // PS declared lost
    int64_t state_transfers = 0;  // copies added as rebuilding
    int64_t rebuilt = 0;          // rebuilding copies that became backups
    int64_t no_live_copy = 0;     // groups left without any copy
    int64_t bytes_copied = 0;     // bytes of finished state transfers, as their primaries reported
    int64_t restored = 0;         // groups that lost every copy and were restored (ps_restored)
    int64_t heartbeats_answered = 0;  // heartbeats any PS answered
    int64_t ps_unreachable = 0;   // times a PS went silent past the heartbeat timeout
    int64_t cut_off = 0;          // times the chief heard from fewer than half of its PS at once
    bool suspects_cut_off = false;  // now
    int64_t workers_cut = 0;      // failovers of a primary the chief heard and workers did not
    int64_t ps_joined = 0;        // PS admitted by AdmitPs
    int64_t ps_left = 0;          // PS drained by DrainPs (holding nothing)
    int64_t moves_started = 0;    // groups retargeted by a join or a leave
    int64_t moves_done = 0;       // of those, groups whose copies are all on their target again
    int64_t move_bytes = 0;       // state transfer bytes of the copies those moves rebuilt
  };
  Stats stats() const;
  // The map the chief holds now.
  ps::ShardMap map() const;

  // A group awaiting a restore from a checkpoint (GroupEntry::restore_pending).
  struct PendingRestore {
    int group = -1;
    int primary = -1;    // -1: no copy came back yet (nothing can be restored)
    uint64_t token = 0;  // which loss of every copy (a group may lose them again later)
  };
  std::vector<PendingRestore> RestoresPending() const;
  // The groups of `restored` (as RestoresPending gave them) hold the checkpoint now: each that
  // still awaits that same restore (same token) is cleared in a new map, pushed to every PS,
  // with an event ps_restored. Restoring is the caller's: call only after every group's
  // primary acknowledged the restore.
  void Restored(const std::vector<PendingRestore>& restored);
  // `listener` (empty: none) is called at every heartbeat round while a group awaits a
  // restore, with an Unavailable status naming the groups; on the monitor's thread, under its
  // lock: it must not call the monitor (PsRecovery::OnPsFailure only pauses dispatch and
  // wakes its own thread). Once this returns the previous listener is not running.
  void SetRestoreListener(std::function<void(const absl::Status&)> listener);

  // What worker `worker` told the coordinator just now: per PS (in PS order), how long that
  // PS has owed it an answer without a word (net::RpcClient::Silence; zero: nothing owed).
  // Judged at the monitor's next round (see the class comment). Any thread; never blocks on
  // the monitor's round.
  void WorkerView(int worker, std::vector<absl::Duration> silence);
  // Worker `worker` is down or gone: its last view no longer counts.
  void ForgetWorker(int worker);

  // Elastic PS (issue 37; ShardMapOwner::Join and Leave). Both may be called from any thread
  // once Start returned OK.
  //
  // Admits PS slot `ps`, which serves at `address` (it must be the address the cluster lists
  // for that slot), and starts moving shard-group copies to it; returns the members after it
  // and whether it was one already (nothing changed). InvalidArgument for an index that is no
  // slot or an address that is not the slot's; FailedPrecondition before Start.
  struct Admitted {
    int members = 0;
    bool already_member = false;
  };
  absl::StatusOr<Admitted> AdmitPs(int ps, const std::string& address);
  // Moves every copy PS `ps` holds to the other members, and returns once it holds none (the
  // groups it moved), or DeadlineExceeded after `timeout` (it is no longer a member; the moves
  // go on). NotFound for a PS that is not a member, FailedPrecondition when the members left
  // could not hold every group's copies (ShardMapOwner::Leave), Unavailable when the monitor
  // stops meanwhile. Blocks: call from an RPC handler thread, not the monitor's.
  absl::StatusOr<int> DrainPs(int ps, absl::Duration timeout);

 private:
  struct PsView;
  struct Gauges;
  struct Answer;
  void Loop();
  void Handle(int ps, const Answer& answer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round's verdict on the PS that did not answer in time (see the class comment).
  void Judge(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The round's verdict on what the workers cannot reach (WorkerView); `reachable`: the PS
  // the chief hears.
  void JudgeWorkerViews(absl::Time now, const std::vector<bool>& reachable) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The PS in `silent` went past the heartbeat timeout without evidence of a loss: their groups
  // fail over to copies in `reachable` (ShardMapOwner::Unreachable).
  void Unreachable(absl::Time now, const std::vector<int>& silent, const std::vector<bool>& reachable)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs and pushes the map after `groups` changed from `before` (failovers and new
  // transfers counted).
  void Changed(const ps::ShardMap& before, const std::vector<int>& groups, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushMap(int ps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and reports the groups the owner left without a live copy (ShardMapOwner::
  // TakeNoLiveCopy), whose empty primary is now `ps`.
  void NoteNoLiveCopy(int ps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Event(const std::string& kind, const std::string& text);

  const std::vector<net::RpcClient*> ps_;
  const std::vector<std::string> addresses_;
  ShardMapCache& cache_;
  metrics::StatusBoard& board_;
  const Options options_;
  std::unique_ptr<Gauges> gauges_;

  mutable Mutex mu_;
  std::unique_ptr<ShardMapOwner> owner_ ABSL_GUARDED_BY(mu_);
  std::vector<PsView> views_ ABSL_GUARDED_BY(mu_);
  // Heartbeat answers, filled on the loop thread. A lock of their own: the loop thread never
  // waits for mu_, which the monitor holds through a whole round. Taken after mu_ when both are.
  Mutex inbox_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::vector<Answer> inbox_ ABSL_GUARDED_BY(inbox_mu_);
  int heartbeats_in_flight_ ABSL_GUARDED_BY(inbox_mu_) = 0;
  struct WorkerReport {
    absl::Time received;
    std::vector<absl::Duration> silence;
  };
  // The workers' latest views, by worker index. A lock of its own, like inbox_mu_: the
  // coordinator's threads never wait for a round.
  Mutex views_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::map<int, WorkerReport> worker_views_ ABSL_GUARDED_BY(views_mu_);
  // Per PS, the workers that could not reach it at the latest round (for the status page).
  std::vector<int> cut_from_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Per group, which loss of every copy it awaits a restore for (PendingRestore::token).
  std::map<int, uint64_t> restore_tokens_ ABSL_GUARDED_BY(mu_);
  uint64_t next_restore_token_ ABSL_GUARDED_BY(mu_) = 1;
  std::function<void(const absl::Status&)> restore_listener_ ABSL_GUARDED_BY(mu_);
  // Elastic PS: per slot, whether it left the job (drained), for the status page; per group,
  // whether it was moving (ShardMapOwner::Moving) at the last look, to tell when a move ends.
  std::vector<bool> left_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> was_moving_ ABSL_GUARDED_BY(mu_);
  // True for a PS the monitor watches: a member, or one still handing off copies.
  bool Watched(int ps) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and reports the moves that finished (moving_ groups whose copies are on target).
  void NoteMovesDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PS_MONITOR_H_
