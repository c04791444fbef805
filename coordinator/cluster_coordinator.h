#ifndef ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_
#define ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/closure_arg.h"
#include "coordinator/closure_queue.h"
#include "coordinator/closure_watermark.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/per_worker_dataset.h"
#include "coordinator/ps_recovery.h"
#include "coordinator/remote_value.h"
#include "coordinator/resource_spec.h"
#include "coordinator/split_cursor.h"
#include "core/sync.h"
#include "worker/program.h"

namespace asyncps {

class CoordinatorMetrics;
namespace net {
class RpcServer;
}  // namespace net
class WorkerHandle;  // internal (coordinator/worker_handle.h): one worker's connection and state

// Schedules step functions ("closures") onto the cluster's workers, with the contract of
// TensorFlow's ClusterCoordinator:
//   * Schedule never blocks on work (only while the queue is full) and returns a RemoteValue.
//     Every closure runs at least once: a closure whose worker fails before answering goes
//     back on the queue and runs on another (or the recovered) worker.
//   * Join blocks until the queue is empty and nothing is in flight; Done says whether that
//     is so. Schedule, Join and Done return the first error a closure produced since the last
//     one was returned, then clear it. When an error happens, queued closures are cancelled
//     (their RemoteValues say Cancelled), running ones are asked to stop (StepContext::
//     cancelled), and Join/Done return only once none is running. The coordinator stays usable.
//   * A closure that could not reach a parameter server, or found that one lost its variables
//     (it restarted empty), fails with Unavailable (TensorFlow's contract), so Schedule/Join/
//     Done return Unavailable. Opt-in instead: automatic PS recovery (Options::ps_recovery;
//     see coordinator/ps_recovery.h) pauses dispatch, waits for the PS to come back, restores
//     the latest checkpoint onto every PS, rolls the split cursors back to the same
//     checkpoint (when it holds them) and re-runs the failed closures by itself.
//   * Dynamic sharding (ShardingPolicy::kDynamic, see PerWorkerDataset): each closure that
//     takes such an iterator is bound, when dispatched, to one batch, and a re-run reads the
//     same batch. Closures dispatched after an epoch's last batch was handed out read nothing
//     (their RemoteValues say OutOfRange) and cancel nothing; Join/Done then return
//     OutOfRange once, after the closures holding batches finished.
// Workers are watched by heartbeats as well as by failed calls, so a hung or partitioned worker
// is noticed too. A down worker is probed with backoff; when it answers, its per-worker
// resources and the variable directory are rebuilt on it before it is given closures again.
//
// Elastic membership (ProcessOptions::elastic, --elastic): the coordinator serves
// coordinator/membership_service.h on the chief's cluster address. A worker that was not in
// the starting cluster joins by registering (JoinWorker) and is admitted like a recovered
// worker, once its per-worker resources are built; a worker leaves by being drained
// (DrainWorker): it takes no new closure, its closures finish or go back to the queue, and the
// splits it was reading are handed to the others first. A departure is counted as one
// (asyncps_coordinator_worker_departures_total), not as a worker failure, also when the
// worker dies while draining. Exactly once holds throughout: a closure that goes back keeps its
// batch and closure id, so the parameter servers apply its update once.
//
// Thread-safe: Schedule/Join/Done/Fetch may be called from any thread.
class ClusterCoordinator {
 public:
  struct Options {
    size_t queue_capacity = 1024;
    // Closures running at once on each worker (TensorFlow: 1). More hide dispatch latency.
    int closures_per_worker = 1;
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    absl::Duration heartbeat_timeout = absl::Seconds(5);
    absl::Duration rpc_timeout = absl::Seconds(30);       // setup calls to workers
    absl::Duration closure_timeout = absl::InfiniteDuration();
    absl::Duration max_recovery_backoff = absl::Seconds(2);
    // How long the destructor lets running closures stop cooperatively after cancelling them.
    absl::Duration shutdown_grace = absl::Milliseconds(500);
    // Exactly-once updates: every update and gradient push a closure makes is applied at
    // most once by its PS, however often the closure runs (ps/update_dedup.h). Off gives
    // TensorFlow's at-least-once behaviour: a closure re-run after its worker failed applies
    // again what the failed attempt had applied. The chief's own updates (outside closures)
    // are never deduplicated.
    bool deduplicate_updates = true;
    // Off by default (a lost PS is reported as Unavailable). Set enabled (and checkpoints) to
    // have the coordinator repair a lost PS by itself.
    PsRecovery::Options ps_recovery;
  };

  // `strategy` (and its ChiefProcess, whose I/O loop, metrics and status page the coordinator
  // uses) and `program` must outlive the coordinator. `program` is used to reject unknown
  // function and resource names at Schedule time.
  ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program);
  ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program, Options options);

  // Returns promptly — within `shutdown_grace` plus a few loop round trips — whatever the
  // workers do: queued closures are cancelled; running ones are asked to stop
  // (StepContext::cancelled) and given `shutdown_grace` to do so; then every call still
  // waiting on a worker is abandoned (a hung worker, a recovery probe, a closure that ignores
  // cancellation) and its RemoteValue says Cancelled. A function that ignores cancellation
  // keeps running in its worker process until it returns on its own; its answer is dropped
  // and nothing it did is rolled back. The worker stays usable by a later coordinator.
  ~ClusterCoordinator();

  absl::StatusOr<RemoteValue> Schedule(const std::string& function, std::vector<ClosureArg> args = {});
  absl::Status Join();
  absl::StatusOr<bool> Done();

  // Values of every remote value, blocking for each; the first error if any failed.
  absl::StatusOr<std::vector<Values>> Fetch(const std::vector<RemoteValue>& values);

  // Creates a resource on every worker from `factory` in the Program, and keeps it there:
  // a worker that restarts gets it rebuilt before its next closure.
  //   * NotFound for a factory the Program does not have.
  //   * When the factory fails on a worker that is up, that error (its code; the message
  //     names the factory and worker) is returned and nothing is left behind: the resource
  //     is deleted where it was built and is not rebuilt on workers that recover later.
  //   * When the factory fails only later, on a worker that was down at creation and is
  //     being recovered, the worker is still admitted: closures that do not use the
  //     resource run there, and a closure that does fails with the factory's error, raised
  //     by Schedule/Join/Done like a function error (TensorFlow's input errors). The factory
  //     is tried again if that worker restarts.
  absl::StatusOr<PerWorkerValues> CreatePerWorkerResource(const std::string& factory,
                                                          std::map<std::string, std::string> args = {});

  // Builds the dataset `name` of the Program on every worker (its factory gets the worker's
  // index, the number of workers and `args`) and keeps it there, rebuilt on a worker that
  // restarts. Iterators over it come from PerWorkerDataset::MakeIterator. NotFound for a name
  // the Program lacks; the factory's own error when it fails on a worker.
  absl::StatusOr<PerWorkerDataset> CreatePerWorkerDataset(const std::string& name,
                                                          std::map<std::string, std::string> args = {});
  // The same with a sharding policy (see ShardingPolicy and PerWorkerDataset). Under kDynamic
  // the sources are cut into splits of `records_per_split` records; InvalidArgument if < 1.
  static constexpr int64_t kDefaultRecordsPerSplit = 4096;
  absl::StatusOr<PerWorkerDataset> CreatePerWorkerDataset(const std::string& name,
                                                          std::map<std::string, std::string> args,
                                                          ShardingPolicy policy,
                                                          int64_t records_per_split = kDefaultRecordsPerSplit);

  // The split cursor of each kDynamic dataset's latest iterator (its epoch, next split, splits
  // being read, batches in flight as not done), keyed "split_cursor/<dataset>": coordinator
  // state for CheckpointManager::Save. Take it after Join (nothing in flight) for exactly once.
  std::map<std::string, std::string> SplitCursorState() const;
  // Restores cursors saved by SplitCursorState (keys without the prefix are ignored, so the
  // whole coordinator state of a checkpoint can be passed): the next MakeIterator of each such
  // kDynamic dataset continues the saved epoch; later ones start the epochs after it.
  // InvalidArgument for a malformed state (nothing is restored then).
  //
  // Automatic PS recovery rolls the cursors back by itself, in the running epoch: when it
  // restores a checkpoint that holds them, each kDynamic dataset's latest iterator continues
  // from the checkpoint's cursor at once, so every batch bound after the checkpoint is bound
  // again (to later closures, or to the closures it re-runs). When the checkpoint is of an
  // earlier epoch, the latest iterator first finishes that epoch (Join then says OutOfRange)
  // and the next MakeIterator starts the epoch after it again.
  absl::Status RestoreSplitCursors(const std::map<std::string, std::string>& state);

  // Members now: the starting workers plus those that joined, less those that left.
  int num_workers() const;
  int workers_up() const;

  // Elastic membership (see the class comment; also called by the membership service).
  // JoinWorker admits worker `index` serving at `address` (asynchronously: it is "joining"
  // until its resources are built, then "up"). InvalidArgument for an index outside
  // [0, MembershipService::kMaxWorkerIndex) or an address that is not host:port;
  // AlreadyExists when `index` is a member at another address (at the same address it is a
  // no-op: already_member); Unavailable once the coordinator is being destroyed.
  struct Joined {
    int members = 0;
    bool already_member = false;
  };
  absl::StatusOr<Joined> JoinWorker(int index, const std::string& address);
  // Drains worker `index` and removes it (what its membership.Leave asks: a worker process
  // that keeps running after a drain it did not ask for registers again within seconds, and
  // is admitted again); returns once it has left, with the number of its
  // closures that went back to the queue (those still running after `timeout`, or whose
  // worker died). NotFound for a worker that is not a member, FailedPrecondition for one
  // already draining, Unavailable once the coordinator is being destroyed.
  absl::StatusOr<int> DrainWorker(int index, absl::Duration timeout);
  // The port the membership service listens on (0: not serving; --elastic is off or the
  // chief's address could not be bound, which is logged).
  int membership_port() const;

  // What automatic PS recovery did so far (all zero when it is off).
  PsRecovery::Stats ps_recovery_stats() const;

 private:
  struct ClosureArgs;
  class MembersAdapter;
  void StartWorkerThreads(WorkerHandle* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(workers_mu_);
  void ServeMembership();
  // Every member now (a snapshot: membership may change right after).
  std::vector<WorkerHandle*> Members() const;
  void DispatchLoop(WorkerHandle& worker);
  void MonitorLoop(WorkerHandle& worker);
  void RunClosure(WorkerHandle& worker, const std::shared_ptr<Closure>& closure);
  void WorkerFailed(WorkerHandle& worker, uint64_t incarnation, const absl::Status& reason);
  // Queue gauges change with every closure; the workers-up gauge only when a worker goes down
  // or is admitted, so only those paths pay for counting them.
  void UpdateQueueGauges();
  void UpdateWorkerGauge();

  friend class PerWorkerDataset;
  void RegisterDynamicDataset(const std::string& name, int64_t records_per_split);
  void StartEpoch(const std::string& name, uint64_t iterator_id);
  // The cursor of the kDynamic iterator among `args` (null if none), and that iterator's id.
  std::shared_ptr<SplitCursor> CursorFor(const std::vector<ClosureArg>& args, uint64_t* iterator_id) const;
  // Automatic PS recovery's rollback of the cursors to a checkpoint's coordinator `state`
  // (see RestoreSplitCursors); with `restored` null only checks that it can be done. Call only
  // while nothing is dispatched. InvalidArgument for a malformed cursor, FailedPrecondition for
  // one in an epoch after the one being read (not from this run); nothing changes then.
  class CursorRollback;
  absl::Status RollBackSplitCursors(const std::map<std::string, std::string>& state,
                                    PsRecovery::Restored* restored);

  ParameterServerStrategy& strategy_;
  const Program& program_;
  const Options options_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  ClosureQueue queue_;
  ClosureWatermark closure_ids_;
  // Members, and (kept until destruction, as their threads hold them) the handles of workers
  // that left; the threads of both.
  mutable Mutex workers_mu_;
  std::vector<std::unique_ptr<WorkerHandle>> workers_ ABSL_GUARDED_BY(workers_mu_);
  std::vector<std::unique_ptr<WorkerHandle>> departed_ ABSL_GUARDED_BY(workers_mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(workers_mu_);
  bool shutting_down_ ABSL_GUARDED_BY(workers_mu_) = false;
  std::unique_ptr<CursorRollback> cursor_rollback_;  // what ps_recovery_ rolls back
  std::unique_ptr<PsRecovery> ps_recovery_;  // null unless options_.ps_recovery.enabled

  Mutex resources_mu_;
  std::vector<ResourceSpec> resources_ ABSL_GUARDED_BY(resources_mu_);
  // Orders the status board's "down" (a failed call, after checking the worker is still
  // down) against the monitor's "up" (after recovering it), so the board's last word on a
  // worker is its current state; without it a failed call's "down" could land after the
  // monitor had recovered the worker and written "up", and stay there.
  Mutex member_state_mu_;

  // Dynamic sharding: per dataset, the split size, the next epoch, its latest cursor (and
  // that iterator's id) and the cursor of each epoch read (for the work a rollback redoes);
  // per iterator, its cursor; cursors restored from a checkpoint until their dataset's next
  // MakeIterator; whether a closure found its epoch's data handed out since the last Join.
  struct DynamicDataset {
    int64_t records_per_split = kDefaultRecordsPerSplit;
    int64_t next_epoch = 0;
    std::shared_ptr<SplitCursor> latest;
    uint64_t latest_iterator = 0;
    std::map<int64_t, std::shared_ptr<SplitCursor>> epochs;
  };
  mutable Mutex dynamic_mu_;
  std::map<std::string, DynamicDataset> dynamic_datasets_ ABSL_GUARDED_BY(dynamic_mu_);
  std::map<uint64_t, std::shared_ptr<SplitCursor>> cursors_ ABSL_GUARDED_BY(dynamic_mu_);
  std::map<std::string, std::shared_ptr<SplitCursor>> restored_cursors_ ABSL_GUARDED_BY(dynamic_mu_);
  bool end_of_data_ ABSL_GUARDED_BY(dynamic_mu_) = false;

  // --elastic only: the membership service and its server (destroyed first).
  std::unique_ptr<MembersAdapter> members_adapter_;
  std::unique_ptr<net::RpcServer> membership_server_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_
