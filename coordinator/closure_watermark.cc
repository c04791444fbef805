#include "coordinator/closure_watermark.h"

#include <algorithm>

#include "core/incarnation.h"

namespace asyncps {
namespace {

constexpr size_t kMinCompaction = 64;

}  // namespace

// Below 2^62, so counting up never wraps; never 0 (0 means "untagged" on the wire).
ClosureWatermark::ClosureWatermark() : ClosureWatermark((RandomId() >> 2) | 1) {}

ClosureWatermark::ClosureWatermark(uint64_t first_id)
    : first_id_(first_id), next_id_(first_id), compact_at_(kMinCompaction) {}

void ClosureWatermark::Assign(const std::shared_ptr<Closure>& closure) {
  MutexLock lock(&mu_);
  closure->id = next_id_++;
  live_.emplace_back(closure->id, closure);
  Prune();
}

uint64_t ClosureWatermark::Watermark() {
  MutexLock lock(&mu_);
  Prune();
  return live_.empty() ? next_id_ : live_.front().first;
}

void ClosureWatermark::Prune() {
  while (!live_.empty() && live_.front().second.expired()) live_.pop_front();
  if (live_.size() >= compact_at_) {
    // Closures that finished behind a long one: amortised O(1) per closure.
    live_.erase(std::remove_if(live_.begin(), live_.end(), [](const auto& e) { return e.second.expired(); }),
                live_.end());
    compact_at_ = std::max(kMinCompaction, 2 * live_.size());
  }
}

size_t ClosureWatermark::tracked() const {
  MutexLock lock(&mu_);
  return live_.size();
}

}  // namespace asyncps
