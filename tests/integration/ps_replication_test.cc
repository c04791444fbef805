// Replicated shards with hot failover (issue 19), with real processes: 3 PS with ps_replicas=2,
// 3 workers, the exactly-once counter (20,000 ids, dynamic sharding). During one epoch the
// test SIGKILLs one PS at a time while closures are in flight — the primary of a group three
// times, a PS that holds only backups once, and a returning PS while it is being rebuilt once
// — restarts it empty at its address, and waits (on the chief's shard map) until it is rebuilt
// before the next kill. Every counter must end at exactly 1, no closure may fail to the user,
// and nothing may come back from a checkpoint (there is none to come back from).
// The fence test SIGSTOPs a primary until its backup is promoted, SIGCONTs it, and checks that
// writes routed to it at the old generation are refused naming that generation, that the
// chief's writes across the stall each land once, and that every copy holds the same values.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/status_board.h"
#include "net/rpc_client.h"
#include "partitioners/partitioner.h"
#include "ps/ps.capnp.h"
#include "ps/ps_wire.h"
#include "ps/replication/shard_map.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;

constexpr int kPs = 3;
constexpr int kReplicas = 2;
constexpr int kWorkers = 3;
constexpr int64_t kIds = 20'000;
constexpr int64_t kBatch = 50;
constexpr int64_t kRecordsPerSplit = 1'000;
constexpr int kRound = 32;           // closures per round
constexpr int kRoundsPerPhase = 2;   // rounds run per kill: 5 kills use 16,000 of the ids
constexpr absl::Duration kWait = absl::Seconds(90);

// Polls `condition` every 10 ms until it holds or `timeout` passes; whether it held.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = kWait) {
  for (const absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;) {
    if (condition()) return true;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
  }
  return condition();
}

// Whether every thread of process `pid` is stopped (state T or t in /proc): kill(SIGSTOP)
// returns before the stop has reached all of them, and a request arriving in between is served.
bool AllThreadsStopped(pid_t pid) {
  const std::filesystem::path tasks = absl::StrCat("/proc/", pid, "/task");
  std::error_code error;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');  // the command name may hold spaces and ')'
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    const char state = stat[paren + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return !error && any;
}

class PsReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = kPs;
    o.extra_env = {{"ASYNCPS_PS_REPLICAS", std::to_string(kReplicas)}};
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ChiefProcess::Options options = cluster_->ChiefOptions();
    options.process.ps_replicas = kReplicas;
    options.process.ps_heartbeat_timeout = absl::Seconds(2);
    auto process = ChiefProcess::Create(cluster_->chief_spec(), options);
    ASSERT_TRUE(process.ok()) << process.status();
    chief_ = std::make_unique<testutil::TestChief>(std::move(*process), *FixedShardsPartitioner::Create(kPs));
    ASSERT_NE(monitor(), nullptr);
    auto counts = chief_->strategy().CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
    ASSERT_TRUE(counts.ok()) << counts.status();
    counts_ = std::make_unique<ShardedVariable>(*counts);
    ASSERT_EQ(counts_->num_shards(), static_cast<size_t>(kPs));
  }

  void TearDown() override {
    coordinator_.reset();
    checkpoints_.reset();  // after the coordinator, which restores from it
    if (!checkpoint_dir_.empty()) std::filesystem::remove_all(checkpoint_dir_);
    counts_.reset();
    chief_.reset();
    cluster_.reset();
  }

  PsMonitor* monitor() { return chief_->process().ps_monitor(); }

  // Every group has a primary and k-1 in-sync backups, and nothing is being rebuilt.
  bool FullyReplicated() {
    const ps::ShardMap map = monitor()->map();
    for (const ps::GroupEntry& g : map.groups) {
      if (g.primary < 0 || g.backups.size() != kReplicas - 1 || !g.rebuilding.empty()) return false;
    }
    return map.groups.size() == kPs;
  }

  bool IsPrimary(int ps) {
    for (const ps::GroupEntry& g : monitor()->map().groups) {
      if (g.primary == ps) return true;
    }
    return false;
  }

  bool IsRebuilding(int ps) {
    for (const ps::GroupEntry& g : monitor()->map().groups) {
      if (std::find(g.rebuilding.begin(), g.rebuilding.end(), ps) != g.rebuilding.end()) return true;
    }
    return false;
  }

  // SIGKILLs PS `ps`, waits until the chief counts it lost (its groups failed over), and
  // restarts it empty at its address.
  void KillUntilLostAndRestart(int ps) {
    const int64_t lost = monitor()->stats().ps_lost;
    ASSERT_TRUE(cluster_->KillPs(ps).ok());
    ASSERT_TRUE(WaitFor([&] { return monitor()->stats().ps_lost > lost; })) << "ps " << ps << " never lost";
    EXPECT_FALSE(IsPrimary(ps)) << "a lost PS is still a primary: " << monitor()->map().DebugString();
    ASSERT_TRUE(cluster_->RestartPs(ps).ok());
  }

  std::vector<int64_t> Counts() {
    auto value = counts_->Read();
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) return {};
    return std::vector<int64_t>(value->data<int64_t>(), value->data<int64_t>() + kIds);
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> counts_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::string checkpoint_dir_;

  void LoseEveryCopyOfGroupZeroPastACheckpoint(bool stay_down);
};

TEST_F(PsReplicationTest, FiveKillsInOneEpochLoseNoUpdate) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, testutil::FastFailureDetection());
  auto dataset = coordinator_->CreatePerWorkerDataset(
      "ids", {{"n", std::to_string(kIds)}, {"batch", std::to_string(kBatch)}}, ShardingPolicy::kDynamic,
      kRecordsPerSplit);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto iterator = dataset->MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();

  // The epoch runs in rounds on its own thread; the test lets it start kRoundsPerPhase rounds
  // per kill, so every kill lands while a round is in flight and the epoch outlasts the kills.
  Mutex mu;
  int rounds_allowed = 0, rounds_started = 0;
  int64_t counted = 0, failed = 0;
  std::string first_failure;
  std::thread epoch([&] {
    for (int round = 0; round < 1000; ++round) {
      {
        MutexLock lock(&mu);
        std::pair<int*, int*> gate(&rounds_allowed, &rounds_started);
        mu.Await(absl::Condition(+[](std::pair<int*, int*>* p) { return *p->second < *p->first; }, &gate));
      }
      std::vector<RemoteValue> values;
      for (int i = 0; i < kRound; ++i) {
        auto v = coordinator_->Schedule("count_ids", {*iterator, Tensor::Scalar<int64_t>(10)});
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) values.push_back(*v);
      }
      {
        MutexLock lock(&mu);
        ++rounds_started;
      }
      const absl::Status joined = coordinator_->Join();
      MutexLock lock(&mu);
      for (const RemoteValue& v : values) {
        auto r = v.Fetch();
        if (r.ok()) {
          counted += r->at(1).data<int64_t>()[0];
        } else if (r.status().code() != absl::StatusCode::kOutOfRange) {
          if (failed++ == 0) first_failure = r.status().ToString();
        }
      }
      if (absl::IsOutOfRange(joined)) return;
      if (!joined.ok() && failed++ == 0) first_failure = joined.ToString();
    }
  });
  // Lets the epoch start its next phase and returns once that phase's first round is in flight.
  auto next_phase = [&] {
    MutexLock lock(&mu);
    const int started = rounds_started;
    rounds_allowed = started + kRoundsPerPhase;
    struct Arg {
      int* started;
      int before;
    } arg{&rounds_started, started};
    mu.Await(absl::Condition(+[](Arg* a) { return *a->started > a->before; }, &arg));
  };
  auto rebuilt = [&](const std::string& what) {
    ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); }))
        << what << ": not rebuilt: " << monitor()->map().DebugString();
  };

  // Three primaries. The first one comes back holding only backups (its group stays with the
  // promoted copy), which the fourth kill takes.
  next_phase();
  const int first = 0;
  ASSERT_TRUE(IsPrimary(first));
  KillUntilLostAndRestart(first);
  rebuilt("primary ps 0");
  ASSERT_FALSE(IsPrimary(first)) << monitor()->map().DebugString();

  next_phase();
  KillUntilLostAndRestart(first);  // holds only backups
  rebuilt("backup-only ps 0");

  for (const char* which : {"second primary", "third primary"}) {
    next_phase();
    int primary = -1;
    for (int ps = 1; ps < kPs && primary < 0; ++ps) {
      if (IsPrimary(ps)) primary = ps;
    }
    ASSERT_GE(primary, 0) << monitor()->map().DebugString();
    KillUntilLostAndRestart(primary);
    rebuilt(which);
  }

  // A returning PS killed again while the chief has it rebuilding.
  next_phase();
  const int returning = 2;
  KillUntilLostAndRestart(returning);
  ASSERT_TRUE(WaitFor([&] { return IsRebuilding(returning); })) << monitor()->map().DebugString();
  KillUntilLostAndRestart(returning);
  rebuilt("ps 2 killed mid-rebuild");

  {
    MutexLock lock(&mu);
    rounds_allowed = 1'000'000;  // the rest of the epoch
  }
  epoch.join();

  EXPECT_EQ(failed, 0) << "first failure: " << first_failure;
  EXPECT_EQ(counted, kIds);
  const std::vector<int64_t> counts = Counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
  std::string wrong;
  int64_t wrong_count = 0;
  for (int64_t i = 0; i < kIds; ++i) {
    if (counts[i] != 1 && wrong_count++ < 10) absl::StrAppend(&wrong, " id ", i, "=", counts[i]);
  }
  EXPECT_EQ(wrong_count, 0) << wrong;
  const PsMonitor::Stats stats = monitor()->stats();
  EXPECT_GE(stats.failovers, 3);
  EXPECT_EQ(stats.ps_lost, 6);
  EXPECT_EQ(stats.no_live_copy, 0) << "a group lost every copy";
  EXPECT_EQ(coordinator_->ps_recovery_stats().recoveries, 0) << "nothing is restored from a checkpoint";
  // Every PS watched and shown, with the groups' copies.
  const std::string json = chief_->process().status_board().Json();
  EXPECT_EQ(json.find("unwatched"), std::string::npos) << json;
  EXPECT_NE(json.find("\"shard_groups\""), std::string::npos) << json;
}

// A raw ps.Update of row 0 of group `group`'s shard of "counts" (add 1), routed {group,
// generation}, sent over `client`; its status.
absl::Status AddToRowZero(net::RpcClient& client, int group, uint64_t generation, absl::Duration timeout) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::UpdateRequest>();
  auto route = req.initRoute();
  route.setGroup(static_cast<uint32_t>(group));
  route.setGeneration(generation);
  auto u = req.initUpdates(1)[0];
  u.setName(absl::StrCat("counts/part_", group));
  u.setKind(ps::UpdateKindToWire(UpdateKind::kAdd));
  m.AddTensor(Tensor::FromVector(std::vector<int64_t>{1}), u.initValue());
  u.setHasIds(true);
  m.AddTensor(Tensor::FromVector(std::vector<int64_t>{0}), u.initIds());
  return client.Call("ps.Update", std::move(m), timeout).status();
}

// The generation of group `group` in the shard map PS `client` itself holds (ps.GetShardMap);
// 0 when it holds none or does not answer.
uint64_t HeldGeneration(net::RpcClient& client, int group) {
  auto r = client.Call("ps.GetShardMap", net::OutMessage(), absl::Seconds(5));
  if (!r.ok()) return 0;
  for (auto g : r->ResponseBody<wire::GetShardMapResponse>().getMap().getGroups()) {
    if (static_cast<int>(g.getGroup()) == group) return g.getGeneration();
  }
  return 0;
}

// A primary stalled (SIGSTOP) past the heartbeat timeout is replaced; once it runs again
// (SIGCONT) a write routed to it at the old generation is refused, naming that generation,
// while the chief's own writes, in flight across the stall, each land exactly once.
TEST_F(PsReplicationTest, StalledPrimaryIsFencedWhenItResumes) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  const int stalled = monitor()->map().Find(0)->primary;
  const uint64_t old_generation = monitor()->map().Find(0)->generation;
  std::unique_ptr<net::RpcClient> raw = chief_->process().Connect(chief_->process().cluster().ps()[stalled]);
  ASSERT_TRUE(AddToRowZero(*raw, 0, old_generation, absl::Seconds(20)).ok()) << "the primary takes writes";

  // The chief's own writes to row 0 of every group, back to back, across the stall.
  Mutex mu;
  bool stop = false;
  int64_t acknowledged = 0;
  absl::Status write_error;
  std::thread writer([&] {
    std::vector<int64_t> ids;
    for (int g = 0; g < kPs; ++g) ids.push_back(g * ((kIds + kPs - 1) / kPs));
    const Tensor rows = Tensor::FromVector(ids);
    const Tensor ones = Tensor::FromVector(std::vector<int64_t>(ids.size(), 1));
    while (true) {
      {
        MutexLock lock(&mu);
        if (stop) return;
      }
      absl::Status s = chief_->process().ps().Update({{"counts", UpdateKind::kAdd, ones, rows}});
      MutexLock lock(&mu);
      if (!s.ok()) {
        write_error = s;
        return;
      }
      ++acknowledged;
    }
  });
  auto acknowledged_now = [&] {
    MutexLock lock(&mu);
    return acknowledged;
  };
  ASSERT_TRUE(WaitFor([&] { return acknowledged_now() >= 20; }));

  cluster_->ps_process(stalled).Signal(SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return AllThreadsStopped(cluster_->ps_process(stalled).pid()); }));
  // Sent while it is stopped: it reads it only once it runs again, by then replaced.
  absl::Status queued;
  std::thread queued_write([&] { queued = AddToRowZero(*raw, 0, old_generation, absl::Seconds(60)); });
  ASSERT_TRUE(WaitFor([&] { return monitor()->map().Find(0)->primary != stalled; }))
      << monitor()->map().DebugString();
  // The chief decides before its map reaches the PS: until the promoted backup holds the new
  // generation it still applies the stalled primary's stream, so a write the stalled primary
  // takes then is acknowledged (and applied once), not refused. Resume it only after.
  {
    const int promoted = monitor()->map().Find(0)->primary;
    std::unique_ptr<net::RpcClient> to_promoted =
        chief_->process().Connect(chief_->process().cluster().ps()[promoted]);
    ASSERT_TRUE(WaitFor([&] { return HeldGeneration(*to_promoted, 0) > old_generation; }))
        << monitor()->map().DebugString();
  }
  const int64_t before_resume = acknowledged_now();
  cluster_->ps_process(stalled).Signal(SIGCONT);
  queued_write.join();
  EXPECT_TRUE(ps::IsStaleShardMap(queued)) << queued;
  EXPECT_NE(queued.message().find(absl::StrCat("generation ", old_generation)), std::string::npos)
      << queued;

  ASSERT_TRUE(WaitFor([&] { return FullyReplicated() && acknowledged_now() >= before_resume + 20; }))
      << monitor()->map().DebugString();
  const absl::Status late = AddToRowZero(*raw, 0, old_generation, absl::Seconds(20));
  EXPECT_TRUE(ps::IsStaleShardMap(late)) << late;
  EXPECT_NE(late.message().find(absl::StrCat("generation ", old_generation)), std::string::npos) << late;
  {
    MutexLock lock(&mu);
    stop = true;
  }
  writer.join();
  EXPECT_TRUE(write_error.ok()) << write_error;

  // Row 0 of every group holds exactly the acknowledged writes (plus the first raw one in
  // group 0): none lost in the stall, none applied twice, none of the refused ones applied.
  const std::vector<int64_t> counts = Counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
  for (int g = 0; g < kPs; ++g) {
    EXPECT_EQ(counts[g * ((kIds + kPs - 1) / kPs)], acknowledged + (g == 0 ? 1 : 0)) << "group " << g;
  }

  // Every copy holds the same bytes: with no writes any more, each group's other copy is made
  // to serve (its primary SIGKILLed and failed over) and read whole; it must equal what the
  // primaries served. The stalled PS's copies are among them (rebuilt after the stall).
  std::set<int> compared;
  for (int round = 0; round < kPs && compared.size() < static_cast<size_t>(kPs); ++round) {
    const ps::ShardMap map = monitor()->map();
    int victim = -1;
    for (const ps::GroupEntry& g : map.groups) {
      if (!compared.contains(static_cast<int>(g.group))) victim = g.primary;
    }
    ASSERT_GE(victim, 0) << map.DebugString();
    std::vector<int> moved;
    for (const ps::GroupEntry& g : map.groups) {
      if (g.primary == victim) moved.push_back(static_cast<int>(g.group));
    }
    KillUntilLostAndRestart(victim);
    EXPECT_TRUE(Counts() == counts) << "a backup copy differs from its primary's (groups now served by "
                                    << "their backups: " << moved.size() << ")";
    compared.insert(moved.begin(), moved.end());
    ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  }
  EXPECT_EQ(compared.size(), static_cast<size_t>(kPs));
}

// Both copies of one group SIGKILLed together past a checkpoint (k = 2, 3 PS): the chief marks
// the group restore_pending, the returning copy serves nothing but the restore, and automatic
// PS recovery starts at once (told by the monitor, not by closures failing at their deadline):
// it restores the checkpoint onto every group and rolls the split cursor back, so the batches
// completed since are trained again, once. Every counter ends at exactly 1 and no closure fails.
// The kill comes once 16 closures completed past a checkpoint; with `stay_down` the two PS are
// restarted only once the chief has declared both lost (the group has no copy meanwhile),
// else at once (the chief sees them restarted).
void PsReplicationTest::LoseEveryCopyOfGroupZeroPastACheckpoint(bool stay_down) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  checkpoint_dir_ = absl::StrCat(::testing::TempDir(), "/ps_replication_restore_", getpid());
  std::filesystem::remove_all(checkpoint_dir_);
  checkpoints_ = std::make_unique<CheckpointManager>(chief_->strategy(), checkpoint_dir_, /*max_to_keep=*/2);
  CheckpointManager& checkpoints = *checkpoints_;
  ClusterCoordinator::Options options = testutil::FastFailureDetection();
  options.ps_recovery.enabled = true;
  options.ps_recovery.checkpoints = &checkpoints;
  options.ps_recovery.timeout = absl::Seconds(60);  // a failed repair fails the test, not hangs it
  coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, options);
  auto dataset = coordinator_->CreatePerWorkerDataset(
      "ids", {{"n", std::to_string(kIds)}, {"batch", std::to_string(kBatch)}}, ShardingPolicy::kDynamic,
      kRecordsPerSplit);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto iterator = dataset->MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();

  Mutex mu;
  int64_t saved = 0, completed_at = 0, completed = 0, counted = 0, failed = 0;
  bool done = false;
  std::string first_failure;
  std::thread trainer([&] {
    for (int round = 1; round < 1000; ++round) {
      std::vector<RemoteValue> values;
      for (int i = 0; i < kRound; ++i) {
        auto v = coordinator_->Schedule("count_ids", {*iterator, Tensor::Scalar<int64_t>(10)});
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) values.push_back(*v);
      }
      const absl::Status joined = coordinator_->Join();
      {
        MutexLock lock(&mu);
        for (const RemoteValue& v : values) {
          auto r = v.Fetch();
          if (r.ok()) {
            counted += r->at(1).data<int64_t>()[0];
            ++completed;
          } else if (r.status().code() != absl::StatusCode::kOutOfRange) {
            if (failed++ == 0) first_failure = r.status().ToString();
          }
        }
        if (!joined.ok() && !absl::IsOutOfRange(joined) && failed++ == 0) first_failure = joined.ToString();
      }
      if (!joined.ok()) break;
      // A join point: nothing in flight, so the variables and the cursor are one cut. A save
      // that a kill interrupts is not committed.
      if (round % 3 == 0 && checkpoints.Save(round, coordinator_->SplitCursorState()).ok()) {
        MutexLock lock(&mu);
        ++saved;
        completed_at = completed;
      }
    }
    MutexLock lock(&mu);
    done = true;
  });
  // Once enough closures completed past a checkpoint, both copies of group 0 go at once.
  auto past_a_checkpoint = [&] {
    MutexLock lock(&mu);
    return done || (saved > 0 && completed >= completed_at + 16);
  };
  const bool past = WaitFor(past_a_checkpoint, absl::Seconds(120)) && [&] {
    MutexLock lock(&mu);
    return !done;
  }();
  EXPECT_TRUE(past) << "the epoch ended (or stalled) before a kill past a checkpoint";
  const ps::GroupEntry group = *monitor()->map().Find(0);
  EXPECT_EQ(group.backups.size(), 1u) << monitor()->map().DebugString();
  if (past && group.backups.size() == 1) {
    const int64_t lost = monitor()->stats().ps_lost;
    for (int ps : {group.primary, group.backups[0]}) EXPECT_TRUE(cluster_->KillPs(ps).ok());
    if (stay_down) {
      EXPECT_TRUE(WaitFor([&] { return monitor()->stats().ps_lost >= lost + 2; }));
      EXPECT_EQ(monitor()->map().Find(0)->primary, -1) << monitor()->map().DebugString();
      EXPECT_TRUE(monitor()->map().Find(0)->restore_pending) << monitor()->map().DebugString();
    }
    for (int ps : {group.primary, group.backups[0]}) EXPECT_TRUE(cluster_->RestartPs(ps).ok());
  }
  trainer.join();
  ASSERT_TRUE(past);

  EXPECT_EQ(failed, 0) << "first failure: " << first_failure;
  const PsRecovery::Stats recovery = coordinator_->ps_recovery_stats();
  EXPECT_FALSE(recovery.gave_up);
  EXPECT_EQ(recovery.recoveries, 1);
  PsRecovery::Event event;
  for (const PsRecovery::Event& e : recovery.events) {
    if (!e.lost_ps.empty()) event = e;
  }
  EXPECT_EQ(event.lost_ps, std::vector<int>{0}) << "the group that lost every copy";
  EXPECT_TRUE(event.cursors_missing.empty());
  EXPECT_EQ(counted - kIds, event.batches_redone * kBatch) << "each batch since the checkpoint trained once more";
  EXPECT_GE(monitor()->stats().restored, 1);
  EXPECT_FALSE(monitor()->map().Find(0)->restore_pending) << monitor()->map().DebugString();
  const std::vector<int64_t> counts = Counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
  std::string wrong;
  int64_t wrong_count = 0;
  for (int64_t i = 0; i < kIds; ++i) {
    if (counts[i] != 1 && wrong_count++ < 10) absl::StrAppend(&wrong, " id ", i, "=", counts[i]);
  }
  EXPECT_EQ(wrong_count, 0) << wrong;
}

TEST_F(PsReplicationTest, EveryCopyOfAGroupLostIsRestoredFromTheCheckpointExactlyOnce) {
  LoseEveryCopyOfGroupZeroPastACheckpoint(/*stay_down=*/false);
}

// The same with the group left without any copy until the chief declared both PS lost: the
// recovery starts then and waits for a copy to come back.
TEST_F(PsReplicationTest, GroupWithoutACopyForAWhileIsRestoredExactlyOnce) {
  LoseEveryCopyOfGroupZeroPastACheckpoint(/*stay_down=*/true);
}

// The chief's own writes (untagged by the caller) to group 0, back to back, while its primary
// is SIGKILLed and restarted: the write in flight at the kill and those sent to the dead
// primary until the failover ride it out (tagged by the chief's client, so resent and applied
// once) and none is reported failed. (Writes to one group only: a write that also reached a
// group whose backup was the killed PS would wait there for the failover and never be sent
// to the dead primary.) Without the tags the first of them fails Unavailable.
TEST_F(PsReplicationTest, ChiefWritesRideOutAPrimaryKilledAndLandOnce) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  Mutex mu;
  bool stop = false;
  int64_t acknowledged = 0;
  absl::Status write_error;
  const std::vector<int64_t> ids = {0, 1, 2};  // rows of group 0's shard
  std::thread writer([&] {
    const Tensor rows = Tensor::FromVector(ids);
    const Tensor ones = Tensor::FromVector(std::vector<int64_t>(ids.size(), 1));
    while (true) {
      {
        MutexLock lock(&mu);
        if (stop) return;
      }
      absl::Status s = chief_->process().ps().Update({{"counts", UpdateKind::kAdd, ones, rows}});
      MutexLock lock(&mu);
      if (!s.ok()) {
        write_error = s;
        return;
      }
      ++acknowledged;
    }
  });
  auto acknowledged_now = [&] {
    MutexLock lock(&mu);
    return acknowledged;
  };
  auto failed_now = [&] {
    MutexLock lock(&mu);
    return !write_error.ok();
  };
  ASSERT_TRUE(WaitFor([&] { return acknowledged_now() >= 20 || failed_now(); }));
  const int primary = monitor()->map().Find(0)->primary;
  KillUntilLostAndRestart(primary);
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated() || failed_now(); })) << monitor()->map().DebugString();
  const int64_t rebuilt_at = acknowledged_now();
  ASSERT_TRUE(WaitFor([&] { return acknowledged_now() >= rebuilt_at + 20 || failed_now(); }));
  {
    MutexLock lock(&mu);
    stop = true;
  }
  writer.join();
  EXPECT_TRUE(write_error.ok()) << write_error;
  const std::vector<int64_t> counts = Counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
  for (int64_t id : ids) EXPECT_EQ(counts[id], acknowledged) << "row " << id;
}

}  // namespace
}  // namespace asyncps
