#include "coordinator/ps_monitor.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/status_board.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps.capnp.h"
#include "ps/replication/shard_map.h"
#include "worker/shard_map_cache.h"

// PsMonitor against scripted parameter servers: each fake PS answers the chief's calls
// (ps.GetShardMap, ps.SetShardMap, ps.ReplicaStatus) from the map it was given, as a real PS
// would, except for the copies a test marks as unable to serve. No processes; every wait is
// on a condition with a deadline.

namespace asyncps {
namespace ps_monitor_test_internal {
namespace {

constexpr absl::Duration kEventually = absl::Seconds(30);

bool WaitUntil(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + kEventually;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));  // polling the monitor, not synchronising with it
  }
  return condition();
}

// One scripted PS. Its copy of a group reports the role the map it holds gives it (a primary
// reports every other copy in sync), unless Break marked it: then it reports `role` until a
// map makes it start that copy over (rebuilding, or the restoring primary), as a real PS's
// broken copy does (ps/replication/replicated_ps.cc, SetShardMap).
class FakePs {
 public:
  // `held`: the map it holds already (none: a PS that just started).
  FakePs(int index, int num_ps, ps::ShardMap held = ps::ShardMap()) : index_(index), num_ps_(num_ps), map_(held) {
    net::RpcServer::Options o;
    o.role = "ps";
    o.task_index = index;
    server_ = std::make_unique<net::RpcServer>(loop_, o);
    server_->Register<wire::Empty>(
        "ps.GetShardMap", net::PeerRoles{"chief", "worker"},
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
          MutexLock lock(&mu_);
          auto out = resp->InitResponseBody<wire::GetShardMapResponse>();
          ps::ShardMapToWire(map_, out.initMap());
          out.setPsIndex(index_);
          out.setIncarnation(kIncarnation);
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
    server_->Register<wire::SetShardMapRequest>(
        "ps.SetShardMap", net::ChiefOnly(),
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage*) {
          absl::StatusOr<ps::ShardMap> map =
              ps::ShardMapFromWire(req.RequestBody<wire::SetShardMapRequest>().getMap(), num_ps_);
          if (!map.ok()) return map.status();
          MutexLock lock(&mu_);
          if (map->generation < map_.generation) return absl::FailedPreconditionError("older map");
          map_ = *std::move(map);
          for (auto it = broken_.begin(); it != broken_.end();) {
            const ps::GroupEntry* e = map_.Find(it->first);
            const bool starts_over =
                e == nullptr || std::find(e->rebuilding.begin(), e->rebuilding.end(), index_) != e->rebuilding.end() ||
                (e->primary == index_ && e->restore_pending);
            it = starts_over ? broken_.erase(it) : std::next(it);
          }
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
    server_->Register<wire::Empty>(
        "ps.ReplicaStatus", net::ChiefOnly(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
          MutexLock lock(&mu_);
          // Silenced: the answer waits (on the I/O thread, so nothing else is served either)
          // as a PS behind a partition never answers, until the silence ends.
          auto heard = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !silent_ || stopping_; };
          mu_.Await(absl::Condition(&heard));
          ++answered_;
          auto out = resp->InitResponseBody<wire::ReplicaStatusResponse>();
          out.setPsIndex(index_);
          out.setIncarnation(kIncarnation);
          out.setMapGeneration(map_.generation);
          std::vector<const ps::GroupEntry*> held;
          for (const ps::GroupEntry& e : map_.groups) {
            if (e.Holds(index_)) held.push_back(&e);
          }
          auto copies = out.initCopies(static_cast<unsigned>(held.size()));
          for (unsigned i = 0; i < held.size(); ++i) {
            const ps::GroupEntry& e = *held[i];
            auto c = copies[i];
            c.setGroup(e.group);
            c.setGeneration(e.generation);
            auto broken = broken_.find(e.group);
            if (broken != broken_.end()) {
              c.setRole(broken->second);
              continue;
            }
            if (e.primary != index_) {
              const bool backup = std::find(e.backups.begin(), e.backups.end(), index_) != e.backups.end();
              c.setRole(backup ? wire::CopyRole::BACKUP : wire::CopyRole::REBUILDING);
              continue;
            }
            c.setRole(e.restore_pending ? wire::CopyRole::RESTORING : wire::CopyRole::PRIMARY);
            std::vector<int32_t> others = e.backups;
            others.insert(others.end(), e.rebuilding.begin(), e.rebuilding.end());
            auto backups = c.initBackups(static_cast<unsigned>(others.size()));
            for (unsigned j = 0; j < others.size(); ++j) {
              backups[j].setPs(others[j]);
              backups[j].setInSync(true);
              backups[j].setTransferBytesCopied(100);
            }
          }
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
    started_ = server_->Start();
  }

  ~FakePs() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    server_.reset();
  }

  // While silent, heartbeats get no answer (a partition, or a paused process).
  void SetSilent(bool silent) {
    MutexLock lock(&mu_);
    silent_ = silent;
  }
  // Closes its port: connections to it are refused (the process is gone).
  void Stop() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    server_.reset();
  }

  absl::Status started() const { return started_; }
  // Heartbeats it has answered (those held while silent included, once answered).
  int answered() {
    MutexLock lock(&mu_);
    return answered_;
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

  // From now on this PS's copy of `group` reports `role` (a copy that cannot serve), until a
  // map makes it start the copy over.
  void Break(uint32_t group, wire::CopyRole role) {
    MutexLock lock(&mu_);
    broken_[group] = role;
  }

 private:
  static constexpr uint64_t kIncarnation = 77;
  const int index_;
  const int num_ps_;
  net::EventLoop loop_;
  std::unique_ptr<net::RpcServer> server_;
  absl::Status started_;
  Mutex mu_;
  ps::ShardMap map_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, wire::CopyRole> broken_ ABSL_GUARDED_BY(mu_);
  bool silent_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int answered_ ABSL_GUARDED_BY(mu_) = 0;
};

class PsMonitorTest : public ::testing::Test {
 protected:
  // `held`: per PS, the map it holds when the monitor starts (none by default).
  // `heartbeat_timeout` and `lost_after` as PsMonitor::Options (by default no PS is lost).
  // `initial_members` as PsMonitor::Options (-1: every PS).
  void Start(int num_ps, const std::vector<ps::ShardMap>& held = {},
             absl::Duration heartbeat_timeout = absl::Seconds(30), absl::Duration lost_after = absl::Seconds(30),
             int initial_members = -1) {
    std::vector<std::string> addresses;
    std::vector<net::RpcClient*> ptrs;
    for (int i = 0; i < num_ps; ++i) {
      ps_.push_back(std::make_unique<FakePs>(i, num_ps, i < static_cast<int>(held.size()) ? held[i] : ps::ShardMap()));
      ASSERT_TRUE(ps_.back()->started().ok()) << ps_.back()->started();
      addresses.push_back(ps_.back()->address());
      net::RpcClient::Options co;
      co.address = addresses.back();
      co.role = "chief";
      clients_.push_back(std::make_unique<net::RpcClient>(client_loop_, co));
      ptrs.push_back(clients_.back().get());
    }
    cache_ = std::make_unique<ShardMapCache>(ptrs, ShardMapCache::Options());
    auto metrics = metrics::ProcessMetrics::Create("chief", 0, "");
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
    board_ = std::make_unique<metrics::StatusBoard>(*metrics_);
    PsMonitor::Options o;
    o.replicas = 2;
    o.heartbeat_interval = absl::Milliseconds(20);
    o.heartbeat_timeout = heartbeat_timeout;
    o.lost_after = lost_after;
    o.start_timeout = absl::Seconds(10);
    o.initial_members = initial_members;
    monitor_ = std::make_unique<PsMonitor>(ptrs, addresses, *cache_, *metrics_, *board_, o);
    monitor_->SetRestoreListener([this](const absl::Status&) {
      MutexLock lock(&mu_);
      ++restore_calls_;
    });
    const absl::Status started = monitor_->Start();
    ASSERT_TRUE(started.ok()) << started;
  }

  void TearDown() override {
    for (auto& p : ps_) {
      if (p != nullptr) p->SetSilent(false);
    }
    monitor_.reset();
    cache_.reset();
    clients_.clear();
    ps_.clear();
  }

  // Group `group` has primary `primary`, backups `backups` and nothing rebuilding or pending.
  bool GroupIs(uint32_t group, int32_t primary, const std::vector<int32_t>& backups) {
    const ps::ShardMap map = monitor_->map();
    const ps::GroupEntry* g = map.Find(group);
    return g != nullptr && g->primary == primary && g->backups == backups && g->rebuilding.empty() &&
           !g->restore_pending;
  }

  int restore_calls() {
    MutexLock lock(&mu_);
    return restore_calls_;
  }

  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<FakePs>> ps_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::unique_ptr<ShardMapCache> cache_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_;
  std::unique_ptr<metrics::StatusBoard> board_;
  std::unique_ptr<PsMonitor> monitor_;
  Mutex mu_;
  int restore_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

int CopiesOn(const ps::ShardMap& map, int ps) {
  int n = 0;
  for (const ps::GroupEntry& g : map.groups) n += g.Holds(ps) ? 1 : 0;
  return n;
}

bool Settled(const ps::ShardMap& map) {
  for (const ps::GroupEntry& g : map.groups) {
    if (g.primary < 0 || !g.rebuilding.empty() || g.backups.size() != 1) return false;
  }
  return true;
}

// Elastic PS (issue 37): slot 2 holds nothing until PS 2 is admitted; then copies move to it
// (rebuilt, then the old copies dropped), and draining it moves them back. Another thread asks
// for the map and admits a member meanwhile (the RPC handlers' threads do). Refusals change
// nothing.
TEST_F(PsMonitorTest, PsAdmittedAndDrainedMovesCopiesToItAndBack) {
  Start(3, {}, absl::Seconds(30), absl::Seconds(30), /*initial_members=*/2);
  EXPECT_EQ(CopiesOn(monitor_->map(), 2), 0);
  EXPECT_NE(board_->Json().find("\"standby\""), std::string::npos) << board_->Json();
  EXPECT_EQ(monitor_->AdmitPs(2, "127.0.0.1:1").status().code(), absl::StatusCode::kInvalidArgument)
      << "not the slot's address";
  EXPECT_EQ(monitor_->AdmitPs(3, ps_[2]->address()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(monitor_->DrainPs(0, absl::Seconds(1)).status().code(), absl::StatusCode::kFailedPrecondition)
      << "two copies need two PS";
  EXPECT_EQ(monitor_->DrainPs(2, absl::Seconds(1)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CopiesOn(monitor_->map(), 2), 0);

  Mutex mu;
  bool done = false;
  std::thread other([&] {
    for (;;) {
      {
        MutexLock lock(&mu);
        if (done) return;
      }
      EXPECT_TRUE(monitor_->AdmitPs(0, ps_[0]->address()).value().already_member);
      (void)monitor_->map();
      (void)monitor_->stats();
    }
  });
  absl::StatusOr<PsMonitor::Admitted> admitted = monitor_->AdmitPs(2, ps_[2]->address());
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  EXPECT_EQ(admitted->members, 3);
  EXPECT_FALSE(admitted->already_member);
  ASSERT_TRUE(WaitUntil([&] { return Settled(monitor_->map()) && CopiesOn(monitor_->map(), 2) == 2; }))
      << monitor_->map().DebugString();
  for (int ps = 0; ps < 3; ++ps) EXPECT_EQ(CopiesOn(monitor_->map(), ps), 2) << ps;
  ASSERT_TRUE(WaitUntil([&] { return monitor_->stats().moves_done == monitor_->stats().moves_started; }));
  EXPECT_EQ(monitor_->stats().ps_joined, 1);

  absl::StatusOr<int> moved = monitor_->DrainPs(2, absl::Seconds(30));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 2);
  EXPECT_EQ(CopiesOn(monitor_->map(), 2), 0);
  EXPECT_TRUE(Settled(monitor_->map())) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().ps_left, 1);
  EXPECT_EQ(monitor_->stats().ps_lost, 0) << "a departure, not a loss";
  {
    MutexLock lock(&mu);
    done = true;
  }
  other.join();
  EXPECT_NE(board_->Json().find("\"left\""), std::string::npos) << board_->Json();
}

// The primary of group 0 says its copy needs a rebuild (a backup that refused its stream and
// was promoted before the chief heard of it does): the group fails over to its in-sync backup
// at a higher generation, and the old primary rebuilds and becomes the backup. No restore.
TEST_F(PsMonitorTest, PrimaryThatNeedsARebuildFailsOverToItsBackup) {
  Start(3);
  ASSERT_TRUE(GroupIs(0, 0, {1})) << monitor_->map().DebugString();
  const uint64_t generation = monitor_->map().Find(0)->generation;
  ps_[0]->Break(0, wire::CopyRole::NEEDS_REBUILD);
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, 1, {0}); })) << monitor_->map().DebugString();
  EXPECT_GT(monitor_->map().Find(0)->generation, generation);
  const PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.failovers, 1);
  EXPECT_EQ(stats.rebuilt, 1);
  EXPECT_EQ(stats.ps_lost, 0) << "the PS itself is alive";
  EXPECT_EQ(stats.no_live_copy, 0);
  EXPECT_TRUE(monitor_->RestoresPending().empty());
  EXPECT_EQ(restore_calls(), 0);
  EXPECT_TRUE(GroupIs(1, 1, {2}) && GroupIs(2, 2, {0})) << "other groups untouched: " << monitor_->map().DebugString();
}

// A primary holding a copy that is still rebuilding, or fenced, at the map's generation
// cannot serve either.
TEST_F(PsMonitorTest, PrimaryRebuildingOrFencedFailsOverToItsBackup) {
  Start(3);
  ps_[1]->Break(1, wire::CopyRole::REBUILDING);
  ps_[2]->Break(2, wire::CopyRole::FENCED);
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(1, 2, {1}) && GroupIs(2, 0, {2}); })) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().failovers, 2);
  EXPECT_EQ(monitor_->stats().no_live_copy, 0);
}

// Both copies of group 0 cannot serve (primary and backup report needs-rebuild at once): no
// copy holds its writes, so the group awaits a restore from the checkpoint, once, with one of
// them as its empty primary; once restored it serves and is replicated again.
TEST_F(PsMonitorTest, GroupWhoseEveryCopyCannotServeIsRestoredOnce) {
  Start(3);
  ps_[0]->Break(0, wire::CopyRole::NEEDS_REBUILD);
  ps_[1]->Break(0, wire::CopyRole::NEEDS_REBUILD);
  ASSERT_TRUE(WaitUntil([&] { return !monitor_->RestoresPending().empty(); })) << monitor_->map().DebugString();
  const std::vector<PsMonitor::PendingRestore> pending = monitor_->RestoresPending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].group, 0);
  EXPECT_GE(pending[0].primary, 0) << "a PS holds it (empty) for the restore";
  ASSERT_TRUE(WaitUntil([&] { return restore_calls() > 0; })) << "the recovery is told";
  EXPECT_EQ(monitor_->stats().no_live_copy, 1);
  monitor_->Restored(pending);
  const int32_t primary = pending[0].primary;
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, primary, {primary == 0 ? 1 : 0}); }))
      << monitor_->map().DebugString();
  const PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.no_live_copy, 1) << "one loss of every copy";
  EXPECT_EQ(stats.restored, 1);
  EXPECT_EQ(stats.ps_lost, 0);
  EXPECT_TRUE(monitor_->RestoresPending().empty());
}

constexpr absl::Duration kShortHeartbeatTimeout = absl::Milliseconds(300);

// A primary that goes silent is unreachable, not lost: its group fails over to the backup that
// answers (fenced by the generation) and the group it backs stops waiting for it; nothing is
// restored and it is not counted lost. Answering again (the same process), it rebuilds what it
// left and becomes a backup.
TEST_F(PsMonitorTest, SilentPrimaryFailsOverToTheBackupThatAnswersAndIsNotLost) {
  Start(3, {}, kShortHeartbeatTimeout, /*lost_after=*/absl::Seconds(60));
  ps_[0]->SetSilent(true);
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, 1, {}) && GroupIs(2, 2, {}); })) << monitor_->map().DebugString();
  PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.ps_unreachable, 1);
  EXPECT_EQ(stats.ps_lost, 0);
  EXPECT_EQ(stats.failovers, 1);
  EXPECT_FALSE(stats.suspects_cut_off) << "two of three answer";
  EXPECT_TRUE(monitor_->RestoresPending().empty());
  ps_[0]->SetSilent(false);
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, 1, {0}) && GroupIs(2, 2, {0}); })) << monitor_->map().DebugString();
  stats = monitor_->stats();
  EXPECT_EQ(stats.ps_lost, 0);
  EXPECT_EQ(stats.no_live_copy, 0);
  EXPECT_EQ(restore_calls(), 0);
}

// Every PS silent at once, longer than lost_after: the chief takes itself for the one cut off
// and changes nothing; when they answer again (the same processes) the map is the one it had.
TEST_F(PsMonitorTest, ChiefCutOffFromEveryPsChangesNothingHoweverLong) {
  const absl::Duration lost_after = absl::Seconds(1);
  Start(3, {}, kShortHeartbeatTimeout, lost_after);
  const ps::ShardMap before = monitor_->map();
  for (auto& p : ps_) p->SetSilent(true);
  ASSERT_TRUE(WaitUntil([&] { return monitor_->stats().suspects_cut_off; }));
  // The cut lasts well past lost_after (the fault's duration, not a synchronisation).
  absl::SleepFor(lost_after * 3);
  EXPECT_TRUE(monitor_->map() == before) << monitor_->map().DebugString();
  PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.ps_lost, 0);
  EXPECT_EQ(stats.ps_unreachable, 0);
  EXPECT_EQ(stats.failovers, 0);
  for (auto& p : ps_) p->SetSilent(false);
  ASSERT_TRUE(WaitUntil([&] { return !monitor_->stats().suspects_cut_off; }));
  EXPECT_TRUE(monitor_->map() == before) << monitor_->map().DebugString();
  stats = monitor_->stats();
  EXPECT_EQ(stats.cut_off, 1);
  EXPECT_EQ(stats.state_transfers, 0);
  EXPECT_TRUE(monitor_->RestoresPending().empty());
  EXPECT_EQ(restore_calls(), 0);
}

// The cut heals unevenly: PS 0 answers first, PS 1 only a moment later (its connection was in
// retransmission backoff, say). PS 1's silence while the chief heard nobody does not count: it
// gets a fresh heartbeat timeout, answers within it, and nothing fails over or is rebuilt.
TEST_F(PsMonitorTest, ChiefReconnectingHearsTheLastPsOutWithoutFailingItOver) {
  const absl::Duration heartbeat_timeout = absl::Seconds(1);
  Start(2, {}, heartbeat_timeout, /*lost_after=*/absl::Seconds(60));
  const ps::ShardMap before = monitor_->map();
  for (auto& p : ps_) p->SetSilent(true);
  ASSERT_TRUE(WaitUntil([&] { return monitor_->stats().suspects_cut_off; }));
  // Long enough that PS 1's silence is well past the timeout when the chief reconnects (the
  // fault's duration, not a synchronisation).
  absl::SleepFor(heartbeat_timeout * 2);
  ps_[0]->SetSilent(false);
  ASSERT_TRUE(WaitUntil([&] { return !monitor_->stats().suspects_cut_off; }));
  const int held = ps_[1]->answered();
  ps_[1]->SetSilent(false);
  // The heartbeat it held, then two on the new connection: each is sent once the one before was
  // answered, so the monitor has taken at least one of them.
  ASSERT_TRUE(WaitUntil([&] { return ps_[1]->answered() >= held + 3; }));
  EXPECT_TRUE(monitor_->map() == before) << monitor_->map().DebugString();
  const PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.ps_unreachable, 0);
  EXPECT_EQ(stats.failovers, 0);
  EXPECT_EQ(stats.state_transfers, 0);
}

// Both copies of group 0 silent while the chief hears the other half of the cluster: group 0
// is kept (unreachable, not restored) while the groups with a copy that answers go on; only
// once the silence outlasts lost_after are the two PS lost and group 0 awaits its restore.
TEST_F(PsMonitorTest, GroupWithEveryCopySilentAwaitsARestoreOnlyAfterLostAfter) {
  const absl::Duration lost_after = absl::Seconds(5);
  Start(4, {}, kShortHeartbeatTimeout, lost_after);
  const uint64_t group0 = monitor_->map().Find(0)->generation;
  ps_[0]->SetSilent(true);
  ps_[1]->SetSilent(true);
  const absl::Time silenced = absl::Now();
  // Group 1 (ps 1, 2) fails over to ps 2; group 3 (ps 3, 0) drops its silent backup.
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(1, 2, {}) && GroupIs(3, 3, {}); })) << monitor_->map().DebugString();
  if (absl::Now() - silenced < lost_after) {
    EXPECT_TRUE(GroupIs(0, 0, {1})) << monitor_->map().DebugString();
    EXPECT_EQ(monitor_->map().Find(0)->generation, group0);
    EXPECT_TRUE(monitor_->RestoresPending().empty());
    EXPECT_EQ(monitor_->stats().ps_lost, 0);
  }
  ASSERT_TRUE(WaitUntil([&] { return !monitor_->RestoresPending().empty(); })) << monitor_->map().DebugString();
  EXPECT_GE(absl::Now() - silenced, lost_after);
  EXPECT_EQ(monitor_->RestoresPending()[0].group, 0);
  EXPECT_EQ(monitor_->stats().ps_lost, 2);
}

// A PS whose address refuses connections has no process left to hold its copies: it is lost
// at the heartbeat timeout, without waiting for lost_after.
TEST_F(PsMonitorTest, PsWhoseAddressRefusesConnectionsIsLostAtOnce) {
  Start(3, {}, kShortHeartbeatTimeout, /*lost_after=*/absl::Seconds(60));
  ps_[2]->Stop();
  ASSERT_TRUE(WaitUntil([&] { return monitor_->stats().ps_lost == 1; })) << monitor_->map().DebugString();
  EXPECT_TRUE(GroupIs(2, 0, {})) << monitor_->map().DebugString();
  EXPECT_TRUE(GroupIs(1, 1, {})) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().ps_unreachable, 0);
}

// Silences as a worker reports them (net::RpcClient::Silence), in PS order.
std::vector<absl::Duration> Silences(std::initializer_list<absl::Duration> s) { return s; }

// A gray failure: every PS answers the chief, but the workers have waited a second for PS 0's
// answers. Group 0 fails over to PS 1, which they reach; PS 0 is fenced and rebuilds (one state
// transfer), then backs group 0; nothing is lost and no other group moves.
TEST_F(PsMonitorTest, PrimaryTheWorkersCannotReachFailsOverToABackupTheyReach) {
  Start(3, {}, kShortHeartbeatTimeout, /*lost_after=*/absl::Seconds(60));
  for (int w = 0; w < 3; ++w) {
    monitor_->WorkerView(w, Silences({absl::Seconds(1), absl::ZeroDuration(), absl::ZeroDuration()}));
  }
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, 1, {0}); })) << monitor_->map().DebugString();
  const PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.workers_cut, 1);
  EXPECT_EQ(stats.failovers, 1);
  EXPECT_EQ(stats.state_transfers, 1) << "the fenced primary rebuilds";
  EXPECT_EQ(stats.ps_unreachable, 0) << "the chief hears every PS";
  EXPECT_EQ(stats.ps_lost, 0);
  EXPECT_TRUE(GroupIs(1, 1, {2}) && GroupIs(2, 2, {0})) << monitor_->map().DebugString();
}

// What does not move a group: the view of a worker that hears from fewer than half of the PS
// (it is more likely cut off itself), and silence shorter than the heartbeat timeout. Judged
// in the same rounds as a view that does move one (group 1: PS 1 silent to worker 1).
TEST_F(PsMonitorTest, WorkerCutOffItselfOrBrieflyUnansweredMovesNothing) {
  Start(3, {}, kShortHeartbeatTimeout, /*lost_after=*/absl::Seconds(60));
  monitor_->WorkerView(0, Silences({absl::Seconds(1), absl::Seconds(1), absl::Seconds(1)}));
  monitor_->WorkerView(2, Silences({absl::Milliseconds(10), absl::ZeroDuration(), absl::ZeroDuration()}));
  monitor_->WorkerView(1, Silences({absl::ZeroDuration(), absl::Seconds(1), absl::ZeroDuration()}));
  ASSERT_TRUE(WaitUntil([&] { return monitor_->map().Find(1)->primary == 2; })) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->map().Find(0)->primary, 0) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().workers_cut, 1);
}

// The chief's own view comes first: a backup it does not hear is no place to fail over to, so
// with PS 1 silent to the chief (group 1 fails over to PS 2, and PS 1 leaves group 0's
// backups) the workers' report on PS 0 moves nothing: group 0 has no backup left.
TEST_F(PsMonitorTest, WorkersCutFromAPrimaryWhoseBackupTheChiefDoesNotHearMoveNothing) {
  Start(3, {}, kShortHeartbeatTimeout, /*lost_after=*/absl::Seconds(60));
  ps_[1]->SetSilent(true);
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(1, 2, {}) && GroupIs(0, 0, {}); })) << monitor_->map().DebugString();
  // Judged (the status page shows PS 0 unreachable from a worker), and nothing moved.
  ASSERT_TRUE(WaitUntil([&] {
    monitor_->WorkerView(0, Silences({absl::Seconds(1), absl::ZeroDuration(), absl::ZeroDuration()}));
    return board_->Json().find("unreachable from 1 worker(s)") != std::string::npos;
  })) << board_->Json();
  EXPECT_TRUE(GroupIs(0, 0, {})) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().workers_cut, 0);
  // PS 1 answers again and rebuilds its copies: group 0's backup is back, and the view (re-sent
  // as a worker's heartbeats would) moves group 0 then.
  ps_[1]->SetSilent(false);
  ASSERT_TRUE(WaitUntil([&] {
    monitor_->WorkerView(0, Silences({absl::Seconds(1), absl::ZeroDuration(), absl::ZeroDuration()}));
    return monitor_->map().Find(0)->primary == 1;
  })) << monitor_->map().DebugString();
  EXPECT_EQ(monitor_->stats().workers_cut, 1);
}

// A chief that restarts takes over the newest map the PS hold; PS 0 restarted meanwhile (it
// holds no map, so no copy): its groups are rebuilt as if the chief had seen it restart. It
// is no longer group 0's primary (its backup is), and it rebuilds group 0 and group 2 (where
// it was a backup: left in the map, an empty copy would count as in sync).
TEST_F(PsMonitorTest, ChiefTakingOverAMapRebuildsAPsThatRestartedEmptyMeanwhile) {
  ps::ShardMap held = *ps::ShardMap::Initial(3, 2);
  for (ps::GroupEntry& g : held.groups) g.generation = 4 + g.group;
  held.generation = 6;
  Start(3, {ps::ShardMap(), held, held});
  ASSERT_TRUE(WaitUntil([&] { return GroupIs(0, 1, {0}) && GroupIs(2, 2, {0}); })) << monitor_->map().DebugString();
  EXPECT_TRUE(GroupIs(1, 1, {2})) << monitor_->map().DebugString();
  EXPECT_GT(monitor_->map().generation, held.generation);
  const PsMonitor::Stats stats = monitor_->stats();
  EXPECT_EQ(stats.ps_lost, 1);
  EXPECT_EQ(stats.failovers, 1);
  EXPECT_EQ(stats.state_transfers, 2);
  EXPECT_EQ(stats.rebuilt, 2);
  EXPECT_EQ(stats.no_live_copy, 0);
}

}  // namespace
}  // namespace ps_monitor_test_internal
}  // namespace asyncps
