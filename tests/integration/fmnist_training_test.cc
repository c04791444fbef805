// The main job under failure: Fashion-MNIST (LibTorch MLP on 2 workers, Adam on 2 PS) with a
// worker SIGKILLed and restarted mid-training. Training completes, reaches the accuracy
// target, and the restarted worker rebuilt its per-worker dataset, iterator and model (its log
// says so, and the coordinator's asyncps_coordinator_resources_rebuilt_total counts them).
//
// The threshold is the main job's target, 0.88 (the published MLP baseline is 0.871). Twelve
// epochs, two more than the example's default, leave margin for the steps worker 1 missed;
// about 30-40 s on two cores.
#include <signal.h>

#include <memory>
#include <string>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

double Counter(ParameterServerStrategy& strategy, const std::string& name) {
  const std::string text = strategy.process().process_metrics().Serialize();
  const size_t at = text.find(name + "{");
  if (at == std::string::npos) return -1;
  const size_t space = text.find("} ", at);
  return std::stod(text.substr(space + 2));
}

TEST(FashionMnistTrainingTest, WorkerKilledAndRestartedMidTrainingStillReachesTheTarget) {
  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "fashion_mnist";
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto chief = (*cluster)->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  const Program program = fmnist::MakeProgram();
  ClusterCoordinator::Options co = testutil::FastFailureDetection();
  auto coordinator = std::make_unique<ClusterCoordinator>(strategy, program, co);

  fmnist::Options options;
  options.epochs = 12;
  options.progress = false;
  constexpr int64_t kKillAtStep = 300;     // of 5616
  constexpr int64_t kRestartAtStep = 700;  // worker 0 trains alone in between
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
  auto result = fmnist::Train(strategy, *coordinator, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(kill_status.ok()) << kill_status;
  ASSERT_TRUE(restart_status.ok()) << restart_status;
  EXPECT_TRUE(rejoined);

  EXPECT_EQ(result->steps, options.epochs * (60'000 / 128));
  EXPECT_GE(result->test_accuracy, 0.88);
  EXPECT_GE(Counter(strategy, "asyncps_coordinator_worker_failures_total"), 1);
  // The dataset, the iterator and the model, rebuilt on the new worker process.
  EXPECT_GE(Counter(strategy, "asyncps_coordinator_resources_rebuilt_total"), 3);
  const std::string log = (*cluster)->worker_output(1);
  EXPECT_NE(log.find("per-worker dataset 'fmnist_train' built on worker 1"), std::string::npos) << log;
  EXPECT_NE(log.find("per-worker iterator over dataset 'fmnist_train' built on worker 1"), std::string::npos) << log;
  coordinator.reset();
}

}  // namespace
}  // namespace asyncps
