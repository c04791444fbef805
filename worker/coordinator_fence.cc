#include "worker/coordinator_fence.h"

namespace asyncps {

CoordinatorFence::Verdict CoordinatorFence::Admit(uint64_t incarnation) {
  if (incarnation == 0 || incarnation == current_) return Verdict::kCurrent;
  if (superseded_.contains(incarnation)) return Verdict::kSuperseded;
  if (current_ == 0) {
    current_ = incarnation;
    return Verdict::kCurrent;
  }
  superseded_.insert(current_);
  superseded_order_.push_back(current_);
  if (superseded_order_.size() > kMaxRemembered) {
    superseded_.erase(superseded_order_.front());
    superseded_order_.pop_front();
  }
  current_ = incarnation;
  return Verdict::kNewCoordinator;
}

}  // namespace asyncps
