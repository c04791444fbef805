#ifndef ASYNCPS_CHECKPOINT_CHECKPOINT_MANIFEST_H_
#define ASYNCPS_CHECKPOINT_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "checkpoint/checkpoint_shard.h"
#include "core/optimizer_config.h"
#include "checkpoint/safetensors.h"
#include "partitioners/variable_placement.h"

namespace asyncps {

// The manifest of a checkpoint directory ("manifest.json"): what the checkpoint holds and
// where. A checkpoint exists only once its manifest does (see CheckpointManager).
//
// JSON layout (version 1):
//   {"format": "asyncps-checkpoint", "version": 1, "step": 100, "wall_time": 1700000000.5,
//    "num_ps": 2,
//    "files": [{"name": "ps-0-of-2.safetensors", "bytes": 1234, "crc32": 305419896}, ...],
//    "variables": [{"name": "emb", "dtype": "F32", "shape": [10, 4],
//                   "optimizer": {"type": "adam", "learning_rate": 0.001, ...} | null,
//                   "shards": [{"name": "emb/part_0", "rows": [0, 5],
//                               "file": "ps-0-of-2.safetensors", "tensor": "emb/part_0",
//                               "slots": {"m": "emb/part_0/.OPTIMIZER_SLOT/m", ...},
//                               "iterations": 42}, ...]}, ...]}
// Optional: "coordinator_state": {"split_cursor/train": "...", ...} — opaque strings the
// coordinator saves beside the variables (CheckpointManager::Save) and reads back on restart.
// Optional: "embedding_tables": {"key_partition": "jump_splitmix64_v1",
//   "tables": [{"name": "user_emb", "dim": 16, "rows": 1234,
//               "files": ["embedding-0-ps-0-of-2.safetensors", ...]}, ...]}
// — the hash-keyed embedding tables (ps/embedding/embedding_checkpoint.h: one file per table per
// PS, each listed in "files" with its size and CRC-32) and the key partition their PS used.
// "rows" is the shard's range of the variable's first axis (a scalar is one row, [0, 1));
// each tensor holds those rows; crc32 is zlib's CRC-32 of the whole file.

struct ManifestShard {
  std::string name;
  int64_t row_begin = 0;
  int64_t row_end = 0;
  std::string file;
  std::string tensor;
  std::map<std::string, std::string> slots;  // slot name -> tensor
  int64_t iterations = 0;
};

struct ManifestVariable {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::optional<OptimizerConfig> optimizer;
  std::vector<ManifestShard> shards;  // by row_begin, tiling the rows

  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  // The shape of the tensor holding `shard`.
  Shape ShardShape(const ManifestShard& shard) const;
};

struct ManifestFile {
  std::string name;
  ps::FileDigest digest;
};

// One embedding table of a checkpoint: the files (one per PS that saved it) holding its rows.
struct ManifestEmbeddingTable {
  std::string name;
  int64_t dim = 0;
  uint64_t rows = 0;  // over all files
  std::vector<std::string> files;
};

struct CheckpointManifest {
  int64_t step = 0;
  double wall_time = 0;  // seconds since the Unix epoch, when the manifest was written
  int num_ps = 0;
  std::vector<ManifestFile> files;
  std::vector<ManifestVariable> variables;  // by name
  std::map<std::string, std::string> coordinator_state;  // empty when absent
  std::vector<ManifestEmbeddingTable> embedding_tables;  // by name; empty when absent
  std::string embedding_key_partition;                   // set when embedding_tables is not

  const ManifestVariable* FindVariable(absl::string_view name) const;
  const ManifestEmbeddingTable* FindEmbeddingTable(absl::string_view name) const;
  const ManifestFile* FindFile(absl::string_view name) const;
};

std::string ManifestToJson(const CheckpointManifest& manifest);

// Parses and validates a manifest: JSON syntax, no duplicate keys at any depth, every field
// present with the right type, known dtypes, shards of each variable tiling its rows in order,
// every shard's file listed in "files", file and tensor names valid, no variable twice; every
// embedding table's files listed in "files", no table twice, no file in two tables.
// DataLoss naming `source` and what is wrong.
absl::StatusOr<CheckpointManifest> ManifestFromJson(absl::string_view json,
                                                    absl::string_view source);

// The manifest for what the parameter servers saved: every variable of `placements` with each
// shard found in `saved` (InvalidArgument if one is missing or differs in dtype or shape).
absl::StatusOr<CheckpointManifest> BuildManifest(int64_t step, double wall_time, int num_ps,
                                                 const std::vector<VariablePlacement>& placements,
                                                 const std::vector<ps::SavedFile>& saved);

// What each PS must do to restore `manifest` (a checkpoint in `directory`) into variables
// placed as `targets` — which may be split differently, over a different number of PS, than
// when saved. Every target shard gets the rows of its range from whichever saved shards hold
// them (value and every slot alike), and its step counter is the largest counter of those
// saved shards (for a shard made of several, the counter of the most-updated one; an equal
// split keeps its source's counter). A target variable missing from the checkpoint is
// NotFound; one with another dtype or shape is FailedPrecondition. Keyed by PS index.
absl::StatusOr<std::map<int, ps::RestorePlan>> PlanRestore(
    const CheckpointManifest& manifest, const std::string& directory,
    const std::vector<VariablePlacement>& targets);

}  // namespace asyncps

#endif  // ASYNCPS_CHECKPOINT_CHECKPOINT_MANIFEST_H_
