#ifndef ASYNCPS_TORCH_MODULE_VARIABLES_H_
#define ASYNCPS_TORCH_MODULE_VARIABLES_H_

// A torch::nn::Module's parameters as parameter-server variables.
//
// Every named parameter ("fc1.weight", "conv.bias", ... as module.named_parameters() names
// them) becomes the variable `prefix + name`. The chief creates the variables from a module;
// a worker pulls their values into its own copy of the module before a step and pushes the
// gradients autograd left in it after backward(). Each pull or push is one request per PS, all
// PS in parallel, and moves tensor bytes without copying them on this side (the module's
// parameters are pointed at the received buffers; gradients are sent from autograd's buffers).
//
// LibTorch types are forward-declared: this header does not pull in <torch/torch.h>.
// LibTorch exceptions (c10::Error) are caught here and come back as a Status.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/optimizer_config.h"
#include "core/tensor.h"
#include "worker/ps_client.h"
#include "worker/ps_future.h"
#include "worker/step_context.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace asyncps {
class ParameterServerStrategy;
}  // namespace asyncps

namespace asyncps::torch_bridge {

// Chief: creates one variable per parameter of `module`, with its shape, dtype and current
// values (the module's own initialisation), `optimizer` applying pushed gradients on its PS.
// Placement and partitioning are the strategy's (round-robin, or row-split by its partitioner).
// Idempotent like ParameterServerStrategy::CreateVariable.
absl::Status CreateVariables(ParameterServerStrategy& strategy, ::torch::nn::Module& module,
                             const OptimizerConfig& optimizer, const std::string& prefix = "");

// Chief: reads every variable into `module`'s parameters (e.g. to evaluate the model).
absl::Status ReadVariables(ParameterServerStrategy& strategy, ::torch::nn::Module& module,
                           const std::string& prefix = "");

// Worker, inside a step function: sets `module`'s parameters to the variables' current values,
// one read request per PS. The versions read are remembered by `ctx` (StepContext::versions),
// and PushGradients below sends them with the gradients. Afterwards each parameter equals its variable bit for bit; its
// storage is the received buffer (no copy). FailedPrecondition when a variable's dtype or shape
// does not match the parameter (the module is left unchanged then).
absl::Status Pull(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix = "");

// Worker, after loss.backward(): sends every parameter's gradient to its variable's optimizer,
// one request per PS, then clears the gradients (so the next backward() starts from zero).
// Parameters without a gradient are skipped. The gradients are sent from autograd's buffers.
absl::Status PushGradients(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix = "");

// Worker: Pull in two halves, so the read can be in flight while the step does something
// else (e.g. pushes the previous gradients). PullAsync starts reading the variables of
// `module`; FinishPull waits for that read and sets the parameters as Pull does. The module
// must be the same (same parameters) for both.
PsFuture<std::vector<Tensor>> PullAsync(StepContext& ctx, ::torch::nn::Module& module,
                                        const std::string& prefix = "");
absl::Status FinishPull(PsFuture<std::vector<Tensor>> pull, ::torch::nn::Module& module,
                        const std::string& prefix = "");

// Worker: PullAsync/FinishPull for a read one step starts and another step uses (e.g. the next
// step's parameters pulled behind this step's push): FinishPull also notes the versions read
// in `ctx`, the step that computes with them, so that its pushes carry them (staleness, see
// docs/staleness.md). With plain PullAsync/FinishPull that step's pushes name no version.
PsFuture<VersionedValues> PullVersionedAsync(StepContext& ctx, ::torch::nn::Module& module,
                                             const std::string& prefix = "");
absl::Status FinishPull(StepContext& ctx, PsFuture<VersionedValues> pull, ::torch::nn::Module& module,
                        const std::string& prefix = "");

// Worker: the gradients autograd left in `module`'s parameters, ready for
// StepContext::PushGradients(Async), and clears them from the module (the returned tensors hold
// autograd's buffers: no copy), so a push can be sent after the module is handed to another
// step. Parameters without a gradient are skipped.
absl::StatusOr<std::vector<GradientUpdate>> TakeGradients(::torch::nn::Module& module, const std::string& prefix = "");

// Worker: PushGradients without waiting: sends the gradients and clears them at once (the
// requests keep autograd's buffers alive); the future says whether every PS applied them.
PsFuture<void> PushGradientsAsync(StepContext& ctx, ::torch::nn::Module& module, const std::string& prefix = "");

// Worker: PushGradientsAsync and PullVersionedAsync(ctx, module) in one request per PS
// (StepContext::PushGradientsAndReadAsync): `pushed` says whether every PS applied the
// gradients; `values`, for FinishPull(ctx, ...), holds the parameters as each PS held them once
// it applied this push (so the next step computes from values that include it).
StepContext::PushAndRead PushGradientsAndPullAsync(StepContext& ctx, ::torch::nn::Module& module,
                                                   const std::string& prefix = "");

}  // namespace asyncps::torch_bridge

#endif  // ASYNCPS_TORCH_MODULE_VARIABLES_H_
