#include "tests/testutil/worker_killer.h"

namespace asyncps::testutil {

WorkerKiller::WorkerKiller(LocalCluster& cluster, int num_workers, absl::Duration every, uint32_t seed)
    : cluster_(cluster), num_workers_(num_workers), every_(every), rng_(seed), thread_([this] { Run(); }) {}

WorkerKiller::~WorkerKiller() {
  stop_.Notify();
  thread_.join();
}

int WorkerKiller::kills() const {
  MutexLock lock(&mu_);
  return kills_;
}

absl::Status WorkerKiller::error() const {
  MutexLock lock(&mu_);
  return error_;
}

void WorkerKiller::Run() {
  // The pause paces the kills; it is not synchronisation (Notify ends it early).
  while (!stop_.WaitForNotificationWithTimeout(every_)) {
    const int w = std::uniform_int_distribution<int>(0, num_workers_ - 1)(rng_);
    absl::Status s = cluster_.KillWorker(w);
    if (s.ok()) s = cluster_.RestartWorker(w);
    MutexLock lock(&mu_);
    if (!s.ok()) {
      error_ = s;
      return;
    }
    ++kills_;
  }
}

}  // namespace asyncps::testutil
