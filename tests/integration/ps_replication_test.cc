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
#include <iostream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/closure_arg.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/status_board.h"
#include "net/rpc_client.h"
#include "partitioners/partitioner.h"
#include "ps/ps.capnp.h"
#include "ps/ps_wire.h"
#include "ps/replication/shard_map.h"
#include "ps/update_tag.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/replicated_cluster.h"

namespace asyncps {
namespace ps_replication_test {
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

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout = kWait) {
  return testutil::WaitFor(condition, timeout);
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
  // How many PS (one shard group each; variables are split in as many shards).
  virtual int NumPs() const { return kPs; }
  // Runs on the cluster before the chief starts (a PS restarted with a test hook, say).
  virtual absl::Status BeforeChief(LocalCluster&) { return absl::OkStatus(); }

  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kWorkers;
    o.num_ps = NumPs();
    auto cluster = testutil::ReplicatedCluster::Start(o, kReplicas, [this](LocalCluster& c) { return BeforeChief(c); });
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    replicated_ = std::move(*cluster);
    cluster_ = &replicated_->cluster();
    chief_ = &replicated_->chief();
    auto counts = chief_->strategy().CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
    ASSERT_TRUE(counts.ok()) << counts.status();
    counts_ = std::make_unique<ShardedVariable>(*counts);
    ASSERT_EQ(counts_->num_shards(), static_cast<size_t>(NumPs()));
  }

  void TearDown() override {
    iterator_.reset();
    coordinator_.reset();
    checkpoints_.reset();  // after the coordinator, which restores from it
    if (!checkpoint_dir_.empty()) std::filesystem::remove_all(checkpoint_dir_);
    counts_.reset();
    replicated_.reset();
  }

  PsMonitor* monitor() { return &replicated_->monitor(); }
  // Every group has a primary and k-1 in-sync backups, and nothing is being rebuilt.
  bool FullyReplicated() { return replicated_->FullyReplicated(); }
  bool IsPrimary(int ps) { return replicated_->IsPrimary(ps); }
  bool IsRebuilding(int ps) { return replicated_->IsRebuilding(ps); }

  // SIGKILLs PS `ps`, waits until the chief counts it lost (its groups failed over), and
  // restarts it empty at its address.
  void KillUntilLostAndRestart(int ps) {
    const absl::Status s = replicated_->KillUntilLostAndRestart(ps, kWait);
    ASSERT_TRUE(s.ok()) << s;
  }

  std::vector<int64_t> Counts() {
    auto value = counts_->Read();
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) return {};
    return std::vector<int64_t>(value->data<int64_t>(), value->data<int64_t>() + kIds);
  }

  // Every counter is exactly 1 (up to ten that are not, shown).
  void ExpectEveryIdCountedOnce() {
    const std::vector<int64_t> counts = Counts();
    ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
    std::string wrong;
    int64_t wrong_count = 0;
    for (int64_t i = 0; i < kIds; ++i) {
      if (counts[i] != 1 && wrong_count++ < 10) absl::StrAppend(&wrong, " id ", i, "=", counts[i]);
    }
    EXPECT_EQ(wrong_count, 0) << wrong;
  }

  // Automatic PS recovery from checkpoints (two kept) in a fresh directory, a coordinator
  // with it, and iterator_ over the ids (dynamic sharding) for RunRound.
  void StartRecoveringCoordinator() {
    checkpoint_dir_ = absl::StrCat(::testing::TempDir(), "/ps_replication_restore_", getpid());
    std::filesystem::remove_all(checkpoint_dir_);
    checkpoints_ = std::make_unique<CheckpointManager>(chief_->strategy(), checkpoint_dir_, /*max_to_keep=*/2);
    ClusterCoordinator::Options options = testutil::FastFailureDetectionWithPsRecovery(checkpoints_.get());
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, options);
    StartEpoch();
  }

  // iterator_ over the ids dataset (dynamic sharding), for RunRound.
  void StartEpoch() {
    auto dataset = coordinator_->CreatePerWorkerDataset(
        "ids", {{"n", std::to_string(kIds)}, {"batch", std::to_string(kBatch)}}, ShardingPolicy::kDynamic,
        kRecordsPerSplit);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    auto iterator = dataset->MakeIterator();
    ASSERT_TRUE(iterator.ok()) << iterator.status();
    iterator_ = std::make_unique<PerWorkerValues>(*std::move(iterator));
  }

  // Schedules a round of kRound count_ids closures over iterator_, calls `scheduled` (when
  // set), joins, and tallies what they counted and which failed; Join's status (OutOfRange:
  // the epoch is over). Any thread, one round at a time.
  absl::Status RunRound(const std::function<void()>& scheduled = nullptr) {
    std::vector<RemoteValue> values;
    for (int i = 0; i < kRound; ++i) {
      auto v = coordinator_->Schedule("count_ids", {*iterator_, Tensor::Scalar<int64_t>(10)});
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok()) values.push_back(*v);
    }
    if (scheduled) scheduled();
    const absl::Status joined = coordinator_->Join();
    MutexLock lock(&tally_mu_);
    for (const RemoteValue& v : values) {
      auto r = v.Fetch();
      if (r.ok()) {
        counted_ += r->at(1).data<int64_t>()[0];
        ++completed_;
      } else if (r.status().code() != absl::StatusCode::kOutOfRange) {
        if (failed_++ == 0) first_failure_ = r.status().ToString();
      }
    }
    if (!joined.ok() && !absl::IsOutOfRange(joined) && failed_++ == 0) first_failure_ = joined.ToString();
    return joined;
  }

  // Runs `n` rounds on the test thread, each of which must complete without ending the epoch.
  void RunRounds(int n) {
    for (int i = 0; i < n; ++i) {
      const absl::Status joined = RunRound();
      ASSERT_TRUE(joined.ok()) << joined;
    }
  }

  // Runs rounds until the epoch ends.
  void FinishEpoch() {
    for (int round = 0; round < 1000; ++round) {
      const absl::Status joined = RunRound();
      if (absl::IsOutOfRange(joined)) return;
      ASSERT_TRUE(joined.ok()) << joined;
    }
    FAIL() << "the epoch did not end";
  }

  // Checkpoint `step` with the split cursor, at a join point (nothing in flight: one cut).
  absl::StatusOr<std::string> Save(int64_t step) { return checkpoints_->Save(step, coordinator_->SplitCursorState()); }

  // SIGKILLs every PS of `ps` together and waits until the chief counts them all lost and
  // every group of `groups` awaits a restore with no copy left.
  void LoseTogether(const std::vector<int>& ps, const std::vector<int>& groups) {
    const int64_t lost = monitor()->stats().ps_lost;
    for (int p : ps) ASSERT_TRUE(cluster_->KillPs(p).ok());
    ASSERT_TRUE(WaitFor([&] { return monitor()->stats().ps_lost >= lost + static_cast<int64_t>(ps.size()); }))
        << monitor()->map().DebugString();
    ExpectAwaitingRestoreWithoutCopy(groups);
  }

  // LoseTogether, then restarts them (empty).
  void LoseTogetherAndRestart(const std::vector<int>& ps, const std::vector<int>& groups) {
    LoseTogether(ps, groups);
    for (int p : ps) ASSERT_TRUE(cluster_->RestartPs(p).ok());
  }

  void ExpectAwaitingRestoreWithoutCopy(const std::vector<int>& groups) {
    const ps::ShardMap map = monitor()->map();
    for (int g : groups) {
      const ps::GroupEntry* entry = map.Find(static_cast<uint32_t>(g));
      ASSERT_NE(entry, nullptr) << g;
      EXPECT_EQ(entry->primary, -1) << "group " << g << ": " << map.DebugString();
      EXPECT_TRUE(entry->restore_pending) << "group " << g << ": " << map.DebugString();
    }
  }

  // Whether a group awaits a restore in the chief's map.
  bool AnyRestorePending() {
    for (const ps::GroupEntry& g : monitor()->map().groups) {
      if (g.restore_pending) return true;
    }
    return false;
  }

  // Waits until `n` recoveries are done and no group awaits a restore; the last event that
  // restored something.
  PsRecovery::Event WaitRecovered(int64_t n) {
    EXPECT_TRUE(WaitFor([&] { return coordinator_->ps_recovery_stats().recoveries >= n && !AnyRestorePending(); }))
        << coordinator_->ps_recovery_stats().recoveries << " recoveries; " << monitor()->map().DebugString();
    return LastRestore();
  }

  PsRecovery::Event LastRestore() {
    PsRecovery::Event event;
    for (const PsRecovery::Event& e : coordinator_->ps_recovery_stats().events) {
      if (!e.lost_ps.empty()) event = e;
    }
    return event;
  }

  // After an epoch with `recoveries` restores (each of every group, with the cursor): no
  // closure failed, no recovery gave up or missed a cursor, the ids counted beyond kIds are
  // exactly the batches the restores handed out again, and every counter is exactly 1.
  void ExpectExactlyOnceThroughRestores(int64_t recoveries) {
    MutexLock lock(&tally_mu_);
    EXPECT_EQ(failed_, 0) << "first failure: " << first_failure_;
    const PsRecovery::Stats recovery = coordinator_->ps_recovery_stats();
    EXPECT_FALSE(recovery.gave_up);
    EXPECT_EQ(recovery.recoveries, recoveries);
    EXPECT_EQ(recovery.cursors_missing, 0);
    EXPECT_EQ(counted_ - kIds, recovery.batches_redone * kBatch) << "each batch since the checkpoint trained once more";
    EXPECT_FALSE(AnyRestorePending()) << monitor()->map().DebugString();
    ExpectEveryIdCountedOnce();
  }

  // With nothing running since groups `groups` lost every copy: one recovery restores
  // `checkpoint` (every counter back at `saved_counts`, what the test read right after saving
  // it), and after the rest of the epoch every id is counted exactly once.
  void ExpectOneRestoreThenFinish(const std::string& checkpoint, const std::vector<int>& groups,
                                  const std::vector<int64_t>& saved_counts) {
    const PsRecovery::Event event = WaitRecovered(1);
    EXPECT_EQ(event.checkpoint, checkpoint);
    EXPECT_EQ(event.lost_ps, groups);
    EXPECT_EQ(monitor()->stats().restored, static_cast<int64_t>(groups.size()));
    EXPECT_TRUE(Counts() == saved_counts) << "the restore did not bring back exactly the checkpoint";
    FinishEpoch();
    ExpectExactlyOnceThroughRestores(/*recoveries=*/1);
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<testutil::ReplicatedCluster> replicated_;
  LocalCluster* cluster_ = nullptr;         // replicated_'s
  testutil::TestChief* chief_ = nullptr;    // replicated_'s
  std::unique_ptr<ShardedVariable> counts_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::unique_ptr<PerWorkerValues> iterator_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  std::string checkpoint_dir_;

  Mutex tally_mu_;  // RunRound may run on a thread of the test's
  int64_t counted_ ABSL_GUARDED_BY(tally_mu_) = 0;    // ids the closures reported counting
  int64_t completed_ ABSL_GUARDED_BY(tally_mu_) = 0;  // closures that returned their count
  int64_t failed_ ABSL_GUARDED_BY(tally_mu_) = 0;
  std::string first_failure_ ABSL_GUARDED_BY(tally_mu_);

  void LoseEveryCopyPastACheckpoint(const std::vector<int>& ps, const std::vector<int>& groups, bool stay_down);
};

TEST_F(PsReplicationTest, FiveKillsInOneEpochLoseNoUpdate) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, testutil::FastFailureDetection());
  StartEpoch();

  // The epoch runs in rounds on its own thread; the test lets it start kRoundsPerPhase rounds
  // per kill, so every kill lands while a round is in flight and the epoch outlasts the kills.
  Mutex mu;
  int rounds_allowed = 0, rounds_started = 0;
  std::thread epoch([&] {
    for (int round = 0; round < 1000; ++round) {
      {
        MutexLock lock(&mu);
        std::pair<int*, int*> gate(&rounds_allowed, &rounds_started);
        mu.Await(absl::Condition(+[](std::pair<int*, int*>* p) { return *p->second < *p->first; }, &gate));
      }
      const absl::Status joined = RunRound([&] {
        MutexLock lock(&mu);
        ++rounds_started;
      });
      if (absl::IsOutOfRange(joined)) return;
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

  {
    MutexLock lock(&tally_mu_);
    EXPECT_EQ(failed_, 0) << "first failure: " << first_failure_;
    EXPECT_EQ(counted_, kIds);
  }
  ExpectEveryIdCountedOnce();
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
// With `tag` (coordinator != 0), the update is tagged as a closure's; the answer's
// alreadyApplied then says whether the PS skipped it as a repeat.
absl::StatusOr<uint32_t> AddToRowZeroTagged(net::RpcClient& client, int group, uint64_t generation,
                                            absl::Duration timeout, const ps::UpdateTag& tag) {
  net::OutMessage m;
  auto req = m.InitRequestBody<wire::UpdateRequest>();
  if (tag.tagged()) {
    auto t = req.initTag();
    t.setCoordinator(tag.coordinator);
    t.setClosure(tag.closure);
    t.setSequence(tag.sequence);
    t.setWatermark(tag.watermark);
  }
  auto route = req.initRoute();
  route.setGroup(static_cast<uint32_t>(group));
  route.setGeneration(generation);
  auto u = req.initUpdates(1)[0];
  u.setName(absl::StrCat("counts/part_", group));
  u.setKind(ps::UpdateKindToWire(UpdateKind::kAdd));
  m.AddTensor(Tensor::FromVector(std::vector<int64_t>{1}), u.initValue());
  u.setHasIds(true);
  m.AddTensor(Tensor::FromVector(std::vector<int64_t>{0}), u.initIds());
  ASSIGN_OR_RETURN(net::InMessage reply, client.Call("ps.Update", std::move(m), timeout));
  return reply.ResponseBody<wire::UpdateResponse>().getAlreadyApplied();
}

absl::Status AddToRowZero(net::RpcClient& client, int group, uint64_t generation, absl::Duration timeout) {
  return AddToRowZeroTagged(client, group, generation, timeout, ps::UpdateTag()).status();
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

// The chief's own writes, back to back on a thread of their own: each a ps.Update adding 1 to
// rows `ids` of "counts", until Stop() or the first that fails.
class ChiefWriter {
 public:
  ChiefWriter(ChiefProcess& chief, std::vector<int64_t> ids)
      : chief_(chief), ids_(std::move(ids)), thread_([this] { Run(); }) {}
  ~ChiefWriter() { Stop().IgnoreError(); }

  int64_t acknowledged() const {
    MutexLock lock(&mu_);
    return acknowledged_;
  }
  bool failed() const {
    MutexLock lock(&mu_);
    return !error_.ok();
  }
  // Stops the writes (the one in flight completes) and returns the first write's error (OK
  // when none failed).
  absl::Status Stop() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
    MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Run() {
    const Tensor rows = Tensor::FromVector(ids_);
    const Tensor ones = Tensor::FromVector(std::vector<int64_t>(ids_.size(), 1));
    while (true) {
      {
        MutexLock lock(&mu_);
        if (stop_) return;
      }
      absl::Status s = chief_.ps().Update({{"counts", UpdateKind::kAdd, ones, rows}});
      MutexLock lock(&mu_);
      if (!s.ok()) {
        error_ = s;
        return;
      }
      ++acknowledged_;
    }
  }

  ChiefProcess& chief_;
  const std::vector<int64_t> ids_;
  mutable Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t acknowledged_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once everything it reads is constructed
};

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
  std::vector<int64_t> row_zeros;
  for (int g = 0; g < kPs; ++g) row_zeros.push_back(g * ((kIds + kPs - 1) / kPs));
  ChiefWriter writer(chief_->process(), row_zeros);
  auto acknowledged_now = [&] { return writer.acknowledged(); };
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
  const absl::Status write_error = writer.Stop();
  EXPECT_TRUE(write_error.ok()) << write_error;
  const int64_t acknowledged = writer.acknowledged();

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

// The chief ends; while none runs, PS 0 (group 0's primary, group 2's backup) is SIGKILLed
// and restarted empty. The new chief takes over the map the other PS hold, in which PS 0 is
// still group 0's primary and group 2's backup: it must count PS 0 lost and rebuild both
// copies (not leave group 0 with a primary that holds nothing, nor group 2 with an empty
// backup counted in sync). Then each group's other copy is made to serve (PS 1 and PS 2
// SIGKILLed in turn, PS 0's rebuilt copies promoted) and every counter holds exactly the
// writes acknowledged before the restart.
TEST_F(PsReplicationTest, PrimaryRestartedWhileNoChiefRunsIsRebuiltByTheNextChief) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  std::vector<int64_t> row_zeros;
  for (int g = 0; g < kPs; ++g) row_zeros.push_back(g * ((kIds + kPs - 1) / kPs));
  int64_t acknowledged = 0;
  {
    ChiefWriter writer(chief_->process(), row_zeros);
    ASSERT_TRUE(WaitFor([&] { return writer.acknowledged() >= 20 || writer.failed(); }));
    const absl::Status error = writer.Stop();
    ASSERT_TRUE(error.ok()) << error;
    acknowledged = writer.acknowledged();
  }
  std::vector<int64_t> expected(kIds, 0);
  for (int64_t row : row_zeros) expected[row] = acknowledged;
  ASSERT_TRUE(Counts() == expected);

  counts_.reset();  // the old chief's
  const absl::Status restarted = replicated_->RestartChief([](LocalCluster& cluster) {
    RETURN_IF_ERROR(cluster.KillPs(0));
    return cluster.RestartPs(0);
  });
  ASSERT_TRUE(restarted.ok()) << restarted;
  chief_ = &replicated_->chief();
  EXPECT_EQ(monitor()->stats().ps_lost, 1) << "the new chief counts PS 0 lost: " << monitor()->map().DebugString();
  EXPECT_NE(monitor()->map().Find(0)->primary, 0) << monitor()->map().DebugString();
  // The same variable, taken over (an existing variable of the same shape is not created again).
  auto counts = chief_->strategy().CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
  ASSERT_TRUE(counts.ok()) << counts.status();
  counts_ = std::make_unique<ShardedVariable>(*counts);
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  EXPECT_EQ(monitor()->stats().rebuilt, 2) << "PS 0 rebuilt groups 0 and 2";
  EXPECT_TRUE(Counts() == expected);

  // PS 0's rebuilt copies serve: group 0's once PS 1 is gone, group 2's once PS 2 is.
  for (int victim : {1, 2}) {
    SCOPED_TRACE(victim);
    KillUntilLostAndRestart(victim);
    EXPECT_EQ(replicated_->PrimaryOf(victim == 1 ? 0 : 2), 0) << monitor()->map().DebugString();
    EXPECT_TRUE(Counts() == expected) << "a rebuilt copy differs from the writes acknowledged";
    ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  }
  EXPECT_EQ(monitor()->stats().no_live_copy, 0);
}

// PS `ps` SIGKILLed together past a checkpoint, taking every copy of groups `groups` (k = 2):
// the chief marks those groups restore_pending, the returning copies serve nothing but the
// restore, and automatic PS recovery starts at once (told by the monitor, not by closures
// failing at their deadline): it restores the checkpoint onto every group and rolls the split
// cursor back, so the batches completed since are trained again, once. Every counter ends at
// exactly 1, no closure fails, and one recovery restores every group of `groups` (one cut:
// restoring the groups one by one would apply the redone batches twice on the others).
// The kill comes once 16 closures completed past a checkpoint, while a round is in flight;
// with `stay_down` the PS are restarted only once the chief has declared them all lost (the
// groups have no copy meanwhile), else at once (the chief sees them restarted).
void PsReplicationTest::LoseEveryCopyPastACheckpoint(const std::vector<int>& ps, const std::vector<int>& groups,
                                                     bool stay_down) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  StartRecoveringCoordinator();

  int64_t saved = 0, completed_at = 0;  // trainer's and, under tally_mu_, the test's
  bool done = false;
  std::thread trainer([&] {
    for (int round = 1; round < 1000; ++round) {
      if (!RunRound().ok()) break;
      // A join point: nothing in flight, so the variables and the cursor are one cut. A save
      // that a kill interrupts is not committed.
      if (round % 3 == 0 && Save(round).ok()) {
        MutexLock lock(&tally_mu_);
        ++saved;
        completed_at = completed_;
      }
    }
    MutexLock lock(&tally_mu_);
    done = true;
  });
  // Once enough closures completed past a checkpoint, the PS go at once.
  auto past_a_checkpoint = [&] {
    MutexLock lock(&tally_mu_);
    return done || (saved > 0 && completed_ >= completed_at + 16);
  };
  const bool past = WaitFor(past_a_checkpoint, absl::Seconds(120)) && [&] {
    MutexLock lock(&tally_mu_);
    return !done;
  }();
  EXPECT_TRUE(past) << "the epoch ended (or stalled) before a kill past a checkpoint";
  const int64_t lost = monitor()->stats().ps_lost;
  if (past) {
    for (int p : ps) EXPECT_TRUE(cluster_->KillPs(p).ok());
    if (stay_down) {
      EXPECT_TRUE(WaitFor([&] { return monitor()->stats().ps_lost >= lost + static_cast<int64_t>(ps.size()); }));
      ExpectAwaitingRestoreWithoutCopy(groups);
    }
    for (int p : ps) EXPECT_TRUE(cluster_->RestartPs(p).ok());
  }
  trainer.join();
  ASSERT_TRUE(past);

  ExpectExactlyOnceThroughRestores(/*recoveries=*/1);
  const PsRecovery::Event event = LastRestore();
  EXPECT_TRUE(event.cursors_missing.empty());
  // A PS the test did not kill counted lost: its heartbeats went unanswered past the timeout
  // (seen once with the machine's load at 8 on 2 cores: the chief's monitor ran no round for
  // 3 s). Its groups then lost their last copy too and are restored in the same recovery.
  const int64_t not_killed_lost = monitor()->stats().ps_lost - lost - static_cast<int64_t>(ps.size());
  if (not_killed_lost == 0) {
    EXPECT_EQ(event.lost_ps, groups) << "the groups that lost every copy";
    EXPECT_EQ(monitor()->stats().restored, static_cast<int64_t>(groups.size()));
  } else {
    std::cout << not_killed_lost << " PS not killed were counted lost; groups restored: "
              << absl::StrJoin(event.lost_ps, ",") << std::endl;
    for (int g : groups) {
      EXPECT_NE(std::find(event.lost_ps.begin(), event.lost_ps.end(), g), event.lost_ps.end()) << "group " << g;
    }
  }
}

// Both copies of group 0 (PS 0 and 1), restarted at once.
TEST_F(PsReplicationTest, EveryCopyOfAGroupLostIsRestoredFromTheCheckpointExactlyOnce) {
  LoseEveryCopyPastACheckpoint(/*ps=*/{0, 1}, /*groups=*/{0}, /*stay_down=*/false);
}

// The same with the group left without any copy until the chief declared both PS lost: the
// recovery starts then and waits for a copy to come back.
TEST_F(PsReplicationTest, GroupWithoutACopyForAWhileIsRestoredExactlyOnce) {
  LoseEveryCopyPastACheckpoint(/*ps=*/{0, 1}, /*groups=*/{0}, /*stay_down=*/true);
}

// Two groups losing every copy at once. With 3 PS and k = 2 (ring: group g on PS g and g+1)
// no set of dead PS takes exactly two groups (two PS take one group, three take all three), so
// this runs 4 PS: PS 0, 1 and 2 SIGKILLed together take groups 0 ({0,1}) and 1 ({1,2}) while
// groups 2 and 3 keep their copy on PS 3. Left down until the chief has declared all three
// lost, both groups await a restore together: the recovery, started by the first, waits for a
// copy of each (its probe needs a primary for every group) and restores both in one event,
// one cut of every group (a restore per group would roll the cursor back twice and train the
// batches in between twice on the groups restored first).
class PsReplicationFourPsTest : public PsReplicationTest {
 protected:
  int NumPs() const override { return 4; }
};

TEST_F(PsReplicationFourPsTest, TwoGroupsLosingEveryCopyAtOnceAreRestoredInOneEventExactlyOnce) {
  LoseEveryCopyPastACheckpoint(/*ps=*/{0, 1, 2}, /*groups=*/{0, 1}, /*stay_down=*/true);
}

// The step whose save PS 0 stops in (PsReplicationMidSaveTest).
constexpr int64_t kHangStep = 6;

// PS 0, group 0's primary, stops in the middle of its part of checkpoint kHangStep (file
// written under its temporary name, not renamed: the test hook of ps/checkpoint_service.h).
class PsReplicationMidSaveTest : public PsReplicationTest {
 protected:
  absl::Status BeforeChief(LocalCluster& cluster) override {
    RETURN_IF_ERROR(cluster.KillPs(0));
    setenv("ASYNCPS_TEST_CKPT_HANG_AT_STEP", std::to_string(kHangStep).c_str(), 1);
    const absl::Status restarted = cluster.RestartPs(0);
    unsetenv("ASYNCPS_TEST_CKPT_HANG_AT_STEP");
    return restarted;
  }
};

// A primary SIGKILLed in the middle of a checkpoint save (ps_replicas = 2): while it is stuck
// nothing of that checkpoint is listed or loadable; the save then fails (not committed, its
// directory removed) or completes on the promoted copy (committed whole); training goes on
// without a failure; a later save succeeds, and when every copy of a group is lost after it,
// the recovery restores exactly that checkpoint: every counter as it was saved, and after the
// epoch every counter exactly 1.
TEST_F(PsReplicationMidSaveTest, PrimaryKilledMidSaveLeavesNoHalfCheckpointAndALaterOneRestoresExactly) {
  namespace fs = std::filesystem;
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  ASSERT_EQ(replicated_->PrimaryOf(0), 0) << monitor()->map().DebugString();
  StartRecoveringCoordinator();
  RunRounds(3);
  const absl::StatusOr<std::string> first = Save(3);
  ASSERT_TRUE(first.ok()) << first.status();
  RunRounds(3);

  absl::StatusOr<std::string> second = absl::UnknownError("not run");
  std::thread save([&] { second = Save(kHangStep); });
  const std::string half = absl::StrCat(checkpoints_->directory(), "/ckpt-", kHangStep);
  const bool stuck = WaitFor([&] { return fs::exists(half + "/ps-0-of-3.safetensors.tmp"); });
  EXPECT_TRUE(stuck) << "ps 0 never reached the hook";
  // Mid-save: the previous checkpoint is the only one, and the latest.
  EXPECT_EQ(checkpoints_->List(), std::vector<std::string>{*first});
  EXPECT_EQ(checkpoints_->Latest().value_or("none"), *first);
  EXPECT_FALSE(fs::exists(half + "/manifest.json"));
  EXPECT_FALSE(ReadManifest(half).ok()) << "a half-written checkpoint reads as one";
  KillUntilLostAndRestart(0);  // group 0 fails over to PS 1
  save.join();
  if (second.ok()) {
    // Completed on the promoted copy: committed whole, and the latest good one.
    EXPECT_EQ(*second, half);
    EXPECT_EQ(checkpoints_->Latest().value_or("none"), half);
  } else {
    EXPECT_EQ(checkpoints_->Latest().value_or("none"), *first) << second.status();
    EXPECT_FALSE(fs::exists(half)) << "an uncommitted save is removed";
  }
  std::cout << "save killed mid-way: " << (second.ok() ? "completed on the promoted copy" : second.status().ToString())
            << std::endl;
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();

  RunRounds(3);  // training goes on
  const absl::StatusOr<std::string> third = Save(9);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(checkpoints_->Latest().value_or("none"), *third);
  const std::vector<int64_t> at_third = Counts();
  RunRounds(2);
  ASSERT_NE(Counts(), at_third);
  // Every copy of group 1 ({1,2}) lost at a join point: the monitor starts the recovery, which
  // restores the latest checkpoint onto every group.
  LoseTogetherAndRestart({1, 2}, {1});
  ExpectOneRestoreThenFinish(*third, {1}, at_third);
}

// Every copy of group 0 lost (PS 0 and 1), then PS 0 comes back alone with a restore that
// stops before it is applied (test hook): group 0's empty primary, restoring. It is SIGKILLed
// there, so group 0 has no copy again before its restore completed. The restore is redone on
// the copy that comes back next (as run here: the recovery's restore call for group 0 waits
// for the group's next primary and is sent again there), still in one recovery; every counter
// is then as the checkpoint holds it, and exactly 1 after the epoch.
TEST_F(PsReplicationTest, CopyLostWhileItsGroupIsRestoringIsRestoredAgainExactlyOnce) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  StartRecoveringCoordinator();
  RunRounds(3);
  const absl::StatusOr<std::string> saved = Save(3);
  ASSERT_TRUE(saved.ok()) << saved.status();
  const std::vector<int64_t> at_save = Counts();
  RunRounds(2);

  LoseTogether({0, 1}, {0});
  setenv("ASYNCPS_TEST_CKPT_HANG_AT_RESTORE", "1", 1);
  const absl::Status restarted = cluster_->RestartPs(0);
  unsetenv("ASYNCPS_TEST_CKPT_HANG_AT_RESTORE");
  ASSERT_TRUE(restarted.ok()) << restarted;
  ASSERT_TRUE(WaitFor([&] {
    return cluster_->ps_process(0).output().find("test hook: restore from") != std::string::npos;
  })) << "ps 0 never started restoring: " << monitor()->map().DebugString();
  // Restoring: group 0 still awaits its restore, served by PS 0 alone, nothing recovered yet.
  {
    const ps::ShardMap map = monitor()->map();
    EXPECT_EQ(map.Find(0)->primary, 0) << map.DebugString();
    EXPECT_TRUE(map.Find(0)->restore_pending) << map.DebugString();
    EXPECT_EQ(coordinator_->ps_recovery_stats().recoveries, 0);
  }
  LoseTogether({0}, {0});  // the restoring copy, before its restore completes
  for (int p : {0, 1}) ASSERT_TRUE(cluster_->RestartPs(p).ok());

  ExpectOneRestoreThenFinish(*saved, {0}, at_save);
}

// The chief's own writes (untagged by the caller) to group 0, back to back, while its primary
// is SIGKILLed and restarted: the write in flight at the kill and those sent to the dead
// primary until the failover ride it out (tagged by the chief's client, so resent and applied
// once) and none is reported failed. (Writes to one group only: a write that also reached a
// group whose backup was the killed PS would wait there for the failover and never be sent
// to the dead primary.) Without the tags the first of them fails Unavailable.
TEST_F(PsReplicationTest, ChiefWritesRideOutAPrimaryKilledAndLandOnce) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  const std::vector<int64_t> ids = {0, 1, 2};  // rows of group 0's shard
  ChiefWriter writer(chief_->process(), ids);
  auto acknowledged_now = [&] { return writer.acknowledged(); };
  auto failed_now = [&] { return writer.failed(); };
  ASSERT_TRUE(WaitFor([&] { return acknowledged_now() >= 20 || failed_now(); }));
  const int primary = monitor()->map().Find(0)->primary;
  KillUntilLostAndRestart(primary);
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated() || failed_now(); })) << monitor()->map().DebugString();
  const int64_t rebuilt_at = acknowledged_now();
  ASSERT_TRUE(WaitFor([&] { return acknowledged_now() >= rebuilt_at + 20 || failed_now(); }));
  const absl::Status write_error = writer.Stop();
  EXPECT_TRUE(write_error.ok()) << write_error;
  const std::vector<int64_t> counts = Counts();
  ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
  for (int64_t id : ids) EXPECT_EQ(counts[id], writer.acknowledged()) << "row " << id;
}

// A closure's update applied before a state transfer, repeated after the copy rebuilt by that
// transfer took over (a re-run of the closure, or a client's retry): the rebuilt copy received
// the primary's update window over the wire and must recognise the repeat. (The window's keys
// were hashed with absl::Hash, which is seeded per process: every key received in a transfer
// was a stranger to its new copy, and the repeat was applied a second time.)
TEST_F(PsReplicationTest, UpdateAppliedBeforeAStateTransferIsRecognisedByTheRebuiltCopy) {
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  const ps::GroupEntry before = *monitor()->map().Find(0);
  ASSERT_EQ(before.backups.size(), 1u) << monitor()->map().DebugString();
  const int first_primary = before.primary;
  const int rebuilt = before.backups[0];
  ps::UpdateTag tag;
  tag.coordinator = 1'000'000;
  tag.closure = 1'000'007;
  tag.sequence = 1;
  tag.watermark = 1'000'000;
  const absl::Duration timeout = absl::Seconds(20);
  {
    std::unique_ptr<net::RpcClient> raw =
        chief_->process().Connect(chief_->process().cluster().ps()[first_primary]);
    auto skipped = AddToRowZeroTagged(*raw, 0, before.generation, timeout, tag);
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_EQ(*skipped, 0u) << "a first update was taken for a repeat";
  }
  // The backup's copy comes back by a state transfer from the primary (window included)...
  KillUntilLostAndRestart(rebuilt);
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  // ...and becomes the group's primary when the first one dies.
  KillUntilLostAndRestart(first_primary);
  ASSERT_TRUE(WaitFor([&] { return FullyReplicated(); })) << monitor()->map().DebugString();
  const ps::GroupEntry after = *monitor()->map().Find(0);
  ASSERT_EQ(after.primary, rebuilt) << monitor()->map().DebugString();
  std::unique_ptr<net::RpcClient> raw = chief_->process().Connect(chief_->process().cluster().ps()[rebuilt]);
  auto skipped = AddToRowZeroTagged(*raw, 0, after.generation, timeout, tag);
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(*skipped, 1u) << "the repeat was applied again";
  const std::vector<int64_t> counts = Counts();
  ASSERT_FALSE(counts.empty());
  EXPECT_EQ(counts[0], 1);
}

}  // namespace
}  // namespace ps_replication_test
}  // namespace asyncps
