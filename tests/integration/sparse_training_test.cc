// Multi-process training: 2 PS and 3 workers fit a sparse linear model whose optimum is known
// (targets are an exact linear function of the features), with the weights sharded over both
// PS, looked up per step (Gather) and updated by row gradients through the PS optimizer.
#include <cmath>
#include <memory>

#include "coordinator/cluster_coordinator.h"
#include "core/optimizer_config.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

TEST(SparseTrainingTest, ThreeWorkersTwoPsConvergeToKnownOptimum) {
  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 3;
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief =
      (*cluster)->MakeChief(std::shared_ptr<const Partitioner>(FixedShardsPartitioner::Create(4).value()));
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  auto w = strategy.CreateVariable("w", init::Zeros({testutil::kVocab, 1}), opt::SGD(4.0f));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->num_shards(), 4u);

  Program program = testutil::MakeTestProgram();
  ClusterCoordinator coordinator(strategy, program);
  auto data = coordinator.CreatePerWorkerResource("regression_data");
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<RemoteValue> losses;
  for (int step = 0; step < 900; ++step) {
    auto loss = coordinator.Schedule("sparse_regression_step", {*data});
    ASSERT_TRUE(loss.ok()) << loss.status();
    losses.push_back(*loss);
  }
  ASSERT_TRUE(coordinator.Join().ok());

  auto first = losses.front().Fetch();
  auto last = losses.back().Fetch();
  ASSERT_TRUE(first.ok() && last.ok());
  const float first_loss = (*first)[0].data<float>()[0];
  const float last_loss = (*last)[0].data<float>()[0];
  EXPECT_GT(first_loss, 0.1f);
  EXPECT_LT(last_loss, 1e-3f) << "loss went from " << first_loss << " to " << last_loss;

  auto value = w->Read();
  ASSERT_TRUE(value.ok());
  float worst = 0;
  for (int64_t f = 0; f < testutil::kVocab; ++f) {
    worst = std::max(worst, std::fabs(value->data<float>()[f] - testutil::TrueWeight(f)));
  }
  EXPECT_LT(worst, 0.02f) << "weights did not reach the known optimum";
}

}  // namespace
}  // namespace asyncps
