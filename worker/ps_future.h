#ifndef ASYNCPS_WORKER_PS_FUTURE_H_
#define ASYNCPS_WORKER_PS_FUTURE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/one_shot_event.h"

namespace asyncps {

// What an asynchronous PsClient operation yields: absl::Status for operations without a
// value (T = void), absl::StatusOr<T> otherwise.
template <typename T>
using PsResult = std::conditional_t<std::is_void_v<T>, absl::Status, absl::StatusOr<T>>;

// Receives the result of an asynchronous PsClient operation, exactly once.
template <typename T>
using PsCallback = std::function<void(PsResult<T>)>;

// The result of an asynchronous PsClient operation, delivered later.
//
// The first result wins: the operation's own, or Cancelled from Cancel(). Cancelling only
// stops waiting — a request already sent may still reach its PS and be applied there, as a
// request whose connection drops may; the answer that comes later is dropped.
//
// Thread-safe: the result may arrive on any thread while another waits. Get() moves the
// result out, so call it once. Copies share one result. A default-constructed future is not
// valid() and must not be used.
template <typename T>
class PsFuture {
 public:
  using Result = PsResult<T>;

  PsFuture() = default;

  // A future and the callback that completes it (the callback may be called from any
  // thread; calls after the first are ignored).
  static std::pair<PsFuture, PsCallback<T>> Make() {
    auto state = std::make_shared<State>();
    PsCallback<T> complete = [state](Result result) { state->Set(std::move(result)); };
    return {PsFuture(std::move(state)), std::move(complete)};
  }

  // A future that is ready with `result` already.
  static PsFuture Ready(Result result) {
    auto [future, complete] = Make();
    complete(std::move(result));
    return future;
  }

  bool valid() const { return state_ != nullptr; }

  // True once the result is there (including a Cancelled one).
  bool ready() const { return state_->ready.HasBeenNotified(); }

  // Blocks until the result is there and returns it (moved out: call once).
  Result Get() {
    state_->ready.Wait();
    return std::move(*state_->result);
  }

  // Waits up to `timeout` for the result; true when it is there. Does not consume it.
  bool WaitFor(absl::Duration timeout) const { return state_->ready.WaitWithTimeout(timeout); }

  // Completes the future with Cancelled now unless it has its result already.
  void Cancel() { state_->Set(absl::CancelledError("PS call cancelled by the caller")); }

 private:
  // The first Set claims the result slot, fills it, then notifies `ready`: a waiter reads
  // `result` only after `ready` (acquire), and nobody writes it after. A bare futex event
  // rather than a Mutex: waking the thread blocked in Get is most of the cost a small call
  // adds to the network round trip (core/one_shot_event.h).
  struct State {
    std::atomic<bool> claimed{false};
    std::optional<Result> result;
    OneShotEvent ready;

    void Set(Result r) {
      if (claimed.exchange(true, std::memory_order_acq_rel)) return;  // a result won already
      result.emplace(std::move(r));
      ready.Notify();
    }
  };

  explicit PsFuture(std::shared_ptr<State> state) : state_(std::move(state)) {}

  std::shared_ptr<State> state_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_PS_FUTURE_H_
