// train_bench: the main job's speed. The Fashion-MNIST MLP (784-256-128-10, batch 128, Adam
// 1e-3) trained asynchronously on 2 PS + 2 workers (real processes, one LibTorch thread each)
// beside the same LibTorch model, data pipeline and step trained in this process with no
// network and torch::optim::Adam (one LibTorch thread), measured in the same run:
//   * examples/s (training time; evaluation pauses excluded) and their ratio;
//   * wall time until the test accuracy first reaches 0.85 (evaluated every quarter epoch).
// --quick: one epoch each, no target (a smoke run for ctest).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

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
  // --quick trains once, with the overlap (the newer path); a full run trains both ways.
  std::vector<bool> overlaps = quick ? std::vector<bool>{true} : std::vector<bool>{false, true};
  std::vector<fmnist::Result> distributed;
  for (bool overlap : overlaps) {
    // Fresh variables per run: each run's chief creates them; the second run's names exist,
    // so it reuses them (CreateVariable is idempotent) — hence a fresh cluster per run.
    if (!distributed.empty()) {
      cluster->reset();
      cluster = testutil::LocalCluster::Start(o);
      if (!cluster.ok()) {
        std::fprintf(stderr, "train_bench: %s\n", cluster.status().ToString().c_str());
        return 1;
      }
    }
    fmnist::Options run = options;
    run.overlap_pull = overlap;
    auto chief = (*cluster)->MakeChief();
    if (!chief.ok()) {
      std::fprintf(stderr, "train_bench: %s\n", chief.status().ToString().c_str());
      return 1;
    }
    const Program program = fmnist::MakeProgram();
    ClusterCoordinator coordinator((*chief)->strategy(), program);
    absl::StatusOr<fmnist::Result> r = fmnist::Train((*chief)->strategy(), coordinator, run);
    if (!r.ok()) {
      std::fprintf(stderr, "train_bench: distributed: %s\n", r.status().ToString().c_str());
      return 1;
    }
    distributed.push_back(*std::move(r));
  }
  cluster->reset();  // the reference gets the machine to itself
  fmnist::SetTorchThreads(1);
  absl::StatusOr<fmnist::Result> local = fmnist::TrainLocal(options);
  if (!local.ok()) {
    std::fprintf(stderr, "train_bench: local: %s\n", local.status().ToString().c_str());
    return 1;
  }

  std::printf("train_bench: Fashion-MNIST MLP 784-256-128-10, batch %d, Adam 1e-3%s\n", options.batch_size,
              quick ? " (--quick: one epoch)" : "");
  Print("reference: one process, no network, 1 thread", *local);
  for (size_t i = 0; i < distributed.size(); ++i) {
    const fmnist::Result& d = distributed[i];
    Print(overlaps[i] ? "2 PS + 2 workers, pull overlapping push" : "2 PS + 2 workers (processes, 1 thread each)", d);
    std::printf("    ratio examples/s (distributed / one process): %.2f  %s (>= 1.0)\n",
                d.examples_per_second / local->examples_per_second,
                d.examples_per_second >= local->examples_per_second ? "AIM MET" : "AIM MISSED");
    const double a = d.SecondsTo(kTarget), b = local->SecondsTo(kTarget);
    if (a > 0 && b > 0) std::printf("    ratio time to %.2f (one process / distributed): %.2f\n", kTarget, b / a);
    // Worker time: 2 workers for the whole training time.
    const double worker_seconds = 2 * d.train_seconds;
    const double other = worker_seconds - d.compute_seconds - d.pull_seconds - d.push_seconds;
    std::printf("    worker time: compute %.0f%%  pull %.0f%%  push %.0f%%  input, dispatch and waiting %.0f%%"
                "  (per step: compute %.2f ms, pull %.2f ms, push %.2f ms)\n",
                100 * d.compute_seconds / worker_seconds, 100 * d.pull_seconds / worker_seconds,
                100 * d.push_seconds / worker_seconds, 100 * other / worker_seconds,
                1e3 * d.compute_seconds / std::max<int64_t>(1, d.steps), 1e3 * d.pull_seconds / std::max<int64_t>(1, d.steps),
                1e3 * d.push_seconds / std::max<int64_t>(1, d.steps));
  }
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  bool quick = false;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick)) return 2;
  return asyncps::Run(quick);
}
