#ifndef ASYNCPS_CHECKPOINT_CHECKPOINT_SHARD_H_
#define ASYNCPS_CHECKPOINT_CHECKPOINT_SHARD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "core/optimizer_config.h"
#include "checkpoint/safetensors.h"

namespace asyncps::ps {

// The format of a parameter server's part of a checkpoint: one safetensors file holding, for
// each shard (variable) it saves, the value as tensor "<shard>" and each optimizer slot as
// tensor "<shard>/.OPTIMIZER_SLOT/<slot>" (a name no other variable's value can take unless a
// user names a variable that way, which the writer then rejects as a duplicate instead of
// losing data). Step counters go to the file's metadata ("iterations/<shard>") and to the caller.
// The PS writes and reads these files from its store with ps/store_checkpoint.h; the
// coordinator records them in the manifest (checkpoint_manifest.h).

std::string SlotTensorName(const std::string& shard, const std::string& slot);

// What was saved of one shard.
struct SavedShard {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string tensor;                     // value tensor in the file
  std::vector<std::string> slot_names;    // optimizer order
  std::vector<std::string> slot_tensors;  // parallel to slot_names
  int64_t iterations = 0;
  std::optional<OptimizerConfig> optimizer;
};

struct SavedFile {
  std::string file_name;  // relative to the checkpoint directory
  FileDigest digest;
  std::vector<SavedShard> shards;
};

// A file name a checkpoint may use: non-empty, [A-Za-z0-9._-] only, not "." or "..".
absl::Status ValidateCheckpointFileName(const std::string& name);

// Where one piece of a shard comes from: rows [src_row_begin, src_row_end) of tensor `tensor`
// (and of its slot tensors) in file `file`, going to rows starting at `dst_row_begin`.
// A scalar counts as one row.
struct RestorePiece {
  size_t file = 0;  // index into RestorePlan::files
  std::string tensor;
  std::vector<std::string> slot_names;
  std::vector<std::string> slot_tensors;
  int64_t src_row_begin = 0;
  int64_t src_row_end = 0;
  int64_t dst_row_begin = 0;
};

// One shard to restore on this PS. It is created (with `optimizer`) when the PS lacks it.
struct RestoreShard {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::optional<OptimizerConfig> optimizer;
  int64_t iterations = 0;
  std::vector<RestorePiece> pieces;  // must tile the shard's rows exactly
};

struct RestoreFile {
  std::string file_name;
  FileDigest digest;  // size and CRC-32 the file must have
};

struct RestorePlan {
  std::string directory;
  std::vector<RestoreFile> files;
  std::vector<RestoreShard> shards;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_CHECKPOINT_CHECKPOINT_SHARD_H_
