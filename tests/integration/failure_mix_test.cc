// Failures in combination (issue 35): PS failovers while workers are being killed. Real
// processes: 2 PS with ps_replicas=2, 3 workers, the in-process chief, one epoch of the
// exactly-once counter (dynamic sharding, batches of 50 ids, splits of 8 batches). Each closure
// adds 1 per id to the sharded "counts" (call 1, one group) and the batch's id sum to the scalar
// "total" (call 2, the other group), then works a few ms, so a worker killed then has applied
// its updates but not answered, and its closure runs again elsewhere.
//
// The test thread is the nemesis (it alone drives the LocalCluster): every 0.4-1.2 s it
// SIGKILLs a random worker and restarts it 0.2 s later, all through the run; meanwhile it
// SIGKILLs PS 0, then PS 1, then PS 0 again, each one restarted empty once the chief counts it
// lost and rebuilt by state transfer (under the same worker kills) before the next PS kill. The
// epoch cannot end before the last PS is rebuilt; while a PS is being rebuilt, workers die every
// 0.1-0.3 s. Every id must be counted exactly once, the total must be the sum of the ids, and
// no closure may fail to the user, on the primaries and then on the backups (promoted by a last
// kill of the primaries' PS).
#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "coordinator/sharded_variable.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/replicated_cluster.h"

namespace asyncps {
namespace failure_mix_test {
namespace {

using testutil::LocalCluster;

constexpr int kPs = 2;
constexpr int kWorkers = 3;
constexpr int64_t kIds = 60'000;
constexpr int64_t kBatch = 50;
constexpr int64_t kRecordsPerSplit = 8 * kBatch;
constexpr int kRound = 32;           // closures per join
constexpr int64_t kWorkMs = 4;       // each closure's work after its updates
constexpr absl::Duration kWait = absl::Seconds(120);

// The seed of the fault schedule: ASYNCPS_TEST_SEED when set (to replay a failure), else
// the clock. Printed either way.
uint32_t ScheduleSeed() {
  if (const char* s = std::getenv("ASYNCPS_TEST_SEED"); s != nullptr && *s != '\0') {
    return static_cast<uint32_t>(std::stoul(s));
  }
  return static_cast<uint32_t>(absl::ToUnixNanos(absl::Now()) ^ getpid());
}

class FailureMixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = kPs;
    auto cluster = testutil::ReplicatedCluster::Start(o, /*replicas=*/2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    replicated_ = std::move(*cluster);
    auto& strategy = replicated_->chief().strategy();
    auto counts = strategy.CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
    ASSERT_TRUE(counts.ok()) << counts.status();
    counts_ = std::make_unique<ShardedVariable>(*counts);
    ASSERT_EQ(counts_->num_shards(), static_cast<size_t>(kPs));
    auto total = strategy.CreateVariable("total", init::Zeros({}, DType::kI64));
    ASSERT_TRUE(total.ok()) << total.status();
    total_ = std::make_unique<ShardedVariable>(*total);
  }

  void TearDown() override {
    coordinator_.reset();
    counts_.reset();
    total_.reset();
    replicated_.reset();
  }

  // Every id counted once and the total exact, as the group primaries serve them now.
  void ExpectExact(uint32_t seed, const std::string& where) {
    auto counts = counts_->Read();
    ASSERT_TRUE(counts.ok()) << counts.status();
    std::string wrong;
    int64_t wrong_ids = 0, excess = 0;
    for (int64_t i = 0; i < kIds; ++i) {
      const int64_t c = counts->data<int64_t>()[i];
      excess += c - 1;
      if (c != 1 && wrong_ids++ < 10) absl::StrAppend(&wrong, " id ", i, "=", c);
    }
    EXPECT_EQ(wrong_ids, 0) << "seed " << seed << ", " << where << ": " << wrong_ids
                            << " ids counted other than once (net " << excess << "):" << wrong;
    auto total = total_->Read();
    ASSERT_TRUE(total.ok()) << total.status();
    EXPECT_EQ(total->data<int64_t>()[0], kIds * (kIds - 1) / 2) << "seed " << seed << ", " << where;
  }

  LocalCluster& cluster() { return replicated_->cluster(); }
  PsMonitor& monitor() { return replicated_->monitor(); }

  std::unique_ptr<testutil::ReplicatedCluster> replicated_;
  std::unique_ptr<ShardedVariable> counts_;
  std::unique_ptr<ShardedVariable> total_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
};

// The nemesis of this test: worker kills on a random schedule, PS kills at chosen moments.
// Runs on the test thread (the LocalCluster's).
class Nemesis {
 public:
  Nemesis(testutil::ReplicatedCluster& cluster, uint32_t seed) : cluster_(cluster), rng_(seed) {
    ScheduleNextWorkerKill();
  }

  int worker_kills() const { return worker_kills_; }
  int ps_kills() const { return ps_kills_; }

  // Keeps killing workers until `condition` holds or `timeout` passes; whether it held.
  // A worker kill failing (kill or restart) fails the wait, with `error()` saying why.
  // `rapid`: a kill every 0.1-0.3 s instead (while a state transfer runs).
  bool KillWorkersUntil(const std::function<bool()>& condition, absl::Duration timeout, bool rapid = false) {
    if (rapid) ScheduleNextWorkerKill(/*rapid=*/true);
    for (const absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;) {
      if (condition()) return true;
      if (!error_.ok()) return false;
      if (absl::Now() >= next_worker_kill_) KillAWorker(rapid);
      Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
    }
    return condition();
  }

  // SIGKILLs PS `ps` (killing workers all along), waits until the chief counts it lost and
  // it is no group's primary, restarts it empty, and waits until every group is fully
  // replicated again. An error names the step that failed.
  absl::Status KillPsAndWaitRebuilt(int ps) {
    const int64_t lost = cluster_.monitor().stats().ps_lost;
    if (absl::Status s = cluster_.cluster().KillPs(ps); !s.ok()) return s;
    ++ps_kills_;
    if (!KillWorkersUntil([&] { return cluster_.monitor().stats().ps_lost > lost && !cluster_.IsPrimary(ps); },
                          kWait)) {
      return absl::DeadlineExceededError(absl::StrCat("ps ", ps, " not counted lost: ", error_.ToString(), " ",
                                                      cluster_.monitor().map().DebugString()));
    }
    if (absl::Status s = cluster_.cluster().RestartPs(ps); !s.ok()) return s;
    // Workers die fast while the PS is rebuilt: closures that applied an update before the
    // transfer's snapshot run again after it, at the primary and, through its stream, at the
    // copy the transfer built.
    if (!KillWorkersUntil([&] { return cluster_.FullyReplicated(); }, kWait, /*rapid=*/true)) {
      return absl::DeadlineExceededError(absl::StrCat("ps ", ps, " not rebuilt: ", error_.ToString(), " ",
                                                      cluster_.monitor().map().DebugString()));
    }
    return absl::OkStatus();
  }

  absl::Status error() const { return error_; }

 private:
  void ScheduleNextWorkerKill(bool rapid = false) {
    const int ms = rapid ? std::uniform_int_distribution<int>(100, 300)(rng_)
                         : std::uniform_int_distribution<int>(400, 1200)(rng_);
    next_worker_kill_ = absl::Now() + absl::Milliseconds(ms);
  }

  void KillAWorker(bool rapid) {
    const int w = std::uniform_int_distribution<int>(0, kWorkers - 1)(rng_);
    absl::Status s = cluster_.cluster().KillWorker(w);
    // The restart comes after the kill as a supervisor would bring it back; pacing only.
    if (s.ok()) Notification().WaitForNotificationWithTimeout(absl::Milliseconds(rapid ? 50 : 200));
    if (s.ok()) s = cluster_.cluster().RestartWorker(w);
    if (!s.ok()) error_ = s;
    ++worker_kills_;
    ScheduleNextWorkerKill(rapid);
  }

  testutil::ReplicatedCluster& cluster_;
  std::mt19937 rng_;
  absl::Time next_worker_kill_;
  int worker_kills_ = 0;
  int ps_kills_ = 0;
  absl::Status error_;
};

TEST_F(FailureMixTest, PsFailoversDuringWorkerKillsApplyEveryUpdateOnce) {
  const uint32_t seed = ScheduleSeed();
  std::cout << "fault schedule seed " << seed << " (ASYNCPS_TEST_SEED replays it)" << std::endl;
  ASSERT_TRUE(testutil::WaitFor([&] { return replicated_->FullyReplicated(); }, kWait))
      << monitor().map().DebugString();
  const Program program = testutil::MakeTestProgram();
  coordinator_ = std::make_unique<ClusterCoordinator>(replicated_->chief().strategy(), program,
                                                      testutil::FastFailureDetection());
  auto dataset = coordinator_->CreatePerWorkerDataset(
      "ids", {{"n", std::to_string(kIds)}, {"batch", std::to_string(kBatch)}}, ShardingPolicy::kDynamic,
      kRecordsPerSplit);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto iterator = dataset->MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();

  // The epoch, in rounds on a thread of its own; it holds back its last rounds until the
  // nemesis is done, so every PS kill lands mid-epoch.
  constexpr int64_t kRoundsHeldBack = 4;
  const int64_t free_rounds = kIds / kBatch / kRound - kRoundsHeldBack;
  Mutex mu;
  bool nemesis_done = false;
  int64_t rounds = 0, counted = 0, failed = 0;
  std::string first_failure;
  std::thread epoch([&] {
    for (;;) {
      {
        MutexLock lock(&mu);
        auto may_start = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return nemesis_done || rounds < free_rounds; };
        mu.Await(absl::Condition(&may_start));
        ++rounds;
      }
      std::vector<RemoteValue> values;
      for (int i = 0; i < kRound; ++i) {
        auto v = coordinator_->Schedule("count_and_sum_ids", {*iterator, Tensor::Scalar<int64_t>(kWorkMs)});
        if (v.ok()) values.push_back(*v);
      }
      const absl::Status joined = coordinator_->Join();
      MutexLock lock(&mu);
      for (const RemoteValue& v : values) {
        auto r = v.Fetch();
        if (r.ok()) {
          counted += r->at(1).data<int64_t>()[0];
        } else if (r.status().code() != absl::StatusCode::kOutOfRange && failed++ == 0) {
          first_failure = r.status().ToString();
        }
      }
      if (absl::IsOutOfRange(joined)) return;
      if (!joined.ok()) {
        if (failed++ == 0) first_failure = joined.ToString();
        if (rounds > kIds / kBatch) return;  // no end in sight: the checks below say why
      }
    }
  });

  Nemesis nemesis(*replicated_, seed);
  for (int ps : {0, 1, 0}) {
    // Workers die for a while before each PS kill, as they do throughout.
    nemesis.KillWorkersUntil([] { return false; }, absl::Milliseconds(1500));
    const absl::Status s = nemesis.KillPsAndWaitRebuilt(ps);
    EXPECT_TRUE(s.ok()) << "seed " << seed << ": " << s;
    if (!s.ok()) break;
  }
  {
    MutexLock lock(&mu);
    nemesis_done = true;
  }
  epoch.join();
  std::cout << "seed " << seed << ": " << nemesis.worker_kills() << " worker kills, " << nemesis.ps_kills()
            << " PS kills, " << rounds << " rounds" << std::endl;
  EXPECT_TRUE(nemesis.error().ok()) << nemesis.error();
  EXPECT_EQ(nemesis.ps_kills(), 3);

  EXPECT_EQ(failed, 0) << "first failure: " << first_failure;
  EXPECT_EQ(counted, kIds);
  ExpectExact(seed, "the primaries");
  // Every copy must hold the same: the backups (PS 0, rebuilt last) serve once PS 1 is gone.
  ASSERT_TRUE(replicated_->IsPrimary(1)) << monitor().map().DebugString();
  const absl::Status s = replicated_->KillUntilLostAndRestart(1, kWait);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(replicated_->IsPrimary(1)) << monitor().map().DebugString();
  ExpectExact(seed, "the backups");
  const PsMonitor::Stats stats = monitor().stats();
  EXPECT_EQ(stats.ps_lost, 4);
  EXPECT_EQ(stats.no_live_copy, 0) << "a group lost every copy";
  EXPECT_EQ(coordinator_->ps_recovery_stats().recoveries, 0) << "nothing is restored from a checkpoint";
}

}  // namespace
}  // namespace failure_mix_test
}  // namespace asyncps
