#include "tests/integration/embedding_counter.h"

#include <chrono>
#include <thread>

#include "core/status_macros.h"
#include "worker/step_context.h"

namespace asyncps::testutil {

Program MakeEmbeddingCounterProgram() {
  Program program;
  program.AddFunction("count_keys", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor keys, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    Tensor gradients(DType::kF32, {keys.num_elements(), kCounterDim});
    for (int64_t i = 0; i < keys.num_elements(); ++i)
      gradients.data<float>()[i * kCounterDim] = -1.0f;
    RETURN_IF_ERROR(ctx.PushEmbeddingGradients("counts", keys, gradients));
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the closure's work, not a wait
    }
    return Values{};
  });
  return program;
}

}  // namespace asyncps::testutil
