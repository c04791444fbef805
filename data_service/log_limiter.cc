#include "data_service/log_limiter.h"

namespace asyncps::data_service {

bool LogLimiter::Allow(absl::Time now, int64_t* suppressed) {
  MutexLock lock(&mu_);
  if (allowed_ < burst_ || now - last_ >= interval_) {
    ++allowed_;
    last_ = now;
    *suppressed = suppressed_;
    suppressed_ = 0;
    return true;
  }
  ++suppressed_;
  return false;
}

}  // namespace asyncps::data_service
