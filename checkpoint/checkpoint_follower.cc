#include "checkpoint/checkpoint_follower.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/durable_file.h"
#include "core/status_macros.h"

namespace asyncps {
namespace {

std::string MarkerPath(const std::string& directory) { return absl::StrCat(directory, "/", kFinalCheckpointMarker); }

}  // namespace

absl::Status MarkFinalCheckpoint(const std::string& directory, int64_t step) {
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat("final checkpoint step ", step, " is negative"));
  ASSIGN_OR_RETURN(std::unique_ptr<DurableFileWriter> writer, DurableFileWriter::Create(MarkerPath(directory)));
  const std::string text = absl::StrCat(step, "\n");
  RETURN_IF_ERROR(writer->Append(text.data(), text.size()));
  RETURN_IF_ERROR(writer->Commit());
  return FsyncDirectory(directory);
}

absl::Status ClearFinalCheckpointMarker(const std::string& directory) {
  const std::string path = MarkerPath(directory);
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ReadFinalCheckpointMarker(const std::string& directory) {
  const std::string path = MarkerPath(directory);
  absl::StatusOr<std::string> text = ReadFileToString(path, /*max_bytes=*/64);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return text.status();
    return absl::DataLossError(absl::StrCat(path, ": ", text.status().message()));
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &step) || step < 0) {
    return absl::DataLossError(absl::StrCat(path, " does not hold a step: '", *text, "'"));
  }
  return step;
}

CheckpointFollower::CheckpointFollower(std::string directory, Options options)
    : directory_(std::move(directory)), options_(options) {}

void CheckpointFollower::Cancel() {
  MutexLock lock(&mu_);
  cancelled_ = true;
}

absl::StatusOr<CheckpointDir> CheckpointFollower::Next() {
  absl::Time idle_deadline = absl::Now() + options_.idle_timeout;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (cancelled_) return absl::CancelledError("checkpoint follower cancelled");
    }
    // The marker is written after the final checkpoint is committed, so a marker read before
    // the scan means the scan sees that checkpoint.
    absl::StatusOr<int64_t> final_step = ReadFinalCheckpointMarker(directory_);
    for (const CheckpointDir& dir : ScanCheckpoints(directory_)) {
      if (!dir.committed || dir.step <= last_step_) continue;
      last_step_ = dir.step;  // a bad one is skipped, not retried
      if (absl::StatusOr<CheckpointManifest> m = VerifyCheckpoint(dir.path, options_.check); !m.ok()) {
        spdlog::warn("skipping checkpoint {}: {}", dir.path, m.status().ToString());
        continue;
      }
      return dir;
    }
    if (final_step.ok()) {
      if (*final_step <= last_step_) {
        return absl::OutOfRangeError(absl::StrCat("training is over: checkpoint ", *final_step, " was the final one"));
      }
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", *final_step, " is marked final in ", directory_, " but is not there"));
    }
    if (!absl::IsNotFound(final_step.status())) spdlog::warn("{}", final_step.status().ToString());
    if (absl::Now() >= idle_deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no new checkpoint in ", directory_, " for ",
                                                      absl::FormatDuration(options_.idle_timeout)));
    }
    MutexLock lock(&mu_);
    auto cancelled = [this]() {
      mu_.AssertReaderHeld();
      return cancelled_;
    };
    // Poll pacing; Cancel() ends the wait at once.
    mu_.AwaitWithTimeout(absl::Condition(&cancelled), std::min(options_.poll_interval, idle_deadline - absl::Now()));
  }
}

}  // namespace asyncps
