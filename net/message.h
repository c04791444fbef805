#ifndef ASYNCPS_NET_MESSAGE_H_
#define ASYNCPS_NET_MESSAGE_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "net/envelope.capnp.h"

namespace asyncps::net {

// Limits applied to every received frame before anything is allocated for it.
struct FrameLimits {
  uint64_t max_header_bytes = 16 << 20;          // the Cap'n Proto envelope
  uint64_t max_payload_bytes = uint64_t{2} << 30;  // all payloads of one frame together
  uint32_t max_payloads = 1 << 16;
  uint32_t max_segments = 64;  // connections cap this at ~4000 (their read buffer)
};

// Limits for frames before a handshake completes: one small envelope, no payloads.
FrameLimits HandshakeFrameLimits(uint64_t max_bytes = 4096);

// A frame being built for sending: a Cap'n Proto envelope plus tensor payloads that are sent
// straight from the tensors' own memory (gather write, no copy). The tensors are kept alive
// by this object until the frame is written.
//
// Not thread-safe; build it on one thread, then hand it over (move) to the RPC layer.
class OutMessage {
 public:
  OutMessage();
  OutMessage(OutMessage&&) noexcept;
  OutMessage& operator=(OutMessage&&) noexcept;
  ~OutMessage();

  // The envelope root. The RPC layer fills request ids and the union; callers fill bodies.
  wire::Envelope::Builder envelope();

  // Initialises the request body as `T` (for client calls).
  template <typename T>
  typename T::Builder InitRequestBody() {
    return envelope().initRequest().getBody().template initAs<T>();
  }
  // Initialises the response body as `T` (inside server handlers).
  template <typename T>
  typename T::Builder InitResponseBody() {
    return envelope().initResponse().getBody().template initAs<T>();
  }

  // Appends `tensor` as a payload and describes it in `ref`. The bytes are not copied.
  void AddTensor(const Tensor& tensor, wire::TensorRef::Builder ref);
  // Appends f32 `tensor` narrowed to bf16 (core/bf16.h: round to nearest, ties to even) as a
  // payload of 2 bytes per element, described in `ref` with the bf16 wire code
  // (kBf16WireCode) and the tensor's shape: reduced-precision transport. The narrowing writes
  // a buffer of its own. `tensor` must be f32.
  void AddTensorAsBf16(const Tensor& tensor, wire::TensorRef::Builder ref);
  // Appends bf16 elements already narrowed: `bytes` (a u8 tensor, 2 bytes per element of
  // `shape`, e.g. InMessage::Bf16View::bytes of a received frame) as a bf16 tensor of `shape`.
  // The bytes are not copied.
  void AddBf16(const Tensor& bytes, const Shape& shape, wire::TensorRef::Builder ref);
  // AddTensorAsBf16 when `f32_as_bf16` and `tensor` is f32; AddTensor otherwise (other dtypes
  // always travel as they are).
  void AddTensorAs(const Tensor& tensor, bool f32_as_bf16, wire::TensorRef::Builder ref);
  // Appends an encoded f32 tensor (gradient compression, core/compression.h: `code` is
  // kInt8BlockWireCode or kTopKWireCode; or bf16's kBf16WireCode): `bytes` (a u8 tensor, the
  // encoded payload) decoding to a tensor of `shape`. The bytes are not copied.
  void AddEncoded(uint8_t code, const Tensor& bytes, const Shape& shape, wire::TensorRef::Builder ref);

  const std::vector<Tensor>& payloads() const { return payloads_; }
  capnp::MessageBuilder& builder() { return storage_->builder; }

  // Room for the stream-framing segment table of a frame of up to kTableSpaceWords * 2 - 1
  // segments (EncodeFrame), allocated with the builder: at an address that survives moves of
  // the message, and without an allocation of its own.
  static constexpr size_t kTableSpaceWords = 4;
  capnp::word* table_space() { return storage_->table; }

 private:
  struct Storage {
    explicit Storage(unsigned first_segment_words) : builder(first_segment_words) {}
    capnp::MallocMessageBuilder builder;
    capnp::word table[kTableSpaceWords];
  };
  std::unique_ptr<Storage> storage_;
  std::vector<Tensor> payloads_;
};

class InMessage;

// Where a frame's payloads are to be received, chosen from its header before any payload byte
// is read (net/rpc_client.h, CallOptions::place_payloads): a caller that knows where a large
// answer belongs (a shard's rows of a whole variable) has it read straight there, sparing a
// copy of the bytes afterwards.
struct PayloadPlacement {
  struct Destination {
    void* data = nullptr;  // null: the frame's own block, as without a placement
    size_t size = 0;       // bytes at `data`; used only when the payload has exactly this size
  };
  // By payload index; payloads past its end go to the frame's own block.
  std::vector<Destination> destinations;
  // Keeps every destination alive while the message, or a tensor viewing it, is.
  std::shared_ptr<const void> owner;
};
// Called with a frame whose header is parsed and checked but whose payloads are not yet read
// (TensorAt must not be called on it). Reads of the header may throw (kj::Exception); the
// decoder treats a throw as "no placement".
using PayloadPlacer = std::function<PayloadPlacement(const InMessage& header)>;

// A received, validated frame. Payloads live in one 64-byte aligned block (or where a
// PayloadPlacement put them) and tensors returned by TensorAt view them in place (they stay
// alive while any view does).
//
// Immutable after construction (but for LiftTraversalLimit); safe to read from several
// threads.
class InMessage {
 public:
  InMessage() = default;
  InMessage(InMessage&&) noexcept = default;
  InMessage& operator=(InMessage&&) noexcept = default;

  wire::Envelope::Reader envelope() const { return reader_->getRoot<wire::Envelope>(); }
  // The untyped root (for net/wire_check.h). Only valid when has_reader().
  capnp::AnyPointer::Reader root() const { return reader_->getRoot<capnp::AnyPointer>(); }
  bool has_reader() const { return reader_ != nullptr; }

  // Reads of the frame are charged against a budget linear in its size (Cap'n Proto's
  // traversal limit), so a crafted frame cannot make its readers do unbounded work. Once
  // everything a reader will touch has been read completely in one pass within that budget
  // (net/wire_check.h), this lifts it for the reads that follow. Call before the frame is
  // shared with other threads; readers obtained before the call must not be used after it.
  void LiftTraversalLimit();

  template <typename T>
  typename T::Reader RequestBody() const {
    return envelope().getRequest().getBody().template getAs<T>();
  }
  template <typename T>
  typename T::Reader ResponseBody() const {
    return envelope().getResponse().getBody().template getAs<T>();
  }

  // The tensor `ref` describes, viewing this frame's payload in place. InvalidArgument when
  // the dtype is unknown, the payload index is out of range, or shape and size disagree.
  absl::StatusOr<Tensor> TensorAt(wire::TensorRef::Reader ref) const;

  // Reduced-precision transport (core/bf16.h). A bf16 tensor is not a Tensor: TensorAt refuses
  // it as an unknown dtype, so only a reader that asks for bf16 ever takes one.
  static bool IsBf16(wire::TensorRef::Reader ref);
  // The bf16 tensor `ref` describes, viewing this frame's payload in place (valid while this
  // message is). InvalidArgument when `ref` is not bf16, the payload index is out of range, or
  // shape and size (2 bytes per element) disagree.
  struct Bf16View {
    Shape shape;
    const uint16_t* data = nullptr;
    size_t count = 0;  // elements
    Tensor bytes;      // the payload as u8 [2 * count], viewing it in place (and keeping it alive)
  };
  absl::StatusOr<Bf16View> Bf16At(wire::TensorRef::Reader ref) const;
  // `view`'s values widened (exactly) to a new f32 tensor of its shape.
  static Tensor Widened(const Bf16View& view);
  // TensorAt, except that a bf16 tensor comes back widened (exactly) to a new f32 tensor.
  absl::StatusOr<Tensor> WidenedTensorAt(wire::TensorRef::Reader ref) const;

  // Gradient compression (core/compression.h): int8 blocks and top-k are not Tensors either;
  // TensorAt refuses them as unknown dtypes.
  static bool IsCompressed(wire::TensorRef::Reader ref);
  // bf16, int8 blocks or top-k: an f32 tensor in a wire encoding.
  static bool IsEncoded(wire::TensorRef::Reader ref);
  // The payload of encoded tensor `ref` as it came (a u8 tensor viewing this frame), for a
  // writer that forwards it unchanged (replication). InvalidArgument when `ref` is not
  // encoded, the payload index is out of range or the shape is not a valid f32 shape. Its
  // size is checked by whoever decodes it.
  absl::StatusOr<Tensor> EncodedBytesAt(wire::TensorRef::Reader ref) const;
  // Compressed tensor `ref` decoded to a new f32 tensor, provided its shape is `expected` (the
  // variable's): InvalidArgument, before anything is allocated, when the shape differs, and
  // when the payload does not decode to exactly that many elements (core/compression.h's
  // decoders check it before they write). So a payload that claims more than its variable is
  // refused before it is expanded.
  absl::StatusOr<Tensor> DecodeCompressedAt(wire::TensorRef::Reader ref, const Shape& expected) const;

  size_t num_payloads() const { return payloads_.size(); }
  // Bytes of all payloads together.
  size_t payload_bytes() const {
    size_t bytes = 0;
    for (const Payload& p : payloads_) bytes += p.size;
    return bytes;
  }

 private:
  friend class FrameDecoder;
  struct Payload {
    size_t offset;            // in block_, unless `placed`
    size_t size;
    void* placed = nullptr;   // where a PayloadPlacement put it (owned by placed_owner_)
  };
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  std::shared_ptr<void> block_;
  std::shared_ptr<const void> placed_owner_;
  std::vector<Payload> payloads_;
};

// Runs `decode`, turning a kj::Exception (malformed Cap'n Proto data from a peer) or a
// std::exception into InvalidArgument. Every read of received data goes through this, runs
// inside a server handler (which does the same), or follows a complete check
// (net/wire_check.h), so no exception leaves the network edge.
// A template rather than a std::function: the lambdas callers pass capture several
// references, and a std::function of more than two would be a heap allocation per frame.
template <typename Decode>
absl::Status CatchDecodeErrors(Decode&& decode);

namespace message_internal {
absl::Status MalformedMessage(const kj::Exception& e);
absl::Status MalformedMessage(const std::exception& e);
}  // namespace message_internal

template <typename Decode>
absl::Status CatchDecodeErrors(Decode&& decode) {
  try {
    return decode();
  } catch (const kj::Exception& e) {
    return message_internal::MalformedMessage(e);
  } catch (const std::exception& e) {
    return message_internal::MalformedMessage(e);
  }
}

// Cap'n Proto builder helpers for repeated tensor-shaped fields.
void SetShape(capnp::List<int64_t>::Builder list, const Shape& shape);
Shape GetShape(capnp::List<int64_t>::Reader list);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_MESSAGE_H_
