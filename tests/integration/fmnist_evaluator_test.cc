// The side-car evaluator of the main job: real ps, worker and evaluator processes
// (bin/fashion_mnist with TF_CONFIG task type "evaluator"), the test as the chief. The chief
// trains one epoch and saves a checkpoint every 60 steps and at the end, then marks the last
// one final. The evaluator, frozen with SIGSTOP for most of the run, must not hold training up;
// once resumed it reports a test accuracy for every checkpoint, in order, the last equal to
// the chief's own final evaluation, and exits 0.
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/checkpoint_follower.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/subprocess.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "tests/testing/local_cluster.h"

namespace asyncps {
namespace {

TEST(FashionMnistEvaluatorTest, EvaluatesEveryCheckpointWithoutHoldingTrainingUpAndStopsAfterTheFinalOne) {
  testing::LocalCluster::Options o;
  o.num_ps = 1;
  o.num_workers = 1;
  o.worker_binary = "fashion_mnist";
  auto cluster = testing::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/fmnist_evaluator_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  // The evaluator's TF_CONFIG: the training cluster plus an evaluator job.
  const ClusterSpec& chief = (*cluster)->chief_spec();
  auto port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  auto spec = ClusterSpec::Create({{TaskType::kChief, {chief.chief()}},
                                   {TaskType::kPs, chief.ps()},
                                   {TaskType::kWorker, chief.workers()},
                                   {TaskType::kEvaluator, {absl::StrCat("127.0.0.1:", *port)}}},
                                  TaskType::kEvaluator, 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  Subprocess::Options eo;
  eo.argv = {testing::LocalCluster::BinaryPath("fashion_mnist"), "--checkpoint_dir", dir, "--eval_poll_ms=20",
             "--eval_idle_timeout_s=120"};
  eo.env = {{"TF_CONFIG", spec->ToTfConfig(TaskType::kEvaluator, 0)}, {"ASYNCPS_METRICS_PORT", "-1"}};
  auto evaluator = Subprocess::Start(eo);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  ASSERT_TRUE((*evaluator)->WaitForLine("evaluator following", absl::Seconds(60)).ok()) << (*evaluator)->output();

  auto strategy = (*cluster)->MakeStrategy();
  const Program program = fmnist::MakeProgram();
  auto coordinator = std::make_unique<ClusterCoordinator>(*strategy, program);
  CheckpointManager checkpoints(*strategy, dir, /*max_to_keep=*/10);
  ASSERT_TRUE(ClearFinalCheckpointMarker(dir).ok());

  fmnist::Options options;
  options.epochs = 1;
  options.batch_size = 256;  // 234 steps
  options.progress = false;
  constexpr int64_t kEvery = 60;
  constexpr int64_t kFreezeAt = 70;  // after the first checkpoint, which it may be evaluating
  std::vector<int64_t> saved;
  absl::Status save_status;
  options.on_step = [&](int64_t step) {
    if (step == kFreezeAt) (*evaluator)->Signal(SIGSTOP);
    if (step % kEvery != 0 || !save_status.ok()) return;
    absl::StatusOr<std::string> path = checkpoints.Save(step);
    save_status = path.status();
    if (path.ok()) saved.push_back(step);
  };
  auto result = fmnist::Train(*strategy, *coordinator, options);
  // Training finished with the evaluator frozen: nothing waited for it.
  const bool frozen_through_training = (*evaluator)->running();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(save_status.ok()) << save_status;
  ASSERT_TRUE(checkpoints.Save(result->steps).ok());
  saved.push_back(result->steps);
  ASSERT_TRUE(MarkFinalCheckpoint(dir, result->steps).ok());
  EXPECT_TRUE(frozen_through_training);
  (*evaluator)->Signal(SIGCONT);

  auto code = (*evaluator)->Wait(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << (*evaluator)->output();
  const std::string out = (*evaluator)->output();
  EXPECT_EQ(*code, 0) << out;
  ASSERT_EQ(saved, (std::vector<int64_t>{60, 120, 180, 234}));
  size_t at = 0;
  for (int64_t step : saved) {
    const std::string line = absl::StrCat("evaluator: checkpoint step ", step, " test accuracy ");
    const size_t found = out.find(line, at);
    ASSERT_NE(found, std::string::npos) << "no accuracy for checkpoint " << step << " (in order):\n" << out;
    EXPECT_EQ(out.find(line, found + 1), std::string::npos) << "checkpoint " << step << " evaluated twice";
    at = found + line.size();
  }
  // The final checkpoint holds the variables the chief evaluated last.
  EXPECT_NE(out.find(absl::StrFormat("evaluator: checkpoint step %d test accuracy %.4f", result->steps,
                                     result->test_accuracy)),
            std::string::npos)
      << "chief's final accuracy " << result->test_accuracy << "\n" << out;
  EXPECT_NE(out.find("evaluator: done after 4 checkpoints"), std::string::npos) << out;
  EXPECT_GE(result->test_accuracy, 0.75);  // one epoch of the MLP
  coordinator.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace asyncps
