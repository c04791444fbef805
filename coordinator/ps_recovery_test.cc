#include "coordinator/ps_recovery.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_metrics.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"

// PsRecovery against a real ClosureQueue and a scripted Repair (no processes): pausing,
// waiting for closures in flight, restore vs re-initialise vs transient outage, the steps-lost
// arithmetic, retries, giving up and stopping. Waits are on conditions with deadlines.

namespace asyncps {
namespace ps_recovery_test_internal {
namespace {


constexpr absl::Duration kEventually = absl::Seconds(30);
constexpr absl::Duration kBriefly = absl::Milliseconds(50);

// What the scripted repair sees and answers. Shared with the test, which keeps it after the
// PsRecovery (owning the Repair) is gone.
struct Script {
  Mutex mu;
  int probe_failures ABSL_GUARDED_BY(mu) = 0;  // ProbeAll fails this many more times
  bool probes_fail_forever ABSL_GUARDED_BY(mu) = false;
  std::vector<int> missing ABSL_GUARDED_BY(mu) = {0};
  absl::StatusOr<std::string> latest ABSL_GUARDED_BY(mu) = std::string("/ckpt/ckpt-5");
  int64_t latest_step ABSL_GUARDED_BY(mu) = 5;
  // What the restore reports rolling back besides the variables.
  int64_t batches_redone ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::string> cursors_missing ABSL_GUARDED_BY(mu);
  std::deque<absl::Status> restore_errors ABSL_GUARDED_BY(mu);  // returned first, in order
  int probes ABSL_GUARDED_BY(mu) = 0;
  int restores ABSL_GUARDED_BY(mu) = 0;
  int reinits ABSL_GUARDED_BY(mu) = 0;
  size_t max_in_flight_seen ABSL_GUARDED_BY(mu) = 0;  // closures in flight while repairing
  ClosureQueue* queue = nullptr;
};

class ScriptedRepair : public PsRecovery::Repair {
 public:
  explicit ScriptedRepair(std::shared_ptr<Script> s) : s_(std::move(s)) {}

  absl::Status ProbeAll(absl::Duration) override {
    const size_t in_flight = s_->queue->in_flight();
    MutexLock lock(&s_->mu);
    ++s_->probes;
    s_->max_in_flight_seen = std::max(s_->max_in_flight_seen, in_flight);
    if (s_->probes_fail_forever) return absl::UnavailableError("ps 0: connection refused");
    if (s_->probe_failures > 0) {
      --s_->probe_failures;
      return absl::UnavailableError("ps 0: connection refused");
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<int>> PsMissingVariables() override {
    MutexLock lock(&s_->mu);
    return s_->missing;
  }
  absl::StatusOr<std::string> LatestCheckpoint() override {
    MutexLock lock(&s_->mu);
    return s_->latest;
  }
  absl::StatusOr<PsRecovery::Restored> Restore(const std::string&) override {
    const size_t in_flight = s_->queue->in_flight();
    MutexLock lock(&s_->mu);
    s_->max_in_flight_seen = std::max(s_->max_in_flight_seen, in_flight);
    ++s_->restores;
    if (!s_->restore_errors.empty()) {
      absl::Status e = s_->restore_errors.front();
      s_->restore_errors.pop_front();
      return e;
    }
    return PsRecovery::Restored{s_->latest_step, s_->batches_redone, s_->cursors_missing};
  }
  absl::Status Reinitialize() override {
    MutexLock lock(&s_->mu);
    ++s_->reinits;
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<Script> s_;
};

std::shared_ptr<Closure> MakeClosure(uint64_t id) {
  auto closure = std::make_shared<Closure>();
  closure->id = id;
  closure->function = "train_step";
  return closure;
}

absl::Status PsLost() {
  return absl::UnavailableError("ps 0 (127.0.0.1:1) lost variables it held");
}

class PsRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { script_->queue = &queue_; }

  void Start(PsRecovery::Options options = {}) {
    options.enabled = true;
    options.probe_interval = absl::Milliseconds(5);
    recovery_ = std::make_unique<PsRecovery>(queue_, std::make_unique<ScriptedRepair>(script_),
                                             metrics_.get(), options);
  }

  // Plays a dispatcher: takes the next closure and reports it failed because of a PS.
  bool FailOneOnPs() {
    auto closure = queue_.Get(kEventually);
    if (closure == nullptr) return false;
    if (recovery_->OnPsFailure(PsLost())) {
      queue_.PutBack(closure);
      return true;
    }
    closure->output.SetFailed(PsLost());
    queue_.MarkFailed(PsLost());
    return false;
  }

  // Completes `n` closures as a dispatcher would.
  void Complete(int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(queue_.Put(MakeClosure(static_cast<uint64_t>(i) + 1000)).ok());
      auto closure = queue_.Get(kEventually);
      ASSERT_NE(closure, nullptr);
      recovery_->NoteCompleted();
      closure->output.SetReady({});
      queue_.MarkFinished();
    }
  }

  // Waits until the recovery thread has finished `n` repairs (recoveries + transient).
  bool WaitForEvents(size_t n) {
    const absl::Time deadline = absl::Now() + kEventually;
    while (absl::Now() < deadline) {
      if (recovery_->stats().events.size() >= n) return true;
      Notification().WaitForNotificationWithTimeout(absl::Milliseconds(2));  // poll pacing
    }
    return false;
  }

  double Counter(const std::string& name) {
    const std::string text = process_metrics_->Serialize();
    const size_t at = text.find(name + "{");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(text.find("} ", at) + 2));
  }

  std::unique_ptr<metrics::ProcessMetrics> process_metrics_ =
      *metrics::ProcessMetrics::Create("chief", 0, "");
  std::unique_ptr<CoordinatorMetrics> metrics_ =
      std::make_unique<CoordinatorMetrics>(*process_metrics_);
  ClosureQueue queue_{64};
  std::shared_ptr<Script> script_ = std::make_shared<Script>();
  std::unique_ptr<PsRecovery> recovery_;
};

TEST_F(PsRecoveryTest, PausesDispatchRestoresLatestAndRerunsTheClosure) {
  {
    MutexLock lock(&script_->mu);
    script_->probe_failures = 3;  // the PS takes a while to come back
  }
  Start();
  auto failing = MakeClosure(1);
  ASSERT_TRUE(queue_.Put(failing).ok());
  ASSERT_TRUE(FailOneOnPs());
  // The put-back closure is handed out again only once the repair is done.
  auto again = queue_.Get(kEventually);
  ASSERT_EQ(again, failing);
  EXPECT_EQ(recovery_->stats().events.size(), 1u) << "dispatch resumed before the repair";
  again->output.SetReady({});
  queue_.MarkFinished();
  EXPECT_TRUE(queue_.Wait().ok());

  PsRecovery::Stats stats = recovery_->stats();
  EXPECT_EQ(stats.recoveries, 1);
  EXPECT_FALSE(stats.gave_up);
  ASSERT_EQ(stats.events.size(), 1u);
  EXPECT_EQ(stats.events[0].checkpoint, "/ckpt/ckpt-5");
  EXPECT_EQ(stats.events[0].checkpoint_step, 5);
  EXPECT_EQ(stats.events[0].lost_ps, std::vector<int>{0});
  EXPECT_FALSE(stats.events[0].reinitialized);
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->restores, 1);
  EXPECT_EQ(script_->reinits, 0);
  EXPECT_GE(script_->probes, 4);
  EXPECT_EQ(Counter("asyncps_coordinator_ps_recoveries_total"), 1);
  EXPECT_EQ(Counter("asyncps_coordinator_dispatch_paused"), 0);
}

// The work the rolled-back split cursors hand out again, and the datasets whose cursor the
// checkpoint lacked, reach the event, the totals and the metrics.
TEST_F(PsRecoveryTest, ReportsBatchesRedoneAndCursorsMissing) {
  {
    MutexLock lock(&script_->mu);
    script_->batches_redone = 9;
    script_->cursors_missing = {"train"};
  }
  Start();
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  PsRecovery::Stats stats = recovery_->stats();
  EXPECT_EQ(stats.events[0].batches_redone, 9);
  EXPECT_EQ(stats.events[0].cursors_missing, std::vector<std::string>{"train"});
  EXPECT_EQ(stats.batches_redone, 9);
  EXPECT_EQ(stats.cursors_missing, 1);
  EXPECT_EQ(Counter("asyncps_coordinator_ps_recovery_batches_redone_total"), 9);
  EXPECT_EQ(Counter("asyncps_coordinator_ps_recovery_cursor_missing_total"), 1);
}

TEST_F(PsRecoveryTest, NothingIsHandedOutWhileRecovering) {
  {
    MutexLock lock(&script_->mu);
    script_->probes_fail_forever = true;
  }
  Start();
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(queue_.Put(MakeClosure(2)).ok());
  ASSERT_TRUE(FailOneOnPs());
  EXPECT_EQ(queue_.Get(kBriefly), nullptr);
  EXPECT_EQ(Counter("asyncps_coordinator_dispatch_paused"), 1);
  EXPECT_EQ(queue_.queued(), 2u);
  {
    MutexLock lock(&script_->mu);
    script_->probes_fail_forever = false;
  }
  EXPECT_NE(queue_.Get(kEventually), nullptr);
  queue_.MarkFinished();
}

TEST_F(PsRecoveryTest, RepairsOnlyOnceNothingIsInFlight) {
  Start();
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(queue_.Put(MakeClosure(i)).ok());
  auto running = queue_.Get(kEventually);  // another worker's closure, still running
  ASSERT_NE(running, nullptr);
  ASSERT_TRUE(FailOneOnPs());
  EXPECT_EQ(queue_.Get(kBriefly), nullptr);
  {
    MutexLock lock(&script_->mu);
    EXPECT_EQ(script_->probes, 0) << "repair started while a closure was running";
  }
  // It fails on the lost PS too: put back, joining the recovery in progress.
  EXPECT_TRUE(recovery_->OnPsFailure(PsLost()));
  queue_.PutBack(running);
  ASSERT_TRUE(WaitForEvents(1));
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->max_in_flight_seen, 0u);
  EXPECT_EQ(script_->restores, 1);
  EXPECT_EQ(recovery_->stats().events.size(), 1u) << "two failures, one recovery";
  EXPECT_EQ(queue_.queued(), 3u);
}

TEST_F(PsRecoveryTest, StepsLostCountClosuresSinceTheRestoredCheckpoint) {
  Start();
  Complete(10);
  recovery_->NoteCheckpoint(5);  // saved after 10 closures
  Complete(7);
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  PsRecovery::Event first = recovery_->stats().events[0];
  EXPECT_EQ(first.steps_lost, 7);
  EXPECT_FALSE(first.steps_lost_upper_bound);
  EXPECT_EQ(Counter("asyncps_coordinator_ps_recovery_steps_lost_total"), 7);

  // Lost again with no newer checkpoint: only the work since the restore is lost this time.
  auto rerun = queue_.Get(kEventually);
  ASSERT_NE(rerun, nullptr);
  recovery_->NoteCompleted();
  queue_.MarkFinished();
  Complete(2);
  ASSERT_TRUE(queue_.Put(MakeClosure(2)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(2));
  PsRecovery::Stats stats = recovery_->stats();
  EXPECT_EQ(stats.events[1].steps_lost, 3);
  EXPECT_EQ(stats.steps_lost, 10);
  EXPECT_EQ(stats.recoveries, 2);
}

TEST_F(PsRecoveryTest, UnseenCheckpointCountsEveryClosureAsAnUpperBound) {
  {
    MutexLock lock(&script_->mu);
    script_->latest_step = 99;  // committed by an earlier run: no mark
  }
  Start();
  Complete(4);
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  PsRecovery::Event event = recovery_->stats().events[0];
  EXPECT_EQ(event.steps_lost, 4);
  EXPECT_TRUE(event.steps_lost_upper_bound);
}

TEST_F(PsRecoveryTest, NoCheckpointReinitializesAndSaysSo) {
  {
    MutexLock lock(&script_->mu);
    script_->latest = absl::NotFoundError("no checkpoint in /ckpt");
  }
  Start();
  Complete(6);
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  PsRecovery::Stats stats = recovery_->stats();
  EXPECT_EQ(stats.recoveries, 1);
  EXPECT_TRUE(stats.events[0].reinitialized);
  EXPECT_TRUE(stats.events[0].checkpoint.empty());
  EXPECT_EQ(stats.events[0].checkpoint_step, -1);
  EXPECT_EQ(stats.events[0].steps_lost, 6);
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->reinits, 1);
  EXPECT_EQ(script_->restores, 0);
}

TEST_F(PsRecoveryTest, PsBackWithItsVariablesRestoresNothing) {
  {
    MutexLock lock(&script_->mu);
    script_->missing.clear();
  }
  Start();
  Complete(3);
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  PsRecovery::Stats stats = recovery_->stats();
  EXPECT_EQ(stats.recoveries, 0);
  EXPECT_EQ(stats.transient, 1);
  EXPECT_EQ(stats.steps_lost, 0);
  EXPECT_EQ(Counter("asyncps_coordinator_ps_recoveries_total"), 0);
  EXPECT_NE(queue_.Get(kEventually), nullptr);
  queue_.MarkFinished();
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->restores + script_->reinits, 0);
}

TEST_F(PsRecoveryTest, UnreachableDuringRestoreIsRetried) {
  {
    MutexLock lock(&script_->mu);
    script_->restore_errors = {absl::UnavailableError("ps 1 died during restore"),
                               absl::DeadlineExceededError("ps 1 slow")};
  }
  Start();
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  ASSERT_TRUE(WaitForEvents(1));
  EXPECT_EQ(recovery_->stats().recoveries, 1);
  EXPECT_FALSE(recovery_->stats().gave_up);
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->restores, 3);
}

TEST_F(PsRecoveryTest, PsThatNeverReturnsGivesUpAndErrorsSurface) {
  {
    MutexLock lock(&script_->mu);
    script_->probes_fail_forever = true;
  }
  PsRecovery::Options options;
  options.timeout = absl::Milliseconds(100);
  Start(options);
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  // Dispatch resumes after the timeout; the closure fails again and now reaches the user.
  EXPECT_FALSE(FailOneOnPs());
  EXPECT_EQ(queue_.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(recovery_->stats().gave_up);
  EXPECT_EQ(recovery_->stats().recoveries, 0);
  // Off for good.
  EXPECT_FALSE(recovery_->OnPsFailure(PsLost()));
}

TEST_F(PsRecoveryTest, RestoreErrorOtherThanUnreachableGivesUpAtOnce) {
  {
    MutexLock lock(&script_->mu);
    script_->restore_errors = {absl::NotFoundError("checkpoint has no variable 'late'")};
  }
  Start();
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  EXPECT_FALSE(FailOneOnPs());
  EXPECT_EQ(queue_.Wait().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(recovery_->stats().gave_up);
  MutexLock lock(&script_->mu);
  EXPECT_EQ(script_->restores, 1);
}

TEST_F(PsRecoveryTest, DestroyedWhileWaitingForThePsReturnsPromptly) {
  {
    MutexLock lock(&script_->mu);
    script_->probes_fail_forever = true;
  }
  Start();
  ASSERT_TRUE(queue_.Put(MakeClosure(1)).ok());
  ASSERT_TRUE(FailOneOnPs());
  Notification destroyed;
  std::thread t([&] {
    recovery_.reset();
    destroyed.Notify();
  });
  EXPECT_TRUE(destroyed.WaitForNotificationWithTimeout(kEventually));
  t.join();
}

}  // namespace
}  // namespace ps_recovery_test_internal
}  // namespace asyncps
