// What the coordinator tells the user when parts of the cluster come back changed, with real
// ps and worker processes: a PS restarted empty (Unavailable, marked "PS state lost", not the
// user's NotFound), a per-worker resource factory that fails (a clear error, and the worker
// still admitted later), concurrent creation of one variable (placed and created once).
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/wait_until.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;
using testutil::LocalCluster;

class CoordinatorRecoveryTest : public ::testing::Test {
 protected:
  void Start(int workers, int ps) {
    LocalCluster::Options o;
    o.num_workers = workers;
    o.num_ps = ps;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto chief = cluster_->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
  }

  void StartCoordinator() {
    ClusterCoordinator::Options co = testutil::FastFailureDetection();
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, co);
  }

  void TearDown() override {
    coordinator_.reset();
    chief_.reset();
    cluster_.reset();
  }

  void WaitForWorkersUp(int n) {
    testutil::WaitUntil([&] { return coordinator_->workers_up() == n; }, absl::Seconds(30));
    ASSERT_EQ(coordinator_->workers_up(), n) << "worker count never reached " << n;
  }

  // Schedules `fn` and Joins; the closure's value (an i64 scalar) or the error.
  absl::StatusOr<int64_t> RunOne(const std::string& fn, std::vector<ClosureArg> args = {}) {
    auto r = coordinator_->Schedule(fn, std::move(args));
    if (!r.ok()) return r.status();
    if (absl::Status s = coordinator_->Join(); !s.ok()) return s;
    auto values = r->Fetch();
    if (!values.ok()) return values.status();
    if (values->empty()) return -1;
    return (*values)[0].data<int64_t>()[0];
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

// Issue item 8: a PS killed and restarted empty. The closure's NotFound for a variable the
// strategy created is a PS failure: Unavailable, marked so automatic recovery can key on it.
TEST_F(CoordinatorRecoveryTest, PsRestartedEmptyIsUnavailableNotNotFound) {
  Start(/*workers=*/1, /*ps=*/1);
  auto iterations = chief_->strategy().CreateVariable("iterations", init::Zeros({}, DType::kI64));
  ASSERT_TRUE(iterations.ok()) << iterations.status();
  StartCoordinator();
  ASSERT_TRUE(RunOne("increment").ok());

  ASSERT_TRUE(cluster_->KillPs(0).ok());
  ASSERT_TRUE(cluster_->RestartPs(0).ok());
  // Until the worker has reconnected, the PS may still look unreachable (also Unavailable);
  // once it answers, it answers NotFound, which must come back marked as lost state.
  absl::Status last;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    last = RunOne("increment").status();
    ASSERT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
    if (IsPsStateLost(last)) break;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(50));  // poll pacing
  }
  ASSERT_TRUE(IsPsStateLost(last)) << last;
  EXPECT_EQ(LostPs(last), 0);
  EXPECT_THAT(std::string(last.message()), HasSubstr("iterations"));
  // The chief's own reads of the lost variable say the same.
  auto chief_read = iterations->Read();
  EXPECT_EQ(chief_read.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsPsStateLost(chief_read.status())) << chief_read.status();
  // The coordinator stays usable for closures that do not touch the lost PS state.
  auto ok = RunOne("whoami");
  ASSERT_TRUE(ok.ok()) << ok.status();
}

// Issue item 9: two concurrent creates of one name both passed the check and both placed and
// created it. Now exactly one succeeds and the placement counter advanced once.
TEST_F(CoordinatorRecoveryTest, ConcurrentCreatesOfOneVariablePlaceItOnce) {
  Start(/*workers=*/1, /*ps=*/2);
  constexpr int kThreads = 8;
  std::vector<absl::StatusCode> codes(kThreads);
  std::vector<std::thread> threads;
  Notification go;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.WaitForNotification();
      codes[t] = chief_->strategy().CreateVariable("contended", init::Zeros({4}, DType::kF32)).status().code();
    });
  }
  go.Notify();
  for (auto& t : threads) t.join();
  int created = 0, exists = 0;
  for (absl::StatusCode c : codes) {
    created += c == absl::StatusCode::kOk;
    exists += c == absl::StatusCode::kAlreadyExists;
  }
  EXPECT_EQ(created, 1);
  EXPECT_EQ(exists, kThreads - 1);
  auto contended = chief_->strategy().GetVariable("contended");
  ASSERT_TRUE(contended.ok());
  auto next = chief_->strategy().CreateVariable("next", init::Zeros({4}, DType::kF32));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->shards()[0].ps, (contended->shards()[0].ps + 1) % 2) << "placed more than once";
}

// Issue 9: a factory failing on one worker is a clear error to the caller, is not left
// behind, and a worker restarted afterwards is admitted and runs closures.
TEST_F(CoordinatorRecoveryTest, FailingFactoryErrsThenRestartedWorkerJoins) {
  Start(/*workers=*/2, /*ps=*/1);
  StartCoordinator();
  WaitForWorkersUp(2);
  auto picky = coordinator_->CreatePerWorkerResource("picky_counter", {{"fail_on_worker", "1"}});
  ASSERT_FALSE(picky.ok());
  EXPECT_EQ(picky.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(picky.status().message()), HasSubstr("picky_counter refuses worker 1"));

  ASSERT_TRUE(cluster_->KillWorker(1).ok());
  ASSERT_TRUE(cluster_->RestartWorker(1).ok());
  WaitForWorkersUp(2);  // before the fix: the failing spec kept worker 1 out forever
  // Only worker 1 left: closures must run there.
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  WaitForWorkersUp(1);
  auto who = RunOne("whoami");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, 1);
}

// Issue 9: no worker is up at creation; the factory's error, found when the worker comes
// back, reaches the user through the closures that use the resource, and the worker is
// admitted for the closures that do not.
TEST_F(CoordinatorRecoveryTest, FactoryErrorAtRecoveryFailsOnlyItsClosures) {
  Start(/*workers=*/1, /*ps=*/1);
  StartCoordinator();
  WaitForWorkersUp(1);
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  WaitForWorkersUp(0);
  auto picky = coordinator_->CreatePerWorkerResource("picky_counter", {{"fail_on_worker", "0"}});
  ASSERT_TRUE(picky.ok()) << picky.status();  // nobody could build it yet
  ASSERT_TRUE(cluster_->RestartWorker(0).ok());
  WaitForWorkersUp(1);  // admitted despite the failing factory

  auto who = RunOne("whoami");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(*who, 0);
  auto used = coordinator_->Schedule("use_counter", {*picky});
  ASSERT_TRUE(used.ok());
  absl::Status joined = coordinator_->Join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kFailedPrecondition) << joined;
  EXPECT_THAT(std::string(joined.message()), HasSubstr("picky_counter refuses worker 0"));
  EXPECT_EQ(used->Fetch().status().code(), absl::StatusCode::kFailedPrecondition);
  // The error was raised once; the coordinator goes on.
  auto again = RunOne("whoami");
  ASSERT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace asyncps
