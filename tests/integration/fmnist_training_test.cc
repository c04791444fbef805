// The main job under failure: Fashion-MNIST (LibTorch MLP on 2 workers, Adam on 2 PS) with a
// worker SIGKILLed and restarted mid-training. Training completes, reaches the accuracy
// target, and the restarted worker rebuilt its per-worker dataset, iterator and model (its log
// says so, and the coordinator's asyncps_coordinator_resources_rebuilt_total counts them).
//
// Two epochs keep it within about a minute on two cores; the threshold is 0.85 (the MLP reaches
// ~0.86-0.87 after two epochs and 0.88+ after the example's default ten; logistic regression's
// published figure is 0.842, so 0.85 still proves the network learned).
#include <signal.h>

#include <memory>
#include <string>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "tests/testing/local_cluster.h"

namespace asyncps {
namespace {

double Counter(ParameterServerStrategy& strategy, const std::string& name) {
  const std::string text = strategy.process_metrics().Serialize();
  const size_t at = text.find(name + "{");
  if (at == std::string::npos) return -1;
  const size_t space = text.find("} ", at);
  return std::stod(text.substr(space + 2));
}

TEST(FashionMnistTrainingTest, WorkerKilledAndRestartedMidTrainingStillReachesTheTarget) {
  testing::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "fashion_mnist";
  auto cluster = testing::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto strategy = (*cluster)->MakeStrategy();
  const Program program = fmnist::MakeProgram();
  ClusterCoordinator::Options co;
  co.heartbeat_interval = absl::Milliseconds(200);
  co.heartbeat_timeout = absl::Seconds(2);
  co.max_recovery_backoff = absl::Milliseconds(200);
  auto coordinator = std::make_unique<ClusterCoordinator>(*strategy, program, co);

  fmnist::Options options;
  options.epochs = 2;
  options.progress = false;
  constexpr int64_t kKillAtStep = 100;     // of 936
  constexpr int64_t kRestartAtStep = 250;  // worker 0 trains alone in between
  absl::Status kill_status = absl::UnknownError("not killed"), restart_status = absl::UnknownError("not restarted");
  bool rejoined = false;
  // On the chief's thread: LocalCluster's processes die with the thread that started them.
  options.on_step = [&](int64_t step) {
    if (step == kKillAtStep) kill_status = (*cluster)->KillWorker(1);
    if (step != kRestartAtStep) return;
    restart_status = (*cluster)->RestartWorker(1);
    // Hold the chief until the new worker is admitted (its resources rebuilt), so the rest of
    // training runs on both workers (deadline-bounded).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (coordinator->workers_up() < 2 && absl::Now() < deadline) {
      Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
    }
    rejoined = coordinator->workers_up() == 2;
  };
  auto result = fmnist::Train(*strategy, *coordinator, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(kill_status.ok()) << kill_status;
  ASSERT_TRUE(restart_status.ok()) << restart_status;
  EXPECT_TRUE(rejoined);

  EXPECT_EQ(result->steps, 2 * (60'000 / 128));
  EXPECT_GE(result->test_accuracy, 0.85);
  EXPECT_GE(Counter(*strategy, "asyncps_coordinator_worker_failures_total"), 1);
  // The dataset, the iterator and the model, rebuilt on the new worker process.
  EXPECT_GE(Counter(*strategy, "asyncps_coordinator_resources_rebuilt_total"), 3);
  const std::string log = (*cluster)->worker_output(1);
  EXPECT_NE(log.find("per-worker dataset 'fmnist_train' built on worker 1"), std::string::npos) << log;
  EXPECT_NE(log.find("per-worker iterator over dataset 'fmnist_train' built on worker 1"), std::string::npos) << log;
  coordinator.reset();
}

}  // namespace
}  // namespace asyncps
