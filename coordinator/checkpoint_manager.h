#ifndef ASYNCPS_COORDINATOR_CHECKPOINT_MANAGER_H_
#define ASYNCPS_COORDINATOR_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/parameter_server_strategy.h"

namespace asyncps {

// Sharded checkpoints of every variable of a ParameterServerStrategy, in `directory`:
//
//   directory/ckpt-<step>/ps-<i>-of-<n>.safetensors   written by PS i, in parallel
//   directory/ckpt-<step>/manifest.json              written last, by the coordinator
//
// Save(step): every PS that holds shards writes its own file (value, optimizer slots and step
// counter of each shard; see ps/store_checkpoint.h) to a temporary name, fsyncs and renames
// it; then the manifest (checkpoint_manifest.h: step, wall time, every variable with dtype,
// shape, optimizer config and which file and tensor hold which rows, every file's size and
// CRC-32) goes to a temporary name, is fsynced, renamed into place, and the directory is
// fsynced. A checkpoint exists only once its manifest does: a crash (of a PS or of the
// coordinator) anywhere before that leaves a directory that Latest() ignores. Only after the
// new manifest is durable are the oldest checkpoints beyond `max_to_keep` deleted (and
// uncommitted leftovers older than it).
//
// Embedding tables (ps/embedding/): Save also has every PS write each hash-keyed embedding table
// to its own file, directory/ckpt-<step>/embedding-<k>-ps-<i>-of-<n>.safetensors (k: the
// table's index by name), durably before the manifest, which lists the files (size, CRC-32),
// which table each holds, and the key partition. The tables saved are those registered with
// AddEmbeddingTable and every table any PS reports (ps.EmbeddingStats); a PS that lacks one of
// them fails the save. Restore sends every PS of the current cluster (any PS count) all table
// files; each PS keeps the keys PsForKey assigns it (ps/embedding/embedding_checkpoint.h).
//
// Consistency. Each shard's value, slots and step counter are captured together under its
// variable's exclusive lock, so a shard never mixes steps (no value from one step with Adam
// moments from another). Save() itself does not pause training: called while closures run,
// different shards (and different PS) are captured at different moments — each consistent,
// the whole not a single cut. Called after ClusterCoordinator::Join() (nothing in flight, no
// new closures scheduled until it returns), it is a consistent cut across all PS.
//
// Restore(path) checks the manifest, every file's size and header against it, and (by default)
// every file's CRC-32 before any PS changes; then each PS reads the rows it needs straight
// from the files and applies them all-or-nothing on that PS. Embedding tables are restored
// first, on every PS, and the variables only once every PS restored its tables: a failed table
// restore fails Restore (naming the PS and the file) with no variable changed. The CRC-32 of
// every table file is checked on the coordinator even without verify_before_restore (the PS
// does not check it). The variables may be split
// differently and over a different number of PS than when saved (rows are re-sliced by
// logical row range; slots too; see PlanRestore for the step-counter rule), and a PS that lacks
// a variable (e.g. restarted) creates it. The checkpoint directory must be reachable under
// the same path from the coordinator and every PS (a shared file system).
//
// Thread-safe; calls are serialised. The strategy (and its ChiefProcess) must outlive the manager.
class CheckpointManager {
 public:
  struct Options {
    int max_to_keep = 5;  // <= 0 keeps every checkpoint
    absl::Duration rpc_timeout = absl::Minutes(10);
    // Restore reads every file's CRC-32 on the coordinator before touching any PS (then a
    // corrupt checkpoint changes nothing anywhere). Each PS checks the files it reads anyway.
    bool verify_before_restore = true;
  };

  CheckpointManager(ParameterServerStrategy& strategy, std::string directory, int max_to_keep);
  CheckpointManager(ParameterServerStrategy& strategy, std::string directory, Options options);

  // Writes checkpoint `step` (>= 0) and returns its directory. AlreadyExists when checkpoint
  // `step` is already committed; Unavailable (naming the PS) when a PS cannot be reached or
  // dies meanwhile — the checkpoint is then not committed and the previous one stays Latest().
  absl::StatusOr<std::string> Save(int64_t step);
  // The same, with the coordinator's own state (e.g. ClusterCoordinator::SplitCursorState) in
  // the manifest, committed with it: read it back with ReadManifest(path)->coordinator_state.
  absl::StatusOr<std::string> Save(int64_t step, const std::map<std::string, std::string>& coordinator_state);

  // Directories of committed checkpoints (those with a manifest), oldest step first. Does
  // not check them.
  std::vector<std::string> List() const;

  // The newest checkpoint that passes VerifyCheckpoint at `check`; torn or corrupt ones are
  // skipped (and logged with the reason). NotFound when there is none.
  absl::StatusOr<std::string> Latest(CheckpointCheck check = CheckpointCheck::kChecksums) const;

  // Every closure of `coordinator` (ClosureWatermark::first_id) below `watermark` has finished
  // and is never dispatched again (coordinator 0: none said).
  struct FinishedClosures {
    uint64_t coordinator = 0;
    uint64_t watermark = 0;
  };

  // Restores checkpoint `path` into the strategy's variables; returns its step. With
  // `finished`, every PS restored refuses the updates of those closures from then on (zombie
  // attempts on workers presumed dead: their effects, if any, are what the restore undid or
  // what the checkpoint already holds), as a newer closure's watermark would tell it.
  absl::StatusOr<int64_t> Restore(const std::string& path, const FinishedClosures& finished);
  absl::StatusOr<int64_t> Restore(const std::string& path) { return Restore(path, FinishedClosures()); }

  // Restore(Latest()). NotFound when there is no good checkpoint.
  absl::StatusOr<int64_t> RestoreLatest();

  const std::string& directory() const { return directory_; }

  // Registers the embedding table `name` (created on every PS with ps.CreateEmbeddingTable):
  // from now on Save fails when a PS lacks it, and Restore fails (NotFound, before any PS
  // changes) from a checkpoint without it. Unregistered tables the PS hold are saved too. Any
  // thread; does not wait for a Save or Restore in progress.
  void AddEmbeddingTable(const std::string& name);

  // Calls `listener(step)` after each checkpoint Save commits (on the saving thread, with this
  // manager's lock held: the listener must not call the manager). Automatic PS recovery uses
  // it to know how much work each checkpoint holds. Returns an id for RemoveCommitListener.
  int AddCommitListener(std::function<void(int64_t step)> listener);
  // After this returns, the listener is not running and is never called again.
  void RemoveCommitListener(int id);

 private:
  // Has every PS save every embedding table (registered or found on a PS) into `dir`; adds
  // the files and tables to `manifest`.
  absl::Status SaveEmbeddingTables(const std::string& dir, int64_t step,
                                   CheckpointManifest& manifest);
  // Has every PS of the cluster restore the tables of `manifest` (in `dir`).
  absl::Status RestoreEmbeddingTables(const std::string& dir, const CheckpointManifest& manifest);
  std::set<std::string> RegisteredTables() const;

  ParameterServerStrategy& strategy_;
  const std::string directory_;
  const Options options_;
  Mutex mu_;  // one Save or Restore at a time
  std::map<int, std::function<void(int64_t)>> listeners_ ABSL_GUARDED_BY(mu_);
  int next_listener_ ABSL_GUARDED_BY(mu_) = 0;
  mutable Mutex tables_mu_;  // not mu_: registering a table must not wait for a Save
  std::set<std::string> embedding_tables_ ABSL_GUARDED_BY(tables_mu_);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CHECKPOINT_MANAGER_H_
