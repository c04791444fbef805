// The sparse job's acceptance: the fastText model on WordNet supersenses trained on 2 PS + 2
// workers (real wordnet_supersense worker processes; the embedding table on the PS, keyed by
// the hashed n-grams themselves) reaches test accuracy within one point of the same model
// trained in this process with torch::nn::EmbeddingBag over 2^20 hashed rows, after the same
// number of epochs, on the same batches.
#include <fstream>
#include <memory>
#include <string>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/wordnet_supersense/wordnet_model.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

TEST(WordnetTest, TwoPsTwoWorkersWithinOnePointOfOneProcess) {
  if (std::ifstream(std::string(wordnet::kDefaultDir) + "/data.noun").fail()) {
    GTEST_SKIP() << "WordNet 3.0 is not installed at " << wordnet::kDefaultDir
                 << ": install the Debian package wordnet-base (scripts/install_deps.sh does)";
  }
  wordnet::Options options;
  options.epochs = 2;
  options.progress = false;
  wordnet::SetTorchThreads(1);
  auto local = wordnet::TrainLocal(options);
  ASSERT_TRUE(local.ok()) << local.status();

  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "wordnet_supersense";
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief = (*cluster)->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  const Program program = wordnet::MakeProgram();
  ClusterCoordinator coordinator((*chief)->strategy(), program);
  auto distributed = wordnet::Train((*chief)->strategy(), coordinator, options);
  ASSERT_TRUE(distributed.ok()) << distributed.status();

  EXPECT_EQ(distributed->examples, local->examples);
  // A model that learned something (45 classes; the largest, noun.artifact, is ~10%).
  EXPECT_GE(local->test_accuracy, 0.75);
  EXPECT_NEAR(distributed->test_accuracy, local->test_accuracy, 0.01)
      << "one process " << local->test_accuracy << ", 2 PS + 2 workers "
      << distributed->test_accuracy;
  std::printf(
      "wordnet after %d epochs: one process %.4f (%.0f examples/s), 2 PS + 2 workers %.4f (%.0f "
      "examples/s)\n",
      options.epochs, local->test_accuracy, local->examples_per_second, distributed->test_accuracy,
      distributed->examples_per_second);
}

}  // namespace
}  // namespace asyncps
