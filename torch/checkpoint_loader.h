#ifndef ASYNCPS_TORCH_CHECKPOINT_LOADER_H_
#define ASYNCPS_TORCH_CHECKPOINT_LOADER_H_

// Loading a checkpoint that CheckpointManager wrote into a torch::nn::Module, with no cluster:
// e.g. to serve or fine-tune the trained model in a plain LibTorch program.
//
// Parameters are matched by name as in torch_bridge::CreateVariables: the parameter "fc1.weight"
// (module.named_parameters()) is the variable `prefix + "fc1.weight"`, its shards joined back
// into the whole. Every parameter must be in the checkpoint with its dtype and shape; variables
// the module does not have are ignored (a checkpoint may hold more than one model). All are
// read and checked before any parameter changes, so on error the module is untouched. Values
// are copied into the parameters' own storage (under torch::NoGradGuard), so an optimizer or a
// shared module already holding them sees the loaded values.
//
// LibTorch types are forward-declared: this header does not pull in <torch/torch.h>. LibTorch
// exceptions are caught here and come back as a Status. Thread-compatible: do not use
// `module` elsewhere meanwhile.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace asyncps::torch_bridge {

// Loads the checkpoint in `checkpoint_dir` (".../ckpt-<step>") into `module` and returns its
// step. Errors: NotFound when the directory is no committed checkpoint or a parameter has no
// variable (naming both); FailedPrecondition when a variable's dtype or shape differs from its
// parameter's (naming both); DataLoss when a file is torn or corrupt (its CRC-32, size or
// header; see CheckpointReader).
absl::StatusOr<int64_t> LoadCheckpoint(const std::string& checkpoint_dir, ::torch::nn::Module& module,
                                       const std::string& prefix = "");

// LoadCheckpoint of the newest good checkpoint under `directory` (a CheckpointManager's
// directory); torn or corrupt newer ones are skipped. NotFound when there is none.
absl::StatusOr<int64_t> LoadLatestCheckpoint(const std::string& directory, ::torch::nn::Module& module,
                                             const std::string& prefix = "");

}  // namespace asyncps::torch_bridge

#endif  // ASYNCPS_TORCH_CHECKPOINT_LOADER_H_
