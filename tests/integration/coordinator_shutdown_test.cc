// Destroying a ClusterCoordinator lets go promptly whatever the workers do: a worker hung
// (SIGSTOP) before the heartbeat noticed, a hung worker whose recovery probe is pending with
// the full RPC timeout, and a long closure running — cooperative or ignoring cancellation.
// The destructor runs on its own thread and the test waits for it with a generous deadline
// (no timing thresholds); the measured duration is printed for the record.
#include <signal.h>

#include <memory>
#include <thread>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_until.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;

Tensor I64(int64_t v) { return Tensor::Scalar<int64_t>(v); }

class CoordinatorShutdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = 1;
    o.num_ps = 1;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
    auto started = chief_->strategy().CreateVariable("started", init::Zeros({}, DType::kI64));
    ASSERT_TRUE(started.ok()) << started.status();
    started_ = std::make_unique<ShardedVariable>(*started);
    ASSERT_TRUE(chief_->strategy().CreateVariable("iterations", init::Zeros({}, DType::kI64)).ok());
  }

  void TearDown() override {
    if (stopped_) cluster_->SignalWorker(0, SIGCONT);
    coordinator_.reset();
    started_.reset();
    chief_.reset();
    cluster_.reset();
  }

  void StartCoordinator(ClusterCoordinator::Options o) {
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, o);
  }

  void Hang() {
    cluster_->SignalWorker(0, SIGSTOP);
    stopped_ = true;
  }

  // Destroys the coordinator on another thread; fails the test if that takes over 10 s (then
  // resumes the worker so the destructor can finish). Returns how long it took.
  absl::Duration DestroyCoordinator() {
    Notification done;
    const absl::Time start = absl::Now();
    absl::Time end;
    std::thread destroyer([&] {
      coordinator_.reset();
      end = absl::Now();
      done.Notify();
    });
    const bool prompt = done.WaitForNotificationWithTimeout(absl::Seconds(10));
    if (!prompt) cluster_->SignalWorker(0, SIGCONT);
    destroyer.join();
    EXPECT_TRUE(prompt) << "~ClusterCoordinator still blocked after 10 s";
    const absl::Duration took = end - start;
    std::printf("[ measured ] ~ClusterCoordinator took %s\n", absl::FormatDuration(took).c_str());
    return took;
  }

  int64_t Started() {
    auto t = started_->Read();
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->data<int64_t>()[0] : -1;
  }

  // Blocks until the worker has started `n` mark_then_work closures (deadline-bounded).
  void WaitForStarted(int64_t n) {
    testutil::WaitUntil([&] { return Started() >= n; }, absl::Seconds(30), absl::Milliseconds(5));
    ASSERT_GE(Started(), n) << "the closure never started";
  }

  void WaitForWorkersUp(int n) {
    testutil::WaitUntil([&] { return coordinator_->workers_up() == n; }, absl::Seconds(30));
    ASSERT_EQ(coordinator_->workers_up(), n);
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> started_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  bool stopped_ = false;
};

// (a) The worker hangs with a closure in flight and a heartbeat pending; the heartbeat timeout
// is far away, so the coordinator still thinks it is up.
TEST_F(CoordinatorShutdownTest, HungWorkerNotYetDetected) {
  ClusterCoordinator::Options o;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.heartbeat_timeout = absl::Seconds(120);
  o.rpc_timeout = absl::Seconds(120);
  StartCoordinator(o);
  WaitForWorkersUp(1);
  auto running = coordinator_->Schedule("mark_then_work", {I64(60000), I64(1)});
  ASSERT_TRUE(running.ok());
  WaitForStarted(1);
  Hang();
  auto queued = coordinator_->Schedule("whoami");
  ASSERT_TRUE(queued.ok());
  ASSERT_EQ(coordinator_->workers_up(), 1);  // not detected
  DestroyCoordinator();
  EXPECT_EQ(running->Fetch(absl::Seconds(10)).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued->Fetch(absl::Seconds(10)).status().code(), absl::StatusCode::kCancelled);
}

// (b) The hang was detected; the coordinator probes the worker to recover it, each probe with
// the full (here 2 minute) RPC timeout, none answered.
TEST_F(CoordinatorShutdownTest, HungWorkerWhileRecoveryProbePending) {
  ClusterCoordinator::Options o;
  o.heartbeat_interval = absl::Milliseconds(100);
  o.heartbeat_timeout = absl::Milliseconds(500);
  o.rpc_timeout = absl::Seconds(120);
  StartCoordinator(o);
  WaitForWorkersUp(1);
  Hang();
  WaitForWorkersUp(0);  // detected; recovery probes start at once
  auto queued = coordinator_->Schedule("whoami");
  ASSERT_TRUE(queued.ok());
  DestroyCoordinator();
  EXPECT_EQ(queued->Fetch(absl::Seconds(10)).status().code(), absl::StatusCode::kCancelled);
}

// (c) A long closure that honours cancellation: cancelled, not waited for.
TEST_F(CoordinatorShutdownTest, LongClosureIsCancelled) {
  StartCoordinator(ClusterCoordinator::Options());
  auto running = coordinator_->Schedule("mark_then_work", {I64(60000), I64(1)});
  ASSERT_TRUE(running.ok());
  WaitForStarted(1);
  DestroyCoordinator();
  EXPECT_EQ(running->Fetch(absl::Seconds(10)).status().code(), absl::StatusCode::kCancelled);
}

// (c') A long closure that ignores cancellation does not hold the destructor hostage: it is
// abandoned (its RemoteValue says Cancelled) and keeps running in the worker process until it
// returns; the worker serves a new coordinator meanwhile.
TEST_F(CoordinatorShutdownTest, ClosureIgnoringCancellationIsAbandoned) {
  StartCoordinator(ClusterCoordinator::Options());
  auto running = coordinator_->Schedule("mark_then_work", {I64(60000), I64(0)});
  ASSERT_TRUE(running.ok());
  WaitForStarted(1);
  DestroyCoordinator();
  EXPECT_EQ(running->Fetch(absl::Seconds(10)).status().code(), absl::StatusCode::kCancelled);

  StartCoordinator(ClusterCoordinator::Options());
  auto next = coordinator_->Schedule("whoami");
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  auto values = next->Fetch();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].data<int64_t>()[0], 0);
}

}  // namespace
}  // namespace asyncps
