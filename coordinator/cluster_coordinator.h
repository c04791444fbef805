#ifndef ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_
#define ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/closure_arg.h"
#include "coordinator/closure_queue.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/per_worker_dataset.h"
#include "coordinator/remote_value.h"
#include "coordinator/resource_spec.h"
#include "core/sync.h"
#include "worker/program.h"

namespace asyncps {

class CoordinatorMetrics;
class WorkerHandle;  // internal (coordinator/worker_handle.h): one worker's connection and state

// Schedules step functions ("closures") onto the cluster's workers, with the contract of
// TensorFlow's ClusterCoordinator:
//   * Schedule never blocks on work (only while the queue is full) and returns a RemoteValue.
//     Every closure runs at least once: a closure whose worker fails before answering goes
//     back on the queue and runs on another (or the recovered) worker.
//   * Join blocks until the queue is empty and nothing is in flight; Done says whether that
//     is so. Schedule, Join and Done return the first error a closure produced since the last
//     one was returned, then clear it. When an error happens, queued closures are cancelled
//     (their RemoteValues say Cancelled), running ones are asked to stop (StepContext::
//     cancelled), and Join/Done return only once none is running. The coordinator stays usable.
//   * A closure that could not reach a parameter server fails with Unavailable.
// Workers are watched by heartbeats as well as by failed calls, so a hung or partitioned worker
// is noticed too. A down worker is probed with backoff; when it answers, its per-worker
// resources and the variable directory are rebuilt on it before it is given closures again.
//
// Thread-safe: Schedule/Join/Done/Fetch may be called from any thread.
class ClusterCoordinator {
 public:
  struct Options {
    size_t queue_capacity = 1024;
    // Closures running at once on each worker (TensorFlow: 1). More hide dispatch latency.
    int closures_per_worker = 1;
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    absl::Duration heartbeat_timeout = absl::Seconds(5);
    absl::Duration rpc_timeout = absl::Seconds(30);       // setup calls to workers
    absl::Duration closure_timeout = absl::InfiniteDuration();
    absl::Duration max_recovery_backoff = absl::Seconds(2);
    // How long the destructor lets running closures stop cooperatively after cancelling them.
    absl::Duration shutdown_grace = absl::Milliseconds(500);
  };

  // `strategy` and `program` must outlive the coordinator. `program` is used to reject
  // unknown function and resource names at Schedule time.
  ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program);
  ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program, Options options);

  // Returns promptly — within `shutdown_grace` plus a few loop round trips — whatever the
  // workers do: queued closures are cancelled; running ones are asked to stop
  // (StepContext::cancelled) and given `shutdown_grace` to do so; then every call still
  // waiting on a worker is abandoned (a hung worker, a recovery probe, a closure that ignores
  // cancellation) and its RemoteValue says Cancelled. A function that ignores cancellation
  // keeps running in its worker process until it returns on its own; its answer is dropped
  // and nothing it did is rolled back. The worker stays usable by a later coordinator.
  ~ClusterCoordinator();

  absl::StatusOr<RemoteValue> Schedule(const std::string& function, std::vector<ClosureArg> args = {});
  absl::Status Join();
  absl::StatusOr<bool> Done();

  // Values of every remote value, blocking for each; the first error if any failed.
  absl::StatusOr<std::vector<Values>> Fetch(const std::vector<RemoteValue>& values);

  // Creates a resource on every worker from `factory` in the Program, and keeps it there:
  // a worker that restarts gets it rebuilt before its next closure.
  //   * NotFound for a factory the Program does not have.
  //   * When the factory fails on a worker that is up, that error (its code; the message
  //     names the factory and worker) is returned and nothing is left behind: the resource
  //     is deleted where it was built and is not rebuilt on workers that recover later.
  //   * When the factory fails only later, on a worker that was down at creation and is
  //     being recovered, the worker is still admitted: closures that do not use the
  //     resource run there, and a closure that does fails with the factory's error, raised
  //     by Schedule/Join/Done like a function error (TensorFlow's input errors). The factory
  //     is tried again if that worker restarts.
  absl::StatusOr<PerWorkerValues> CreatePerWorkerResource(const std::string& factory,
                                                          std::map<std::string, std::string> args = {});

  // Builds the dataset `name` of the Program on every worker (its factory gets the worker's
  // index, the number of workers and `args`) and keeps it there, rebuilt on a worker that
  // restarts. Iterators over it come from PerWorkerDataset::MakeIterator. NotFound for a name
  // the Program lacks; the factory's own error when it fails on a worker.
  absl::StatusOr<PerWorkerDataset> CreatePerWorkerDataset(const std::string& name,
                                                          std::map<std::string, std::string> args = {});

  int num_workers() const { return static_cast<int>(workers_.size()); }
  int workers_up() const;

 private:
  struct ClosureArgs;
  void DispatchLoop(WorkerHandle& worker);
  void MonitorLoop(WorkerHandle& worker);
  void RunClosure(WorkerHandle& worker, const std::shared_ptr<Closure>& closure);
  void WorkerFailed(WorkerHandle& worker, uint64_t incarnation, const absl::Status& reason);
  // Queue gauges change with every closure; the workers-up gauge only when a worker goes down
  // or is admitted, so only those paths pay for counting them.
  void UpdateQueueGauges();
  void UpdateWorkerGauge();

  ParameterServerStrategy& strategy_;
  const Program& program_;
  const Options options_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  ClosureQueue queue_;
  std::vector<std::unique_ptr<WorkerHandle>> workers_;

  Mutex resources_mu_;
  std::vector<ResourceSpec> resources_ ABSL_GUARDED_BY(resources_mu_);

  std::vector<std::thread> threads_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_CLUSTER_COORDINATOR_H_
