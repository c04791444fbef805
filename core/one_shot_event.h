#ifndef ASYNCPS_CORE_ONE_SHOT_EVENT_H_
#define ASYNCPS_CORE_ONE_SHOT_EVENT_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace asyncps {

// A one-shot event on a bare futex, for handing one result to a thread that blocks for it
// (a blocking RPC waiting for its answer, PsFuture::Get).
//
// Why not Notification: its Mutex is a shared_mutex plus a condition_variable_any, and a
// hand-off through them costs five futex calls and usually an extra context switch (the
// woken thread blocks again on the locks the notifier still holds). Here Notify is one atomic
// exchange plus one FUTEX_WAKE only when a thread is asleep on the event, and a Wait that
// finds it notified makes no system call. That is the whole hand-off cost of a small RPC
// answered on the I/O thread, so it shows in the round trip.
//
// Memory order: everything the notifying thread wrote before Notify is visible to a thread
// after its Wait/WaitWithTimeout returned true or HasBeenNotified returned true.
//
// Thread-safe; any number of threads may wait. Not resettable.
class OneShotEvent {
 public:
  OneShotEvent() = default;
  OneShotEvent(const OneShotEvent&) = delete;
  OneShotEvent& operator=(const OneShotEvent&) = delete;

  // Idempotent. A waiter may return (and free the event) between the exchange and the
  // FUTEX_WAKE; a wake on a private futex only hashes the address, so that is harmless.
  void Notify() {
    if (state_.exchange(kNotified, std::memory_order_acq_rel) == kSleeping) {
      Futex(FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
    }
  }

  bool HasBeenNotified() const { return state_.load(std::memory_order_acquire) == kNotified; }

  // Blocks until notified.
  void Wait() { WaitUntil(absl::InfiniteFuture()); }

  // True when notified within `timeout`.
  bool WaitWithTimeout(absl::Duration timeout) { return WaitUntil(absl::Now() + timeout); }

  bool WaitUntil(absl::Time deadline) {
    for (;;) {
      uint32_t s = state_.load(std::memory_order_acquire);
      if (s == kNotified) return true;
      if (s == kIdle &&
          !state_.compare_exchange_weak(s, kSleeping, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;  // notified (or another waiter marked it) meanwhile: look again
      }
      if (deadline == absl::InfiniteFuture()) {
        Futex(FUTEX_WAIT_PRIVATE, kSleeping, nullptr);
        continue;
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return HasBeenNotified();
      const timespec relative = absl::ToTimespec(left);
      Futex(FUTEX_WAIT_PRIVATE, kSleeping, &relative);
    }
  }

 private:
  static constexpr uint32_t kIdle = 0;
  static constexpr uint32_t kSleeping = 1;  // a waiter is (or is about to be) in FUTEX_WAIT
  static constexpr uint32_t kNotified = 2;

  // EINTR, EAGAIN (the value changed before sleeping) and timeouts all lead back to the
  // caller's loop, which looks at the state again.
  void Futex(int op, uint32_t value, const timespec* timeout) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&state_), op, value, timeout, nullptr, 0);
  }

  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  std::atomic<uint32_t> state_{kIdle};
};

}  // namespace asyncps

#endif  // ASYNCPS_CORE_ONE_SHOT_EVENT_H_
