#ifndef ASYNCPS_NET_METHOD_TABLE_H_
#define ASYNCPS_NET_METHOD_TABLE_H_

#include <atomic>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <capnp/schema.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "net/message.h"
#include "net/peer.h"
#include "net/wire_check.h"

namespace asyncps::net {

// Fills `response` (its body and payloads) and returns the status the caller sees. The
// response body is sent only when the status is OK.
using Handler =
    std::function<absl::Status(const RequestContext& ctx, const InMessage& request, OutMessage* response)>;

// The answer to one request, sent later from any thread: what a deferred handler
// (MethodTable::RegisterDeferred) gets instead of a response to fill before it returns, so a
// handler that must wait for something (a backup's acknowledgement) neither blocks its thread
// nor the I/O thread. Copyable; every copy names the same answer. The first Send answers;
// later ones do nothing. When the last copy goes without a Send, the request is answered
// Internal ("dropped"), so a caller never waits out its timeout on a lost handle.
class DeferredResponse {
 public:
  using SendFn = std::function<void(const absl::Status& status, OutMessage response)>;
  DeferredResponse() = default;  // answers nothing (for tests)
  explicit DeferredResponse(SendFn send) : state_(std::make_shared<StateWith<SendFn>>(std::move(send))) {}
  // The same for any callable `send`: the answer's state and `send` are one allocation (a
  // std::function of a capture this large would be a second one per request).
  template <typename Fn>
  static DeferredResponse Of(Fn send) {
    DeferredResponse r;
    r.state_ = std::make_shared<StateWith<Fn>>(std::move(send));
    return r;
  }

  // Sends `status`, with `response`'s body and payloads when it is OK. Any thread.
  void Send(const absl::Status& status, OutMessage response = OutMessage()) const {
    if (state_ != nullptr) state_->Send(status, std::move(response));
  }
  // Whether no copy has sent yet.
  bool pending() const { return state_ != nullptr && !state_->sent.load(); }

 private:
  struct State {
    virtual ~State() = default;
    void Send(const absl::Status& status, OutMessage response) {
      if (!sent.exchange(true)) Answer(status, std::move(response));
    }
    virtual void Answer(const absl::Status& status, OutMessage response) = 0;
    std::atomic<bool> sent{false};
  };
  template <typename Fn>
  struct StateWith final : State {
    explicit StateWith(Fn s) : send(std::move(s)) {}
    ~StateWith() override {
      if (!sent.load()) send(absl::InternalError("the request's answer was dropped"), OutMessage());
    }
    void Answer(const absl::Status& status, OutMessage response) override { send(status, std::move(response)); }
    Fn send;
  };
  std::shared_ptr<State> state_;
};

// A handler that answers through `answer` (now or later, from any thread) instead of by
// returning. The request frame is valid only until it returns (keep what the answer needs).
using DeferredHandler =
    std::function<void(const RequestContext& ctx, const InMessage& request, DeferredResponse answer)>;

// Where a handler runs: on the server's pool, or on the I/O thread (must not block).
// kInlineIfSmall runs it on the I/O thread when the request's payloads total at most
// kSmallRequestPayloadBytes, else on the pool: for handlers whose work grows with what the
// request carries (an update applies what it sends), so a small request skips the thread
// hand-off — the largest cost of a small request — and a large one does not hold the I/O
// thread. Such a handler may still wait briefly for a lock a pooled handler holds.
// kAdaptive is kInlineIfSmall only while no handler is queued or running on the pool: a small
// request then skips the hand-off, and a burst of them (many read at once) is served inline
// one after another and answered in one write; while the pool is busy, small requests queue
// behind it there rather than wait on the I/O thread for a lock a pooled handler holds.
// (Handing each request of a burst to the pool measured 2-3x slower than serving it inline
// once clients coalesce their bursts: a pool wake-up per request costs more than the
// request.)
enum class Dispatch { kPool, kInline, kInlineIfSmall, kAdaptive };
inline constexpr size_t kSmallRequestPayloadBytes = 16 << 10;

// The peer roles (as authenticated in the handshake) allowed to call a method.
class PeerRoles {
 public:
  PeerRoles(std::initializer_list<const char*> roles) : roles_(roles.begin(), roles.end()) {}
  bool Allows(absl::string_view role) const;
  std::string ToString() const;

 private:
  std::vector<std::string> roles_;
};

// Callers of the PS's methods (an evaluator may only read), and of a worker's methods (only
// the chief's coordinator drives workers).
inline PeerRoles PsCallers() { return {"chief", "worker"}; }
inline PeerRoles PsReaders() { return {"chief", "worker", "evaluator"}; }
inline PeerRoles WorkerCallers() { return {"chief"}; }
// Methods only the coordinator may call anywhere (saving and restoring checkpoints).
inline PeerRoles ChiefOnly() { return {"chief"}; }

// The methods a server serves. Each declares its request body's type (checked completely,
// net/wire_check.h, before the handler runs), the roles that may call it, and its dispatch.
//
// Not thread-safe while registering; register everything before serving, then it is only
// read (from any thread).
class MethodTable {
 public:
  struct Entry {
    WireChecker request;
    PeerRoles callers;
    Handler handler;
    Dispatch dispatch;
    DeferredHandler deferred;  // set (and `handler` empty) for RegisterDeferred's methods
    // The method's name, shared by everything that outlives the request (a deferred answer
    // labels its metrics with it) without a copy of the string per request.
    std::shared_ptr<const std::string> name;
  };

  template <typename Request>
  void Register(const std::string& method, PeerRoles callers, Handler handler,
                Dispatch dispatch = Dispatch::kPool) {
    methods_.insert_or_assign(method, Entry{WireChecker(capnp::Schema::from<Request>()), std::move(callers),
                                            std::move(handler), dispatch, nullptr,
                                            std::make_shared<const std::string>(method)});
  }
  // The same for a handler that answers later (DeferredResponse): its dispatch says where it
  // starts; its answer goes out from whichever thread sends it.
  template <typename Request>
  void RegisterDeferred(const std::string& method, PeerRoles callers, DeferredHandler handler,
                        Dispatch dispatch = Dispatch::kPool) {
    methods_.insert_or_assign(method, Entry{WireChecker(capnp::Schema::from<Request>()), std::move(callers),
                                            nullptr, dispatch, std::move(handler),
                                            std::make_shared<const std::string>(method)});
  }

  // nullptr when `method` is not registered.
  const Entry* Find(absl::string_view method) const;

 private:
  absl::flat_hash_map<std::string, Entry> methods_;
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_METHOD_TABLE_H_
