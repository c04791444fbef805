#ifndef ASYNCPS_NET_RAW_CLIENT_TESTING_H_
#define ASYNCPS_NET_RAW_CLIENT_TESTING_H_

// Test-only (library asyncps_net_testutil): a blocking client that speaks raw bytes at an
// RpcServer, for tests that must send what a well-behaved RpcClient never would.

#include <cstdint>
#include <string>
#include <vector>

#include <capnp/any.h>
#include <capnp/schema.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/message.h"

namespace asyncps::net::testutil {

// Pointer field `field` of `builder` as an untyped pointer, to put the wrong kind of thing in
// it (a struct where text is expected, text bytes without their NUL, ...).
template <typename Builder>
capnp::AnyPointer::Builder PointerField(Builder builder, const char* field) {
  using T = capnp::FromBuilder<Builder>;
  const auto slot = capnp::Schema::from<T>().getFieldByName(field).getProto().getSlot();
  return capnp::toAny(builder).getPointerSection()[slot.getOffset()];
}

// The Hello frame answering `nonce` (the server's challenge) as `role`:`task_index`, with the
// proof computed from `token`.
std::string HelloFrame(const std::string& token, const std::string& nonce, const std::string& role,
                       int task_index = 0, uint64_t incarnation = 1);

// A request frame for `method` whose body the caller fills through `message` (may be empty).
std::string RequestFrame(OutMessage message, uint64_t id, const std::string& method);

// Not thread-safe, except that one thread may write while another reads.
class RawClient {
 public:
  // Connects to 127.0.0.1:`port` (blocking).
  explicit RawClient(int port);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }

  bool Write(const std::string& bytes);
  // Writes `bytes` in consecutive pieces of the given sizes (cycled), each its own send.
  bool WriteInPieces(const std::string& bytes, const std::vector<size_t>& pieces);

  // The next whole frame from the server. Unavailable when it closed the connection,
  // DeadlineExceeded when nothing complete arrived within `timeout`.
  absl::StatusOr<InMessage> ReadFrame(absl::Duration timeout = absl::Seconds(20));

  // Reads the server's challenge and returns its nonce.
  absl::StatusOr<std::string> ReadChallenge(absl::Duration timeout = absl::Seconds(20));

  // Reads the challenge, answers it with a correct proof for `token`, and returns the ack
  // (which may be a refusal).
  absl::StatusOr<InMessage> Handshake(const std::string& token, const std::string& role, int task_index = 0);

  // True when the server closes the connection within `timeout` (whatever it sent first is
  // discarded).
  bool WaitClosed(absl::Duration timeout = absl::Seconds(20));

 private:
  int fd_;
  bool connected_ = false;
  std::string pending_;
};

}  // namespace asyncps::net::testutil

#endif  // ASYNCPS_NET_RAW_CLIENT_TESTING_H_
