// The main job with replicated shards (ps_replicas=2, issue 19): Fashion-MNIST (LibTorch MLP on
// 2 workers, Adam on 2 PS, each PS the other's backup) with PS 0 SIGKILLed mid-training and
// restarted empty. Its groups fail over to PS 1, training goes on without a checkpoint restore
// (there is no checkpoint and no automatic PS recovery: a lost update or a failed step would
// fail the run), PS 0 is rebuilt by state transfer, and training reaches the main job's
// target, 0.88, in twelve epochs like the worker-kill test.
#include <memory>
#include <string>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/sync.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

bool FullyReplicated(const ps::ShardMap& map) {
  for (const ps::GroupEntry& g : map.groups) {
    if (g.primary < 0 || g.backups.size() != 1 || !g.rebuilding.empty()) return false;
  }
  return !map.groups.empty();
}

TEST(FashionMnistReplicationTest, PsKilledMidTrainingFailsOverAndReachesTarget) {
  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "fashion_mnist";
  o.extra_env = {{"ASYNCPS_PS_REPLICAS", "2"}};
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ChiefProcess::Options chief_options = (*cluster)->ChiefOptions();
  chief_options.process.ps_replicas = 2;
  auto process = ChiefProcess::Create((*cluster)->chief_spec(), chief_options);
  ASSERT_TRUE(process.ok()) << process.status();
  testutil::TestChief chief(std::move(*process), nullptr);
  PsMonitor& monitor = *chief.process().ps_monitor();
  const Program program = fmnist::MakeProgram();
  auto coordinator =
      std::make_unique<ClusterCoordinator>(chief.strategy(), program, testutil::FastFailureDetection());
  fmnist::Options options;
  options.epochs = 12;
  options.progress = false;
  constexpr int64_t kKillAtStep = 300;  // of 5616
  absl::Status kill_status = absl::UnknownError("not killed"), restart_status = absl::UnknownError("not restarted");
  bool rebuilt = false;
  // On the chief's thread: LocalCluster's processes die with the thread that started them.
  options.on_step = [&](int64_t step) {
    if (step != kKillAtStep) return;
    const int64_t lost = monitor.stats().ps_lost;
    kill_status = (*cluster)->KillPs(0);
    // Until the chief has failed PS 0's group over (training goes on meanwhile: closures ride
    // out the failover), then restart it empty and wait until it is rebuilt (deadline-bounded).
    const absl::Time deadline = absl::Now() + absl::Seconds(90);
    while (monitor.stats().ps_lost == lost && absl::Now() < deadline) {
      Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
    }
    restart_status = (*cluster)->RestartPs(0);
    while (!FullyReplicated(monitor.map()) && absl::Now() < deadline) {
      Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
    }
    rebuilt = FullyReplicated(monitor.map());
  };
  auto result = fmnist::Train(chief.strategy(), *coordinator, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(kill_status.ok()) << kill_status;
  ASSERT_TRUE(restart_status.ok()) << restart_status;
  EXPECT_TRUE(rebuilt) << monitor.map().DebugString();
  EXPECT_EQ(result->steps, options.epochs * (60'000 / 128));
  EXPECT_GE(result->test_accuracy, 0.88);
  EXPECT_GE(monitor.stats().failovers, 1);
  EXPECT_EQ(coordinator->ps_recovery_stats().recoveries, 0);
  coordinator.reset();
}

}  // namespace
}  // namespace asyncps
