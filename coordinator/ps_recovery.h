#ifndef ASYNCPS_COORDINATOR_PS_RECOVERY_H_
#define ASYNCPS_COORDINATOR_PS_RECOVERY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/closure_queue.h"
#include "core/sync.h"

namespace asyncps {

class CoordinatorMetrics;
class ParameterServerStrategy;

// Automatic recovery from a lost parameter server (opt-in; see ClusterCoordinator::Options).
//
// TensorFlow's contract — and this coordinator's default — is that a closure which cannot
// reach a PS, or finds that a PS lost its variables (it restarted empty), fails with
// Unavailable, and Schedule/Join/Done return that error. With automatic recovery the
// coordinator repairs the cluster instead and the user never sees the failure:
//   1. The first closure that fails because of a PS pauses dispatch (no closure is handed to
//      a worker) and is put back on the queue, like a closure whose worker died; so is every
//      closure that fails the same way meanwhile. They run again after the repair: closures
//      lost to the PS failure are re-run, not reported as errors.
//   2. Once no closure is running, recovery waits until every PS answers (the lost one comes
//      back at the same address as a new incarnation) and asks each which variables and
//      embedding tables it holds.
//   3. When every PS still holds all of its variables, the PS was only unreachable for a
//      while: dispatch resumes with nothing restored.
//   4. Otherwise the latest good checkpoint of `checkpoints` is restored onto every PS (the
//      lost PS's variables are created by the restore), so all PS are back at one cut; the
//      coordinator's own state is rolled back to the same checkpoint with them (the split
//      cursors of dynamically sharded datasets, saved there by ClusterCoordinator::
//      SplitCursorState; see CoordinatorState), so the batches whose effects the restore undid
//      are handed out again and trained again (Event::batches_redone). A checkpoint saved
//      without a live dataset's cursor cannot roll it back: the batches completed since are not
//      read again; recovery says so as an error in the log, in Event::cursors_missing and in
//      asyncps_coordinator_ps_recovery_cursor_missing_total.
//      With no checkpoint yet (or no CheckpointManager), the variables the lost PS held are
//      created again from their initializers and every other PS keeps its values; this is
//      logged as a warning: that PS's part of the model restarts from scratch.
//   5. Dispatch resumes. The recovery is logged, counted (asyncps_coordinator_ps_recoveries_total)
//      and its lost work reported (see Stats; asyncps_coordinator_ps_recovery_steps_lost_total).
// With replicated shards (ps_replicas >= 2, a PsMonitor on the chief) a lost PS is not a
// recovery's business: its groups fail over and its copies are rebuilt. Only a group that lost
// every copy is: the monitor marks it restore_pending (its returning copy serves nothing but
// the restore) and calls the coordinator's listener at once, which starts a recovery as a
// failed closure would (step 1; closures that reach the group meanwhile are refused with
// ps::RestorePendingError and put back). Step 2 waits until every group has a primary; step
// 3 finds the groups awaiting a restore (Event::lost_ps then names groups, not PS); step 4
// restores the checkpoint onto every group and rolls the cursors back (one cut: restoring the
// lost groups alone would apply the redone batches twice on the others), and the monitor
// clears restore_pending in a new map (event ps_restored) before dispatch resumes.
//
// A failed step is retried (every `probe_interval`) until `timeout` has passed since the
// failure; then recovery gives up: dispatch resumes, the closures fail with Unavailable as in
// the default mode, and automatic recovery stays off for the rest of the coordinator's life
// (logged as an error). A restore that fails for any reason other than an unreachable PS (a
// checkpoint that lacks a variable created after it, say) gives up at once.
//
// Steps lost are counted in closures: those that completed after the restored checkpoint was
// committed (through options.checkpoints) or last restored, and before this restore, whose
// effects the restore undid. Exact when checkpoints are saved at a join point (nothing
// running); a closure completing while a Save runs counts as saved. For a checkpoint whose
// commit this recovery did not see (written by an earlier run or another manager), every
// closure this coordinator completed is counted and Event says it is an upper bound. When
// re-initialising, the closures completed since the start (or the previous re-initialisation)
// are counted: their effects on the lost PS's variables are gone.
//
// A closure that updated one PS and then failed on the lost one is run again. With
// exactly-once updates (ClusterCoordinator::Options::deduplicate_updates, the default) a PS
// that kept its values answers the re-run's repeated updates "already applied", while a
// variable restored from the checkpoint (or re-created) takes them again: each update ends up
// applied once. Without it, re-runs are at-least-once: the restore undoes the first run only
// when a checkpoint was restored.
//
// Exactly once through a restore (dynamic sharding, checkpoints saved at join points with the
// split cursor): the checkpoint is one cut of variables, cursor and update window. At a join
// point every closure scheduled so far has finished, so the window's cut is just "every
// closure below the watermark is applied, none above": those closures are never dispatched
// again, and a restore raises every restored variable's generation (ps/update_dedup.h), so
// keys recorded after the cut no longer match and the closures re-run after it apply again.
// Those closures (the ones in flight at the failure) lose their batch binding and are bound
// afresh from the restored cursor, which hands out again every batch bound after the cut:
// every example is trained once in the variables, none twice, none skipped (tested in
// tests/integration/dynamic_sharding_test.cc). Not covered: a zombie attempt (on a worker
// presumed dead) of a closure finished before the cut that reaches a PS restarted empty before
// any newer closure has told it the watermark; the restored window does not carry it.
//
// Thread-safe. The recovery runs on a thread of its own.
class PsRecovery {
 public:
  struct Options {
    bool enabled = false;
    // Where to restore from; nullptr: always re-initialise lost variables. Not owned; must
    // outlive the coordinator.
    CheckpointManager* checkpoints = nullptr;
    // How long after a failure the lost PS may take to come back before recovery gives up.
    absl::Duration timeout = absl::Minutes(10);
    // Pause between attempts while a PS does not answer or a restore fails.
    absl::Duration probe_interval = absl::Milliseconds(200);
  };

  // What one recovery did.
  struct Event {
    absl::Time time;
    std::string reason;        // the closure error that started it
    std::vector<int> lost_ps;  // PS that had lost variables (empty: only unreachable); with
                               // replicated shards, the groups that lost every copy
    std::string checkpoint;    // restored checkpoint directory; empty when none was restored
    int64_t checkpoint_step = -1;
    bool reinitialized = false;  // lost variables re-created from their initializers
    int64_t steps_lost = 0;      // closures whose effects were undone (see the class comment)
    bool steps_lost_upper_bound = false;
    // Batches of dynamically sharded datasets completed after the restored checkpoint and
    // handed out again by the rolled-back cursors: the work redone. Examples redone are these
    // times the pipeline's batch size (the coordinator does not see records).
    int64_t batches_redone = 0;
    // Datasets reading when the PS was lost whose cursor the restored checkpoint lacks (saved
    // without SplitCursorState): not rolled back, so examples read since the checkpoint may
    // never be trained again.
    std::vector<std::string> cursors_missing;
    absl::Duration paused;  // how long dispatch was held
  };

  struct Stats {
    int64_t recoveries = 0;  // repairs that restored or re-initialised something
    int64_t transient = 0;   // PS unreachable for a while, nothing lost, nothing restored
    int64_t steps_lost = 0;  // sum over recoveries
    int64_t batches_redone = 0;  // sum over recoveries
    int64_t cursors_missing = 0;  // sum over recoveries of Event::cursors_missing.size()
    bool gave_up = false;
    std::vector<Event> events;  // every recovery and transient outage, oldest first
  };

  // What a checkpoint restore did.
  struct Restored {
    int64_t step = -1;
    int64_t batches_redone = 0;                // see Event
    std::vector<std::string> cursors_missing;  // see Event
  };

  // The coordinator's state that a restore rolls back with the variables, from the same
  // checkpoint (ClusterCoordinator: the split cursors). Called from the recovery thread only,
  // while dispatch is paused and no closure is in flight.
  class CoordinatorState {
   public:
    virtual ~CoordinatorState() = default;
    // OK when RollBack(state) will succeed; changes nothing. `state` is a checkpoint manifest's
    // coordinator_state.
    virtual absl::Status CheckRollBack(const std::map<std::string, std::string>& state) = 0;
    // Rolls back to `state` (CheckRollBack passed; the variables are restored), filling in
    // restored->batches_redone and restored->cursors_missing.
    virtual void RollBack(const std::map<std::string, std::string>& state, Restored* restored) = 0;
    // The closures that have finished (the coordinator's identity and watermark): the PS
    // restored refuse their zombie attempts (CheckpointManager::Restore). None by default.
    virtual CheckpointManager::FinishedClosures Finished() { return {}; }
  };

  // What recovery does to the cluster; MakeClusterPsRepair talks to the real PS, tests may
  // substitute their own. Called from the recovery thread only.
  class Repair {
   public:
    virtual ~Repair() = default;
    // OK once every PS answers within `timeout`.
    virtual absl::Status ProbeAll(absl::Duration timeout) = 0;
    // The PS that no longer hold every variable the strategy placed on them, or every
    // embedding table it created (ParameterServerStrategy::EmbeddingTableNames).
    virtual absl::StatusOr<std::vector<int>> PsMissingVariables() = 0;
    // The newest good checkpoint's directory; NotFound when there is none.
    virtual absl::StatusOr<std::string> LatestCheckpoint() = 0;
    // Restores checkpoint `path` onto every PS, and the coordinator's state from it, as one
    // cut: when anything fails before the variables change, neither changes.
    virtual absl::StatusOr<Restored> Restore(const std::string& path) = 0;
    // Re-creates missing variables from their initializers.
    virtual absl::Status Reinitialize() = 0;
  };

  // Repair against `strategy`'s parameter servers, restoring from `checkpoints` (nullable)
  // and rolling `state` (nullable: nothing but the variables) back with them. Neither is owned;
  // both must outlive the Repair.
  static std::unique_ptr<Repair> MakeClusterPsRepair(ParameterServerStrategy& strategy,
                                                     CheckpointManager* checkpoints,
                                                     CoordinatorState* state = nullptr);

  // `queue` (the coordinator's) and `metrics` (nullable) must outlive this object. Registers
  // with options.checkpoints (when set) to learn of checkpoint commits. Starts the recovery
  // thread.
  PsRecovery(ClosureQueue& queue, std::unique_ptr<Repair> repair,
             CoordinatorMetrics* metrics, Options options);
  // Stop() and joins the recovery thread; a restore in progress is waited for (bounded by the
  // CheckpointManager's rpc_timeout).
  ~PsRecovery();

  // A dispatcher's closure failed with `error` because of a PS. Returns true when recovery
  // takes it over: dispatch is paused (before this returns) and the caller must put the
  // closure back on the queue. False once recovery gave up: the caller reports the error.
  bool OnPsFailure(const absl::Status& error);

  // A closure completed (for the steps-lost count). Cheap; any thread.
  void NoteCompleted();
  // Checkpoint `step` was committed now.
  void NoteCheckpoint(int64_t step);

  Stats stats() const;

  // Ends recovery: the thread stops at its next step; waits on PS are abandoned. Does not
  // resume dispatch (the coordinator is shutting down).
  void Stop();

 private:
  enum class Result { kDone, kGaveUp, kStopped };

  void Loop();
  Result Recover(const absl::Status& reason, absl::Time started);
  // Waits `timeout` unless stopped first; false when stopping.
  bool Pace(absl::Duration timeout);
  bool stopping() const;
  void Resume();

  ClosureQueue& queue_;
  std::unique_ptr<Repair> repair_;
  CoordinatorMetrics* const metrics_;
  const Options options_;
  int listener_id_ = -1;
  std::atomic<int64_t> completed_{0};

  mutable Mutex mu_;
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;  // dispatch paused, repair pending or running
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool gave_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status reason_ ABSL_GUARDED_BY(mu_);
  absl::Time failed_at_ ABSL_GUARDED_BY(mu_);
  // Closures completed when each checkpoint step was committed (or last restored).
  std::map<int64_t, int64_t> marks_ ABSL_GUARDED_BY(mu_);
  // Closures completed at the last re-initialisation (0: the start).
  int64_t reinit_mark_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PS_RECOVERY_H_
