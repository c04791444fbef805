#include "net/frame_codec.h"

#include <cstring>

#include <kj/exception.h>

#include "absl/strings/str_cat.h"

namespace asyncps::net {
namespace {

constexpr size_t kPayloadAlignment = 64;
const uint8_t kZeros[8] = {0, 0, 0, 0, 0, 0, 0, 0};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

BlockPool::Options DecoderPoolOptions() {
  BlockPool::Options options;
  options.max_idle_blocks = 1;
  return options;
}

}  // namespace

FrameDecoder::FrameDecoder(const FrameLimits& limits) : limits_(limits), pool_(DecoderPoolOptions()) {}

absl::StatusOr<size_t> FrameDecoder::SegmentTableBytes(const uint8_t first4[4]) const {
  uint32_t count_minus_one;
  std::memcpy(&count_minus_one, first4, 4);  // little-endian on every platform we build for
  const uint64_t segments = uint64_t{count_minus_one} + 1;
  if (segments > limits_.max_segments) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame declares ", segments, " segments (limit ", limits_.max_segments, ")"));
  }
  return RoundUp(4 * (segments + 1), 8);
}

absl::StatusOr<size_t> FrameDecoder::HeaderWords(absl::Span<const capnp::word> table) const {
  // Sum the segment sizes ourselves: expectedSizeInWordsFromPrefix would do the same, but we
  // must reject oversized values before they are multiplied or allocated.
  const uint32_t* sizes = reinterpret_cast<const uint32_t*>(table.data());
  const uint64_t segments = uint64_t{sizes[0]} + 1;
  uint64_t words = table.size();
  for (uint64_t i = 0; i < segments; ++i) words += sizes[1 + i];
  if (words * sizeof(capnp::word) > limits_.max_header_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame header of ", words * 8,
                                                   " bytes exceeds limit ", limits_.max_header_bytes));
  }
  const size_t expected = capnp::expectedSizeInWordsFromPrefix(
      kj::ArrayPtr<const capnp::word>(table.data(), table.size()));
  if (expected != words) return absl::InvalidArgumentError("inconsistent segment table");
  return static_cast<size_t>(words);
}

absl::Status FrameDecoder::ParseHeader(kj::Array<capnp::word> words, const PayloadPlacer* placer) {
  message_ = InMessage();
  buffers_.clear();
  total_padded_ = 0;
  message_.words_ = std::move(words);
  capnp::ReaderOptions options;
  // Linear in the frame: the parse-time walk, the complete check of the envelope and body
  // (net/wire_check.h), a payload placer's and the handler's own reads each traverse it
  // about once.
  options.traversalLimitInWords = message_.words_.size() * 8 + 64;
  options.nestingLimit = 16;
  absl::Status status = CatchDecodeErrors([&]() -> absl::Status {
    message_.reader_ = std::make_unique<capnp::FlatArrayMessageReader>(message_.words_, options);
    auto root = message_.reader_->getRoot<capnp::AnyPointer>();
    // Walk the whole message once now, so later field reads cannot fail structurally.
    (void)root.targetSize();
    auto envelope = root.getAs<wire::Envelope>();
    auto payload_sizes = envelope.getPayloadSizes();
    if (payload_sizes.size() > limits_.max_payloads) {
      return absl::InvalidArgumentError(absl::StrCat("frame lists ", payload_sizes.size(),
                                                     " payloads (limit ", limits_.max_payloads, ")"));
    }
    uint64_t total_bytes = 0;
    message_.payloads_.reserve(payload_sizes.size());
    for (uint64_t size : payload_sizes) {
      if (size > limits_.max_payload_bytes || total_bytes + size > limits_.max_payload_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("frame payloads exceed limit ", limits_.max_payload_bytes, " bytes"));
      }
      total_bytes += size;
      message_.payloads_.push_back({0, static_cast<size_t>(size)});
    }
    return absl::OkStatus();
  });
  if (!status.ok()) {
    message_ = InMessage();
    return status;
  }
  if (message_.payloads_.empty()) return absl::OkStatus();  // nothing to allocate
  buffers_.reserve(message_.payloads_.size());

  // Every size is checked: the placer may now say where the payloads go. Its destinations
  // are taken only at exactly a payload's size, so a wrong one cannot make the reader write
  // past it. A placer that throws on a malformed header places nothing; the frame's reader
  // meets the same error.
  if (placer != nullptr && *placer) {
    PayloadPlacement placement;
    if (CatchDecodeErrors([&] {
          placement = (*placer)(message_);
          return absl::OkStatus();
        }).ok()) {
      bool any = false;
      for (size_t i = 0; i < placement.destinations.size() && i < message_.payloads_.size(); ++i) {
        const PayloadPlacement::Destination& d = placement.destinations[i];
        InMessage::Payload& p = message_.payloads_[i];
        if (d.data == nullptr || p.size == 0 || d.size != p.size) continue;
        p.placed = d.data;
        any = true;
      }
      if (any) message_.placed_owner_ = std::move(placement.owner);
    }
  }

  uint64_t block_bytes = 0;
  for (InMessage::Payload& p : message_.payloads_) {
    if (p.placed != nullptr) continue;
    p.offset = static_cast<size_t>(block_bytes);
    block_bytes += RoundUp(p.size, kPayloadAlignment);
  }
  // Uninitialised: the reader overwrites every padded payload byte, so zero-filling the block
  // first would only double the memory traffic of a large frame. The alignment gaps between
  // payloads are never written by the reader; zero them so no stale heap bytes are reachable.
  char* block = nullptr;
  if (block_bytes > 0) {
    message_.block_ = AllocateBlock(block_bytes);
    block = static_cast<char*>(message_.block_.get());
  }
  for (const InMessage::Payload& p : message_.payloads_) {
    const size_t padded = RoundUp(p.size, 8);
    total_padded_ += padded;
    if (p.placed != nullptr) {
      buffers_.push_back({p.placed, p.size});
      if (padded > p.size) buffers_.push_back({&scratch_, padded - p.size});
      continue;
    }
    if (padded == 0) continue;
    std::memset(block + p.offset + padded, 0, RoundUp(p.size, kPayloadAlignment) - padded);
    buffers_.push_back({block + p.offset, padded});
  }
  return absl::OkStatus();
}

std::shared_ptr<void> FrameDecoder::AllocateBlock(size_t bytes) {
  // A small request's payload (a gradient of a few floats) takes one allocation, its
  // reference count beside its bytes, instead of an aligned block plus a separate count.
  // Zero-filled, which at these sizes costs less than the allocation it saves.
  if (bytes <= SmallBlock<kSmallBlockBytes[0]>::kBytes) return std::make_shared<SmallBlock<kSmallBlockBytes[0]>>();
  if (bytes <= SmallBlock<kSmallBlockBytes[1]>::kBytes) return std::make_shared<SmallBlock<kSmallBlockBytes[1]>>();
  return pool_.AllocateUninitialized(bytes);
}

InMessage FrameDecoder::Finish() { return std::move(message_); }

absl::StatusOr<InMessage> FrameDecoder::DecodeAll(absl::Span<const uint8_t> bytes,
                                                  const FrameLimits& limits, size_t* consumed,
                                                  const PayloadPlacer* placer) {
  FrameDecoder decoder(limits);
  if (bytes.size() < 4) return absl::InvalidArgumentError("truncated frame");
  auto table_bytes = decoder.SegmentTableBytes(bytes.data());
  if (!table_bytes.ok()) return table_bytes.status();
  if (bytes.size() < *table_bytes) return absl::InvalidArgumentError("truncated frame");
  auto table = kj::heapArray<capnp::word>(*table_bytes / 8);
  std::memcpy(table.begin(), bytes.data(), *table_bytes);
  auto words = decoder.HeaderWords(absl::MakeConstSpan(table.begin(), table.size()));
  if (!words.ok()) return words.status();
  if (bytes.size() < *words * 8) return absl::InvalidArgumentError("truncated frame");
  auto header = kj::heapArray<capnp::word>(*words);
  std::memcpy(header.begin(), bytes.data(), *words * 8);
  if (absl::Status s = decoder.ParseHeader(std::move(header), placer); !s.ok()) return s;
  size_t offset = *words * 8;
  for (const auto& range : decoder.payload_buffers()) {
    if (bytes.size() - offset < range.size) return absl::InvalidArgumentError("truncated frame");
    std::memcpy(range.data, bytes.data() + offset, range.size);
    offset += range.size;
  }
  if (consumed != nullptr) *consumed = offset;
  return decoder.Finish();
}

EncodedFrame EncodeFrame(OutMessage& message) {
  EncodedFrame frame;
  auto envelope = message.envelope();
  const auto& payloads = message.payloads();
  auto sizes = envelope.initPayloadSizes(static_cast<unsigned>(payloads.size()));
  for (size_t i = 0; i < payloads.size(); ++i) sizes.set(static_cast<unsigned>(i), payloads[i].num_bytes());
  // Stream framing by hand (what messageToFlatArray writes) so the segments are gathered from
  // the builder's own memory instead of being copied into one flat array first.
  auto segments = message.builder().getSegmentsForOutput();
  const size_t table_words = segments.size() / 2 + 1;
  capnp::word* table_words_at = message.table_space();
  if (table_words > OutMessage::kTableSpaceWords) {
    frame.table = kj::heapArray<capnp::word>(table_words);
    table_words_at = frame.table.begin();
  }
  auto* table = reinterpret_cast<uint32_t*>(table_words_at);
  table[0] = static_cast<uint32_t>(segments.size() - 1);
  for (size_t i = 0; i < segments.size(); ++i) table[i + 1] = static_cast<uint32_t>(segments[i].size());
  if (segments.size() % 2 == 0) table[segments.size() + 1] = 0;
  frame.ranges.reserve(1 + segments.size() + 2 * payloads.size());
  frame.ranges.push_back({table_words_at, table_words * sizeof(capnp::word)});
  frame.total_bytes = table_words * sizeof(capnp::word);
  for (auto segment : segments) {
    frame.ranges.push_back({segment.begin(), segment.size() * sizeof(capnp::word)});
    frame.total_bytes += segment.size() * sizeof(capnp::word);
  }
  for (const Tensor& t : payloads) {
    if (t.num_bytes() > 0) frame.ranges.push_back({t.raw_data(), t.num_bytes()});
    const size_t pad = RoundUp(t.num_bytes(), 8) - t.num_bytes();
    if (pad > 0) frame.ranges.push_back({kZeros, pad});
    frame.total_bytes += t.num_bytes() + pad;
  }
  return frame;
}

std::string EncodeFrameToString(OutMessage& message) {
  EncodedFrame frame = EncodeFrame(message);
  std::string out;
  out.reserve(frame.total_bytes);
  for (const auto& r : frame.ranges) out.append(static_cast<const char*>(r.data), r.size);
  return out;
}

}  // namespace asyncps::net
