#ifndef ASYNCPS_NET_WIRE_CHECK_H_
#define ASYNCPS_NET_WIRE_CHECK_H_

#include <capnp/any.h>
#include <capnp/schema.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "net/message.h"

namespace asyncps::net {

// Complete validation of untrusted Cap'n Proto data against the schema the reader expects.
//
// The framing layer only checks sizes and bounds; a field read can still throw later when
// the peer put a pointer of the wrong kind where a struct, list, text or data is expected,
// or text without its NUL terminator. These functions read every pointer field the schema
// describes (recursively; for unions only the active member) inside one try block, so after
// they return OK no generated accessor on that data can throw — given read budget left: every
// read is charged against the message's traversal limit, and some shapes (lists of zero-sized
// structs) cost more per read than their size on the wire. The server therefore lifts the
// limit after the check (InMessage::LiftTraversalLimit), and a handler never fails half-way
// through applying a request. AnyPointer fields are left to whoever knows their type.
// Errors: InvalidArgument naming the problem.
//
// Thread-safe for concurrent readers of one message (it only reads).
//
// WireChecker is the same check with the schema's walk planned once: build one per schema
// when registering (it copies cheaply and is immutable, so any thread may use it) and check
// each message with it. CheckStruct plans afresh on every call, for code off the hot path.
class WireChecker {
 public:
  explicit WireChecker(capnp::StructSchema schema);
  ~WireChecker();
  WireChecker(const WireChecker&);
  WireChecker& operator=(const WireChecker&);

  // OK, or InvalidArgument naming the schema and the problem.
  absl::Status Check(capnp::AnyPointer::Reader pointer) const;

  struct Plan;  // private to wire_check.cc

 private:
  std::shared_ptr<const Plan> plan_;
};

absl::Status CheckStruct(capnp::AnyPointer::Reader pointer, capnp::StructSchema schema);

template <typename T>
absl::Status CheckStruct(capnp::AnyPointer::Reader pointer) {
  return CheckStruct(pointer, capnp::Schema::from<T>());
}

// The whole envelope of `message` (not the bodies inside it).
absl::Status CheckEnvelope(const InMessage& message);

// The response body of `message` as `T`, after checking it completely. For RPC callers, whose
// response bodies come from another process.
template <typename T>
absl::StatusOr<typename T::Reader> CheckedResponseBody(const InMessage& message) {
  absl::Status status = CheckEnvelope(message);
  if (status.ok() && message.envelope().which() != wire::Envelope::RESPONSE) {
    status = absl::InvalidArgumentError("frame is not a response");
  }
  if (status.ok()) status = CheckStruct<T>(message.envelope().getResponse().getBody());
  if (!status.ok()) return status;
  return message.ResponseBody<T>();
}

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_WIRE_CHECK_H_
