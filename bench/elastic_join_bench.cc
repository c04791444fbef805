// Elastic membership (issue 37): the time from starting a new worker process (what
// `asyncps_launch scale` and `kubectl scale` do) to the chief serving it closures, against the
// time the same process takes to start serving its own RPC port ("worker N ready"), measured on
// the same process in the same run. The difference is what joining costs: the registration
// (membership.Join) and the chief building the worker's per-worker dataset and iterator and
// sending it the variable directory. Then the time from SIGTERM to the worker's exit 0 after
// its drain (membership.Leave), beside the same process start as a scale for the reader.
//
// Usage: elastic_join_bench [--quick] [--json=PATH]
//
// The cluster is real: one parameter server and one starting worker (bin/asyncps_test_program)
// through LocalCluster, this process as an --elastic chief; each round starts worker 1+r at a
// new address, waits until the coordinator has it up and a closure ran on it, then SIGTERMs it.
// Exits 0 unless a round fails; no aim (the issue asks for the figure).

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "coordinator/chief_process.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/logging.h"
#include "core/subprocess.h"
#include "core/sync.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(bool quick, bench::Report& report) {
  testutil::LocalCluster::Options o;
  o.num_ps = 1;
  o.num_workers = 1;
  o.extra_env = {{"ASYNCPS_ELASTIC", "1"}};
  auto cluster = testutil::LocalCluster::Start(o);
  if (!cluster.ok()) {
    std::fprintf(stderr, "cluster: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  ChiefProcess::Options chief_options = (*cluster)->ChiefOptions();
  chief_options.process.elastic = true;
  auto process = ChiefProcess::Create((*cluster)->chief_spec(), chief_options);
  if (!process.ok()) {
    std::fprintf(stderr, "chief: %s\n", process.status().ToString().c_str());
    return 1;
  }
  testutil::TestChief chief(std::move(*process), *FixedShardsPartitioner::Create(1));
  const Program program = testutil::MakeTestProgram();
  ClusterCoordinator coordinator(chief.strategy(), program, testutil::FastFailureDetection());
  // A per-worker dataset and iterator, so that admitting a worker builds something on it.
  auto dataset = coordinator.CreatePerWorkerDataset("ids", {{"n", "1000"}, {"batch", "10"}});
  if (!dataset.ok() || !dataset->MakeIterator().ok()) {
    std::fprintf(stderr, "dataset: %s\n", dataset.status().ToString().c_str());
    return 1;
  }

  const int rounds = quick ? 2 : 7;
  std::vector<double> ready_ms, serving_ms, leave_ms;
  const ClusterSpec& spec = (*cluster)->chief_spec();
  std::vector<std::string> workers = spec.workers();
  for (int r = 0; r < rounds; ++r) {
    const int index = 1 + r;
    auto ports = PickUnusedPorts(1);
    if (!ports.ok()) return 1;
    // The workers so far (those that left keep their addresses) and this one's.
    workers.push_back(absl::StrCat("127.0.0.1:", (*ports)[0]));
    std::map<TaskType, std::vector<std::string>> jobs;
    jobs[TaskType::kChief].push_back(spec.chief());
    jobs[TaskType::kPs] = spec.ps();
    jobs[TaskType::kWorker] = workers;
    auto joiner = ClusterSpec::Create(jobs, TaskType::kWorker, index);
    if (!joiner.ok()) {
      std::fprintf(stderr, "%s\n", joiner.status().ToString().c_str());
      return 1;
    }
    Subprocess::Options p;
    p.argv = {testutil::LocalCluster::BinaryPath("asyncps_test_program")};
    p.env = {{"TF_CONFIG", joiner->ToTfConfig(TaskType::kWorker, index)},
             {"ASYNCPS_CLUSTER_TOKEN", (*cluster)->token()},
             {"ASYNCPS_METRICS_PORT", "-1"},
             {"ASYNCPS_ELASTIC", "1"},
             {"ASYNCPS_LOG_LEVEL", "info"}};
    const absl::Time start = absl::Now();
    auto worker = Subprocess::Start(p);
    if (!worker.ok()) return 1;
    if (!(*worker)->WaitForLine(absl::StrCat("worker ", index, " ready"), kTimeout).ok()) {
      std::fprintf(stderr, "worker %d did not start:\n%s\n", index, (*worker)->output().c_str());
      return 1;
    }
    const absl::Time ready = absl::Now();
    // Serving: admitted, and a closure ran there ("whoami" until worker `index` answers).
    bool served = false;
    while (!served && absl::Now() - start < kTimeout) {
      if (coordinator.workers_up() < 2) {
        Notification().WaitForNotificationWithTimeout(absl::Microseconds(200));  // poll pacing
        continue;
      }
      auto v = coordinator.Schedule("whoami");
      if (!v.ok()) return 1;
      auto value = v->Fetch();
      served = value.ok() && value->at(0).data<int64_t>()[0] == index;
    }
    if (!served) {
      std::fprintf(stderr, "worker %d was never served a closure\n", index);
      return 1;
    }
    const absl::Time serving = absl::Now();
    (*worker)->Signal(SIGTERM);
    auto code = (*worker)->Wait(kTimeout);
    if (!code.ok() || *code != 0) {
      std::fprintf(stderr, "worker %d did not leave cleanly:\n%s\n", index, (*worker)->output().c_str());
      return 1;
    }
    const absl::Time left = absl::Now();
    ready_ms.push_back(absl::ToDoubleMilliseconds(ready - start));
    serving_ms.push_back(absl::ToDoubleMilliseconds(serving - start));
    leave_ms.push_back(absl::ToDoubleMilliseconds(left - serving));
    std::printf("round %d: ready %.1f ms, serving closures %.1f ms after start; SIGTERM to exit 0 (drained) %.1f ms\n",
                r, ready_ms.back(), serving_ms.back(), leave_ms.back());
  }
  const double ready = Median(ready_ms);
  report.Add({.name = "new worker: process start to serving closures (median)",
              .value = Median(serving_ms),
              .unit = "ms",
              .reference = "process start to its RPC port ready",
              .reference_value = ready,
              .note = "the difference is registration + building its dataset and iterator + directory"});
  report.Add({.name = "leaving worker: SIGTERM to exit 0 after its drain (median)",
              .value = Median(leave_ms),
              .unit = "ms",
              .reference = "process start to its RPC port ready",
              .reference_value = ready,
              .note = "idle worker: nothing in flight to wait for"});
  std::printf("median: start -> serving %.1f ms (start -> ready %.1f ms, x%.2f); SIGTERM -> drained exit %.1f ms\n",
              Median(serving_ms), ready, ready > 0 ? Median(serving_ms) / ready : 0, Median(leave_ms));
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  asyncps::InitLogging("bench", 0, "warn");
  asyncps::bench::Report report(argc, argv);
  return report.Finish(json, asyncps::Run(quick, report));
}
