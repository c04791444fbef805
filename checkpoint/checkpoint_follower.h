#ifndef ASYNCPS_CHECKPOINT_CHECKPOINT_FOLLOWER_H_
#define ASYNCPS_CHECKPOINT_CHECKPOINT_FOLLOWER_H_

// Following a training job's checkpoint directory from outside the cluster, the way
// TensorFlow's side-car evaluator does: no connection to any task, only the files a
// CheckpointManager commits, so a slow or dead follower never holds training up.
//
// How a follower learns that training is over: after its last Save, the chief calls
// MarkFinalCheckpoint, which writes "<directory>/final_checkpoint" (the final step, written to
// a temporary name, fsynced and renamed, so it is never seen half-written). A chief that
// starts (or resumes) training in a directory calls ClearFinalCheckpointMarker first, so a
// marker left by an earlier run does not end the followers of this one.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_reader.h"
#include "core/sync.h"

namespace asyncps {

inline constexpr char kFinalCheckpointMarker[] = "final_checkpoint";

// Records that ckpt-<step> under `directory` is the last checkpoint this run writes. Call after
// the Save of that step returned OK.
absl::Status MarkFinalCheckpoint(const std::string& directory, int64_t step);

// Removes the marker (OK when there is none).
absl::Status ClearFinalCheckpointMarker(const std::string& directory);

// The step MarkFinalCheckpoint recorded. NotFound when there is no marker; DataLoss when its
// content is not a step.
absl::StatusOr<int64_t> ReadFinalCheckpointMarker(const std::string& directory);

// Yields each committed checkpoint under a directory once, oldest first, as they appear.
//
// A follower that falls behind goes on with the oldest checkpoint still there, so it sees every
// checkpoint that outlives max_to_keep until it gets to it; older ones are skipped. A committed
// checkpoint that fails VerifyCheckpoint is logged and skipped.
//
// Thread-safety: Next() from one thread at a time; Cancel() from any thread.
class CheckpointFollower {
 public:
  struct Options {
    // How often the directory is scanned while nothing new is there.
    absl::Duration poll_interval = absl::Milliseconds(500);
    // Give up (DeadlineExceeded) when no new checkpoint appears for this long.
    absl::Duration idle_timeout = absl::InfiniteDuration();
    CheckpointCheck check = CheckpointCheck::kStructure;
  };

  CheckpointFollower(std::string directory, Options options);

  // Blocks until there is a committed checkpoint with a step above every one returned so far
  // and returns the oldest such. Then, once the checkpoint marked final (or a later one) has
  // been returned: OutOfRange (training is over). NotFound when the marked final checkpoint is
  // not there although nothing newer than it is either (deleted). DeadlineExceeded after
  // idle_timeout without a new checkpoint; Cancelled once Cancel() was called.
  absl::StatusOr<CheckpointDir> Next();

  // Makes a blocked or later Next() return Cancelled.
  void Cancel();

  const std::string& directory() const { return directory_; }

 private:
  const std::string directory_;
  const Options options_;
  int64_t last_step_ = -1;  // used by the Next() thread only
  Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace asyncps

#endif  // ASYNCPS_CHECKPOINT_CHECKPOINT_FOLLOWER_H_
