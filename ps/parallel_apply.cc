#include "ps/parallel_apply.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "core/sync.h"
#include "core/thread_pool.h"

namespace asyncps::ps {
namespace {

// A loop is cut into a few parts per thread rather than one: a part claimed by a thread that
// is then preempted (a loaded machine) holds up the caller for that part only, while the
// threads that run take the rest.
constexpr int kApplyPartsPerThread = 4;
static_assert((ApplyPool::kMaxHelpers + 1) * kApplyPartsPerThread <= ApplyPool::kMaxParts);

ApplyPool::Options ResolvedApplyOptions(ApplyPool::Options options) {
  if (options.helpers < 0) options.helpers = static_cast<int>(std::thread::hardware_concurrency()) - 1;
  options.helpers = std::clamp(options.helpers, 0, ApplyPool::kMaxHelpers);
  return options;
}

// One ParallelFor: its parts are claimed through `next`, and `done` counts those finished.
// Shared with the helpers' tasks, which may start after the call returned (then they claim
// nothing and never touch `fn`, whose target was the caller's).
struct ApplyPoolJob {
  ApplyPoolJob(int parts, absl::FunctionRef<void(int)> fn) : parts(parts), fn(fn) {}
  const int parts;
  const absl::FunctionRef<void(int)> fn;
  std::atomic<int> next{0};
  Mutex mu;
  int done ABSL_GUARDED_BY(mu) = 0;
};

// Runs parts of `job` until none is left to claim. The mutex orders what the parts wrote
// before the caller's return.
void RunClaimedApplyParts(ApplyPoolJob& job) {
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

ApplyPool::ApplyPool(Options options)
    : options_(ResolvedApplyOptions(options)),
      helpers_(options_.helpers > 0 ? std::make_unique<ThreadPool>(options_.helpers) : nullptr) {}

ApplyPool::~ApplyPool() = default;

int ApplyPool::Parts(int64_t work, int64_t min_part_work) const {
  if (helpers_ == nullptr) return 1;
  const int64_t most = int64_t{threads()} * kApplyPartsPerThread;
  if (min_part_work <= 0) return static_cast<int>(most);
  return static_cast<int>(std::clamp<int64_t>(work / min_part_work, 1, most));
}

void ApplyPool::ParallelFor(int parts, absl::FunctionRef<void(int)> fn) {
  if (parts <= 0) return;
  if (parts == 1 || helpers_ == nullptr) {
    for (int p = 0; p < parts; ++p) fn(p);
    return;
  }
  auto job = std::make_shared<ApplyPoolJob>(parts, fn);
  const int asks = std::min(parts - 1, options_.helpers);
  for (int i = 0; i < asks; ++i) helpers_->Submit([job] { RunClaimedApplyParts(*job); });
  RunClaimedApplyParts(*job);
  MutexLock lock(&job->mu);
  job->mu.Await(absl::Condition(
      +[](ApplyPoolJob* j) ABSL_NO_THREAD_SAFETY_ANALYSIS { return j->done == j->parts; }, job.get()));
}

void ApplyInParts(ApplyPool* pool, int parts, absl::FunctionRef<void(int)> fn) {
  if (pool != nullptr) {
    pool->ParallelFor(parts, fn);
    return;
  }
  for (int p = 0; p < parts; ++p) fn(p);
}

}  // namespace asyncps::ps
