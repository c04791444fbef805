#ifndef ASYNCPS_NET_RPC_CLIENT_H_
#define ASYNCPS_NET_RPC_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "metrics/rpc_metrics.h"
#include "net/event_loop.h"
#include "net/message.h"
#include "net/peer.h"

namespace asyncps::net {

// A connection to one server, shared by any number of threads making concurrent calls; the
// responses are matched to calls by request id, so many calls can be in flight at once.
//
// Connecting is lazy and repeated: the first call connects and handshakes; when the
// connection drops, every call in flight on it fails with Unavailable and the next call
// reconnects. Failed attempts back off exponentially (initial_backoff doubling up to
// max_backoff). With wait_for_ready, a call made while the server is unreachable waits
// (retrying with backoff) until its deadline; without it, the call fails fast with
// Unavailable so the caller can route around the dead peer.
//
// Thread-safe. Callbacks of CallAsync run on the loop thread and must not block.
// Destroy before the EventLoop.
class RpcClient {
 public:
  struct Options {
    std::string address;        // "host:port"
    std::string role;           // this process's role and task, sent in the handshake
    int task_index = 0;
    std::string token;          // cluster token
    bool wait_for_ready = false;
    absl::Duration initial_backoff = absl::Milliseconds(20);
    absl::Duration max_backoff = absl::Seconds(1);
    absl::Duration connect_timeout = absl::Seconds(5);
    FrameLimits limits;
    metrics::RpcMetrics* metrics = nullptr;  // optional; not owned
  };
  using Callback = std::function<void(absl::StatusOr<InMessage>)>;

  struct CallOptions {
    CallOptions() = default;
    // Not an aggregate, so that `{timeout, wait_for_ready}` leaves the members after them at
    // their defaults without a missing-initializer warning.
    CallOptions(absl::Duration timeout, std::optional<bool> wait_for_ready = std::nullopt,
                PayloadPlacer place_payloads = nullptr)
        : timeout(timeout), wait_for_ready(wait_for_ready), place_payloads(std::move(place_payloads)) {}

    absl::Duration timeout = absl::InfiniteDuration();
    // Overrides Options::wait_for_ready for this call.
    std::optional<bool> wait_for_ready;
    // Optional: where the payloads of this call's answer are read to (net/message.h). Asked
    // on the loop thread once an OK answer's header has arrived, before its payloads are
    // read, only while the call is still waiting for it; it must not block. The answer's
    // tensors then view the destinations it gave (TensorAt), so a caller can check by
    // address which payloads landed there. Bytes may be written there for an answer the
    // call never returns (one past its deadline), so a destination must not be shown to
    // anyone before the call succeeds.
    PayloadPlacer place_payloads;
  };

  RpcClient(EventLoop& loop, Options options);
  ~RpcClient();  // fails every pending call with Cancelled

  // Sends `request` (its body built with InitRequestBody) and blocks for the response. The
  // returned status is the server handler's status, or Unavailable (connection lost or peer
  // unreachable), DeadlineExceeded (no answer within `timeout`), PermissionDenied (handshake
  // refused). Never call from the loop thread.
  absl::StatusOr<InMessage> Call(const std::string& method, OutMessage request,
                                 const CallOptions& call_options);
  absl::StatusOr<InMessage> Call(const std::string& method, OutMessage request,
                                 absl::Duration timeout = absl::InfiniteDuration()) {
    return Call(method, std::move(request), CallOptions{timeout, std::nullopt});
  }

  // Like Call, but returns at once; `done` runs exactly once, on the loop thread.
  void CallAsync(const std::string& method, OutMessage request, const CallOptions& call_options,
                 Callback done);
  void CallAsync(const std::string& method, OutMessage request, absl::Duration timeout,
                 Callback done) {
    CallAsync(method, std::move(request), CallOptions{timeout, std::nullopt}, std::move(done));
  }

  // The server's identity from the latest successful handshake (incarnation 0 before any).
  PeerInfo peer() const;

  // How long the server has owed this client an answer without a word: from the latest of the
  // start of the oldest call still waiting (sent, or waiting for a connection), the last frame
  // the server sent, and the last time any of its bytes arrived (part of a large answer), to
  // now; zero while no call waits. An answer slowed by a narrow link is not silence; a large
  // request still on its way out is (what the kernel took says nothing of the peer). A server that answers some calls
  // while others take long is not silent; one behind a partition (or a host that died
  // without a reset) is, and the figure grows until the calls end or the connection is
  // closed (net/silent_peer.h). What a worker tells the chief about the PS it cannot reach.
  absl::Duration Silence() const;

  // Closes the connection that is ready at the time of the call, and returns once it is
  // closed: calls in flight on it have failed with Unavailable, and the next call connects
  // afresh. A connection made after this call started is left alone.
  void Disconnect();

  const std::string& address() const { return options_.address; }

 private:
  struct Impl;
  EventLoop& loop_;
  Options options_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_RPC_CLIENT_H_
