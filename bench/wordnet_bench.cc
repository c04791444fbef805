// wordnet_bench: the sparse job's speed. The fastText model on WordNet supersenses
// (examples/wordnet_supersense) trained on 2 PS + 2 workers (real processes, one LibTorch thread
// each; the embedding table on the PS) beside the same model trained in this process with
// torch::nn::EmbeddingBag over 2^20 hashed rows (one thread), measured in the same run:
// examples/s of training (evaluation excluded), their ratio (aim: >= 0.8x), the test accuracy of
// each, and the machine's load average before and after (`uptime`: the figures mean little on a
// machine shared with other jobs).
// Flags: --epochs N (default 1).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/wordnet_supersense/wordnet_model.h"
#include "tests/testutil/local_cluster.h"

namespace {

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace

int main(int argc, char** argv) {
  asyncps::wordnet::Options options;
  options.epochs = 1;
  options.progress = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--epochs=", 9) == 0) options.epochs = std::atoi(argv[i] + 9);
  }
  if (options.epochs < 1) {
    std::fprintf(stderr, "wordnet_bench [--epochs=N]\n");
    return 2;
  }
  asyncps::wordnet::SetTorchThreads(1);
  std::printf("load average before: %s\n", LoadAverage().c_str());
  auto local = asyncps::wordnet::TrainLocal(options);
  if (!local.ok()) {
    std::fprintf(stderr, "one process: %s\n", local.status().ToString().c_str());
    return 1;
  }
  asyncps::testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "wordnet_supersense";
  auto cluster = asyncps::testutil::LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  auto chief = (*cluster)->MakeChief();
  if (!chief.ok()) {
    std::fprintf(stderr, "chief: %s\n", chief.status().ToString().c_str());
    return 1;
  }
  const asyncps::Program program = asyncps::wordnet::MakeProgram();
  asyncps::ClusterCoordinator coordinator((*chief)->strategy(), program);
  auto distributed = asyncps::wordnet::Train((*chief)->strategy(), coordinator, options);
  if (!distributed.ok()) {
    std::fprintf(stderr, "2 PS + 2 workers: %s\n", distributed.status().ToString().c_str());
    return 1;
  }
  std::printf("wordnet, %d epoch(s), batch %d:\n", options.epochs, options.batch_size);
  std::printf("  one process (EmbeddingBag, 1 thread): %8.0f examples/s  test accuracy %.4f\n",
              local->examples_per_second, local->test_accuracy);
  std::printf("  2 PS + 2 workers (embedding table):   %8.0f examples/s  test accuracy %.4f\n",
              distributed->examples_per_second, distributed->test_accuracy);
  std::printf("  ratio %.2fx (aim >= 0.8x)\n",
              distributed->examples_per_second / local->examples_per_second);
  std::printf("load average after: %s\n", LoadAverage().c_str());
  return 0;
}
