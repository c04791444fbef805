#include "examples/training_checkpoints.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "asyncps/checkpoints.h"
#include "asyncps/status.h"

namespace asyncps {

TrainingCheckpoints::TrainingCheckpoints(ParameterServerStrategy& strategy, Options options)
    : options_(std::move(options)) {
  if (options_.manager != nullptr) {
    manager_ = options_.manager;
    return;
  }
  if (options_.directory.empty()) return;
  owned_ = std::make_unique<CheckpointManager>(strategy, options_.directory, options_.max_to_keep);
  manager_ = owned_.get();
}

TrainingCheckpoints::~TrainingCheckpoints() = default;

absl::StatusOr<int64_t> TrainingCheckpoints::RestoreLatest() {
  if (!enabled()) return 0;
  RETURN_IF_ERROR(ClearFinalCheckpointMarker(manager_->directory()));
  absl::StatusOr<std::string> latest = manager_->Latest();
  if (absl::IsNotFound(latest.status())) return 0;
  RETURN_IF_ERROR(latest.status());
  // The manifest first: a checkpoint restored is one whose state is known.
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(*latest);
  absl::StatusOr<int64_t> step = manifest.ok() ? manager_->Restore(*latest) : manifest.status();
  if (!step.ok()) {
    return absl::Status(step.status().code(), absl::StrCat("cannot resume from ", *latest, ": ",
                                                           step.status().message()));
  }
  restored_state_ = std::move(manifest->coordinator_state);
  return step;
}

int64_t TrainingCheckpoints::NextAfter(int64_t step) const {
  if (!enabled() || options_.every_steps <= 0) return std::numeric_limits<int64_t>::max();
  return (step / options_.every_steps + 1) * options_.every_steps;
}

absl::StatusOr<std::string> TrainingCheckpoints::Save(int64_t step,
                                                     const std::map<std::string, std::string>& coordinator_state) {
  if (!enabled()) return std::string();
  absl::StatusOr<std::string> dir = manager_->Save(step, coordinator_state);
  if (absl::IsAlreadyExists(dir.status())) return std::string();
  return dir;
}

absl::Status TrainingCheckpoints::MarkFinal(int64_t step) {
  if (!enabled()) return absl::OkStatus();
  return MarkFinalCheckpoint(manager_->directory(), step);
}

}  // namespace asyncps
