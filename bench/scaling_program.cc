#include "bench/scaling_program.h"

#include <algorithm>

#include "core/status_macros.h"
#include "core/tensor.h"
#include "worker/step_context.h"

namespace asyncps::bench {

Program MakeScalingProgram() {
  Program program;
  program.AddFunction("dense_step", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor value, ctx.Read("dense"));
    // The gradient a model would compute: a fresh tensor of the variable's shape.
    Tensor gradient(DType::kF32, value.shape());
    std::fill_n(gradient.data<float>(), gradient.num_elements(), 1e-3f);
    RETURN_IF_ERROR(ctx.PushGradients({{"dense", gradient, std::nullopt}}));
    return Values{Tensor::Scalar<float>(1)};
  });
  program.AddFunction("small_step", [](StepContext& ctx) -> absl::StatusOr<Values> {
    RETURN_IF_ERROR(
        ctx.PushGradients({{"small", Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}}));
    return Values{Tensor::Scalar<float>(1)};
  });
  return program;
}

}  // namespace asyncps::bench
