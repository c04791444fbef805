// train_bench: the main job's speed. The Fashion-MNIST MLP (784-256-128-10, batch 128, Adam
// 1e-3) trained asynchronously on 2 PS + 2 workers (real processes, one LibTorch thread each)
// beside the same LibTorch model, data pipeline and step trained in this process with no
// network and torch::optim::Adam (one LibTorch thread), measured in the same run:
//   * examples/s (training time; evaluation pauses excluded) and their ratio;
//   * wall time until the test accuracy first reaches 0.85 (evaluated every quarter epoch).
// --quick: one epoch each, no target (a smoke run for ctest).
#include <cstdio>
#include <memory>

#include "bench/bench_flags.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/fmnist_training.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

constexpr double kTarget = 0.85;

void Print(const char* label, const fmnist::Result& r) {
  const double to_target = r.SecondsTo(kTarget);
  std::printf("  %-44s %8.0f examples/s  %5lld steps  test accuracy %.4f  ", label, r.examples_per_second,
              static_cast<long long>(r.steps), r.test_accuracy);
  if (to_target >= 0) {
    std::printf("%.2f reached after %.1f s\n", kTarget, to_target);
  } else {
    std::printf("%.2f not reached\n", kTarget);
  }
}

int Run(bool quick) {
  fmnist::Options options;
  options.progress = false;
  options.epochs = quick ? 1 : 6;
  options.eval_every_epochs = quick ? 0 : 0.25;
  options.stop_at_accuracy = quick ? 0 : kTarget;

  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "fashion_mnist";
  auto cluster = testutil::LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<fmnist::Result> distributed;
  {
    auto strategy = (*cluster)->MakeStrategy();
    const Program program = fmnist::MakeProgram();
    ClusterCoordinator coordinator(*strategy, program);
    distributed = fmnist::Train(*strategy, coordinator, options);
  }
  cluster->reset();  // the reference gets the machine to itself
  if (!distributed.ok()) {
    std::fprintf(stderr, "train_bench: distributed: %s\n", distributed.status().ToString().c_str());
    return 1;
  }
  fmnist::SetTorchThreads(1);
  absl::StatusOr<fmnist::Result> local = fmnist::TrainLocal(options);
  if (!local.ok()) {
    std::fprintf(stderr, "train_bench: local: %s\n", local.status().ToString().c_str());
    return 1;
  }

  std::printf("train_bench: Fashion-MNIST MLP 784-256-128-10, batch %d, Adam 1e-3%s\n", options.batch_size,
              quick ? " (--quick: one epoch)" : "");
  Print("2 PS + 2 workers (processes, 1 thread each)", *distributed);
  Print("reference: one process, no network, 1 thread", *local);
  std::printf("  ratio examples/s (distributed / one process): %.2f\n",
              distributed->examples_per_second / local->examples_per_second);
  const double a = distributed->SecondsTo(kTarget), b = local->SecondsTo(kTarget);
  if (a > 0 && b > 0) std::printf("  ratio time to %.2f (one process / distributed): %.2f\n", kTarget, b / a);
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  bool quick = false;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick)) return 2;
  return asyncps::Run(quick);
}
