#include "torch/checkpoint_loader.h"

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "core/status_macros.h"
#include "torch/tensor_bridge.h"

namespace asyncps::torch_bridge {
namespace {

absl::StatusOr<int64_t> Load(const std::string& checkpoint_dir, ::torch::nn::Module& module,
                             const std::string& prefix) {
  ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                   CheckpointReader::Open(checkpoint_dir));
  // Each parameter with its value (a view of the bytes read).
  std::vector<std::pair<at::Tensor, at::Tensor>> loads;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string name = prefix + item.key();
    absl::StatusOr<Tensor> value = reader->Read(name);
    if (!value.ok()) {
      return absl::Status(value.status().code(), absl::StrCat("module parameter '", item.key(),
                                                              "': ", value.status().message()));
    }
    const at::Tensor& param = item.value();
    ASSIGN_OR_RETURN(at::Tensor view, ToTorch(*value));
    if (view.scalar_type() != param.scalar_type() || view.sizes() != param.sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", checkpoint_dir, " has variable '", name, "' as ",
          DTypeName(value->dtype()), ShapeString(value->shape()), " but the module's parameter '",
          item.key(), "' is ", c10::toString(param.scalar_type()), " ", c10::str(param.sizes())));
    }
    loads.emplace_back(param, std::move(view));
  }
  ::torch::NoGradGuard no_grad;
  for (auto& [param, value] : loads) param.copy_(value);
  return reader->manifest().step;
}

// LibTorch reports errors by throwing c10::Error; they stop here.
template <typename Fn>
absl::StatusOr<int64_t> Guard(Fn&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LoadCheckpoint: torch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LoadCheckpoint: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<int64_t> LoadCheckpoint(const std::string& checkpoint_dir,
                                       ::torch::nn::Module& module, const std::string& prefix) {
  return Guard([&] { return Load(checkpoint_dir, module, prefix); });
}

absl::StatusOr<int64_t> LoadLatestCheckpoint(const std::string& directory,
                                             ::torch::nn::Module& module,
                                             const std::string& prefix) {
  ASSIGN_OR_RETURN(std::string latest, LatestCheckpoint(directory, CheckpointCheck::kChecksums));
  return LoadCheckpoint(latest, module, prefix);
}

}  // namespace asyncps::torch_bridge
