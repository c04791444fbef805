#ifndef ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_
#define ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_

#include <atomic>
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

  // The primary's own apply of this write (ForwardsBeforeApply writes are forwarded first):
  // set once, under the copy's write lock, right after it; 0 while unknown, 1 applied,
  // 2 refused. A stream that sees a copy refuse the write compares it with this. `skipped`:
  // how many of its updates the primary's update window skipped as already applied
  // (kSkipsNotCounted for a write without such a count); a stream compares the copy's count.
  static constexpr uint32_t kSkipsNotCounted = 0xFFFFFFFFu;
  void set_outcome(bool applied, uint32_t skipped = kSkipsNotCounted) const {
    skipped_.store(skipped, std::memory_order_relaxed);
    outcome_.store(applied ? 1 : 2, std::memory_order_release);
  }
  int outcome() const { return outcome_.load(std::memory_order_acquire); }
  // Valid once outcome() is 1 or 2 (read after it).
  uint32_t skipped() const { return skipped_.load(std::memory_order_relaxed); }

 private:
  mutable std::atomic<int> outcome_{0};
  mutable std::atomic<uint32_t> skipped_{kSkipsNotCounted};
  LoggedWrite() = default;
  std::string method_;
  const CopyExtension* extension_ = nullptr;  // set for an extension's write
  kj::Array<capnp::word> body_;  // a flat message whose root is the request struct
  std::vector<Tensor> tensors_;  // in the order ForEachTensorRef visits their references
  uint64_t bytes_ = 0;
};

// True for the methods a primary forwards to its backups.
bool IsReplicatedWrite(const std::string& method);

// True for the writes a primary forwards before it applies them, so its backups apply them
// while it does (ps.PushGradients, ps.Update: the hot writes). What they do is determined by
// the copy's state and the request alone (their checks come before any change, the update
// window is replicated), so every copy, holding the same state at the write's sequence,
// applies or refuses such a write alike: a backup takes its refusal as that sequence (without
// effect) and acknowledges one short of it, and the primary checks it refused the write too
// (else the copies diverged and the stream stops: the copy is rebuilt).
bool ForwardsBeforeApply(const std::string& method);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_LOGGED_WRITE_H_
