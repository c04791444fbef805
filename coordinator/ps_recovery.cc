#include "coordinator/ps_recovery.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/ps.capnp.h"
#include "ps/replication/shard_map.h"
#include "net/rpc_client.h"

namespace asyncps {
namespace {

class ClusterPsRepair : public PsRecovery::Repair {
 public:
  ClusterPsRepair(ParameterServerStrategy& strategy, CheckpointManager* checkpoints,
                  PsRecovery::CoordinatorState* state)
      : strategy_(strategy), checkpoints_(checkpoints), state_(state) {}

  absl::Status ProbeAll(absl::Duration timeout) override {
    if (PsMonitor* monitor = strategy_.process().ps_monitor(); monitor != nullptr) {
      // Replicated shards: what a restore needs is a primary for every group (a PS that stays
      // away while its groups are served elsewhere does not hold it up).
      for (const ps::GroupEntry& g : monitor->map().groups) {
        if (g.primary < 0) {
          return absl::UnavailableError(absl::StrCat("shard group ", g.group, " has no copy yet"));
        }
        RETURN_IF_ERROR(strategy_.process().ps().Health(g.primary, timeout, /*wait_for_ready=*/true));
      }
      return absl::OkStatus();
    }
    for (int i = 0; i < strategy_.cluster().num_ps(); ++i) {
      RETURN_IF_ERROR(strategy_.process().ps().Health(i, timeout, /*wait_for_ready=*/true));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<int>> PsMissingVariables() override {
    if (PsMonitor* monitor = strategy_.process().ps_monitor(); monitor != nullptr) {
      // Replicated shards: a copy that lost its state is rebuilt from another copy by the
      // monitor; only the groups that lost every copy (restore_pending) need the checkpoint.
      pending_ = monitor->RestoresPending();
      std::vector<int> groups;
      for (const PsMonitor::PendingRestore& p : pending_) {
        if (p.primary < 0) {
          return absl::UnavailableError(absl::StrCat("shard group ", p.group, " has no copy to restore yet"));
        }
        groups.push_back(p.group);
      }
      if (!groups.empty()) {
        spdlog::warn("shard group(s) {} lost every copy: restoring the checkpoint", absl::StrJoin(groups, ", "));
      }
      return groups;
    }
    const int num_ps = strategy_.cluster().num_ps();
    std::vector<absl::flat_hash_set<std::string>> expected(static_cast<size_t>(num_ps));
    for (const auto& placement : strategy_.process().directory().All()) {
      for (const auto& shard : placement->shards)
        expected[static_cast<size_t>(shard.ps)].insert(shard.name);
    }
    const std::vector<std::string> tables = strategy_.EmbeddingTableNames();  // sorted
    std::vector<int> missing;
    for (int i = 0; i < num_ps; ++i) {
      net::RpcClient& client = strategy_.process().ps_rpc(i);
      ASSIGN_OR_RETURN(net::InMessage response, client.Call("ps.ListVariables", net::OutMessage(),
                                                            strategy_.process().options().rpc_timeout));
      size_t held = 0;
      RETURN_IF_ERROR(net::CatchDecodeErrors([&] {
        for (auto v : response.ResponseBody<wire::ListVariablesResponse>().getVariables()) {
          held += expected[static_cast<size_t>(i)].contains(v.getName().cStr()) ? 1 : 0;
        }
        return absl::OkStatus();
      }));
      const size_t want = expected[static_cast<size_t>(i)].size();
      if (held != want) {
        spdlog::warn("ps {} ({}, incarnation {:x}) holds {} of its {} variable shard(s)", i,
                     client.address(), client.peer().incarnation, held, want);
        missing.push_back(i);
        continue;
      }
      // Every embedding table lives on every PS (its part of the keys).
      ASSIGN_OR_RETURN(size_t tables_held, TablesHeld(client, tables));
      if (tables_held != tables.size()) {
        spdlog::warn("ps {} ({}, incarnation {:x}) holds {} of the {} embedding table(s)", i, client.address(),
                     client.peer().incarnation, tables_held, tables.size());
        missing.push_back(i);
      }
    }
    return missing;
  }

  // How many of `tables` the PS of `client` holds (ps.EmbeddingStats of every table it has).
  absl::StatusOr<size_t> TablesHeld(net::RpcClient& client, const std::vector<std::string>& tables) {
    if (tables.empty()) return 0;
    net::OutMessage request;
    ps::BuildEmbeddingStatsRequest({}, request);
    ASSIGN_OR_RETURN(net::InMessage response, client.Call(ps::kEmbeddingStatsMethod, std::move(request),
                                                          strategy_.process().options().rpc_timeout));
    size_t held = 0;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&] {
      for (auto t : response.ResponseBody<wire::EmbeddingStatsResponse>().getTables()) {
        held += std::binary_search(tables.begin(), tables.end(), std::string(t.getName().cStr())) ? 1 : 0;
      }
      return absl::OkStatus();
    }));
    return held;
  }

  absl::StatusOr<std::string> LatestCheckpoint() override {
    if (checkpoints_ == nullptr)
      return absl::NotFoundError("no CheckpointManager was given for PS recovery");
    return checkpoints_->Latest();
  }

  // With replicated shards the checkpoint is restored onto every group, not only the ones that
  // lost every copy: the closures completed since it are trained again (the cursor rolls
  // back), and a group that kept their updates would apply them twice (the closures that
  // train them again have other ids). One cut of every group, as without replication.
  absl::StatusOr<PsRecovery::Restored> Restore(const std::string& path) override {
    PsRecovery::Restored restored;
    if (state_ == nullptr) {
      ASSIGN_OR_RETURN(restored.step, checkpoints_->Restore(path, CheckpointManager::FinishedClosures()));
      MarkRestored();
      return restored;
    }
    // The cursor is checked before any variable changes, and rolled back only once they all
    // are: a checkpoint whose cursor cannot be used leaves the cluster as it was.
    ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(path));
    RETURN_IF_ERROR(state_->CheckRollBack(manifest.coordinator_state));
    ASSIGN_OR_RETURN(restored.step, checkpoints_->Restore(path, state_->Finished()));
    state_->RollBack(manifest.coordinator_state, &restored);
    MarkRestored();
    return restored;
  }

  absl::Status Reinitialize() override {
    RETURN_IF_ERROR(strategy_.RecreateVariables());
    MarkRestored();
    return absl::OkStatus();
  }

 private:
  // The groups awaiting a restore serve again (replicated shards), all of their primaries
  // having acknowledged it.
  void MarkRestored() {
    PsMonitor* monitor = strategy_.process().ps_monitor();
    if (monitor == nullptr || pending_.empty()) return;
    monitor->Restored(pending_);
    // The monitor pushes the map without waiting; the restored primaries get it here before
    // dispatch resumes, or a closure sent at once would still find them restoring, fail, and
    // start another (empty) recovery. Best effort: a PS that misses it gets it next heartbeat.
    const ps::ShardMap map = monitor->map();
    for (const PsMonitor::PendingRestore& p : pending_) {
      const ps::GroupEntry* g = map.Find(static_cast<uint32_t>(p.group));
      if (g == nullptr || g->primary < 0) continue;
      net::OutMessage m;
      ps::ShardMapToWire(map, m.InitRequestBody<wire::SetShardMapRequest>().initMap());
      absl::Status s = strategy_.process().ps_rpc(g->primary).Call("ps.SetShardMap", std::move(m),
                                                                    strategy_.process().options().rpc_timeout).status();
      if (!s.ok()) spdlog::warn("restored shard map not taken by ps {}: {}", g->primary, s.ToString());
    }
    pending_.clear();
  }

  ParameterServerStrategy& strategy_;
  CheckpointManager* const checkpoints_;
  PsRecovery::CoordinatorState* const state_;
  std::vector<PsMonitor::PendingRestore> pending_;  // as PsMissingVariables found them
};

// Failures worth retrying: a PS that is (again) unreachable.
bool Retryable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

std::unique_ptr<PsRecovery::Repair> PsRecovery::MakeClusterPsRepair(
    ParameterServerStrategy& strategy, CheckpointManager* checkpoints, CoordinatorState* state) {
  return std::make_unique<ClusterPsRepair>(strategy, checkpoints, state);
}

PsRecovery::PsRecovery(ClosureQueue& queue, std::unique_ptr<Repair> repair,
                       CoordinatorMetrics* metrics, Options options)
    : queue_(queue), repair_(std::move(repair)), metrics_(metrics), options_(options) {
  if (options_.checkpoints != nullptr) {
    listener_id_ =
        options_.checkpoints->AddCommitListener([this](int64_t step) { NoteCheckpoint(step); });
  }
  thread_ = std::thread([this] { Loop(); });
}

PsRecovery::~PsRecovery() {
  Stop();
  thread_.join();
  if (listener_id_ >= 0) options_.checkpoints->RemoveCommitListener(listener_id_);
}

void PsRecovery::Stop() {
  MutexLock lock(&mu_);
  stopping_ = true;
}

bool PsRecovery::stopping() const {
  MutexLock lock(&mu_);
  return stopping_;
}

void PsRecovery::NoteCompleted() { completed_.fetch_add(1, std::memory_order_relaxed); }

void PsRecovery::NoteCheckpoint(int64_t step) {
  const int64_t completed = completed_.load(std::memory_order_relaxed);
  MutexLock lock(&mu_);
  marks_[step] = completed;
  // Only the newest checkpoints can be restored (older ones are deleted by max_to_keep).
  while (marks_.size() > 64) marks_.erase(marks_.begin());
}

PsRecovery::Stats PsRecovery::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

bool PsRecovery::OnPsFailure(const absl::Status& error) {
  MutexLock lock(&mu_);
  if (gave_up_) return false;
  if (recovering_ || stopping_) return true;
  recovering_ = true;
  reason_ = error;
  failed_at_ = absl::Now();
  // Before the caller puts its closure back, so no dispatcher picks it up again first.
  queue_.Pause();
  if (metrics_ != nullptr) metrics_->dispatch_paused.Set(1);
  spdlog::warn("parameter server failure: {}; dispatch paused for automatic PS recovery",
               error.ToString());
  return true;
}

void PsRecovery::Resume() {
  queue_.Resume();
  if (metrics_ != nullptr) metrics_->dispatch_paused.Set(0);
}

bool PsRecovery::Pace(absl::Duration timeout) {
  MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), timeout);
  return !stopping_;
}

void PsRecovery::Loop() {
  for (;;) {
    absl::Status reason;
    absl::Time started;
    {
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PsRecovery* r)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return r->recovering_ || r->stopping_; },
          this));
      if (stopping_) return;
      reason = reason_;
      started = failed_at_;
    }
    const Result result = Recover(reason, started);
    if (result == Result::kStopped) return;
    MutexLock lock(&mu_);
    if (result == Result::kGaveUp) gave_up_ = true;
    // Resumed under mu_: a failure reported from now on starts a new recovery, never joins
    // one that has finished.
    recovering_ = false;
    Resume();
  }
}

PsRecovery::Result PsRecovery::Recover(const absl::Status& reason, absl::Time started) {
  const absl::Time deadline = started + options_.timeout;
  auto give_up = [&](const absl::Status& why) {
    spdlog::error(
        "automatic PS recovery gives up: {}; resuming dispatch: closures that need the lost PS "
        "fail with "
        "Unavailable, and automatic recovery stays off for this coordinator",
        why.ToString());
    MutexLock lock(&mu_);
    stats_.gave_up = true;
    return Result::kGaveUp;
  };
  // Nothing may run while the PS are repaired: a closure still writing to a surviving PS
  // would land on top of the restored values.
  while (!queue_.WaitUntilNoneInFlight(options_.probe_interval)) {
    if (stopping()) return Result::kStopped;
  }
  Event event;
  event.reason = reason.ToString();
  for (;;) {
    if (stopping()) return Result::kStopped;
    if (absl::Now() >= deadline) {
      return give_up(absl::DeadlineExceededError(absl::StrCat(
          "the parameter servers did not all come back and get repaired within ",
          absl::FormatDuration(options_.timeout), " of the failure (", reason.message(), ")")));
    }
    absl::Status s = repair_->ProbeAll(
        std::min(absl::Seconds(1), std::max(deadline - absl::Now(), absl::ZeroDuration())));
    absl::StatusOr<std::vector<int>> missing = s.ok() ? repair_->PsMissingVariables() : s;
    if (!missing.ok()) {
      if (!Pace(options_.probe_interval)) return Result::kStopped;
      continue;
    }
    event.lost_ps = *missing;
    if (missing->empty()) break;  // only unreachable for a while: nothing to restore

    const int64_t completed = completed_.load(std::memory_order_relaxed);
    absl::StatusOr<std::string> latest = repair_->LatestCheckpoint();
    if (latest.ok()) {
      absl::StatusOr<Restored> restored = repair_->Restore(*latest);
      if (!restored.ok()) {
        if (!Retryable(restored.status())) return give_up(restored.status());
        spdlog::warn("PS recovery: restore failed, will retry: {}", restored.status().ToString());
        if (!Pace(options_.probe_interval)) return Result::kStopped;
        continue;
      }
      const int64_t step = restored->step;
      event.checkpoint = *latest;
      event.checkpoint_step = step;
      event.batches_redone = restored->batches_redone;
      event.cursors_missing = std::move(restored->cursors_missing);
      MutexLock lock(&mu_);
      auto mark = marks_.find(step);
      event.steps_lost_upper_bound = mark == marks_.end();
      event.steps_lost = completed - (event.steps_lost_upper_bound ? 0 : mark->second);
      // The cluster is at checkpoint `step` again as of now.
      marks_[step] = completed;
    } else if (latest.status().code() == absl::StatusCode::kNotFound) {
      absl::Status re = repair_->Reinitialize();
      if (!re.ok()) {
        if (!Retryable(re)) return give_up(re);
        spdlog::warn("PS recovery: re-initialising failed, will retry: {}", re.ToString());
        if (!Pace(options_.probe_interval)) return Result::kStopped;
        continue;
      }
      spdlog::warn(
          "PS recovery: no checkpoint to restore ({}): the variables of ps {} were re-created from "
          "their "
          "initializers; every other PS keeps its values",
          latest.status().ToString(), absl::StrJoin(event.lost_ps, ", "));
      event.reinitialized = true;
      MutexLock lock(&mu_);
      event.steps_lost = completed - reinit_mark_;
      reinit_mark_ = completed;
    } else {
      return give_up(latest.status());
    }
    break;
  }
  event.time = absl::Now();
  event.paused = event.time - started;
  if (event.lost_ps.empty()) {
    spdlog::info(
        "parameter servers reachable again with their variables after {}; nothing restored, "
        "dispatch "
        "resumes",
        absl::FormatDuration(event.paused));
  } else {
    spdlog::warn(
        "PS recovery done in {}: ps {} had lost its variables (with replicated shards: the shard "
        "groups that lost every copy); {}; {}{} completed closure(s) lost; "
        "closures that failed meanwhile run again",
        absl::FormatDuration(event.paused), absl::StrJoin(event.lost_ps, ", "),
        event.reinitialized
            ? std::string("re-initialised from initializers (no checkpoint)")
            : absl::StrCat("restored ", event.checkpoint, " (step ", event.checkpoint_step, ")"),
        event.steps_lost_upper_bound ? "at most " : "", event.steps_lost);
    if (event.batches_redone > 0) {
      spdlog::warn(
          "PS recovery: work redone: {} batch(es) of dynamically sharded data completed after "
          "checkpoint step {} are handed out again, so their examples are read once more",
          event.batches_redone, event.checkpoint_step);
    }
    if (!event.cursors_missing.empty()) {
      spdlog::error(
          "PS recovery: EXAMPLES MAY BE SKIPPED: checkpoint {} holds no split cursor for "
          "dataset(s) '{}' (saved without ClusterCoordinator::SplitCursorState()), so the variables were "
          "rolled back but the cursor was not: the batches handed out since step {} ({}{} "
          "closure(s) completed) are not trained again. Save the cursor with each checkpoint "
          "(CheckpointManager::Save(step, coordinator.SplitCursorState())) for exactly once",
          event.checkpoint, absl::StrJoin(event.cursors_missing, "', '"), event.checkpoint_step,
          event.steps_lost_upper_bound ? "at most " : "", event.steps_lost);
    }
    if (metrics_ != nullptr) {
      metrics_->ps_recoveries.Increment();
      metrics_->ps_recovery_steps_lost.Increment(static_cast<double>(event.steps_lost));
      metrics_->ps_recovery_batches_redone.Increment(static_cast<double>(event.batches_redone));
      metrics_->ps_recovery_cursor_missing.Increment(
          static_cast<double>(event.cursors_missing.size()));
    }
  }
  MutexLock lock(&mu_);
  if (event.lost_ps.empty()) {
    ++stats_.transient;
  } else {
    ++stats_.recoveries;
    stats_.steps_lost += event.steps_lost;
    stats_.batches_redone += event.batches_redone;
    stats_.cursors_missing += static_cast<int64_t>(event.cursors_missing.size());
  }
  stats_.events.push_back(std::move(event));
  return Result::kDone;
}

}  // namespace asyncps
