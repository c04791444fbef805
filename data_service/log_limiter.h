#ifndef ASYNCPS_DATA_SERVICE_LOG_LIMITER_H_
#define ASYNCPS_DATA_SERVICE_LOG_LIMITER_H_

#include <cstdint>

#include "absl/time/time.h"
#include "core/sync.h"

namespace asyncps::data_service {

// Rate limit for a log line a peer can trigger once per request (a consumer asking for an
// unknown dataset in a loop must not fill the disk): the first `burst` lines pass, then one
// per `interval`, which says how many were suppressed since the last one that passed.
//
// Thread-safe.
class LogLimiter {
 public:
  LogLimiter(int64_t burst, absl::Duration interval) : burst_(burst), interval_(interval) {}

  // Whether to log a line at `now`. When it returns true, `*suppressed` is the number of lines
  // refused since the last one allowed (0 when none).
  bool Allow(absl::Time now, int64_t* suppressed);
  bool Allow(int64_t* suppressed) { return Allow(absl::Now(), suppressed); }

 private:
  const int64_t burst_;
  const absl::Duration interval_;
  Mutex mu_;
  int64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_LOG_LIMITER_H_
