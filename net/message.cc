#include "net/message.h"

#include <kj/exception.h>

#include <algorithm>
#include <exception>
#include <new>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/compression.h"

namespace asyncps::net {

namespace {

// Words in an envelope's first segment. MallocMessageBuilder callocs it for every frame; the
// default (1024 words) zero-fills 8 KiB, and any request of 1 KiB or more also misses glibc's
// per-thread cache and makes malloc consolidate its fast bins. Envelopes are usually a few
// dozen words; a larger one grows into further segments.
constexpr unsigned kFirstSegmentWords = 120;

}  // namespace

FrameLimits HandshakeFrameLimits(uint64_t max_bytes) {
  FrameLimits limits;
  limits.max_header_bytes = max_bytes;
  limits.max_payload_bytes = 0;
  limits.max_payloads = 0;
  limits.max_segments = 4;
  return limits;
}

OutMessage::OutMessage() : storage_(std::make_unique<Storage>(kFirstSegmentWords)) {
  storage_->builder.initRoot<wire::Envelope>();
}
OutMessage::OutMessage(OutMessage&&) noexcept = default;
OutMessage& OutMessage::operator=(OutMessage&&) noexcept = default;
OutMessage::~OutMessage() = default;

wire::Envelope::Builder OutMessage::envelope() { return storage_->builder.getRoot<wire::Envelope>(); }

void InMessage::LiftTraversalLimit() {
  if (reader_ == nullptr) return;
  capnp::ReaderOptions options = reader_->getOptions();
  options.traversalLimitInWords = kj::maxValue;
  // Rebuilt in its own storage (one allocation less per request). The constructor accepted
  // the same words before, so it cannot throw now; if it did, the storage is freed and the
  // message is left without a reader rather than with a destroyed one.
  capnp::FlatArrayMessageReader* storage = reader_.release();
  storage->~FlatArrayMessageReader();
  try {
    new (storage) capnp::FlatArrayMessageReader(words_, options);
  } catch (...) {
    ::operator delete(storage);
    throw;
  }
  reader_.reset(storage);
}

void OutMessage::AddTensor(const Tensor& tensor, wire::TensorRef::Builder ref) {
  ref.setDtype(static_cast<uint8_t>(tensor.dtype()));
  SetShape(ref.initShape(static_cast<unsigned>(tensor.rank())), tensor.shape());
  ref.setPayload(static_cast<uint32_t>(payloads_.size()));
  payloads_.push_back(tensor);
}

void OutMessage::AddTensorAsBf16(const Tensor& tensor, wire::TensorRef::Builder ref) {
  const size_t n = static_cast<size_t>(tensor.num_elements());
  std::shared_ptr<void> block = AllocateAlignedUninitialized(std::max<size_t>(1, n * sizeof(uint16_t)));
  void* data = block.get();
  NarrowToBf16(tensor.data<float>(), static_cast<uint16_t*>(data), n);
  // The payload's bytes as a u8 tensor: what the writer sends is only its bytes.
  AddBf16(Tensor::View(DType::kU8, {static_cast<int64_t>(n * sizeof(uint16_t))}, std::move(block), data),
          tensor.shape(), ref);
}

void OutMessage::AddBf16(const Tensor& bytes, const Shape& shape, wire::TensorRef::Builder ref) {
  ref.setDtype(kBf16WireCode);
  SetShape(ref.initShape(static_cast<unsigned>(shape.size())), shape);
  ref.setPayload(static_cast<uint32_t>(payloads_.size()));
  payloads_.push_back(bytes);
}

void OutMessage::AddEncoded(uint8_t code, const Tensor& bytes, const Shape& shape, wire::TensorRef::Builder ref) {
  ref.setDtype(code);
  SetShape(ref.initShape(static_cast<unsigned>(shape.size())), shape);
  ref.setPayload(static_cast<uint32_t>(payloads_.size()));
  payloads_.push_back(bytes);
}

void OutMessage::AddTensorAs(const Tensor& tensor, bool f32_as_bf16, wire::TensorRef::Builder ref) {
  if (f32_as_bf16 && tensor.dtype() == DType::kF32) {
    AddTensorAsBf16(tensor, ref);
  } else {
    AddTensor(tensor, ref);
  }
}

absl::StatusOr<Tensor> InMessage::TensorAt(wire::TensorRef::Reader ref) const {
  auto dtype = DTypeFromWire(ref.getDtype());
  if (!dtype.ok()) return dtype.status();
  const uint32_t index = ref.getPayload();
  if (index >= payloads_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor refers to payload ", index, " of ", payloads_.size()));
  }
  Shape shape = GetShape(ref.getShape());
  if (absl::Status s = ValidateShape(shape, *dtype); !s.ok()) return s;
  const Payload& p = payloads_[index];
  const uint64_t expected = static_cast<uint64_t>(NumElements(shape)) * DTypeSize(*dtype);
  if (expected != p.size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", DTypeName(*dtype), ShapeString(shape),
                                                   " needs ", expected, " bytes, payload has ",
                                                   p.size));
  }
  if (p.placed != nullptr) return Tensor::View(*dtype, std::move(shape), placed_owner_, p.placed);
  return Tensor::View(*dtype, std::move(shape), block_, static_cast<char*>(block_.get()) + p.offset);
}

bool InMessage::IsBf16(wire::TensorRef::Reader ref) { return ref.getDtype() == kBf16WireCode; }

absl::StatusOr<InMessage::Bf16View> InMessage::Bf16At(wire::TensorRef::Reader ref) const {
  if (!IsBf16(ref)) return absl::InvalidArgumentError(absl::StrCat("tensor dtype code ", ref.getDtype(), " is not bf16"));
  const uint32_t index = ref.getPayload();
  if (index >= payloads_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor refers to payload ", index, " of ", payloads_.size()));
  }
  Bf16View view;
  view.shape = GetShape(ref.getShape());
  // Validated as f32 (4 bytes an element): a bf16 tensor may be no larger than its widened form.
  if (absl::Status s = ValidateShape(view.shape, DType::kF32); !s.ok()) return s;
  const Payload& p = payloads_[index];
  view.count = static_cast<size_t>(NumElements(view.shape));
  if (uint64_t{view.count} * sizeof(uint16_t) != p.size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor bf16", ShapeString(view.shape), " needs ",
                                                   uint64_t{view.count} * sizeof(uint16_t), " bytes, payload has ",
                                                   p.size));
  }
  const Shape byte_shape = {static_cast<int64_t>(p.size)};
  view.bytes = p.placed != nullptr ? Tensor::View(DType::kU8, byte_shape, placed_owner_, p.placed)
                                   : Tensor::View(DType::kU8, byte_shape, block_, static_cast<char*>(block_.get()) + p.offset);
  view.data = static_cast<const uint16_t*>(view.bytes.raw_data());
  return view;
}

Tensor InMessage::Widened(const Bf16View& view) {
  const size_t bytes = view.count * sizeof(float);
  std::shared_ptr<void> block = AllocateAlignedUninitialized(std::max<size_t>(1, bytes));
  void* data = block.get();
  WidenFromBf16(view.data, static_cast<float*>(data), view.count);
  return Tensor::View(DType::kF32, view.shape, std::move(block), data);
}

absl::StatusOr<Tensor> InMessage::WidenedTensorAt(wire::TensorRef::Reader ref) const {
  if (!IsBf16(ref)) return TensorAt(ref);
  absl::StatusOr<Bf16View> view = Bf16At(ref);
  if (!view.ok()) return view.status();
  return Widened(*view);
}

bool InMessage::IsCompressed(wire::TensorRef::Reader ref) {
  return ref.getDtype() == kInt8BlockWireCode || ref.getDtype() == kTopKWireCode;
}

bool InMessage::IsEncoded(wire::TensorRef::Reader ref) { return IsBf16(ref) || IsCompressed(ref); }

absl::StatusOr<Tensor> InMessage::EncodedBytesAt(wire::TensorRef::Reader ref) const {
  if (!IsEncoded(ref)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor dtype code ", ref.getDtype(), " is not an encoding"));
  }
  const uint32_t index = ref.getPayload();
  if (index >= payloads_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor refers to payload ", index, " of ", payloads_.size()));
  }
  if (absl::Status s = ValidateShape(GetShape(ref.getShape()), DType::kF32); !s.ok()) return s;
  const Payload& p = payloads_[index];
  const Shape byte_shape = {static_cast<int64_t>(p.size)};
  return p.placed != nullptr ? Tensor::View(DType::kU8, byte_shape, placed_owner_, p.placed)
                             : Tensor::View(DType::kU8, byte_shape, block_, static_cast<char*>(block_.get()) + p.offset);
}

absl::StatusOr<Tensor> InMessage::DecodeCompressedAt(wire::TensorRef::Reader ref, const Shape& expected) const {
  if (!IsCompressed(ref)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor dtype code ", ref.getDtype(), " is not compressed"));
  }
  const char* form = ref.getDtype() == kInt8BlockWireCode ? "int8" : "top-k";
  const Shape shape = GetShape(ref.getShape());
  if (shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat(form, " tensor of shape ", ShapeString(shape),
                                                   " where one of shape ", ShapeString(expected), " belongs"));
  }
  absl::StatusOr<Tensor> bytes = EncodedBytesAt(ref);
  if (!bytes.ok()) return bytes.status();
  const size_t n = static_cast<size_t>(NumElements(shape));
  const auto* payload = static_cast<const uint8_t*>(bytes->raw_data());
  const size_t size = static_cast<size_t>(bytes->num_bytes());
  // The payload's size is checked against the shape before the f32 tensor is allocated: a
  // small frame cannot make this allocate more than the variable it names.
  if (ref.getDtype() == kInt8BlockWireCode ? size != Int8EncodedBytes(n)
                                           : (size % TopKEncodedBytes(1) != 0 || size / TopKEncodedBytes(1) > n)) {
    return absl::InvalidArgumentError(absl::StrCat(form, " payload of ", size, " bytes does not fit ", n, " elements"));
  }
  Tensor out(DType::kF32, shape);
  absl::Status s = ref.getDtype() == kInt8BlockWireCode ? DecodeInt8(payload, size, n, out.data<float>())
                                                        : DecodeTopK(payload, size, n, out.data<float>());
  if (!s.ok()) return s;
  return out;
}

namespace message_internal {

absl::Status MalformedMessage(const kj::Exception& e) {
  return absl::InvalidArgumentError(absl::StrCat("malformed message: ", e.getDescription().cStr()));
}

absl::Status MalformedMessage(const std::exception& e) {
  return absl::InvalidArgumentError(absl::StrCat("malformed message: ", e.what()));
}

}  // namespace message_internal

void SetShape(capnp::List<int64_t>::Builder list, const Shape& shape) {
  for (size_t i = 0; i < shape.size(); ++i) list.set(static_cast<unsigned>(i), shape[i]);
}

Shape GetShape(capnp::List<int64_t>::Reader list) {
  Shape shape;
  shape.reserve(list.size());
  for (int64_t d : list) shape.push_back(d);
  return shape;
}

}  // namespace asyncps::net
