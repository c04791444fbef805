#include "torch/module_variables.h"

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/initializers.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/status_macros.h"
#include "torch/tensor_bridge.h"
#include "worker/step_context.h"

namespace asyncps::torch_bridge {
namespace {

// LibTorch reports errors by throwing c10::Error; they stop here.
template <typename Fn>
absl::Status Guard(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": torch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
}

struct Parameters {
  std::vector<std::string> names;  // variable names
  std::vector<at::Tensor> tensors;
};

Parameters NamedParameters(::torch::nn::Module& module, const std::string& prefix) {
  Parameters p;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    p.names.push_back(prefix + item.key());
    p.tensors.push_back(item.value());
  }
  return p;
}

// Points every parameter at its value; checks them all before changing any.
absl::Status Assign(const Parameters& params, const std::vector<Tensor>& values) {
  if (values.size() != params.tensors.size()) {
    return absl::InternalError(absl::StrCat("read ", values.size(), " variables for ", params.tensors.size(),
                                            " parameters"));
  }
  std::vector<at::Tensor> data;
  data.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSIGN_OR_RETURN(at::Tensor t, ToTorch(values[i]));
    const at::Tensor& param = params.tensors[i];
    if (t.scalar_type() != param.scalar_type() || t.sizes() != param.sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "variable '", params.names[i], "' is ", DTypeName(values[i].dtype()), ShapeString(values[i].shape()),
          " but the module's parameter is ", c10::toString(param.scalar_type()), " ", c10::str(param.sizes())));
    }
    data.push_back(std::move(t));
  }
  for (size_t i = 0; i < data.size(); ++i) params.tensors[i].set_data(data[i]);
  return absl::OkStatus();
}

}  // namespace

absl::Status CreateVariables(ParameterServerStrategy& strategy, ::torch::nn::Module& module,
                             const OptimizerConfig& optimizer, const std::string& prefix) {
  return Guard("CreateVariables", [&]() -> absl::Status {
    const Parameters params = NamedParameters(module, prefix);
    for (size_t i = 0; i < params.names.size(); ++i) {
      ASSIGN_OR_RETURN(Tensor value, FromTorch(params.tensors[i]));
      RETURN_IF_ERROR(strategy.CreateVariable(params.names[i], init::FromTensor(value), optimizer).status());
    }
    return absl::OkStatus();
  });
}

absl::Status ReadVariables(ParameterServerStrategy& strategy, ::torch::nn::Module& module,
                           const std::string& prefix) {
  return Guard("ReadVariables", [&]() -> absl::Status {
    const Parameters params = NamedParameters(module, prefix);
    ASSIGN_OR_RETURN(std::vector<Tensor> values, strategy.process().ps().Read(params.names));
    return Assign(params, values);
  });
}

absl::Status Pull(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix) {
  return Guard("Pull", [&]() -> absl::Status {
    const Parameters params = NamedParameters(module, prefix);
    ASSIGN_OR_RETURN(std::vector<Tensor> values, ctx.ReadMany(params.names));
    return Assign(params, values);
  });
}

PsFuture<std::vector<Tensor>> PullAsync(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix) {
  std::vector<std::string> names;
  absl::Status status = Guard("PullAsync", [&]() -> absl::Status {
    names = NamedParameters(module, prefix).names;
    return absl::OkStatus();
  });
  if (!status.ok()) return PsFuture<std::vector<Tensor>>::Ready(status);
  return ctx.ReadManyAsync(names);
}

absl::Status FinishPull(PsFuture<std::vector<Tensor>> pull, ::torch::nn::Module& module, const std::string& prefix) {
  ASSIGN_OR_RETURN(std::vector<Tensor> values, pull.Get());
  return Guard("Pull", [&]() -> absl::Status { return Assign(NamedParameters(module, prefix), values); });
}

PsFuture<VersionedValues> PullVersionedAsync(StepContext& ctx, ::torch::nn::Module& module,
                                             const std::string& prefix) {
  std::vector<std::string> names;
  absl::Status status = Guard("PullAsync", [&]() -> absl::Status {
    names = NamedParameters(module, prefix).names;
    return absl::OkStatus();
  });
  if (!status.ok()) return PsFuture<VersionedValues>::Ready(status);
  return ctx.ReadManyVersionedAsync(names);
}

absl::Status FinishPull(StepContext& ctx, PsFuture<VersionedValues> pull, ::torch::nn::Module& module,
                        const std::string& prefix) {
  ASSIGN_OR_RETURN(VersionedValues read, pull.Get());
  RETURN_IF_ERROR(Guard("Pull", [&]() -> absl::Status { return Assign(NamedParameters(module, prefix), read.values); }));
  ctx.NoteVersions(read.versions);
  return absl::OkStatus();
}

namespace {

// TakeGradients of `params` (a module's NamedParameters).
absl::StatusOr<std::vector<GradientUpdate>> TakeGradientsOf(Parameters& params) {
  std::vector<GradientUpdate> gradients;
  gradients.reserve(params.tensors.size());
  RETURN_IF_ERROR(Guard("TakeGradients", [&]() -> absl::Status {
    absl::Status status;
    for (size_t i = 0; i < params.tensors.size() && status.ok(); ++i) {
      const at::Tensor& grad = params.tensors[i].grad();
      if (!grad.defined()) continue;
      absl::StatusOr<Tensor> value = FromTorch(grad);
      if (!value.ok()) {
        status = value.status();
        break;
      }
      gradients.push_back({params.names[i], std::move(*value), std::nullopt});
    }
    // Cleared also on failure: a failed step's gradients must not leak into the next step.
    for (at::Tensor& param : params.tensors) param.mutable_grad() = at::Tensor();
    return status;
  }));
  return gradients;
}

}  // namespace

absl::StatusOr<std::vector<GradientUpdate>> TakeGradients(::torch::nn::Module& module, const std::string& prefix) {
  Parameters params;
  RETURN_IF_ERROR(Guard("TakeGradients", [&]() -> absl::Status {
    params = NamedParameters(module, prefix);
    return absl::OkStatus();
  }));
  return TakeGradientsOf(params);
}

PsFuture<void> PushGradientsAsync(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix) {
  absl::StatusOr<std::vector<GradientUpdate>> gradients = TakeGradients(module, prefix);
  if (!gradients.ok()) return PsFuture<void>::Ready(gradients.status());
  return ctx.PushGradientsAsync(*gradients);
}

StepContext::PushAndRead PushGradientsAndPullAsync(StepContext& ctx, ::torch::nn::Module& module,
                                                   const std::string& prefix) {
  // One walk over the module for both the names read and the gradients pushed.
  Parameters params;
  absl::Status status = Guard("PushGradientsAndPullAsync", [&]() -> absl::Status {
    params = NamedParameters(module, prefix);
    return absl::OkStatus();
  });
  absl::StatusOr<std::vector<GradientUpdate>> gradients =
      status.ok() ? TakeGradientsOf(params) : absl::StatusOr<std::vector<GradientUpdate>>(status);
  if (!gradients.ok()) {
    return {PsFuture<void>::Ready(gradients.status()), PsFuture<VersionedValues>::Ready(gradients.status())};
  }
  return ctx.PushGradientsAndReadAsync(*gradients, params.names);
}

absl::Status PushGradients(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix) {
  ASSIGN_OR_RETURN(std::vector<GradientUpdate> gradients, TakeGradients(module, prefix));
  if (gradients.empty()) return absl::OkStatus();
  return ctx.PushGradients(gradients);
}

}  // namespace asyncps::torch_bridge
