#ifndef ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_
#define ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <capnp/any.h>
#include <kj/array.h>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "net/message.h"
#include "ps/ps.capnp.h"
#include "ps/replication/copy_extension.h"

namespace asyncps::ps {

// One write a primary applied, kept until every copy it streams to has acknowledged it: the
// request body (a flat copy) and the tensors it carries (views of the writer's frame, so no
// tensor bytes are copied). Immutable once made; shared by the streams to each backup.
class LoggedWrite {
 public:
  // The write `method` ("ps.CreateVariable", "ps.Update", "ps.PushGradients",
  // "ps.RestoreCheckpoint", or a write of `extension`, which must then outlive the result)
  // whose request `body` was read from `frame`. InvalidArgument for another method or a
  // tensor reference the frame does not hold.
  static absl::StatusOr<std::shared_ptr<const LoggedWrite>> Make(const std::string& method,
                                                                 const net::InMessage& frame,
                                                                 capnp::AnyPointer::Reader body,
                                                                 const CopyExtension* extension = nullptr);

  const std::string& method() const { return method_; }
  // Tensor bytes plus body bytes (what a ps.Replicate carrying it sends).
  uint64_t bytes() const { return bytes_; }

  // Fills `entry` with this write, adding its tensors to `message` (the ps.Replicate frame).
  void AppendTo(wire::ReplicatedEntry::Builder entry, net::OutMessage& message) const;

 private:
  LoggedWrite() = default;
  std::string method_;
  const CopyExtension* extension_ = nullptr;  // set for an extension's write
  kj::Array<capnp::word> body_;  // a flat message whose root is the request struct
  std::vector<Tensor> tensors_;  // in the order ForEachTensorRef visits their references
  uint64_t bytes_ = 0;
};

// True for the methods a primary forwards to its backups.
bool IsReplicatedWrite(const std::string& method);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_
