// The worker program of embedding_exactly_once_test: function "count_keys" (args: i64 [k] keys,
// i64 scalar milliseconds) pushes a gradient of -1 to element 0 of each key's row of table
// "counts" (SGD with learning rate 1 on zero-initialised rows: each applied push adds exactly 1),
// then works for the given time, so a SIGKILL usually lands after the push reached the PS and
// before the closure answered.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/status_macros.h"
#include "worker/serve.h"
#include "worker/step_context.h"

namespace {

constexpr int64_t kDim = 2;

asyncps::Program MakeProgram() {
  asyncps::Program program;
  program.AddFunction("count_keys", [](asyncps::StepContext& ctx) -> absl::StatusOr<asyncps::Values> {
    ASSIGN_OR_RETURN(asyncps::Tensor keys, ctx.arg(0));
    ASSIGN_OR_RETURN(asyncps::Tensor ms, ctx.arg(1));
    asyncps::Tensor gradients(asyncps::DType::kF32, {keys.num_elements(), kDim});
    for (int64_t i = 0; i < keys.num_elements(); ++i) gradients.data<float>()[i * kDim] = -1.0f;
    RETURN_IF_ERROR(ctx.PushEmbeddingGradients("counts", keys, gradients));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the closure's work, not a wait
    }
    return asyncps::Values{};
  });
  return program;
}

}  // namespace

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "embedding_counter_program: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  return asyncps::Serve(*cluster, MakeProgram(), asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
}
