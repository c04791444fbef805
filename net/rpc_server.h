#ifndef ASYNCPS_NET_RPC_SERVER_H_
#define ASYNCPS_NET_RPC_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/thread_pool.h"
#include "metrics/rpc_metrics.h"
#include "net/event_loop.h"
#include "net/message.h"
#include "net/method_table.h"
#include "net/peer.h"
#include "net/server_session.h"

namespace asyncps::net {

// Serves request/response RPCs on one TCP port.
//
// Every connection starts with a challenge-response handshake (net/handshake.h; the token
// never crosses the wire); a failed one is answered with a refusal, logged, counted and the
// connection closed. After that each request frame is checked against its method's declared
// request type and caller roles (MethodTable) and dispatched; the handler's status and body go
// back with the request id. Malformed input of any kind closes or answers only that
// connection (ServerSession is the decode-error boundary); everyone else keeps being served.
//
// Limits (each refusal logged and counted in asyncps_rpc_server_rejected_total{reason}):
// until the handshake completes, frames are capped by `handshake_limits` (a 2 GiB frame is
// refused from its header, never read) and the handshake must finish within
// `handshake_timeout`; at most `max_connections` connections are open (more are closed at
// accept); an authenticated connection with nothing in flight is closed after `idle_timeout`
// without traffic (clients reconnect on their next call); accept errors (EMFILE, ...) back
// off exponentially from 10 ms to 1 s instead of spinning.
//
// Thread-safety: register methods before Start; Start/Shutdown from the owning thread.
// Handlers run on the pool (kPool) or on the loop thread (kInline: must not block), or on
// either depending on size and load (kInlineIfSmall, kAdaptive: see net::Dispatch).
class RpcServer {
 public:
  using Handler = net::Handler;
  using Dispatch = net::Dispatch;

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                 // 0: pick a free port (see port())
    std::string role;             // what this server says it is in HelloAck
    int task_index = 0;
    // Cluster token clients must prove they hold. Empty is allowed only when `host` is a
    // loopback address (Start refuses otherwise).
    std::string token;
    int handler_threads = 4;
    FrameLimits limits;            // after the handshake
    FrameLimits handshake_limits = HandshakeFrameLimits();
    absl::Duration handshake_timeout = absl::Seconds(5);
    absl::Duration idle_timeout = absl::Minutes(10);  // InfiniteDuration(): never
    int max_connections = 1024;
    metrics::RpcMetrics* metrics = nullptr;  // optional; not owned
  };

  RpcServer(EventLoop& loop, Options options);
  ~RpcServer();  // Shutdown()

  // The methods served; register before Start.
  MethodTable& methods() { return methods_; }
  template <typename Request>
  void Register(const std::string& method, PeerRoles callers, Handler handler,
                Dispatch dispatch = Dispatch::kPool) {
    methods_.Register<Request>(method, std::move(callers), std::move(handler), dispatch);
  }
  // A handler that answers later, from any thread (net::DeferredResponse).
  template <typename Request>
  void RegisterDeferred(const std::string& method, PeerRoles callers, DeferredHandler handler,
                        Dispatch dispatch = Dispatch::kPool) {
    methods_.RegisterDeferred<Request>(method, std::move(callers), std::move(handler), dispatch);
  }

  // Binds, listens and starts accepting. Unavailable when the address cannot be bound;
  // InvalidArgument for a bad host, or an empty token on a non-loopback address.
  absl::Status Start();

  // Stops accepting, closes every connection, waits for running handlers to finish.
  void Shutdown();

  int port() const { return port_; }
  // Open connections (for tests; takes a hop to the loop thread).
  int num_connections();

 private:
  struct Impl;
  friend struct Impl;
  EventLoop& loop_;
  Options options_;
  SessionConfig session_config_;
  int port_ = 0;
  MethodTable methods_;
  std::atomic<int> pool_load_{0};  // handlers queued or running on pool_ (outlives it)
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_RPC_SERVER_H_
