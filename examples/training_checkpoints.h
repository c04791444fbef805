#ifndef ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_
#define ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace asyncps {

class CheckpointManager;
class ParameterServerStrategy;

// A training loop's checkpoint policy: save every N steps, and when the same program starts
// again (the chief restarted, the PS and workers still running or restarted), continue from
// the newest good checkpoint. The step is the manifest's.
//
// Save at a join point (nothing in flight) so the checkpoint is a consistent cut and its step
// counts exactly the updates it holds; see CheckpointManager. Side-car evaluators following the
// directory (checkpoint/checkpoint_follower.h) learn that training is over from MarkFinal.
//
// Not thread-safe: the chief's training thread uses it.
class TrainingCheckpoints {
 public:
  struct Options {
    std::string directory;  // empty: no checkpoints, every call below is a no-op
    int64_t every_steps = 500;
    int max_to_keep = 3;
    // Saves and restores through this manager instead of one of its own (then `directory`
    // and `max_to_keep` are the manager's): e.g. the one the coordinator's automatic PS
    // recovery restores from, which must see every commit to count the steps a recovery
    // loses. Not owned; must outlive this.
    CheckpointManager* manager = nullptr;
  };

  // `strategy` must outlive this.
  TrainingCheckpoints(ParameterServerStrategy& strategy, Options options);
  ~TrainingCheckpoints();

  bool enabled() const { return manager_ != nullptr; }

  // Restores the newest good checkpoint into the strategy's variables (create them first) and
  // returns its step; 0 when there is none yet (or checkpoints are off). A checkpoint that is
  // there but cannot be restored (a PS unreachable, a shape that no longer matches) is an
  // error, never a silent fresh start. Also removes the final-checkpoint marker an earlier
  // run left (this run writes more), so followers keep following.
  absl::StatusOr<int64_t> RestoreLatest();

  // The coordinator state saved with the checkpoint RestoreLatest restored (what Save was
  // given: ClusterCoordinator::SplitCursorState()); empty when it restored none. Pass it to
  // ClusterCoordinator::RestoreSplitCursors so a dynamically sharded epoch goes on where the
  // checkpoint left it instead of starting over.
  const std::map<std::string, std::string>& restored_state() const { return restored_state_; }

  // The first step after `step` at which a checkpoint is due (a multiple of every_steps); a
  // step no run reaches when checkpoints are off.
  int64_t NextAfter(int64_t step) const;

  // Saves checkpoint `step` unless it is already committed (a run that resumed from it and
  // stopped there). Returns the checkpoint's directory, or "" when nothing was written.
  // `coordinator_state` goes into the checkpoint with the variables: pass
  // ClusterCoordinator::SplitCursorState() so that automatic PS recovery, restoring this
  // checkpoint, rolls the dynamically sharded data back with the model (nothing skipped).
  absl::StatusOr<std::string> Save(int64_t step,
                                   const std::map<std::string, std::string>& coordinator_state = {});

  // Records that checkpoint `step` (saved) is this run's last (MarkFinalCheckpoint).
  absl::Status MarkFinal(int64_t step);

 private:
  const Options options_;
  std::unique_ptr<CheckpointManager> owned_;
  CheckpointManager* manager_ = nullptr;
  std::map<std::string, std::string> restored_state_;
};

}  // namespace asyncps

#endif  // ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_
