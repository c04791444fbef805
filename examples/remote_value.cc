// TensorFlow's RemoteValue example (tf.distribute.experimental.coordinator.RemoteValue),
// across real processes:
//
//   v1 = 0.0, v2 = 1.0 created under the strategy (on the parameter servers);
//   worker_fn: v1 += 0.1; v2 -= 0.2; return v1 / v2
//   the first fetched result is 0.125; after 10 more schedules and a join, v1 = 1.1, v2 = -1.2.
//
// Run it on a local cluster:  build/bin/asyncps_launch --ps 2 --workers 2 -- build/bin/remote_value
// Every process runs this same binary; TF_CONFIG says which role it plays.
#include <cmath>
#include <cstdio>

#include "asyncps/chief.h"
#include "asyncps/cluster_spec.h"
#include "asyncps/coordinator.h"
#include "asyncps/process.h"
#include "asyncps/serve.h"
#include "asyncps/status.h"
#include "asyncps/step_context.h"
#include "asyncps/strategy.h"

namespace {

asyncps::Program MakeProgram() {
  asyncps::Program program;
  program.AddFunction("worker_fn", [](asyncps::StepContext& ctx) -> absl::StatusOr<asyncps::Values> {
    // Both updates travel in one request per PS.
    RETURN_IF_ERROR(ctx.Update({{"v1", asyncps::UpdateKind::kAdd, asyncps::Tensor::Scalar(0.1f), {}},
                                {"v2", asyncps::UpdateKind::kSub, asyncps::Tensor::Scalar(0.2f), {}}}));
    ASSIGN_OR_RETURN(std::vector<asyncps::Tensor> v, ctx.ReadMany({"v1", "v2"}));
    return asyncps::Values{asyncps::Tensor::Scalar(v[0].data<float>()[0] / v[1].data<float>()[0])};
  });
  return program;
}

absl::Status RunChief(asyncps::ChiefProcess& chief, const asyncps::Program& program) {
  asyncps::ParameterServerStrategy strategy(chief);
  ASSIGN_OR_RETURN(auto v1, strategy.CreateVariable("v1", asyncps::init::Scalar(0.0f)));
  ASSIGN_OR_RETURN(auto v2, strategy.CreateVariable("v2", asyncps::init::Scalar(1.0f)));
  std::printf("v1 on ps %d, v2 on ps %d\n", v1.shards()[0].ps, v2.shards()[0].ps);

  asyncps::ClusterCoordinator coordinator(strategy, program);
  ASSIGN_OR_RETURN(asyncps::RemoteValue result, coordinator.Schedule("worker_fn"));
  ASSIGN_OR_RETURN(asyncps::Values first, result.Fetch());
  std::printf("first result: %.6f\n", first[0].data<float>()[0]);

  for (int i = 0; i < 10; ++i) RETURN_IF_ERROR(coordinator.Schedule("worker_fn").status());
  RETURN_IF_ERROR(coordinator.Join());

  ASSIGN_OR_RETURN(asyncps::Tensor a, v1.Read());
  ASSIGN_OR_RETURN(asyncps::Tensor b, v2.Read());
  const float fa = a.data<float>()[0], fb = b.data<float>()[0];
  std::printf("after 11 steps: v1 = %.6f, v2 = %.6f\n", fa, fb);
  if (std::fabs(first[0].data<float>()[0] - 0.125f) > 1e-5f || std::fabs(fa - 1.1f) > 1e-5f ||
      std::fabs(fb + 1.2f) > 1e-5f) {
    return absl::InternalError("results differ from TensorFlow's documented values");
  }
  std::printf("OK: matches TensorFlow's documented results (0.125, 1.1, -1.2)\n");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "remote_value: %s\n", cluster.status().ToString().c_str());
    return asyncps::kExitUsage;
  }
  // Settings every role takes (token, /metrics port, log level), from flags and environment.
  const asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  asyncps::Program program = MakeProgram();
  if (!cluster->is_chief()) return asyncps::Serve(*cluster, program, process);

  // The chief's wiring: the process (I/O loop, PS connections, /metrics and the status page)
  // that the strategy and coordinator run on.
  asyncps::InitLogging("chief", cluster->task_index(), process.log_level);
  absl::StatusOr<std::unique_ptr<asyncps::ChiefProcess>> chief =
      asyncps::ChiefProcess::Create(*cluster, {.process = process});
  absl::Status status = chief.ok() ? RunChief(**chief, program) : chief.status();
  if (!status.ok()) {
    std::fprintf(stderr, "remote_value failed: %s\n", status.ToString().c_str());
    return asyncps::ExitCodeForStatus(status);
  }
  return 0;
}
