#ifndef ASYNCPS_PS_STORE_CHECKPOINT_H_
#define ASYNCPS_PS_STORE_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_shard.h"

namespace asyncps::ps {

class VariableStore;

// A parameter server's store written to, and restored from, its part of a checkpoint (the
// file format is checkpoint/checkpoint_shard.h).

// Test-only hooks (a PS started with ASYNCPS_TEST_CKPT_HANG_AT_STEP uses one to stop between
// writing its file and renaming it into place, so a test can kill it there).
struct SaveHooks {
  std::function<void(const std::string& temp_path)> before_rename;
};

// Writes shards `names` of `store` to `directory`/`file_name` (durably: temporary name, fsync,
// rename). Each shard is copied under its variable's exclusive lock (see
// Variable::CheckpointState) one at a time, so training continues meanwhile and memory grows
// by one shard at most; shards are therefore captured at slightly different moments. Unknown
// names are NotFound before anything is written. `directory` must exist.
absl::StatusOr<SavedFile> SaveShards(const VariableStore& store, const std::string& directory,
                                     const std::string& file_name,
                                     const std::vector<std::string>& names, int64_t step,
                                     const SaveHooks& hooks = {});

// Restores `plan` into `store`. Every file is read and checked (size, CRC-32, header) and
// every piece checked against it (tensor present, dtype, row shape, row range, slots) before
// any variable changes: an error (DataLoss for a corrupt file, naming it) leaves the store as
// it was. Slots: every slot of the target variable's optimizer must be in the pieces
// (FailedPrecondition otherwise); slots the target does not have are ignored. Existing
// variables must have the plan's dtype and shape.
absl::Status RestoreShards(VariableStore& store, const RestorePlan& plan);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_STORE_CHECKPOINT_H_
