#include "ps/parallel_apply.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "core/sync.h"
#include "core/thread_pool.h"

namespace asyncps::ps {
namespace {

// Beyond a few threads these memory-bound loops gain little, and a PS shares its machine.
constexpr int kMaxApplyHelpers = 3;
// A loop is cut into a few parts per thread rather than one: a part claimed by a thread that
// is then preempted (a loaded machine) holds up the caller for that part only, while the
// threads that run take the rest.
constexpr int kParallelPartsPerThread = 4;
static_assert((kMaxApplyHelpers + 1) * kParallelPartsPerThread <= kMaxParallelParts);

int DefaultApplyHelpers() {
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cpus - 1, 0, kMaxApplyHelpers);
}

// The helper threads, made on first use. Never destroyed: a PS applies until it exits, and a
// pool destroyed at exit could still be asked for help by a thread not yet stopped.
class ApplyHelpers {
 public:
  static ApplyHelpers& Get() {
    static ApplyHelpers* helpers = new ApplyHelpers(DefaultApplyHelpers());
    return *helpers;
  }

  // The pool and its size, for one ParallelFor (null with no helpers).
  std::pair<ThreadPool*, int> pool() {
    MutexLock lock(&mu_);
    return {pool_.get(), helpers_};
  }

  int64_t min_part_divisor() {
    MutexLock lock(&mu_);
    return min_part_divisor_;
  }

  void Reset(int helpers, int64_t min_part_divisor) {
    helpers = std::clamp(helpers, 0, kMaxApplyHelpers);
    std::unique_ptr<ThreadPool> fresh = helpers > 0 ? std::make_unique<ThreadPool>(helpers) : nullptr;
    std::unique_ptr<ThreadPool> old;
    {
      MutexLock lock(&mu_);
      helpers_ = helpers;
      min_part_divisor_ = std::max<int64_t>(1, min_part_divisor);
      old = std::move(pool_);
      pool_ = std::move(fresh);
    }
    // `old` joins its idle threads here, outside the lock.
  }

 private:
  explicit ApplyHelpers(int helpers) { Reset(helpers, 1); }

  Mutex mu_;
  std::unique_ptr<ThreadPool> pool_ ABSL_GUARDED_BY(mu_);
  int helpers_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t min_part_divisor_ ABSL_GUARDED_BY(mu_) = 1;
};

// One ParallelFor: its parts are claimed through `next`, and `done` counts those finished.
// Shared with the helpers' tasks, which may start after the call returned (then they claim
// nothing and never touch `fn`, whose target was the caller's).
struct ParallelJob {
  ParallelJob(int parts, absl::FunctionRef<void(int)> fn) : parts(parts), fn(fn) {}
  const int parts;
  const absl::FunctionRef<void(int)> fn;
  std::atomic<int> next{0};
  Mutex mu;
  int done ABSL_GUARDED_BY(mu) = 0;
};

// Runs parts of `job` until none is left to claim. The mutex orders what the parts wrote
// before the caller's return.
void RunClaimedParts(ParallelJob& job) {
  int ran = 0;
  for (int p = job.next.fetch_add(1, std::memory_order_relaxed); p < job.parts;
       p = job.next.fetch_add(1, std::memory_order_relaxed)) {
    job.fn(p);
    ++ran;
  }
  if (ran == 0) return;
  MutexLock lock(&job.mu);
  job.done += ran;
}

}  // namespace

void ParallelFor(int parts, absl::FunctionRef<void(int)> fn) {
  if (parts <= 0) return;
  auto [pool, helpers] = ApplyHelpers::Get().pool();
  if (parts == 1 || pool == nullptr) {
    for (int p = 0; p < parts; ++p) fn(p);
    return;
  }
  auto job = std::make_shared<ParallelJob>(parts, fn);
  const int asks = std::min(parts - 1, helpers);
  for (int i = 0; i < asks; ++i) pool->Submit([job] { RunClaimedParts(*job); });
  RunClaimedParts(*job);
  MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(
      +[](ParallelJob* j) ABSL_NO_THREAD_SAFETY_ANALYSIS { return j->done == j->parts; }, job.get()));
}

int ParallelApplyThreads() { return 1 + ApplyHelpers::Get().pool().second; }

int ParallelParts(int64_t work, int64_t min_part_work) {
  const int threads = ParallelApplyThreads();
  if (threads == 1) return 1;
  const int64_t most = int64_t{threads} * kParallelPartsPerThread;
  min_part_work /= ApplyHelpers::Get().min_part_divisor();
  if (min_part_work <= 0) return static_cast<int>(most);
  return static_cast<int>(std::clamp<int64_t>(work / min_part_work, 1, most));
}

void SetParallelApplyHelpersForTesting(int helpers, int64_t min_part_divisor) {
  ApplyHelpers::Get().Reset(helpers, min_part_divisor);
}

}  // namespace asyncps::ps
