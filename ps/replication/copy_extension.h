#ifndef ASYNCPS_PS_REPLICATION_COPY_EXTENSION_H_
#define ASYNCPS_PS_REPLICATION_COPY_EXTENSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <capnp/any.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "net/message.h"
#include "ps/ps.capnp.h"

namespace asyncps::ps {

// State a shard group copy holds beside its variables and update window, owned by another
// subsystem of the PS (embedding tables: ps/replication/replicated_tables.h). ReplicatedPs keeps
// one per copy and never looks inside it.
class CopyExtensionState {
 public:
  virtual ~CopyExtensionState() = default;
};

// A consistent copy of a CopyExtensionState taken at a sequence number (under the copy's write
// lock), sent to a rebuilding copy as InstallStateRequest.extension chunks after the variables.
class CopyExtensionSnapshot {
 public:
  virtual ~CopyExtensionSnapshot() = default;
  // Tensor bytes of the whole snapshot (progress reporting).
  virtual uint64_t bytes() const = 0;
  // How many chunks of about `chunk_bytes` the snapshot is sent in (at least 1: the last one
  // carries what is not rows, e.g. an update window).
  virtual size_t Chunks(uint64_t chunk_bytes) = 0;
  // Writes chunk `i` (< Chunks()) into `out`, adding its tensors to `message`; returns its
  // tensor bytes.
  virtual uint64_t WriteChunk(size_t i, capnp::AnyPointer::Builder out, net::OutMessage& message) = 0;
};

// What ReplicatedPs needs of such a subsystem: new and default states, its replicated write
// methods (their tensors, for the log, and how a backup applies them), and state transfer.
// Implementations are thread-safe; ReplicatedPs calls the state-changing ones under the copy's
// write lock, so a state sees one call at a time in sequence order.
class CopyExtension {
 public:
  virtual ~CopyExtension() = default;

  // The state of a new, empty copy of `group`.
  virtual std::shared_ptr<CopyExtensionState> NewState(uint32_t group) = 0;
  // The state the PS serves from before any shard map (its own group's).
  virtual std::shared_ptr<CopyExtensionState> DefaultState() = 0;

  // Whether `method` is one of the extension's replicated writes.
  virtual bool IsWrite(const std::string& method) const = 0;
  // The tensor references of a write's body, always in the same order (LoggedWrite copies
  // the tensors and rewrites the references into each ps.Replicate frame).
  virtual absl::Status ForEachTensorRef(const std::string& method, capnp::AnyPointer::Reader body,
                                        const std::function<void(wire::TensorRef::Reader)>& fn) const = 0;
  virtual void ForEachTensorRef(const std::string& method, capnp::AnyPointer::Builder body,
                                const std::function<void(wire::TensorRef::Builder)>& fn) const = 0;
  // Applies a write the primary applied (`frame` holds its tensors) to a backup's state.
  virtual absl::Status ApplyReplicated(CopyExtensionState& state, const std::string& method,
                                       const net::InMessage& frame, capnp::AnyPointer::Reader body) = 0;

  // A snapshot of `state` (called under the copy's write lock: keep it short).
  virtual std::unique_ptr<CopyExtensionSnapshot> Snapshot(CopyExtensionState& state) = 0;
  // Receives one extension chunk of a state transfer into `state` (a new copy's, rebuilding);
  // chunks come in order. `last`: the transfer's last chunk, after which the state must be
  // complete (InvalidArgument otherwise).
  virtual absl::Status Install(CopyExtensionState& state, const net::InMessage& frame,
                               capnp::AnyPointer::Reader chunk, bool last) = 0;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_COPY_EXTENSION_H_
