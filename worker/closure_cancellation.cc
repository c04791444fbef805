#include "worker/closure_cancellation.h"

namespace asyncps {

ClosureCancellation::Attempt ClosureCancellation::Start(uint64_t closure_id) {
  Attempt attempt{closure_id, 0, std::make_shared<std::atomic<bool>>(false)};
  MutexLock lock(&mu_);
  attempt.token = ++next_token_;
  if (cancelled_.contains(closure_id)) attempt.cancelled->store(true);
  running_[closure_id].emplace(attempt.token, attempt.cancelled);
  return attempt;
}

void ClosureCancellation::Finish(const Attempt& attempt) {
  MutexLock lock(&mu_);
  auto it = running_.find(attempt.closure_id);
  if (it == running_.end()) return;
  it->second.erase(attempt.token);
  if (it->second.empty()) running_.erase(it);
}

void ClosureCancellation::Cancel(absl::Span<const uint64_t> closure_ids) {
  MutexLock lock(&mu_);
  for (uint64_t id : closure_ids) {
    if (auto it = running_.find(id); it != running_.end()) {
      for (auto& [token, flag] : it->second) flag->store(true);
    }
    if (!cancelled_.insert(id).second) continue;
    cancelled_order_.push_back(id);
    if (cancelled_order_.size() > kMaxRememberedCancels) {
      cancelled_.erase(cancelled_order_.front());
      cancelled_order_.pop_front();
    }
  }
}

size_t ClosureCancellation::CancelAll() {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (auto& [id, attempts] : running_) {
    for (auto& [token, flag] : attempts) {
      flag->store(true);
      ++n;
    }
  }
  return n;
}

size_t ClosureCancellation::running() const {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, attempts] : running_) n += attempts.size();
  return n;
}

}  // namespace asyncps
