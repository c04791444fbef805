#ifndef ASYNCPS_TESTS_TESTUTIL_WORKER_KILLER_H_
#define ASYNCPS_TESTS_TESTUTIL_WORKER_KILLER_H_

#include <random>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps::testutil {

// Chaos for integration tests: every `every`, SIGKILLs a random one of the cluster's first
// `num_workers` workers and restarts it at the same address, from its own thread, until
// destroyed (the destructor stops and joins it). That thread is the only one driving the
// cluster meanwhile — LocalCluster is not thread-safe — and it is long-lived because a
// LocalCluster process dies with the thread that started it. `cluster` must outlive this.
class WorkerKiller {
 public:
  WorkerKiller(LocalCluster& cluster, int num_workers, absl::Duration every, uint32_t seed);
  ~WorkerKiller();
  WorkerKiller(const WorkerKiller&) = delete;
  WorkerKiller& operator=(const WorkerKiller&) = delete;

  // Kill-and-restart rounds completed so far. Thread-safe.
  int kills() const;
  // The first kill or restart that failed (the killer stops there); OK while none has.
  absl::Status error() const;

 private:
  void Run();

  LocalCluster& cluster_;
  const int num_workers_;
  const absl::Duration every_;
  std::mt19937 rng_;  // only Run's thread uses it
  Notification stop_;
  mutable Mutex mu_;
  int kills_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once everything it reads is constructed
};

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_WORKER_KILLER_H_
