// The side-car evaluator of the main job: real ps, worker and evaluator processes
// (bin/fashion_mnist with TF_CONFIG task type "evaluator"), the test as the chief. The chief
// trains one epoch and saves a checkpoint every 60 steps and at the end, then marks the last
// one final. The evaluator, frozen with SIGSTOP for most of the run, must not hold training up;
// once resumed it reports a test accuracy for every checkpoint, in order, the last equal to
// the chief's own final evaluation (also on its /metrics), and exits 0 once the final marker
// is written.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_follower.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/subprocess.h"
#include "core/test_temp_dir.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/http_get.h"

namespace asyncps {
namespace {

using testutil::HttpGet;

// The value of the first sample of `family` in a Prometheus text exposition; -1 when absent.
double Sample(const std::string& text, const std::string& family) {
  const size_t at = text.find("\n" + family + "{");
  if (at == std::string::npos) return -1;
  const size_t space = text.find("} ", at);
  return std::stod(text.substr(space + 2));
}

TEST(FashionMnistEvaluatorTest, FollowsCheckpointsWithoutBlockingTraining) {
  testutil::LocalCluster::Options o;
  o.num_ps = 1;
  o.num_workers = 1;
  o.worker_binary = "fashion_mnist";
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testutil::TestDir temp("fmnist_evaluator");
  const std::string& dir = temp.path();

  // The evaluator's TF_CONFIG: the training cluster plus an evaluator job.
  const ClusterSpec& training = (*cluster)->chief_spec();
  auto port = PickUnusedPort();
  ASSERT_TRUE(port.ok()) << port.status();
  auto spec = ClusterSpec::Create({{TaskType::kChief, {training.chief()}},
                                   {TaskType::kPs, training.ps()},
                                   {TaskType::kWorker, training.workers()},
                                   {TaskType::kEvaluator, {absl::StrCat("127.0.0.1:", *port)}}},
                                  TaskType::kEvaluator, 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  Subprocess::Options eo;
  eo.argv = {testutil::LocalCluster::BinaryPath("fashion_mnist"), "--checkpoint_dir", dir, "--eval_poll_ms=20",
             "--eval_idle_timeout_s=120"};
  eo.env = {{"TF_CONFIG", spec->ToTfConfig(TaskType::kEvaluator, 0)}, {"ASYNCPS_METRICS_PORT", "0"}};
  auto evaluator = Subprocess::Start(eo);
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  auto following = (*evaluator)->WaitForLine("evaluator following", absl::Seconds(60));
  ASSERT_TRUE(following.ok()) << following.status() << (*evaluator)->output();
  const size_t port_at = following->find("metrics on port ");
  ASSERT_NE(port_at, std::string::npos) << *following;
  const int metrics_port = std::stoi(following->substr(port_at + 16));
  ASSERT_GT(metrics_port, 0) << *following;

  auto chief = (*cluster)->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  const Program program = fmnist::MakeProgram();
  auto coordinator = std::make_unique<ClusterCoordinator>(strategy, program);
  CheckpointManager checkpoints(strategy, dir, /*max_to_keep=*/10);
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
  auto result = fmnist::Train(strategy, *coordinator, options);
  // Training finished with the evaluator frozen: nothing waited for it.
  const bool frozen_through_training = (*evaluator)->running();
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(save_status.ok()) << save_status;
  ASSERT_TRUE(checkpoints.Save(result->steps).ok());
  saved.push_back(result->steps);
  EXPECT_TRUE(frozen_through_training);
  (*evaluator)->Signal(SIGCONT);
  // Caught up but not told the end yet, it waits; its /metrics shows the last evaluation.
  ASSERT_TRUE((*evaluator)->WaitForLine(absl::StrCat("checkpoint step ", result->steps, " test"), absl::Seconds(60)).ok())
      << (*evaluator)->output();
  const std::string scrape = HttpGet(metrics_port, "/metrics");
  EXPECT_EQ(Sample(scrape, "asyncps_evaluator_checkpoint_step"), static_cast<double>(result->steps)) << scrape;
  EXPECT_EQ(Sample(scrape, "asyncps_evaluator_evaluations_total"), 4) << scrape;
  EXPECT_NEAR(Sample(scrape, "asyncps_evaluator_accuracy"), result->test_accuracy, 1e-4) << scrape;
  EXPECT_TRUE((*evaluator)->running());
  ASSERT_TRUE(MarkFinalCheckpoint(dir, result->steps).ok());

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
}

// The README's way: asyncps_launch --evaluator runs the whole job; the chief, given
// --checkpoint_dir, ends with a checkpoint marked final; the launcher waits for the evaluator,
// which reports that checkpoint's accuracy (the chief's own final figure) and exits 0.
TEST(FashionMnistEvaluatorTest, LaunchedJobEndsAfterTheLastEvaluation) {
  testutil::TestDir temp("fmnist_launch_evaluator");
  const std::string dir = temp.path() + "/ckpt";  // made by the chief
  Subprocess::Options o;
  o.argv = {testutil::LocalCluster::BinaryPath("asyncps_launch"), "--ps", "1", "--workers", "1", "--evaluator", "--",
            testutil::LocalCluster::BinaryPath("fashion_mnist"), "--epochs=1", "--batch_size=512",
            absl::StrCat("--checkpoint_dir=", dir), "--eval_poll_ms=50"};
  auto launcher = Subprocess::Start(o);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  auto code = (*launcher)->Wait(absl::Seconds(180));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << (*launcher)->output();
  const std::string out = (*launcher)->output();
  EXPECT_EQ(*code, 0) << out;
  // 60,000 / 512 = 117 steps; the chief's final accuracy, and the evaluator's on ckpt-117.
  const size_t chief_at = out.find("[chief] test accuracy ");
  ASSERT_NE(chief_at, std::string::npos) << out;
  const std::string accuracy = out.substr(chief_at + 22, 6);
  EXPECT_NE(out.find(absl::StrCat("[evaluator] evaluator: checkpoint step 117 test accuracy ", accuracy)),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[launcher] evaluator exited with code 0"), std::string::npos) << out;
  EXPECT_EQ(*ReadFinalCheckpointMarker(dir), 117);
}

}  // namespace
}  // namespace asyncps
