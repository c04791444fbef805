#ifndef ASYNCPS_NET_IN_MEMORY_TRANSPORT_H_
#define ASYNCPS_NET_IN_MEMORY_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/sync.h"
#include "net/message.h"
#include "net/server_session.h"

namespace asyncps::net {

// A SessionTransport without a socket: what the session sends is encoded and kept, and
// DeliverBytes plays the part of Connection's reader (the same FrameDecoder, the same limits,
// the same close on a refused frame). For tests and the fuzzer, which drive the server's real
// protocol code in process.
//
// Thread-safe (pooled handlers may send from other threads).
class InMemoryTransport : public SessionTransport {
 public:
  void Send(OutMessage message) override ABSL_LOCKS_EXCLUDED(mu_);
  void Close(const absl::Status& reason) override ABSL_LOCKS_EXCLUDED(mu_);
  void SetLimits(const FrameLimits& limits) override ABSL_LOCKS_EXCLUDED(mu_);

  bool closed() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status close_reason() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every frame sent so far, each as encoded bytes.
  std::vector<std::string> sent() const ABSL_LOCKS_EXCLUDED(mu_);
  FrameLimits limits() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::vector<std::string> sent_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_reason_ ABSL_GUARDED_BY(mu_);
  FrameLimits limits_ ABSL_GUARDED_BY(mu_);
};

// Decodes `bytes` frame by frame under `transport`'s current limits and hands each to
// `session`, as the socket reader would; a frame the decoder refuses closes the transport.
// Stops when the bytes run out (a trailing partial frame is dropped) or the transport closed.
void DeliverBytes(absl::Span<const uint8_t> bytes, InMemoryTransport& transport, ServerSession& session);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_IN_MEMORY_TRANSPORT_H_
