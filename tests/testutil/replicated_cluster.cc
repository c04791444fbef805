#include "tests/testutil/replicated_cluster.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "partitioners/partitioner.h"
#include "ps/replication/shard_map.h"

namespace asyncps::testutil {

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  for (const absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;) {
    if (condition()) return true;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
  }
  return condition();
}

absl::StatusOr<std::unique_ptr<ReplicatedCluster>> ReplicatedCluster::Start(
    LocalCluster::Options options, int replicas, const std::function<absl::Status(LocalCluster&)>& before_chief) {
  options.extra_env.emplace_back("ASYNCPS_PS_REPLICAS", std::to_string(replicas));
  const int num_ps = options.num_ps;
  ASSIGN_OR_RETURN(std::unique_ptr<LocalCluster> local, LocalCluster::Start(std::move(options)));
  std::unique_ptr<ReplicatedCluster> cluster(new ReplicatedCluster(std::move(local), replicas));
  cluster->num_ps_ = num_ps;
  if (before_chief) RETURN_IF_ERROR(before_chief(*cluster->cluster_));
  RETURN_IF_ERROR(cluster->StartChief());
  return cluster;
}

absl::Status ReplicatedCluster::StartChief() {
  ChiefProcess::Options chief_options = cluster_->ChiefOptions();
  chief_options.process.ps_replicas = replicas_;
  chief_options.process.ps_heartbeat_timeout = absl::Seconds(2);
  ASSIGN_OR_RETURN(std::unique_ptr<ChiefProcess> process, ChiefProcess::Create(cluster_->chief_spec(), chief_options));
  ASSIGN_OR_RETURN(std::unique_ptr<FixedShardsPartitioner> partitioner, FixedShardsPartitioner::Create(num_ps_));
  chief_ = std::make_unique<TestChief>(std::move(process), std::move(partitioner));
  if (chief_->process().ps_monitor() == nullptr) {
    return absl::InternalError("the chief watches no replicated PS (ps_replicas not taken)");
  }
  return absl::OkStatus();
}

absl::Status ReplicatedCluster::RestartChief(const std::function<absl::Status(LocalCluster&)>& meanwhile) {
  chief_.reset();
  if (meanwhile) RETURN_IF_ERROR(meanwhile(*cluster_));
  return StartChief();
}

bool ReplicatedCluster::FullyReplicated() {
  const ps::ShardMap map = monitor().map();
  for (const ps::GroupEntry& g : map.groups) {
    if (g.primary < 0 || static_cast<int>(g.backups.size()) != replicas_ - 1 || !g.rebuilding.empty()) return false;
  }
  return static_cast<int>(map.groups.size()) == num_ps_;
}

bool ReplicatedCluster::IsPrimary(int ps) {
  for (const ps::GroupEntry& g : monitor().map().groups) {
    if (g.primary == ps) return true;
  }
  return false;
}

bool ReplicatedCluster::IsRebuilding(int ps) {
  for (const ps::GroupEntry& g : monitor().map().groups) {
    if (std::find(g.rebuilding.begin(), g.rebuilding.end(), ps) != g.rebuilding.end()) return true;
  }
  return false;
}

int ReplicatedCluster::PrimaryOf(int group) {
  const ps::ShardMap map = monitor().map();
  const ps::GroupEntry* g = map.Find(static_cast<uint32_t>(group));
  return g == nullptr ? -1 : g->primary;
}

absl::Status ReplicatedCluster::WaitFullyReplicated(absl::Duration timeout) {
  if (WaitFor([&] { return FullyReplicated(); }, timeout)) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat("not fully replicated within ", absl::FormatDuration(timeout),
                                                  ": ", monitor().map().DebugString()));
}

absl::Status ReplicatedCluster::KillUntilLostAndRestart(int ps, absl::Duration timeout) {
  const int64_t lost = monitor().stats().ps_lost;
  RETURN_IF_ERROR(cluster_->KillPs(ps));
  if (!WaitFor([&] { return monitor().stats().ps_lost > lost; }, timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("ps ", ps, " never counted lost: ", monitor().map().DebugString()));
  }
  if (IsPrimary(ps)) {
    return absl::InternalError(absl::StrCat("lost ps ", ps, " is still a primary: ", monitor().map().DebugString()));
  }
  return cluster_->RestartPs(ps);
}

absl::Status ReplicatedCluster::KillAndWaitRebuilt(int ps, absl::Duration timeout) {
  RETURN_IF_ERROR(KillUntilLostAndRestart(ps, timeout));
  return WaitFullyReplicated(timeout);
}

}  // namespace asyncps::testutil
