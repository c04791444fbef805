#ifndef ASYNCPS_TESTS_TESTUTIL_LOCAL_CLUSTER_H_
#define ASYNCPS_TESTS_TESTUTIL_LOCAL_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/chief_process.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/cluster_spec.h"
#include "core/subprocess.h"

namespace asyncps::testutil {

// Coordinator options for tests that kill and restart workers: a dead or hung worker is noticed
// within about 2 s and probed every 200 ms, instead of the production defaults (5 s, 2 s).
inline ClusterCoordinator::Options FastFailureDetection() {
  ClusterCoordinator::Options o;
  o.heartbeat_interval = absl::Milliseconds(200);
  o.heartbeat_timeout = absl::Seconds(2);
  o.max_recovery_backoff = absl::Milliseconds(200);
  return o;
}

// FastFailureDetection with automatic PS recovery, from `checkpoints` (nullable, not owned;
// it must outlive the coordinator), giving up after 60 s: a failed repair fails the test
// instead of hanging it.
inline ClusterCoordinator::Options FastFailureDetectionWithPsRecovery(CheckpointManager* checkpoints) {
  ClusterCoordinator::Options o = FastFailureDetection();
  o.ps_recovery.enabled = true;
  o.ps_recovery.checkpoints = checkpoints;
  o.ps_recovery.timeout = absl::Seconds(60);
  return o;
}

// The in-process chief of a LocalCluster, wired as a chief's main wires it: a ChiefProcess and
// a strategy on it (destroyed first, as its contract asks).
class TestChief {
 public:
  TestChief(std::unique_ptr<ChiefProcess> process, std::shared_ptr<const Partitioner> partitioner)
      : process_(std::move(process)), strategy_(*process_, std::move(partitioner)) {}

  ChiefProcess& process() { return *process_; }
  ParameterServerStrategy& strategy() { return strategy_; }

 private:
  std::unique_ptr<ChiefProcess> process_;
  ParameterServerStrategy strategy_;
};

// Real parameter-server and worker processes on 127.0.0.1 (ephemeral ports) for integration
// tests, with the test process itself as the chief. Processes are killed with SIGKILL and
// restarted at the same address on demand, and every process is ended by pid when the
// cluster is destroyed.
//
// Not thread-safe: drive it from the test thread.
class LocalCluster {
 public:
  struct Options {
    int num_ps = 1;
    int num_workers = 1;
    // Binary for workers (a user program that calls Serve); PS run bin/asyncps_ps.
    std::string worker_binary = "asyncps_test_program";
    std::string token = "integration-test-token";
    absl::Duration start_timeout = absl::Seconds(60);
    // Extra environment for every ps and worker process (e.g. ASYNCPS_RPC_* limits).
    std::vector<std::pair<std::string, std::string>> extra_env;
  };

  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(Options options);
  ~LocalCluster();

  // The spec the in-process chief uses.
  const ClusterSpec& chief_spec() const { return chief_spec_; }

  // Options for this cluster's in-process chief: its token, no /metrics endpoint, PS calls
  // that give up after 20 s.
  ChiefProcess::Options ChiefOptions() const;
  // The in-process chief of this cluster, made with ChiefOptions(); the process's errors.
  absl::StatusOr<std::unique_ptr<TestChief>> MakeChief(std::shared_ptr<const Partitioner> partitioner = nullptr) const;
  const std::string& token() const { return options_.token; }
  // How to start a chief as a separate process for this cluster (a user program, `argv` its
  // binary and flags; not to be confused with the in-process ChiefProcess of MakeChief):
  // TF_CONFIG as task chief 0, the cluster token, no /metrics endpoint. Callers may add to the
  // environment.
  Subprocess::Options ChiefSubprocessOptions(std::vector<std::string> argv) const;

  absl::Status KillWorker(int i);
  absl::Status RestartWorker(int i);
  absl::Status KillPs(int i);
  absl::Status RestartPs(int i);
  bool worker_running(int i);
  // The process of PS i (its pid, signals, exit), for tests that watch the server itself.
  Subprocess& ps_process(int i) { return *ps_[i]; }
  // What worker i's current process has printed so far.
  std::string worker_output(int i);
  // Sends `signal` to worker i (SIGSTOP/SIGCONT make a hung worker that is still connected).
  void SignalWorker(int i, int signal);
  // Process ids (for /proc checks in tests); -1 when not running.
  int ps_pid(int i) const;
  int worker_pid(int i) const;

  // Path of a binary built next to the tests (bin/NAME).
  static std::string BinaryPath(const std::string& name);

 private:
  explicit LocalCluster(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::unique_ptr<Subprocess>> Launch(TaskType type, int index);

  Options options_;
  ClusterSpec chief_spec_;
  std::vector<std::unique_ptr<Subprocess>> ps_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_LOCAL_CLUSTER_H_
