// TensorFlow's parameter-server fault-tolerance scenarios (fault_tolerance_test_base.py),
// with real ps and worker processes killed by SIGKILL and restarted at the same address.
// The test process is the chief. Cluster sizes as in TF: (2 workers, 2 PS) and (1, 1).
#include <signal.h>

#include <memory>
#include <set>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/functional/function_ref.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/status_board.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_until.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;

struct ClusterSize {
  int workers;
  int ps;
};

// Short, so ctest's name (which carries the parameter's printout) fits one line.
void PrintTo(const ClusterSize& size, std::ostream* os) { *os << size.workers << "w" << size.ps << "ps"; }

std::string SizeName(const ::testing::TestParamInfo<ClusterSize>& info) {
  return std::to_string(info.param.workers) + "workers_" + std::to_string(info.param.ps) + "ps";
}

class FaultToleranceTest : public ::testing::TestWithParam<ClusterSize> {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = GetParam().workers;
    o.num_ps = GetParam().ps;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
    auto iterations = chief_->strategy().CreateVariable("iterations", init::Zeros({}, DType::kI64));
    ASSERT_TRUE(iterations.ok()) << iterations.status();
    iterations_ = std::make_unique<ShardedVariable>(*iterations);
    StartCoordinator(1);
  }

  void StartCoordinator(int closures_per_worker) {
    coordinator_.reset();
    ClusterCoordinator::Options co = testutil::FastFailureDetection();
    co.closures_per_worker = closures_per_worker;
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, co);
  }

  void TearDown() override {
    coordinator_.reset();
    iterations_.reset();
    chief_.reset();
    cluster_.reset();
  }

  int64_t Iterations() {
    auto t = iterations_->Read();
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->data<int64_t>()[0] : -1;
  }

  // Blocks until the iterations counter reaches `n` (deadline-bounded; a failing test, not a hang).
  void WaitForIterations(int64_t n) {
    testutil::WaitUntil([&] { return Iterations() >= n; }, absl::Seconds(60), absl::Milliseconds(5));
    ASSERT_GE(Iterations(), n) << "training made no progress";
  }

  void Schedule(const std::string& fn, int n, std::vector<ClosureArg> args = {}) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(coordinator_->Schedule(fn, args).ok());
  }

  double CoordinatorCounter(const std::string& name) {
    const std::string text = chief_->process().process_metrics().Serialize();
    const size_t at = text.find(name + "{");
    if (at == std::string::npos) return -1;
    const size_t space = text.find("} ", at);
    return std::stod(text.substr(space + 2));
  }

  static Tensor Millis(int64_t ms) { return Tensor::Scalar<int64_t>(ms); }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> iterations_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

// TF testWorkerPreemptionBetweenFunctions.
TEST_P(FaultToleranceTest, WorkerKilledBetweenFunctionsAndRestarted) {
  Schedule("increment", 2);
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ(Iterations(), 2);
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  Schedule("increment", 2);
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ(Iterations(), 4);
}

// What a person watching sees of it: on the status page a worker_down and a worker_rebuilt
// event, the worker up again under a new incarnation; in /metrics one recovery counted.
TEST_P(FaultToleranceTest, WorkerRestartShowsOnStatusBoardAndInMetrics) {
  auto worker0 = [&] {
    const auto doc = nlohmann::json::parse(chief_->process().status_board().Json());
    for (const auto& m : doc["members"]) {
      if (m["role"] == "worker" && m["index"] == 0) return m;
    }
    return nlohmann::json();
  };
  auto has_event = [&](const std::string& kind) {
    const auto doc = nlohmann::json::parse(chief_->process().status_board().Json());
    for (const auto& e : doc["events"]) {
      if (e["kind"] == kind) return true;
    }
    return false;
  };
  auto wait_until = [](absl::FunctionRef<bool()> done) { return testutil::WaitUntil(done, absl::Seconds(60)); };
  Schedule("increment", 2);
  ASSERT_TRUE(coordinator_->Join().ok());
  ASSERT_TRUE(wait_until([&] { return worker0()["state"] == "up"; })) << chief_->process().status_board().Json();
  const std::string first = worker0()["incarnation"];
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(CoordinatorCounter("asyncps_coordinator_worker_recoveries_total"), 0);
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  Schedule("increment", 2);
  ASSERT_TRUE(coordinator_->Join().ok());
  // The board records the rebuild before the worker's state turns up and the recovery counter
  // moves: wait for all three.
  ASSERT_TRUE(wait_until([&] {
    return has_event("worker_rebuilt") && worker0()["state"] == "up" &&
           CoordinatorCounter("asyncps_coordinator_worker_recoveries_total") >= 1;
  })) << chief_->process().status_board().Json();
  EXPECT_TRUE(has_event("worker_down"));
  EXPECT_EQ(worker0()["state"], "up");
  EXPECT_NE(worker0()["incarnation"], first);
  EXPECT_EQ(CoordinatorCounter("asyncps_coordinator_worker_recoveries_total"), 1);
  EXPECT_GE(CoordinatorCounter("asyncps_coordinator_worker_failures_total"), 1);
}

// TF testWorkerPreemptionMidstFunction.
TEST_P(FaultToleranceTest, WorkerKilledMidFunctionAndRestarted) {
  constexpr int kClosures = 12;
  std::vector<RemoteValue> results;
  for (int i = 0; i < kClosures; ++i) {
    auto r = coordinator_->Schedule("slow_increment", {Millis(150)});
    ASSERT_TRUE(r.ok());
    results.push_back(*r);
  }
  WaitForIterations(1);  // worker 0 has a closure in flight now: the queue is still long
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  for (auto& r : results) EXPECT_TRUE(r.Fetch().ok());
  EXPECT_GE(Iterations(), kClosures);
  EXPECT_GE(CoordinatorCounter("asyncps_coordinator_closures_retried_total"), 1)
      << "no closure was interrupted by the kill";
  EXPECT_GE(CoordinatorCounter("asyncps_coordinator_worker_failures_total"), 1);
}

// TF testWorkerContinuousFailure: the same worker killed and restarted twice in a row.
TEST_P(FaultToleranceTest, WorkerKilledAndRestartedTwiceInARow) {
  Schedule("slow_increment", 10, {Millis(100)});
  for (int round = 0; round < 2; ++round) {
    WaitForIterations(round + 1);
    ASSERT_TRUE(cluster_->KillWorker(0).ok());
    ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  }
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_GE(Iterations(), 10);
}

// TF testTwoWorkersPreempted.
TEST_P(FaultToleranceTest, AllWorkersKilledThenRestarted) {
  Schedule("slow_increment", 8, {Millis(100)});
  WaitForIterations(1);
  for (int w = 0; w < GetParam().workers; ++w) ASSERT_TRUE(cluster_->KillWorker(w).ok());
  EXPECT_FALSE(coordinator_->Done().value_or(true));  // nothing can run now
  for (int w = 0; w < GetParam().workers; ++w) ASSERT_TRUE(cluster_->RestartWorker(w).ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_GE(Iterations(), 8);
  EXPECT_TRUE(coordinator_->Done().value_or(false));
}

// A per-worker resource is rebuilt on a restarted worker before its next closure, and closures
// taking it as PerWorkerValues get the new instance.
TEST_P(FaultToleranceTest, PerWorkerResourceRebuiltOnRestartedWorker) {
  auto counter = coordinator_->CreatePerWorkerResource("counter");
  ASSERT_TRUE(counter.ok()) << counter.status();
  // Only worker 0 runs from here on: the other workers are stopped.
  for (int w = 1; w < GetParam().workers; ++w) ASSERT_TRUE(cluster_->KillWorker(w).ok());
  auto before = coordinator_->Schedule("use_counter", {*counter});
  ASSERT_TRUE(before.ok());
  auto old_values = before->Fetch();
  ASSERT_TRUE(old_values.ok()) << old_values.status();
  const int64_t* old_v = (*old_values)[0].data<int64_t>();
  EXPECT_EQ(old_v[0], 0);  // ran on worker 0

  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  std::vector<RemoteValue> after;
  for (int i = 0; i < 3; ++i) {
    auto r = coordinator_->Schedule("use_counter", {*counter});
    ASSERT_TRUE(r.ok());
    after.push_back(*r);
  }
  ASSERT_TRUE(coordinator_->Join().ok());
  std::set<int64_t> counts;
  for (int i = 0; i < 3; ++i) {
    auto v = after[i].Fetch();
    ASSERT_TRUE(v.ok()) << v.status();
    const int64_t* nv = (*v)[0].data<int64_t>();
    EXPECT_EQ(nv[0], 0);
    EXPECT_NE(nv[2], old_v[2]) << "closure used the resource of the dead incarnation";
    counts.insert(nv[1]);
  }
  // The rebuilt counter starts from scratch. Completion order need not be schedule order: a
  // closure taken by a worker not yet known to be dead is put back while others run.
  EXPECT_EQ(counts, (std::set<int64_t>{1, 2, 3}));
}

// TF testOneWorkerPreemptionWithCancellation. The failing closure must run while the long one
// does, so a single worker gets two closures in flight.
TEST_P(FaultToleranceTest, ErrorAmongLongFunctionsWithWorkerRestart) {
  if (GetParam().workers == 1) StartCoordinator(2);
  Schedule("increment", 3);
  auto long_result = coordinator_->Schedule("slow_increment", {Millis(20000)});
  ASSERT_TRUE(long_result.ok());
  auto failing = coordinator_->Schedule("fail");
  ASSERT_TRUE(failing.ok());
  WaitForIterations(3);
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());

  absl::Status join = coordinator_->Join();
  EXPECT_EQ(join.code(), absl::StatusCode::kInvalidArgument) << join;
  EXPECT_EQ(long_result->Fetch().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(failing->Fetch().status().code(), absl::StatusCode::kInvalidArgument);
  // The error was raised once; the coordinator keeps working.
  Schedule("increment", 3);
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ(Iterations(), 6);
}

// TF testJoinRaisesUnavailableErrorAtPsFailure.
TEST_P(FaultToleranceTest, PsKilledMakesJoinReturnUnavailable) {
  Schedule("slow_increment", 50, {Millis(20)});
  WaitForIterations(2);
  ASSERT_TRUE(cluster_->KillPs(0).ok());
  absl::Status join = coordinator_->Join();
  EXPECT_EQ(join.code(), absl::StatusCode::kUnavailable) << join;
}

// A worker that hangs (SIGSTOP: its connection stays open, it just stops answering) is noticed
// by heartbeats, its closures go elsewhere or wait, and it is re-admitted when it resumes.
TEST_P(FaultToleranceTest, HungWorkerIsDetectedByHeartbeat) {
  Schedule("slow_increment", 10, {Millis(100)});
  WaitForIterations(1);
  cluster_->SignalWorker(0, SIGSTOP);
  testutil::WaitUntil([&] { return CoordinatorCounter("asyncps_coordinator_worker_failures_total") >= 1; },
                      absl::Seconds(60), absl::Milliseconds(20));
  EXPECT_GE(CoordinatorCounter("asyncps_coordinator_worker_failures_total"), 1) << "hung worker not noticed";
  cluster_->SignalWorker(0, SIGCONT);
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_GE(Iterations(), 10);
}

// A fetched value stays available after every worker is gone; Fetch works on structures.
TEST_P(FaultToleranceTest, FetchedValuesSurviveWorkers) {
  auto a = coordinator_->Schedule("slow_increment", {Millis(1)});
  auto b = coordinator_->Schedule("slow_increment", {Millis(1)});
  ASSERT_TRUE(a.ok() && b.ok());
  auto both = coordinator_->Fetch({*a, *b});
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  for (int w = 0; w < GetParam().workers; ++w) ASSERT_TRUE(cluster_->KillWorker(w).ok());
  auto again = a->Fetch();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)[0].Equals((*both)[0][0]));
  EXPECT_EQ(a->state(), RemoteValue::State::kReady);
}

TEST_P(FaultToleranceTest, ScheduleRejectsBadCallsClearly) {
  auto unknown = coordinator_->Schedule("no_such_function");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  auto first = coordinator_->Schedule("increment");
  ASSERT_TRUE(first.ok());
  auto chained = coordinator_->Schedule("slow_increment", {*first});
  EXPECT_EQ(chained.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(chained.status().message().find("RemoteValue"), std::string::npos);
  EXPECT_FALSE(coordinator_->CreatePerWorkerResource("no_such_factory").ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ(Iterations(), 1);
}

// A function error is the user's: raised once by Join, then cleared.
TEST_P(FaultToleranceTest, FunctionErrorRaisedOnceThenCleared) {
  auto bad = coordinator_->Schedule("fail");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(coordinator_->Join().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad->Fetch().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(coordinator_->Join().ok());
  EXPECT_TRUE(coordinator_->Done().value_or(false));
  EXPECT_EQ(CoordinatorCounter("asyncps_coordinator_worker_failures_total"), 0) << "function error blamed on worker";
}

INSTANTIATE_TEST_SUITE_P(Sizes, FaultToleranceTest,
                         ::testing::Values(ClusterSize{2, 2}, ClusterSize{1, 1}), SizeName);

}  // namespace
}  // namespace asyncps
