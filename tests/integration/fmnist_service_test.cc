// The main job fed by the tf.data service: Fashion-MNIST (LibTorch MLP on 2 workers, Adam on 2
// PS) whose input pipeline, with the random crop/flip augmentation, runs on 2 data workers (a
// dispatcher and the data workers are fashion_mnist processes too, like asyncps_launch
// --data_workers 2 starts them). A data worker is SIGKILLed and restarted mid-training: its
// splits are read from the other one at the same positions. Training reaches the main job's
// accuracy target (0.88), stopping at the first evaluation that does (kept short for CI), and
// the trainers' CPU time per example is printed (the figure the README compares with
// --data_service off).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/subprocess.h"
#include "examples/fmnist_training.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;

constexpr int kDataWorkers = 2;

// utime + stime of a live process, in seconds; -1 when unreadable.
double CpuSeconds(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

class FmnistServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_ps = 2;
    o.num_workers = 2;
    o.worker_binary = "fashion_mnist";
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto ports = PickUnusedPorts(1 + kDataWorkers);
    ASSERT_TRUE(ports.ok()) << ports.status();
    std::map<TaskType, std::vector<std::string>> jobs = {
        {TaskType::kChief, {cluster_->chief_spec().chief()}},
        {TaskType::kPs, cluster_->chief_spec().ps()},
        {TaskType::kWorker, cluster_->chief_spec().workers()},
        {TaskType::kDispatcher, {absl::StrCat("127.0.0.1:", (*ports)[0])}}};
    for (int i = 0; i < kDataWorkers; ++i) {
      jobs[TaskType::kDataWorker].push_back(absl::StrCat("127.0.0.1:", (*ports)[1 + i]));
    }
    auto spec = ClusterSpec::Create(jobs, TaskType::kChief, 0);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    auto dispatcher = Launch(TaskType::kDispatcher, 0, "ready on");
    ASSERT_TRUE(dispatcher.ok()) << dispatcher.status();
    dispatcher_ = std::move(*dispatcher);
    data_workers_.resize(kDataWorkers);
    for (int i = 0; i < kDataWorkers; ++i) ASSERT_TRUE(RestartDataWorker(i).ok());
  }

  void TearDown() override {
    data_workers_.clear();
    dispatcher_.reset();
    cluster_.reset();
  }

  absl::StatusOr<std::unique_ptr<Subprocess>> Launch(TaskType type, int index,
                                                     const std::string& ready) {
    Subprocess::Options o;
    o.argv = {LocalCluster::BinaryPath("fashion_mnist")};
    o.env = {{"TF_CONFIG", spec_.ToTfConfig(type, index)},
             {"ASYNCPS_CLUSTER_TOKEN", cluster_->token()},
             {"ASYNCPS_METRICS_PORT", "-1"}};
    auto process = Subprocess::Start(std::move(o));
    if (!process.ok()) return process.status();
    auto line = (*process)->WaitForLine(ready, absl::Seconds(60));
    if (!line.ok()) return absl::Status(line.status().code(), (*process)->output());
    return process;
  }

  absl::Status RestartDataWorker(int i) {
    data_workers_[i].reset();  // SIGKILL
    auto p = Launch(TaskType::kDataWorker, i, "registered with dispatcher");
    if (!p.ok()) return p.status();
    data_workers_[i] = std::move(*p);
    return absl::OkStatus();
  }

  std::unique_ptr<LocalCluster> cluster_;
  ClusterSpec spec_;
  std::unique_ptr<Subprocess> dispatcher_;
  std::vector<std::unique_ptr<Subprocess>> data_workers_;
};

TEST_F(FmnistServiceTest, AugmentedOnDataWorkersReachesTarget) {
  auto chief = cluster_->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  const Program program = fmnist::MakeProgram(cluster_->token());
  auto coordinator =
      std::make_unique<ClusterCoordinator>(strategy, program, testutil::FastFailureDetection());

  fmnist::Options options;
  options.epochs = 20;  // an upper bound: the run stops at the target (13 epochs seen)
  options.eval_every_epochs = 1;
  options.stop_at_accuracy = 0.88;
  options.progress = false;
  options.augment = true;
  options.dynamic_sharding = true;
  options.data_service = spec_.dispatcher();
  options.data_service_token = cluster_->token();
  constexpr int64_t kKillAtStep = 200;
  constexpr int64_t kRestartAtStep = 500;
  absl::Status kill_status = absl::UnknownError("not killed"),
               restart_status = absl::UnknownError("not restarted");
  std::vector<double> cpu_before(2);
  for (int w = 0; w < 2; ++w) cpu_before[w] = CpuSeconds(cluster_->worker_pid(w));
  options.on_step = [&](int64_t step) {
    if (step == kKillAtStep) {
      data_workers_[1].reset();  // SIGKILL
      kill_status = absl::OkStatus();
    }
    if (step == kRestartAtStep) restart_status = RestartDataWorker(1);
  };
  auto result = fmnist::Train(strategy, *coordinator, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(kill_status.ok()) << kill_status;
  EXPECT_TRUE(restart_status.ok()) << restart_status;
  EXPECT_GE(result->test_accuracy, 0.88);
  EXPECT_GT(result->steps, kRestartAtStep);

  double trainer_cpu = 0;
  for (int w = 0; w < 2; ++w) {
    const double now = CpuSeconds(cluster_->worker_pid(w));
    ASSERT_GE(now, 0);
    trainer_cpu += now - cpu_before[w];
  }
  std::printf(
      "trained %lld steps (%lld examples) to %.4f through %d data workers; trainer CPU %.1f "
      "us/example\n",
      static_cast<long long>(result->steps), static_cast<long long>(result->examples),
      result->test_accuracy, kDataWorkers,
      1e6 * trainer_cpu / static_cast<double>(result->examples));
  // The workers read the service's dataset, not their own pipeline.
  const std::string log = cluster_->worker_output(0);
  EXPECT_NE(log.find("per-worker dataset 'fmnist_service' built on worker 0"), std::string::npos)
      << log;
  coordinator.reset();
}

}  // namespace
}  // namespace asyncps
