// A parameter server SIGKILLed mid-training, with real ps and worker processes (2 PS, 2
// workers; the test process is the chief):
//   * default mode (TensorFlow's contract): Join, Done and Schedule return Unavailable, no
//     call hangs, and a PS that came back empty is reported as such (IsPsStateLost);
//   * automatic PS recovery: the coordinator pauses, waits for the PS to be restarted,
//     restores the latest checkpoint onto every PS (or re-initialises without one), re-runs
//     the closures that failed, and training finishes with the checkpoint's values plus the
//     re-run work; a PS that never comes back makes recovery give up with Unavailable.
// Processes are killed and restarted from the test thread (LocalCluster children die with the
// thread that started them) while the coordinator's own threads keep dispatching.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_until.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using testutil::LocalCluster;

constexpr int64_t kCheckpointed = 20;  // closures before the checkpoint
constexpr int kAfter = 60;             // closures scheduled after it

class PsFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = 2;
    o.num_ps = 2;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
    // Round-robin placement: "iterations" on PS 0, "mirror" on PS 1.
    ASSERT_TRUE(chief_->strategy().CreateVariable("iterations", init::Zeros({}, DType::kI64)).ok());
    ASSERT_TRUE(chief_->strategy().CreateVariable("mirror", init::Zeros({}, DType::kI64)).ok());
    dir_ = absl::StrCat(::testing::TempDir(), "/ps_failure_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  void TearDown() override {
    coordinator_.reset();
    checkpoints_.reset();
    chief_.reset();
    cluster_.reset();
    fs::remove_all(dir_);
  }

  void StartCoordinator(bool automatic, bool with_checkpoints,
                        absl::Duration timeout = absl::Minutes(2)) {
    if (with_checkpoints) checkpoints_ = std::make_unique<CheckpointManager>(chief_->strategy(), dir_, 3);
    ClusterCoordinator::Options co = testutil::FastFailureDetection();
    co.ps_recovery.enabled = automatic;
    co.ps_recovery.checkpoints = checkpoints_.get();
    co.ps_recovery.timeout = timeout;
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, co);
  }

  int64_t Read(const std::string& name) {
    auto t = chief_->process().ps().Read({name});
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? (*t)[0].data<int64_t>()[0] : -1;
  }

  // Blocks until "iterations" reaches `n` (deadline-bounded; a failing test, not a hang).
  void WaitForIterations(int64_t n) {
    testutil::WaitUntil([&] { return Read("iterations") >= n; }, absl::Seconds(60), absl::Milliseconds(5));
    ASSERT_GE(Read("iterations"), n) << "training made no progress";
  }

  std::vector<RemoteValue> Schedule(int n, int64_t ms) {
    std::vector<RemoteValue> out;
    for (int i = 0; i < n; ++i) {
      auto v = coordinator_->Schedule("slow_increment_then_mirror", {Tensor::Scalar<int64_t>(ms)});
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok()) out.push_back(*v);
    }
    return out;
  }

  double Metric(const std::string& name) {
    const std::string text = chief_->process().process_metrics().Serialize();
    const size_t at = text.find(name + "{");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(text.find("} ", at) + 2));
  }

  // Trains kCheckpointed closures and commits checkpoint 1 at that join point.
  void TrainAndCheckpoint() {
    Schedule(kCheckpointed, 1);
    ASSERT_TRUE(coordinator_->Join().ok());
    ASSERT_EQ(Read("iterations"), kCheckpointed);
    ASSERT_TRUE(checkpoints_->Save(1).ok());
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::string dir_;
};

// TensorFlow's contract: every entry point reports the lost PS as Unavailable, nothing hangs,
// and the coordinator stays usable (each error is raised once).
TEST_F(PsFailureTest, DefaultModeJoinDoneAndScheduleReturnUnavailable) {
  StartCoordinator(/*automatic=*/false, /*with_checkpoints=*/false);
  std::vector<RemoteValue> values = Schedule(50, 20);
  WaitForIterations(3);
  ASSERT_TRUE(cluster_->KillPs(0).ok());

  absl::Status join = coordinator_->Join();
  EXPECT_EQ(join.code(), absl::StatusCode::kUnavailable) << join;
  EXPECT_NE(join.message().find("ps 0"), std::string::npos) << join;
  int failed = 0;
  for (const RemoteValue& v : values) {
    const absl::StatusCode code = v.Fetch().status().code();
    EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kUnavailable ||
                code == absl::StatusCode::kCancelled)
        << code;
    failed += code == absl::StatusCode::kUnavailable ? 1 : 0;
  }
  EXPECT_GE(failed, 1);

  // Done: a new closure fails the same way, and Done raises it. A RemoteValue says it failed
  // just before the coordinator records the error, so Done is asked until it raises (a
  // deadline-bounded poll).
  std::vector<RemoteValue> more = Schedule(1, 1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].Fetch().status().code(), absl::StatusCode::kUnavailable)
      << more[0].Fetch().status();
  absl::StatusOr<bool> done = coordinator_->Done();
  for (const absl::Time deadline = absl::Now() + absl::Seconds(30);
       done.ok() && absl::Now() < deadline;) {
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(1));  // poll pacing
    done = coordinator_->Done();
  }
  EXPECT_EQ(done.status().code(), absl::StatusCode::kUnavailable) << done.status();

  // Schedule: a later call raises the next failure. Closures are scheduled until one does;
  // one queued just before the error is recorded is cancelled by it.
  absl::Status scheduled;
  for (int i = 0; i < 100 && scheduled.ok(); ++i) {
    auto v = coordinator_->Schedule("slow_increment_then_mirror", {Tensor::Scalar<int64_t>(1)});
    scheduled = v.status();
    if (v.ok()) {
      const absl::StatusCode code = v->Fetch().status().code();
      EXPECT_TRUE(code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kCancelled)
          << v->Fetch().status();
    }
  }
  EXPECT_EQ(scheduled.code(), absl::StatusCode::kUnavailable) << scheduled;
  EXPECT_EQ(coordinator_->ps_recovery_stats().recoveries, 0);
}

TEST_F(PsFailureTest, DefaultModePsBackEmptyIsUnavailableStateLost) {
  StartCoordinator(/*automatic=*/false, /*with_checkpoints=*/false);
  Schedule(5, 1);
  ASSERT_TRUE(coordinator_->Join().ok());
  ASSERT_TRUE(cluster_->KillPs(0).ok());
  ASSERT_TRUE(cluster_->RestartPs(0).ok());
  Schedule(5, 1);
  absl::Status join = coordinator_->Join();
  EXPECT_EQ(join.code(), absl::StatusCode::kUnavailable) << join;
  EXPECT_TRUE(IsPsStateLost(join)) << join;
  EXPECT_EQ(LostPs(join), 0) << join;
}

// Acceptance: a PS killed mid-training in automatic mode and restarted; training resumes by
// itself and every closure succeeds. Both PS are rolled back to the checkpoint (one cut), so
// both counters equal the checkpoint's value plus the closures that completed after the
// restore: kCheckpointed + kAfter - steps lost.
TEST_F(PsFailureTest, AutomaticModeRestoresTheCheckpointAndFinishes) {
  StartCoordinator(/*automatic=*/true, /*with_checkpoints=*/true);
  TrainAndCheckpoint();
  std::vector<RemoteValue> values = Schedule(kAfter, 20);
  WaitForIterations(kCheckpointed + 5);
  ASSERT_TRUE(cluster_->KillPs(0).ok());
  ASSERT_TRUE(cluster_->RestartPs(0).ok());

  ASSERT_TRUE(coordinator_->Join().ok());
  for (const RemoteValue& v : values) EXPECT_TRUE(v.Fetch().ok()) << v.Fetch().status();
  PsRecovery::Stats stats = coordinator_->ps_recovery_stats();
  ASSERT_EQ(stats.recoveries, 1);
  EXPECT_FALSE(stats.gave_up);
  const PsRecovery::Event* event = nullptr;
  for (const auto& e : stats.events) {
    if (!e.lost_ps.empty()) event = &e;
  }
  ASSERT_NE(event, nullptr);
  EXPECT_EQ(event->lost_ps, std::vector<int>{0});
  EXPECT_EQ(event->checkpoint_step, 1);
  EXPECT_FALSE(event->reinitialized);
  EXPECT_FALSE(event->steps_lost_upper_bound);
  EXPECT_GE(event->steps_lost, 5);
  EXPECT_EQ(Read("iterations"), kCheckpointed + kAfter - stats.steps_lost);
  EXPECT_EQ(Read("mirror"), kCheckpointed + kAfter - stats.steps_lost);
  EXPECT_EQ(Metric("asyncps_coordinator_ps_recoveries_total"), 1);
  EXPECT_EQ(Metric("asyncps_coordinator_ps_recovery_steps_lost_total"), stats.steps_lost);
  EXPECT_EQ(Metric("asyncps_coordinator_dispatch_paused"), 0);
  // Training goes on normally afterwards.
  Schedule(4, 1);
  ASSERT_TRUE(coordinator_->Join().ok());
  EXPECT_EQ(Read("mirror"), kCheckpointed + kAfter - stats.steps_lost + 4);
}

// Without a checkpoint the lost PS's variables start again from their initializers and the
// other PS keep their values: "iterations" (PS 0) counts only what completed after the repair,
// "mirror" (PS 1) every closure.
TEST_F(PsFailureTest, AutomaticModeWithoutCheckpointReinitializes) {
  StartCoordinator(/*automatic=*/true, /*with_checkpoints=*/false);
  std::vector<RemoteValue> values = Schedule(kAfter, 20);
  WaitForIterations(5);
  ASSERT_TRUE(cluster_->KillPs(0).ok());
  ASSERT_TRUE(cluster_->RestartPs(0).ok());
  ASSERT_TRUE(coordinator_->Join().ok());
  for (const RemoteValue& v : values) EXPECT_TRUE(v.Fetch().ok()) << v.Fetch().status();
  PsRecovery::Stats stats = coordinator_->ps_recovery_stats();
  ASSERT_EQ(stats.recoveries, 1);
  const PsRecovery::Event& event = stats.events.back();
  EXPECT_TRUE(event.reinitialized);
  EXPECT_EQ(event.checkpoint_step, -1);
  EXPECT_GE(stats.steps_lost, 5);
  EXPECT_EQ(Read("iterations"), kAfter - stats.steps_lost);
  EXPECT_EQ(Read("mirror"), kAfter);
}

// A PS that never comes back: recovery gives up after its timeout and the user gets
// Unavailable, as in the default mode.
TEST_F(PsFailureTest, AutomaticModeGivesUpWhenThePsNeverReturns) {
  StartCoordinator(/*automatic=*/true, /*with_checkpoints=*/true, /*timeout=*/absl::Seconds(2));
  TrainAndCheckpoint();
  Schedule(20, 20);
  WaitForIterations(kCheckpointed + 2);
  ASSERT_TRUE(cluster_->KillPs(0).ok());
  absl::Status join = coordinator_->Join();
  EXPECT_EQ(join.code(), absl::StatusCode::kUnavailable) << join;
  PsRecovery::Stats stats = coordinator_->ps_recovery_stats();
  EXPECT_TRUE(stats.gave_up);
  EXPECT_EQ(stats.recoveries, 0);
}

}  // namespace
}  // namespace asyncps
