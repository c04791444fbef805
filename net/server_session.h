#ifndef ASYNCPS_NET_SERVER_SESSION_H_
#define ASYNCPS_NET_SERVER_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "metrics/rpc_metrics.h"
#include "net/message.h"
#include "net/method_table.h"
#include "net/peer.h"

namespace asyncps::net {

// What every session of one server shares. Immutable while sessions exist.
struct SessionConfig {
  std::string role;  // this server's role and task, as it proves them in HelloAck
  int task_index = 0;
  uint64_t incarnation = 0;
  std::string token;  // cluster token; never sent
  FrameLimits handshake_limits;  // frames until the handshake completes
  FrameLimits limits;            // frames after it
  metrics::RpcMetrics* metrics = nullptr;  // optional; not owned
  // Handlers queued or running on the pool that may hold it up, over all sessions (for
  // Dispatch::kAdaptive): every pooled handler except small requests of kAdaptive and
  // kInlineIfSmall methods, which hold locks only for a moment (counting those too let one
  // pooled small update send every later one of a burst to the pool). Sessions count them;
  // nullptr: the pool counts as idle. Not owned; outlives the pool's jobs.
  std::atomic<int>* pool_load = nullptr;
};

// Where a session's frames go. The socket-backed one wraps a Connection; tests and the
// fuzzer use an in-memory one.
class SessionTransport {
 public:
  virtual ~SessionTransport() = default;
  // Any thread. Frames sent after Close are dropped.
  virtual void Send(OutMessage message) = 0;
  // The session's thread. Frames already sent go out first when that is possible without
  // blocking.
  virtual void Close(const absl::Status& reason) = 0;
  // The session's thread, between frames: limits for the frames that follow.
  virtual void SetLimits(const FrameLimits& limits) = 0;
};

// The server side of one connection's protocol, without any I/O: the handshake (challenge,
// proof check, role), then request dispatch into a MethodTable with a per-method role check
// and a complete check of each request body before its handler runs.
//
// This is the decode-error boundary: OnFrame never throws. Malformed input (a frame that is
// not what the protocol expects, a pointer of the wrong kind, text without NUL, ...) closes
// the connection with a log line and a count in asyncps_rpc_server_rejected_total{reason},
// or, inside a request body, is answered with InvalidArgument. A handler that throws is
// answered with InvalidArgument (kj::Exception) or Internal (anything else).
//
// Thread-safety: Start, OnFrame and Reject run on one thread (the I/O thread for sockets).
// Pooled handlers run on `pool` and send their responses from there. The accessors for
// timeouts are safe from the session's thread.
class ServerSession : public std::enable_shared_from_this<ServerSession> {
 public:
  // Runs a pooled handler somewhere (a thread pool; inline in the fuzzer).
  using Executor = std::function<void(std::function<void()>)>;

  // `config` and `methods` must outlive the session and every pooled handler it started.
  ServerSession(const SessionConfig* config, const MethodTable* methods, Executor pool,
                std::unique_ptr<SessionTransport> transport, std::string peer_address,
                std::string nonce);

  // Applies the handshake limits and sends the challenge.
  void Start();

  // Handles one received frame. Never throws.
  void OnFrame(InMessage frame);

  // Closes the connection for `why`: logs it and counts `reason` in the rejected metric.
  void Reject(absl::string_view reason, const absl::Status& why);

  // Closes the connection without counting it as a rejection (server shutdown).
  void Close(const absl::Status& reason);

  bool authenticated() const { return authenticated_; }
  bool rejected() const { return rejected_; }
  absl::Time started() const { return started_; }
  // Time of the last frame received or response sent (any thread).
  absl::Time last_activity() const { return absl::FromUnixNanos(last_activity_ns_.load()); }
  // Requests received and not yet answered (any thread).
  int in_flight() const { return in_flight_.load(); }
  const PeerInfo& peer() const { return peer_; }

 private:
  void OnFrameUnchecked(InMessage& frame);
  void HandleHello(const InMessage& frame);
  void HandleRequest(InMessage frame);
  // Whether a request for a method registered with `dispatch` runs on this thread;
  // `small_update`: a small request of a kAdaptive or kInlineIfSmall method.
  bool RunInline(Dispatch dispatch, bool small_update) const;
  // Runs a deferred handler (MethodTable::RegisterDeferred) where its dispatch says; its
  // answer is sent by whichever thread calls DeferredResponse::Send.
  void StartDeferred(const MethodTable::Entry& entry, RequestContext ctx, uint64_t request_id, absl::Time received,
                     InMessage frame, bool small_update);
  void Touch();
  // Answers request `request_id` with `status` (no body) at once.
  void Answer(uint64_t request_id, absl::string_view method, const absl::Status& status);

  const SessionConfig& config_;
  const MethodTable& methods_;
  const Executor pool_;
  const std::unique_ptr<SessionTransport> transport_;
  const std::string nonce_;
  const absl::Time started_;
  PeerInfo peer_;
  bool authenticated_ = false;
  bool rejected_ = false;
  std::atomic<int64_t> last_activity_ns_;
  std::atomic<int> in_flight_{0};
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_SERVER_SESSION_H_
