#ifndef ASYNCPS_TESTS_TESTUTIL_REPLICATED_CLUSTER_H_
#define ASYNCPS_TESTS_TESTUTIL_REPLICATED_CLUSTER_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/ps_monitor.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps::testutil {

// Polls `condition` every 10 ms until it holds or `timeout` passes; whether it held.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

// A LocalCluster with replicated shards (issue 19): every PS started with
// ASYNCPS_PS_REPLICAS=`replicas`, and its in-process chief watching them (ps_replicas, PS lost
// after 2 s without an answer) with variables split in one shard per PS (FixedShardsPartitioner),
// so shard g is group g. For tests that SIGKILL and restart PS and wait on the chief's shard map.
//
// Not thread-safe (LocalCluster is not): drive it from the test thread. Destroy whatever uses
// the chief's strategy (coordinators, variables, checkpoint managers) first.
class ReplicatedCluster {
 public:
  // Starts `options` (its extra_env gains ASYNCPS_PS_REPLICAS), runs `before_chief` on it when
  // set (to restart a PS with a test hook in its environment, say), then the chief, and
  // returns once the chief's first map is on every PS. The errors of those steps.
  static absl::StatusOr<std::unique_ptr<ReplicatedCluster>> Start(
      LocalCluster::Options options, int replicas,
      const std::function<absl::Status(LocalCluster&)>& before_chief = nullptr);

  LocalCluster& cluster() { return *cluster_; }
  TestChief& chief() { return *chief_; }
  PsMonitor& monitor() { return *chief_->process().ps_monitor(); }
  int num_ps() const { return num_ps_; }

  // Every group has a primary and replicas-1 in-sync backups, and nothing is being rebuilt.
  bool FullyReplicated();
  bool IsPrimary(int ps);
  bool IsRebuilding(int ps);
  // Group `group`'s primary in the chief's map; -1 when it has none.
  int PrimaryOf(int group);

  // Waits (up to `timeout`) until FullyReplicated(); DeadlineExceeded showing the map if not.
  absl::Status WaitFullyReplicated(absl::Duration timeout);
  // SIGKILLs PS `ps`, waits (up to `timeout`) until the chief counts it lost, checks that it
  // is no group's primary any more (its groups failed over), and restarts it empty at its
  // address. Errors name the step that failed.
  absl::Status KillUntilLostAndRestart(int ps, absl::Duration timeout);
  // KillUntilLostAndRestart, then WaitFullyReplicated: the PS is back and rebuilt.
  absl::Status KillAndWaitRebuilt(int ps, absl::Duration timeout);

  // Ends the chief (destroy what uses its strategy first), runs `meanwhile` on the cluster
  // when set, and starts a new chief, which takes over the map the PS hold. Errors of those
  // steps.
  absl::Status RestartChief(const std::function<absl::Status(LocalCluster&)>& meanwhile = nullptr);

 private:
  absl::Status StartChief();

  ReplicatedCluster(std::unique_ptr<LocalCluster> cluster, int replicas)
      : cluster_(std::move(cluster)), replicas_(replicas) {}

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<TestChief> chief_;  // destroyed before the cluster
  int num_ps_ = 0;
  const int replicas_;
};

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_REPLICATED_CLUSTER_H_
