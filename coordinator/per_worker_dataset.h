#ifndef ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_
#define ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/closure_arg.h"
#include "worker/program.h"

namespace asyncps {

class ClusterCoordinator;

// A dataset built on every worker from the factory named in the Program
// (ClusterCoordinator::CreatePerWorkerDataset). Like TensorFlow's per-worker dataset, it is
// consumed through iterators: MakeIterator creates one on every worker.
//
// kOff, kData, kFile and kAuto (see ShardingPolicy): each call gives fresh iterators that start from the
// beginning (TF's iter()). A worker that comes back after a failure gets the dataset and every
// iterator rebuilt before it runs a closure; its iterators start over.
//
// kDynamic: each MakeIterator is one epoch over the data, handed out by the coordinator. Every
// closure that takes the iterator as an argument is bound, when dispatched, to one batch (a
// split of `records_per_split` source records, and a batch within it; see SplitCursor) and
// StepContext::Next gives it exactly that batch — once per closure, at most one such iterator
// per closure. Guarantees, per epoch:
//   * Nothing fails: every record is read exactly once, in one batch.
//   * A worker dies (SIGKILL, partition, hang): its closures run again on another worker, bound
//     to the same batches, so they read exactly the same records. A read batch's gradient is
//     thus pushed once per attempt; with the parameter servers' idempotent-update window, a
//     closure's updates apply once, so each record's gradient is applied exactly once.
//   * A closure that fails with its own error, or is cancelled, gives its batch back: a later
//     closure reads it (its updates made before failing are not rolled back).
//   * Once every batch is handed out, closures read nothing: their RemoteValues say
//     OutOfRange, running closures are not cancelled, and the next Join (or Done) returns
//     OutOfRange once none is running: the epoch is complete. MakeIterator starts the next.
//   * The coordinator dies: a new one restores the cursor from the checkpoint
//     (ClusterCoordinator::RestoreSplitCursors) and continues the epoch; batches in flight at
//     the save are read again. Save after Join (nothing in flight) to keep exactly once.
//
// Cheap to copy. Valid while its coordinator lives. Thread-safe.
class PerWorkerDataset {
 public:
  PerWorkerDataset(ClusterCoordinator* coordinator, std::string name, std::map<std::string, std::string> args,
                   ShardingPolicy policy = ShardingPolicy::kOff)
      : coordinator_(coordinator), name_(std::move(name)), args_(std::move(args)), policy_(policy) {}

  const std::string& name() const { return name_; }
  ShardingPolicy policy() const { return policy_; }

  // New iterators, one per worker, as a Schedule argument: a step function takes the next
  // element with StepContext::Next(i). Under kDynamic, the next epoch (or the epoch a restored
  // cursor left unfinished). Errors: the factory's or iterator's own error on some worker (the
  // caller's mistake, not retried).
  absl::StatusOr<PerWorkerValues> MakeIterator() const;

 private:
  ClusterCoordinator* coordinator_;
  std::string name_;
  std::map<std::string, std::string> args_;  // with the sharding argument
  ShardingPolicy policy_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_PER_WORKER_DATASET_H_
