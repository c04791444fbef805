#ifndef ASYNCPS_CHECKPOINT_CHECKPOINT_READER_H_
#define ASYNCPS_CHECKPOINT_CHECKPOINT_READER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_manifest.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "checkpoint/safetensors.h"

namespace asyncps {

// Reading checkpoints without a cluster: for checking them, and for loading trained weights
// elsewhere (e.g. copying a variable into a LibTorch module's parameter).

inline constexpr char kManifestFileName[] = "manifest.json";

// How much of a checkpoint to check.
enum class CheckpointCheck {
  kStructure,  // manifest, file sizes, every file's safetensors header against the manifest
  kChecksums,  // all of that, plus every file's CRC-32 (reads every byte)
};

// A checkpoint directory under a CheckpointManager's directory: "ckpt-<step>".
struct CheckpointDir {
  int64_t step = 0;
  std::string path;
  bool committed = false;  // has its manifest
};

// Every "ckpt-<step>" directory under `directory`, oldest step first (committed or not).
std::vector<CheckpointDir> ScanCheckpoints(const std::string& directory);

// The newest committed checkpoint under `directory` that passes VerifyCheckpoint at `check`;
// torn or corrupt ones are skipped and logged with the reason. NotFound when there is none.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& directory, CheckpointCheck check);

// The manifest of the checkpoint in `checkpoint_dir` (validated; NotFound when it has none).
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& checkpoint_dir);

// Checks the checkpoint in `checkpoint_dir` at `level`: every listed file exists with the
// listed size (and CRC-32), its header is valid safetensors, and every shard's value and slot
// tensors are in it with the variable's dtype (f32 for slots) and the shard's shape. DataLoss
// names the file and what is wrong; returns the manifest when all is well.
absl::StatusOr<CheckpointManifest> VerifyCheckpoint(const std::string& checkpoint_dir,
                                                    CheckpointCheck level);

// Reads whole logical variables (shards concatenated) and their optimizer slots from one
// checkpoint. Files are read on first use, checked against the manifest's size and CRC-32,
// and kept for later reads.
//
// Thread-safe.
class CheckpointReader {
 public:
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& checkpoint_dir);

  const CheckpointManifest& manifest() const { return manifest_; }

  // Variable `name` (slot "" ) or its optimizer slot `slot` ("m", "v", "accumulator", ...),
  // with the variable's full shape. NotFound names what is missing.
  absl::StatusOr<Tensor> Read(const std::string& name, const std::string& slot = "");

 private:
  CheckpointReader(std::string dir, CheckpointManifest manifest)
      : dir_(std::move(dir)), manifest_(std::move(manifest)) {}
  absl::StatusOr<std::shared_ptr<const ps::SafetensorsFile>> File(const std::string& name);

  const std::string dir_;
  const CheckpointManifest manifest_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<const ps::SafetensorsFile>> files_ ABSL_GUARDED_BY(mu_);
};

// One-shot form of CheckpointReader::Read.
absl::StatusOr<Tensor> ReadCheckpointVariable(const std::string& checkpoint_dir,
                                              const std::string& name,
                                              const std::string& slot = "");

}  // namespace asyncps

#endif  // ASYNCPS_CHECKPOINT_CHECKPOINT_READER_H_
