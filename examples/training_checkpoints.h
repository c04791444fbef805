#ifndef ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_
#define ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_

#include <cstdint>
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
// counts exactly the updates it holds; see CheckpointManager.
//
// Not thread-safe: the chief's training thread uses it.
class TrainingCheckpoints {
 public:
  struct Options {
    std::string directory;  // empty: no checkpoints, every call below is a no-op
    int64_t every_steps = 500;
    int max_to_keep = 3;
  };

  // `strategy` must outlive this.
  TrainingCheckpoints(ParameterServerStrategy& strategy, Options options);
  ~TrainingCheckpoints();

  bool enabled() const { return manager_ != nullptr; }

  // Restores the newest good checkpoint into the strategy's variables (create them first) and
  // returns its step; 0 when there is none yet (or checkpoints are off). A checkpoint that is
  // there but cannot be restored (a PS unreachable, a shape that no longer matches) is an
  // error, never a silent fresh start.
  absl::StatusOr<int64_t> RestoreLatest();

  // The first step after `step` at which a checkpoint is due (a multiple of every_steps); a
  // step no run reaches when checkpoints are off.
  int64_t NextAfter(int64_t step) const;

  // Saves checkpoint `step` unless it is already committed (a run that resumed from it and
  // stopped there). Returns the checkpoint's directory, or "" when nothing was written.
  absl::StatusOr<std::string> Save(int64_t step);

 private:
  const Options options_;
  std::unique_ptr<CheckpointManager> manager_;
};

}  // namespace asyncps

#endif  // ASYNCPS_EXAMPLES_TRAINING_CHECKPOINTS_H_
