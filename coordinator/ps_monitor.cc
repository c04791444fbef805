#include "coordinator/ps_monitor.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/shard_map_owner.h"
#include "metrics/process_metrics.h"
#include "metrics/status_board.h"
#include "net/peer_absent.h"
#include "net/rpc_client.h"
#include "ps/ps.capnp.h"
#include "worker/ps_future.h"
#include "worker/shard_map_cache.h"

namespace asyncps {

// One PS as the monitor sees it.
struct PsMonitor::PsView {
  bool up = true;              // false once lost, until it answers again
  // Silent past the heartbeat timeout and handled as unreachable (ShardMapOwner::Unreachable),
  // not lost: until it answers again.
  bool unreachable = false;
  // Its latest heartbeat failed with evidence that no process serves its address.
  bool absent = false;
  uint64_t incarnation = 0;    // of the process that answered last (0: none yet)
  absl::Time last_answer;      // when its last answer to a heartbeat arrived
  // When the oldest heartbeat sent since that answer went out (InfiniteFuture: none). A PS is
  // lost once this is heartbeat_timeout old: only time it had a question to answer counts, so
  // a monitor that did not run for a while (a busy machine) does not blame the PS for it.
  absl::Time unanswered_since = absl::InfiniteFuture();
  bool heartbeat_in_flight = false;
  uint64_t map_generation = 0;  // the map it said it holds
  absl::Time pushed_at = absl::InfinitePast();
  uint64_t pushed_generation = 0;
};

// A heartbeat's answer, decoded on the loop thread and handled on the monitor's.
struct PsMonitor::Answer {
  int ps = -1;
  absl::Time received;
  absl::Status status;
  uint64_t incarnation = 0;
  uint64_t map_generation = 0;
  struct Backup {
    int ps;
    bool in_sync;
    bool needs_rebuild;
    uint64_t lag;
    uint64_t bytes_copied;
  };
  struct Copy {
    int group;
    uint64_t generation;
    wire::CopyRole role;
    std::vector<Backup> backups;
    uint64_t state_bytes = 0;
  };
  std::vector<Copy> copies;
};

struct PsMonitor::Gauges {
  explicit Gauges(metrics::ProcessMetrics& m) {
    const std::map<std::string, std::string> labels = {{"role", m.role()}, {"task", m.task()}};
    ps_up = &prometheus::BuildGauge()
                 .Name("asyncps_ps_up")
                 .Help("1 while the chief's heartbeats reach the PS, 0 once it is declared lost")
                 .Labels(labels)
                 .Register(m.registry());
    primary = &prometheus::BuildGauge()
                   .Name("asyncps_shard_group_primary")
                   .Help("The PS index serving a shard group (-1: no live copy)")
                   .Labels(labels)
                   .Register(m.registry());
    generation = &prometheus::BuildGauge()
                      .Name("asyncps_shard_group_generation")
                      .Help("A shard group's generation in the chief's shard map")
                      .Labels(labels)
                      .Register(m.registry());
    copies = &prometheus::BuildGauge()
                  .Name("asyncps_shard_group_copies")
                  .Help("Copies of a shard group by state (primary, backup, rebuilding)")
                  .Labels(labels)
                  .Register(m.registry());
    lag = &prometheus::BuildGauge()
               .Name("asyncps_replication_lag")
               .Help("Writes applied by a group's primary and not yet acknowledged by a copy")
               .Labels(labels)
               .Register(m.registry());
    auto& counters = prometheus::BuildCounter()
                         .Name("asyncps_ps_failover_events_total")
                         .Help("The chief's shard-map decisions, by kind (failover, ps_lost, "
                               "state_transfer, rebuilt, no_live_copy, restored, workers_cut, ps_joined, "
                               "ps_left, move_done)")
                         .Labels(labels)
                         .Register(m.registry());
    failovers = &counters.Add({{"kind", "failover"}});
    ps_lost = &counters.Add({{"kind", "ps_lost"}});
    transfers = &counters.Add({{"kind", "state_transfer"}});
    rebuilt = &counters.Add({{"kind", "rebuilt"}});
    no_live_copy = &counters.Add({{"kind", "no_live_copy"}});
    restored = &counters.Add({{"kind", "restored"}});
    workers_cut = &counters.Add({{"kind", "workers_cut"}});
    ps_joined = &counters.Add({{"kind", "ps_joined"}});
    ps_left = &counters.Add({{"kind", "ps_left"}});
    move_done = &counters.Add({{"kind", "move_done"}});
    bytes = &prometheus::BuildGauge()
                 .Name("asyncps_ps_state_transfer_bytes")
                 .Help("State transfer bytes copied to rebuilding copies (finished and running)")
                 .Labels(labels)
                 .Register(m.registry())
                 .Add({});
  }
  prometheus::Family<prometheus::Gauge>* ps_up;
  prometheus::Family<prometheus::Gauge>* primary;
  prometheus::Family<prometheus::Gauge>* generation;
  prometheus::Family<prometheus::Gauge>* copies;
  prometheus::Family<prometheus::Gauge>* lag;
  prometheus::Counter* failovers;
  prometheus::Counter* ps_lost;
  prometheus::Counter* transfers;
  prometheus::Counter* rebuilt;
  prometheus::Counter* no_live_copy;
  prometheus::Counter* restored;
  prometheus::Counter* workers_cut;
  prometheus::Counter* ps_joined;
  prometheus::Counter* ps_left;
  prometheus::Counter* move_done;
  prometheus::Gauge* bytes;
};

namespace {

std::string Members(const std::vector<int32_t>& list) {
  return list.empty() ? "-" : absl::StrJoin(list, ",");
}

}  // namespace

PsMonitor::PsMonitor(std::vector<net::RpcClient*> ps, std::vector<std::string> addresses, ShardMapCache& cache,
                     metrics::ProcessMetrics& metrics, metrics::StatusBoard& board, Options options)
    : ps_(std::move(ps)),
      addresses_(std::move(addresses)),
      cache_(cache),
      board_(board),
      options_(options),
      gauges_(std::make_unique<Gauges>(metrics)),
      views_(ps_.size()),
      cut_from_(ps_.size(), 0),
      left_(ps_.size(), false),
      was_moving_(ps_.size(), false) {}

PsMonitor::~PsMonitor() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

PsMonitor::Stats PsMonitor::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

ps::ShardMap PsMonitor::map() const {
  MutexLock lock(&mu_);
  return owner_ != nullptr ? owner_->map() : ps::ShardMap();
}

std::vector<PsMonitor::PendingRestore> PsMonitor::RestoresPending() const {
  MutexLock lock(&mu_);
  std::vector<PendingRestore> out;
  if (owner_ == nullptr) return out;
  for (const ps::GroupEntry& g : owner_->map().groups) {
    if (!g.restore_pending) continue;
    auto token = restore_tokens_.find(static_cast<int>(g.group));
    out.push_back({static_cast<int>(g.group), g.primary, token == restore_tokens_.end() ? 0 : token->second});
  }
  return out;
}

void PsMonitor::Restored(const std::vector<PendingRestore>& restored) {
  MutexLock lock(&mu_);
  if (owner_ == nullptr) return;
  const ps::ShardMap before = owner_->map();
  std::vector<int> changed;
  for (const PendingRestore& r : restored) {
    auto token = restore_tokens_.find(r.group);
    if ((token == restore_tokens_.end() ? 0 : token->second) != r.token) continue;  // lost again since
    for (int g : owner_->Restored(r.group)) {
      changed.push_back(g);
      ++stats_.restored;
      gauges_->restored->Increment();
      Event("ps_restored", absl::StrCat("shard group ", g, " restored from the checkpoint on ps ",
                                        owner_->map().Find(static_cast<uint32_t>(g))->primary, ": it serves again"));
    }
  }
  Changed(before, changed, "restored from the checkpoint");
  Publish();
}

void PsMonitor::SetRestoreListener(std::function<void(const absl::Status&)> listener) {
  MutexLock lock(&mu_);
  restore_listener_ = std::move(listener);
}

void PsMonitor::WorkerView(int worker, std::vector<absl::Duration> silence) {
  MutexLock lock(&views_mu_);
  worker_views_[worker] = {absl::Now(), std::move(silence)};
}

void PsMonitor::ForgetWorker(int worker) {
  MutexLock lock(&views_mu_);
  worker_views_.erase(worker);
}

void PsMonitor::Event(const std::string& kind, const std::string& text) {
  spdlog::info("{}: {}", kind, text);
  board_.AddEvent(kind, text);
}

absl::Status PsMonitor::Start() {
  const int num_ps = static_cast<int>(ps_.size());
  const int members =
      options_.initial_members > 0 && options_.initial_members < num_ps ? options_.initial_members : num_ps;
  absl::StatusOr<ShardMapOwner> initial = ShardMapOwner::Create(num_ps, options_.replicas, members);
  if (!initial.ok()) return initial.status();
  // A chief that restarted takes over the newest map the PS hold instead of the ring map
  // (which they would refuse as older). Waits for PS that are still starting.
  ps::ShardMap newest;
  std::vector<uint64_t> incarnations(ps_.size(), 0);
  std::vector<uint64_t> held_generations(ps_.size(), 0);
  // Slots past the first members may hold a PS that joined before this chief restarted, or
  // none: asked briefly, and skipped when nothing answers.
  for (int i = 0; i < num_ps; ++i) {
    const bool starting_member = i < members;
    absl::StatusOr<net::InMessage> r = ps_[i]->Call(
        "ps.GetShardMap", net::OutMessage(),
        starting_member ? net::RpcClient::CallOptions{options_.start_timeout, true}
                        : net::RpcClient::CallOptions{std::min(options_.start_timeout, options_.heartbeat_timeout), false});
    if (!r.ok() && !starting_member) continue;
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("ps ", i, " (", addresses_[i],
                                                          ") did not answer ps.GetShardMap: ", r.status().message()));
    }
    absl::StatusOr<ps::ShardMap> held;
    absl::Status decoded = net::CatchDecodeErrors([&] {
      auto body = r->ResponseBody<wire::GetShardMapResponse>();
      incarnations[i] = body.getIncarnation();
      held = ps::ShardMapFromWire(body.getMap(), num_ps);
      return held.status();
    });
    if (!decoded.ok()) return decoded;
    held_generations[i] = held->generation;
    if (held->generation > newest.generation) newest = *std::move(held);
  }
  MutexLock lock(&mu_);
  if (newest.generation > 0 && newest.replicas == static_cast<uint32_t>(options_.replicas)) {
    owner_ = std::make_unique<ShardMapOwner>(std::move(newest), num_ps, members < num_ps ? members : -1);
    Event("shard_map", absl::StrCat("took over the map the PS hold: ", owner_->map().DebugString()));
    // A PS holds a map from the chief's first push on: one that holds none restarted while no
    // chief watched, so it holds no copy (its primaries would say they need a rebuild, and
    // its backups would count as in sync while empty). It is lost and returns, as if seen.
    for (int i = 0; i < num_ps; ++i) {
      if (held_generations[i] != 0 || !owner_->IsMember(i)) continue;
      ++stats_.ps_lost;
      gauges_->ps_lost->Increment();
      Event("ps_down", absl::StrCat("ps ", i, " (", addresses_[i], ") holds no shard map: it restarted empty ",
                                    "while no chief watched; rebuilding its copies"));
      const ps::ShardMap before = owner_->map();
      std::vector<int> changed = owner_->Lost(i);
      for (int g : owner_->Returned(i)) changed.push_back(g);
      std::sort(changed.begin(), changed.end());
      changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
      NoteNoLiveCopy(i);
      Changed(before, changed, absl::StrCat("ps ", i, " restarted empty"));
    }
  } else {
    owner_ = std::make_unique<ShardMapOwner>(*std::move(initial));
    Event("shard_map", absl::StrCat("initial map: ", owner_->map().DebugString()));
  }
  cache_.Install(owner_->map());
  const absl::Time now = absl::Now();
  for (int i = 0; i < num_ps; ++i) {
    views_[i].incarnation = incarnations[i];
    views_[i].last_answer = now;
  }
  // The first map, on every PS before a variable is created.
  for (int i = 0; i < num_ps; ++i) {
    if (!Watched(i)) continue;
    net::OutMessage m;
    ps::ShardMapToWire(owner_->map(), m.InitRequestBody<wire::SetShardMapRequest>().initMap());
    absl::StatusOr<net::InMessage> r =
        ps_[i]->Call("ps.SetShardMap", std::move(m), net::RpcClient::CallOptions{options_.start_timeout, true});
    if (!r.ok()) {
      return absl::Status(r.status().code(), absl::StrCat("ps ", i, " (", addresses_[i],
                                                          ") did not take the shard map: ", r.status().message()));
    }
    views_[i].map_generation = owner_->map().generation;
  }
  Publish();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void PsMonitor::Loop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < ps_.size(); ++i) {
      PsView& v = views_[i];
      if (v.heartbeat_in_flight || !Watched(static_cast<int>(i))) continue;
      v.heartbeat_in_flight = true;
      if (v.unanswered_since == absl::InfiniteFuture()) v.unanswered_since = now;
      {
        MutexLock inbox_lock(&inbox_mu_);
        ++heartbeats_in_flight_;
      }
      const int index = static_cast<int>(i);
      ps_[i]->CallAsync(
          "ps.ReplicaStatus", net::OutMessage(), net::RpcClient::CallOptions{options_.heartbeat_timeout, false},
          [this, index](absl::StatusOr<net::InMessage> r) {
            Answer a;
            a.ps = index;
            a.received = absl::Now();
            a.status = r.status();
            if (r.ok()) {
              a.status = net::CatchDecodeErrors([&] {
                auto body = r->ResponseBody<wire::ReplicaStatusResponse>();
                a.incarnation = body.getIncarnation();
                a.map_generation = body.getMapGeneration();
                for (auto c : body.getCopies()) {
                  Answer::Copy copy{static_cast<int>(c.getGroup()), c.getGeneration(), c.getRole(), {},
                                    c.getStateBytes()};
                  for (auto b : c.getBackups()) {
                    copy.backups.push_back(
                        {b.getPs(), b.getInSync(), b.getNeedsRebuild(), b.getLag(), b.getTransferBytesCopied()});
                  }
                  a.copies.push_back(std::move(copy));
                }
                return absl::OkStatus();
              });
            }
            // Only inbox_mu_, never mu_: this runs on the loop thread, which must not wait for
            // the monitor's round (it holds mu_ across the status board, logging and the
            // restore listener).
            MutexLock inbox_lock(&inbox_mu_);
            inbox_.push_back(std::move(a));
            --heartbeats_in_flight_;
          });
    }
    std::vector<Answer> answers;
    {
      MutexLock inbox_lock(&inbox_mu_);
      answers.swap(inbox_);
    }
    for (const Answer& a : answers) {
      PsView& v = views_[static_cast<size_t>(a.ps)];
      v.heartbeat_in_flight = false;
      if (a.status.ok()) {
        v.absent = false;
        Handle(a.ps, a);
      } else {
        v.absent = net::IsPeerAbsent(a.status);
      }
    }
    Judge(now);
    for (size_t i = 0; i < ps_.size(); ++i) {
      PsView& v = views_[i];
      // A PS that answers but holds an older map missed a push: send it again (at most once a
      // heartbeat timeout while it does not take it).
      if (v.up && Watched(static_cast<int>(i)) && v.map_generation < owner_->map().generation &&
          (v.pushed_generation < owner_->map().generation || now - v.pushed_at > options_.heartbeat_timeout)) {
        PushMap(static_cast<int>(i));
      }
    }
    Publish();
    if (restore_listener_) {
      std::vector<std::string> awaiting;
      for (const ps::GroupEntry& g : owner_->map().groups) {
        if (g.restore_pending) awaiting.push_back(absl::StrCat(g.group));
      }
      if (!awaiting.empty()) {
        restore_listener_(absl::UnavailableError(absl::StrCat("shard group(s) ", absl::StrJoin(awaiting, ", "),
                                                              " lost every copy and await a restore")));
      }
    }
    // Not a sleep as synchronisation: the heartbeat period, cut short by the destructor.
    mu_.AwaitWithTimeout(
        absl::Condition(+[](PsMonitor* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return m->stopping_; }, this),
        std::max(absl::ZeroDuration(), now + options_.heartbeat_interval - absl::Now()));
  }
  // Heartbeats still in flight answer into inbox_: wait for them so none touches this object
  // after the destructor returns.
  MutexLock inbox_lock(&inbox_mu_);
  inbox_mu_.Await(absl::Condition(
      +[](PsMonitor* m) ABSL_NO_THREAD_SAFETY_ANALYSIS { return m->heartbeats_in_flight_ == 0; }, this));
}

void PsMonitor::Judge(absl::Time now) {
  const size_t slots = ps_.size();
  std::vector<bool> overdue(slots, false), reachable(slots, false);
  size_t answering = 0;
  size_t n = 0;  // the PS watched (every slot but those out of the job)
  for (size_t i = 0; i < slots; ++i) {
    const PsView& v = views_[i];
    if (!Watched(static_cast<int>(i))) continue;
    ++n;
    if (!v.up) continue;
    overdue[i] = now - v.unanswered_since > options_.heartbeat_timeout;
    // Reachable: answered within half the timeout. A chief cut off from every PS sees them go
    // overdue one by one within a heartbeat period; the ones not overdue yet have not answered
    // lately either, so they are neither counted as answering nor failed over to.
    reachable[i] = !overdue[i] && now - v.last_answer <= options_.heartbeat_timeout / 2;
    answering += reachable[i] ? 1 : 0;
  }
  const bool any_overdue = std::find(overdue.begin(), overdue.end(), true) != overdue.end();
  // Fewer than half answer at once: more likely this chief is cut off than they all failed.
  const bool cut_off = any_overdue && answering * 2 < n;
  if (cut_off != stats_.suspects_cut_off) {
    stats_.suspects_cut_off = cut_off;
    if (cut_off) {
      ++stats_.cut_off;
      Event("chief_cut_off", absl::StrCat("the chief hears from ", answering, " of its ", n,
                                          " PS: it takes itself for the one cut off and changes nothing on "
                                          "silence until half of them answer again"));
    } else {
      Event("chief_reconnected", absl::StrCat("the chief hears from ", answering, " of its ", n, " PS again"));
      // The PS that have not answered yet were silent while the chief could hear nobody: that
      // silence says nothing about them, and they answer at the pace of their connections,
      // which a long cut leaves in TCP's retransmission backoff (seconds). Each gets a fresh
      // heartbeat timeout from now, on a new connection, before it counts as unreachable.
      for (size_t i = 0; i < slots; ++i) {
        PsView& v = views_[i];
        if (!v.up || reachable[i] || !Watched(static_cast<int>(i))) continue;
        v.unanswered_since = now;
        overdue[i] = false;
        ps_[i]->Disconnect();
      }
    }
  }
  std::vector<int> silent;
  for (size_t i = 0; i < slots; ++i) {
    PsView& v = views_[i];
    if (!overdue[i]) continue;
    const absl::Duration silence = now - v.unanswered_since;
    std::string why;
    if (v.absent) {
      why = absl::StrCat("its address refuses connections (no process serves there) after ",
                         absl::FormatDuration(silence), " without an answer");
    } else if (!cut_off && silence > options_.lost_after) {
      why = absl::StrCat("it did not answer heartbeats for ", absl::FormatDuration(silence),
                         " (--ps_lost_after ", absl::FormatDuration(options_.lost_after), ")");
    }
    if (why.empty()) {
      silent.push_back(static_cast<int>(i));
      continue;
    }
    v.up = false;
    v.unreachable = false;
    ++stats_.ps_lost;
    gauges_->ps_lost->Increment();
    Event("ps_down", absl::StrCat("ps ", i, " (", addresses_[i], ") is lost: ", why, " (last answer ",
                                  absl::FormatDuration(now - v.last_answer), " ago)"));
    const ps::ShardMap before = owner_->map();
    Changed(before, owner_->Lost(static_cast<int>(i)), absl::StrCat("ps ", i, " lost"));
  }
  if (cut_off) {
    std::fill(cut_from_.begin(), cut_from_.end(), 0);
    return;
  }
  if (!silent.empty()) Unreachable(now, silent, reachable);
  JudgeWorkerViews(now, reachable);
}

void PsMonitor::Unreachable(absl::Time now, const std::vector<int>& silent, const std::vector<bool>& reachable) {
  for (int i : silent) {
    PsView& v = views_[static_cast<size_t>(i)];
    if (v.unreachable) continue;
    v.unreachable = true;
    ++stats_.ps_unreachable;
    Event("ps_unreachable",
          absl::StrCat("ps ", i, " (", addresses_[i], ") did not answer heartbeats for ",
                       absl::FormatDuration(now - v.unanswered_since), ": unreachable (not lost before ",
                       absl::FormatDuration(options_.lost_after),
                       " of silence); its groups fail over to copies that answer, and a group with none is kept"));
  }
  const ps::ShardMap before = owner_->map();
  Changed(before, owner_->Unreachable(silent, reachable), "ps unreachable");
}

void PsMonitor::JudgeWorkerViews(absl::Time now, const std::vector<bool>& reachable) {
  const size_t n = ps_.size();
  std::vector<int> cut_from(n, 0);
  std::vector<std::vector<int>> who(n);
  {
    MutexLock lock(&views_mu_);
    for (const auto& [worker, view] : worker_views_) {
      const absl::Duration age = std::max(absl::ZeroDuration(), now - view.received);
      if (age > options_.worker_view_ttl || view.silence.size() != n) continue;
      std::vector<size_t> silent;
      size_t watched = 0;
      for (size_t j = 0; j < n; ++j) {
        if (!Watched(static_cast<int>(j))) continue;
        ++watched;
        // Zero: nothing owed, so nothing known. Otherwise the silence grew since the report.
        if (view.silence[j] > absl::ZeroDuration() && view.silence[j] + age >= options_.heartbeat_timeout) {
          silent.push_back(j);
        }
      }
      // A worker that hears from fewer than half of the PS is more likely cut off itself.
      if ((watched - silent.size()) * 2 < watched) continue;
      for (size_t j : silent) {
        ++cut_from[j];
        who[j].push_back(worker);
      }
    }
  }
  cut_from_ = cut_from;
  const ps::ShardMap before = owner_->map();
  const std::vector<int> changed = owner_->WorkersCannotReach(cut_from, reachable);
  for (int group : changed) {
    const ps::GroupEntry* was = before.Find(static_cast<uint32_t>(group));
    const ps::GroupEntry* now_entry = owner_->map().Find(static_cast<uint32_t>(group));
    if (was == nullptr || now_entry == nullptr) continue;
    ++stats_.workers_cut;
    gauges_->workers_cut->Increment();
    Event("ps_workers_cut",
          absl::StrCat("worker(s) ", absl::StrJoin(who[static_cast<size_t>(was->primary)], ","),
                       " have had no answer from ps ", was->primary, " (", addresses_[static_cast<size_t>(was->primary)],
                       ") for ", absl::FormatDuration(options_.heartbeat_timeout), " or more, though the chief hears it: shard group ",
                       group, " fails over to ps ", now_entry->primary, ", which they reach; ps ", was->primary,
                       " is fenced and rebuilds it"));
  }
  Changed(before, changed, "workers cannot reach a primary");
}

void PsMonitor::Handle(int ps, const Answer& a) {
  if (!Watched(ps)) return;  // an answer from before it left
  PsView& v = views_[static_cast<size_t>(ps)];
  const bool restarted = v.incarnation != 0 && a.incarnation != v.incarnation;
  v.last_answer = a.received;
  v.unanswered_since = absl::InfiniteFuture();
  ++stats_.heartbeats_answered;
  v.map_generation = a.map_generation;
  if (v.unreachable) {
    v.unreachable = false;
    if (!restarted) {
      // The same process, with whatever it kept: the groups it still leads serve again as they
      // were; what it left while silent (backups of groups that went on) it rebuilds.
      Event("ps_reachable", absl::StrCat("ps ", ps, " (", addresses_[ps], ") answers again, same incarnation"));
      const ps::ShardMap before = owner_->map();
      const std::vector<int> changed = owner_->Returned(ps);
      NoteNoLiveCopy(ps);
      Changed(before, changed, absl::StrCat("ps ", ps, " reachable again"));
    }
  }
  if (v.up && restarted) {
    // Restarted within the timeout: it holds nothing, so it is lost as much as a silent one.
    ++stats_.ps_lost;
    gauges_->ps_lost->Increment();
    Event("ps_down", absl::StrCat("ps ", ps, " (", addresses_[ps], ") restarted (incarnation ", v.incarnation,
                                  " -> ", a.incarnation, ")"));
    const ps::ShardMap before = owner_->map();
    Changed(before, owner_->Lost(ps), absl::StrCat("ps ", ps, " restarted"));
    v.up = false;
  }
  v.incarnation = a.incarnation;
  if (!v.up) {
    v.up = true;
    Event("ps_up", absl::StrCat("ps ", ps, " (", addresses_[ps], ") answers again (incarnation ", a.incarnation,
                                "): rebuilding its copies"));
    const ps::ShardMap before = owner_->map();
    const std::vector<int> changed = owner_->Returned(ps);
    NoteNoLiveCopy(ps);
    Changed(before, changed, absl::StrCat("ps ", ps, " returned"));
  }
  // The primaries' view of their copies: who caught up, who needs a new transfer.
  const ps::ShardMap map = owner_->map();
  for (const Answer::Copy& c : a.copies) {
    const ps::GroupEntry* g = map.Find(static_cast<uint32_t>(c.group));
    if (g == nullptr) continue;
    // The group's primary, at the map's generation, holding a copy that cannot serve (a backup
    // that refused its stream and was promoted before this monitor heard of it, say): nothing
    // on the PS makes such a copy serve again, so it is a lost copy of the group. (At an older
    // generation the PS has not installed the map yet: its next answer tells.)
    const bool cannot_serve = c.role == wire::CopyRole::NEEDS_REBUILD || c.role == wire::CopyRole::REBUILDING ||
                              c.role == wire::CopyRole::FENCED;
    if (cannot_serve && g->primary == ps && c.generation == g->generation && !g->restore_pending) {
      Event("ps_primary_cannot_serve",
            absl::StrCat("ps ", ps, " is primary of shard group ", c.group, " at generation ", c.generation,
                         " but holds a ", ps::WireCopyRoleName(c.role), " copy: a lost copy of the group"));
      const std::vector<int> changed = owner_->CannotServe(ps, c.group);
      NoteNoLiveCopy(ps);
      Changed(map, changed, absl::StrCat("ps ", ps, "'s copy of group ", c.group, " cannot serve"));
      continue;
    }
    if (c.role == wire::CopyRole::NEEDS_REBUILD &&
        std::find(g->backups.begin(), g->backups.end(), ps) != g->backups.end()) {
      Changed(map, owner_->NeedsRebuild(ps, c.group), absl::StrCat("ps ", ps, " needs a rebuild of group ", c.group));
      continue;
    }
    // Only a primary at the map's generation speaks for the group's copies (a restoring one
    // too: its copies rebuild from it while it takes the restore).
    if ((c.role != wire::CopyRole::PRIMARY && c.role != wire::CopyRole::RESTORING) || g->primary != ps ||
        c.generation != g->generation) {
      continue;
    }
    if (c.role == wire::CopyRole::PRIMARY) owner_->SetGroupBytes(c.group, c.state_bytes);
    for (const Answer::Backup& b : c.backups) {
      const bool rebuilding = std::find(g->rebuilding.begin(), g->rebuilding.end(), b.ps) != g->rebuilding.end();
      const bool backup = std::find(g->backups.begin(), g->backups.end(), b.ps) != g->backups.end();
      gauges_->lag->Add({{"group", std::to_string(c.group)}, {"ps", std::to_string(b.ps)}})
          .Set(static_cast<double>(b.lag));
      if (rebuilding && b.in_sync && owner_->map().generation == map.generation) {
        ++stats_.rebuilt;
        gauges_->rebuilt->Increment();
        stats_.bytes_copied += static_cast<int64_t>(b.bytes_copied);
        if (owner_->Moving(c.group)) stats_.move_bytes += static_cast<int64_t>(b.bytes_copied);
        Event("ps_rebuilt", absl::StrCat("ps ", b.ps, " holds group ", c.group, " in sync (", b.bytes_copied,
                                         " bytes copied): a backup now"));
        Changed(map, owner_->InSync(b.ps, c.group), absl::StrCat("ps ", b.ps, " rebuilt group ", c.group));
        continue;
      }
      if ((backup || rebuilding) && b.needs_rebuild) {
        Changed(map, owner_->NeedsRebuild(b.ps, c.group),
                absl::StrCat("ps ", b.ps, " refused group ", c.group, "'s stream"));
        continue;
      }
    }
  }
}

void PsMonitor::NoteNoLiveCopy(int ps) {
  for (int g : owner_->TakeNoLiveCopy()) {
    ++stats_.no_live_copy;
    gauges_->no_live_copy->Increment();
    Event("no_live_copy", absl::StrCat("shard group ", g, " lost every copy; ps ", ps,
                                       " holds it empty and serves only its restore from the checkpoint"));
  }
}

void PsMonitor::Changed(const ps::ShardMap& before, const std::vector<int>& groups, const std::string& why) {
  if (groups.empty()) return;
  const ps::ShardMap& map = owner_->map();
  for (int group : groups) {
    const ps::GroupEntry* was = before.Find(static_cast<uint32_t>(group));
    const ps::GroupEntry* now = map.Find(static_cast<uint32_t>(group));
    if (was == nullptr || now == nullptr) continue;
    if (now->restore_pending && !was->restore_pending) restore_tokens_[group] = next_restore_token_++;
    if (was->primary >= 0 && now->primary >= 0 && was->primary != now->primary) {
      ++stats_.failovers;
      gauges_->failovers->Increment();
      Event("ps_failover", absl::StrCat("shard group ", group, ": primary ps ", was->primary, " -> ps ", now->primary,
                                        ", generation ", now->generation));
    }
    for (int32_t r : now->rebuilding) {
      if (std::find(was->rebuilding.begin(), was->rebuilding.end(), r) != was->rebuilding.end()) continue;
      ++stats_.state_transfers;
      gauges_->transfers->Increment();
      Event("ps_rebuilding", absl::StrCat("shard group ", group, ": ps ", r, " rebuilds from primary ps ",
                                          now->primary, " (backups ", Members(now->backups), "), generation ",
                                          now->generation));
    }
  }
  Event("shard_map", absl::StrCat(why, ": ", map.DebugString()));
  cache_.Install(map);
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (views_[i].up && Watched(static_cast<int>(i))) PushMap(static_cast<int>(i));
  }
  NoteMovesDone();
}

bool PsMonitor::Watched(int ps) const { return owner_->IsMember(ps) || owner_->HoldsAny(ps); }

void PsMonitor::NoteMovesDone() {
  for (size_t g = 0; g < was_moving_.size(); ++g) {
    const bool moving = owner_->Moving(static_cast<int>(g));
    if (was_moving_[g] && !moving) {
      ++stats_.moves_done;
      gauges_->move_done->Increment();
      const ps::GroupEntry* e = owner_->map().Find(static_cast<uint32_t>(g));
      Event("ps_move_done",
            absl::StrCat("shard group ", g, " is on its target: primary ps ", e != nullptr ? e->primary : -1,
                         ", backups ", e != nullptr ? Members(e->backups) : "-", ", generation ",
                         e != nullptr ? e->generation : 0, " (one map change for its clients)"));
    }
    was_moving_[g] = moving;
  }
}

absl::StatusOr<PsMonitor::Admitted> PsMonitor::AdmitPs(int ps, const std::string& address) {
  MutexLock lock(&mu_);
  if (owner_ == nullptr) return absl::FailedPreconditionError("the chief's PS monitor has not started yet");
  if (ps < 0 || static_cast<size_t>(ps) >= ps_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ps ", ps, " is not a PS slot of this job (it lists ", ps_.size(),
                                                   "; a job grows to at most the PS its cluster spec lists)"));
  }
  if (address != addresses_[static_cast<size_t>(ps)]) {
    return absl::InvalidArgumentError(absl::StrCat("ps ", ps, " serves at ", addresses_[static_cast<size_t>(ps)],
                                                   " in the cluster spec, not at '", address, "'"));
  }
  if (owner_->IsMember(ps)) return Admitted{owner_->members(), true};
  PsView& v = views_[static_cast<size_t>(ps)];
  const bool was_watched = Watched(ps);
  if (!was_watched) {
    // A fresh start for a slot the monitor did not watch: whatever it knew of an earlier
    // process there is void.
    v = PsView();
    v.last_answer = absl::Now();
  }
  const ps::ShardMap before = owner_->map();
  absl::StatusOr<std::vector<int>> changed = owner_->Join(ps);
  if (!changed.ok()) return changed.status();
  left_[static_cast<size_t>(ps)] = false;
  ++stats_.ps_joined;
  gauges_->ps_joined->Increment();
  stats_.moves_started += static_cast<int64_t>(changed->size());
  const std::vector<uint64_t> load = owner_->TargetBytes();
  Event("ps_joined", absl::StrCat("ps ", ps, " (", address, ") joined: ", owner_->members(), " PS; ",
                                  changed->size(), " group copies move to it (", load[static_cast<size_t>(ps)],
                                  " bytes by the groups' last reported sizes)"));
  for (size_t g = 0; g < was_moving_.size(); ++g) was_moving_[g] = owner_->Moving(static_cast<int>(g));
  Changed(before, *changed, absl::StrCat("ps ", ps, " joined"));
  Publish();
  return Admitted{owner_->members(), false};
}

absl::StatusOr<int> PsMonitor::DrainPs(int ps, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  if (owner_ == nullptr) return absl::FailedPreconditionError("the chief's PS monitor has not started yet");
  const ps::ShardMap before = owner_->map();
  absl::StatusOr<std::vector<int>> changed = owner_->Leave(ps);
  if (!changed.ok()) return changed.status();
  int moved = 0;
  for (const ps::GroupEntry& g : before.groups) moved += g.Holds(ps) ? 1 : 0;
  stats_.moves_started += moved;
  Event("ps_draining", absl::StrCat("ps ", ps, " (", addresses_[static_cast<size_t>(ps)], ") leaves: its ", moved,
                                    " group copies move to the ", owner_->members(), " other PS"));
  for (size_t g = 0; g < was_moving_.size(); ++g) was_moving_[g] = owner_->Moving(static_cast<int>(g));
  Changed(before, *changed, absl::StrCat("ps ", ps, " leaves"));
  Publish();
  auto done = [this, ps]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !owner_->HoldsAny(ps); };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (owner_->HoldsAny(ps)) {
    if (stopping_) return absl::UnavailableError(absl::StrCat("the chief stopped while ps ", ps, " was draining"));
    return absl::DeadlineExceededError(absl::StrCat("ps ", ps, " still holds copies after ",
                                                    absl::FormatDuration(timeout), ": ", owner_->map().DebugString()));
  }
  left_[static_cast<size_t>(ps)] = true;
  ++stats_.ps_left;
  gauges_->ps_left->Increment();
  Event("ps_left", absl::StrCat("ps ", ps, " (", addresses_[static_cast<size_t>(ps)], ") holds no copy: it left (",
                                moved, " group copies moved)"));
  Publish();
  return moved;
}

void PsMonitor::PushMap(int ps) {
  PsView& v = views_[static_cast<size_t>(ps)];
  v.pushed_generation = owner_->map().generation;
  v.pushed_at = absl::Now();
  net::OutMessage m;
  ps::ShardMapToWire(owner_->map(), m.InitRequestBody<wire::SetShardMapRequest>().initMap());
  ps_[static_cast<size_t>(ps)]->CallAsync(
      "ps.SetShardMap", std::move(m), net::RpcClient::CallOptions{options_.heartbeat_timeout, false},
      [ps, generation = v.pushed_generation](absl::StatusOr<net::InMessage> r) {
        if (!r.ok()) spdlog::debug("shard map {} not taken by ps {}: {}", generation, ps, r.status().ToString());
      });
}

void PsMonitor::Publish() {
  const ps::ShardMap& map = owner_->map();
  std::vector<metrics::StatusBoard::ShardGroup> groups;
  std::vector<bool> rebuilding(ps_.size(), false);
  for (const ps::GroupEntry& g : map.groups) {
    const std::string label = std::to_string(g.group);
    gauges_->primary->Add({{"group", label}}).Set(g.primary);
    gauges_->generation->Add({{"group", label}}).Set(static_cast<double>(g.generation));
    gauges_->copies->Add({{"group", label}, {"state", "backup"}}).Set(static_cast<double>(g.backups.size()));
    gauges_->copies->Add({{"group", label}, {"state", "rebuilding"}}).Set(static_cast<double>(g.rebuilding.size()));
    for (int32_t r : g.rebuilding) rebuilding[static_cast<size_t>(r)] = true;
    groups.push_back({static_cast<int>(g.group), g.generation, g.primary,
                      std::vector<int>(g.backups.begin(), g.backups.end()),
                      std::vector<int>(g.rebuilding.begin(), g.rebuilding.end())});
  }
  for (size_t i = 0; i < ps_.size(); ++i) {
    const PsView& v = views_[i];
    if (!Watched(static_cast<int>(i))) {
      // A slot out of the job: one no PS joined yet, or one whose PS left.
      board_.SetMember("ps", static_cast<int>(i), addresses_[i], left_[i] ? "left" : "standby", 0);
      gauges_->ps_up->Add({{"ps", std::to_string(i)}}).Set(0);
      continue;
    }
    // Unreachable (silent to the chief, nothing thrown away) is not down (lost); a PS the chief
    // hears and some workers do not is shown as such.
    const std::string state = !v.up                ? "down"
                              : !owner_->IsMember(static_cast<int>(i)) ? "draining"
                              : v.unreachable      ? "unreachable"
                              : rebuilding[i]      ? "rebuilding"
                              : cut_from_[i] > 0   ? absl::StrCat("unreachable from ", cut_from_[i], " worker(s)")
                                                   : "up";
    board_.SetMember("ps", static_cast<int>(i), addresses_[i], state, v.up ? v.incarnation : 0);
    gauges_->ps_up->Add({{"ps", std::to_string(i)}}).Set(v.up ? 1 : 0);
  }
  gauges_->bytes->Set(static_cast<double>(stats_.bytes_copied));
  board_.SetShardGroups(std::move(groups),
                        {{"ps_failovers", static_cast<double>(stats_.failovers)},
                         {"ps_lost", static_cast<double>(stats_.ps_lost)},
                         {"ps_state_transfers", static_cast<double>(stats_.state_transfers)},
                         {"ps_rebuilt", static_cast<double>(stats_.rebuilt)},
                         {"ps_state_transfer_bytes", static_cast<double>(stats_.bytes_copied)},
                         {"shard_map_generation", static_cast<double>(map.generation)},
                         {"ps_joined", static_cast<double>(stats_.ps_joined)},
                         {"ps_left", static_cast<double>(stats_.ps_left)},
                         {"ps_moves_started", static_cast<double>(stats_.moves_started)},
                         {"ps_moves_done", static_cast<double>(stats_.moves_done)},
                         {"ps_move_bytes", static_cast<double>(stats_.move_bytes)}});
}

}  // namespace asyncps
