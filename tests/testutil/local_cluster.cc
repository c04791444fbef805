#include "tests/testutil/local_cluster.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

#ifndef ASYNCPS_BIN_DIR
#error "ASYNCPS_BIN_DIR must name the directory holding the built binaries"
#endif

namespace asyncps::testutil {

std::string LocalCluster::BinaryPath(const std::string& name) { return absl::StrCat(ASYNCPS_BIN_DIR, "/", name); }

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(Options options) {
  std::unique_ptr<LocalCluster> cluster(new LocalCluster(std::move(options)));
  std::map<TaskType, std::vector<std::string>> jobs;
  const int num_ps = cluster->options_.num_ps, num_workers = cluster->options_.num_workers;
  ASSIGN_OR_RETURN(const std::vector<int> ports, PickUnusedPorts(1 + num_ps + num_workers));
  auto address = [&ports](int i) { return absl::StrCat("127.0.0.1:", ports[i]); };
  jobs[TaskType::kChief].push_back(address(0));
  for (int i = 0; i < num_ps; ++i) jobs[TaskType::kPs].push_back(address(1 + i));
  for (int i = 0; i < num_workers; ++i) jobs[TaskType::kWorker].push_back(address(1 + num_ps + i));
  ASSIGN_OR_RETURN(cluster->chief_spec_, ClusterSpec::Create(jobs, TaskType::kChief, 0));
  cluster->ps_.resize(cluster->options_.num_ps);
  cluster->workers_.resize(cluster->options_.num_workers);
  for (int i = 0; i < cluster->options_.num_ps; ++i) RETURN_IF_ERROR(cluster->RestartPs(i));
  for (int i = 0; i < cluster->options_.num_workers; ++i) RETURN_IF_ERROR(cluster->RestartWorker(i));
  return cluster;
}

LocalCluster::~LocalCluster() {
  // Subprocess's destructor SIGKILLs and reaps its own pid.
  workers_.clear();
  ps_.clear();
}

absl::StatusOr<std::unique_ptr<Subprocess>> LocalCluster::Launch(TaskType type, int index) {
  Subprocess::Options o;
  o.argv = {BinaryPath(type == TaskType::kPs ? "asyncps_ps" : options_.worker_binary)};
  o.env = {{"TF_CONFIG", chief_spec_.ToTfConfig(type, index)},
           {"ASYNCPS_CLUSTER_TOKEN", options_.token},
           {"ASYNCPS_METRICS_PORT", "-1"}};
  for (const auto& [key, value] : options_.extra_env) o.env[key] = value;
  ASSIGN_OR_RETURN(auto process, Subprocess::Start(std::move(o)));
  const std::string ready = type == TaskType::kPs ? absl::StrCat("parameter server ", index, " ready")
                                                  : absl::StrCat("worker ", index, " ready");
  auto line = process->WaitForLine(ready, options_.start_timeout);
  if (!line.ok()) {
    return absl::Status(line.status().code(), absl::StrCat(TaskTypeName(type), " ", index, " did not start: ",
                                                           line.status().message(), "\n", process->output()));
  }
  return process;
}

ChiefProcess::Options LocalCluster::ChiefOptions() const {
  ChiefProcess::Options options;
  options.process.cluster_token = options_.token;
  options.process.metrics_port = -1;
  options.rpc_timeout = absl::Seconds(20);
  return options;
}

absl::StatusOr<std::unique_ptr<TestChief>> LocalCluster::MakeChief(
    std::shared_ptr<const Partitioner> partitioner) const {
  ASSIGN_OR_RETURN(std::unique_ptr<ChiefProcess> process, ChiefProcess::Create(chief_spec_, ChiefOptions()));
  return std::make_unique<TestChief>(std::move(process), std::move(partitioner));
}

Subprocess::Options LocalCluster::ChiefSubprocessOptions(std::vector<std::string> argv) const {
  Subprocess::Options o;
  o.argv = std::move(argv);
  o.env = {{"TF_CONFIG", chief_spec_.ToTfConfig(TaskType::kChief, 0)},
           {"ASYNCPS_CLUSTER_TOKEN", options_.token},
           {"ASYNCPS_METRICS_PORT", "-1"}};
  return o;
}

absl::Status LocalCluster::KillWorker(int i) {
  workers_[i]->Signal(SIGKILL);
  return workers_[i]->Wait(absl::Seconds(30)).status();
}

absl::Status LocalCluster::RestartWorker(int i) {
  workers_[i].reset();
  ASSIGN_OR_RETURN(workers_[i], Launch(TaskType::kWorker, i));
  return absl::OkStatus();
}

absl::Status LocalCluster::KillPs(int i) {
  ps_[i]->Signal(SIGKILL);
  return ps_[i]->Wait(absl::Seconds(30)).status();
}

absl::Status LocalCluster::RestartPs(int i) {
  ps_[i].reset();
  ASSIGN_OR_RETURN(ps_[i], Launch(TaskType::kPs, i));
  return absl::OkStatus();
}

void LocalCluster::SignalWorker(int i, int signal) { workers_[i]->Signal(signal); }

std::string LocalCluster::worker_output(int i) { return workers_[i] != nullptr ? workers_[i]->output() : ""; }
int LocalCluster::ps_pid(int i) const { return ps_[i] != nullptr ? ps_[i]->pid() : -1; }
int LocalCluster::worker_pid(int i) const { return workers_[i] != nullptr ? workers_[i]->pid() : -1; }

bool LocalCluster::worker_running(int i) { return workers_[i] != nullptr && workers_[i]->running(); }

}  // namespace asyncps::testutil
