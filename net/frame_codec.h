#ifndef ASYNCPS_NET_FRAME_CODEC_H_
#define ASYNCPS_NET_FRAME_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/block_pool.h"
#include "net/message.h"

namespace asyncps::net {

// The frame format, byte for byte:
//   Cap'n Proto stream framing of one Envelope (segment table, then segments), followed by
//   each payload listed in envelope.payloadSizes, zero-padded to a multiple of 8 bytes.
//
// Decoding happens in three steps so a socket reader can read exactly what each step needs
// and check every size before allocating for it:
//   1. FirstSegmentTableBytes -> bytes of segment table to read (from the first 4 bytes);
//   2. HeaderWords(table)     -> total header words (capped by FrameLimits);
//   3. FrameDecoder::ParseHeader(words) then ReadPayloadsInto / Finish.
class FrameDecoder {
 public:
  explicit FrameDecoder(const FrameLimits& limits);

  // Limits for the frames that follow (e.g. larger ones once a handshake completed).
  void set_limits(const FrameLimits& limits) { limits_ = limits; }
  const FrameLimits& limits() const { return limits_; }

  // Step 1: given the frame's first 4 bytes, the number of bytes of the whole segment table
  // (including those 4). InvalidArgument when the segment count exceeds the limit.
  absl::StatusOr<size_t> SegmentTableBytes(const uint8_t first4[4]) const;

  // Step 2: given the whole segment table, the total size of the header in words.
  // InvalidArgument when it exceeds max_header_bytes.
  absl::StatusOr<size_t> HeaderWords(absl::Span<const capnp::word> table) const;

  // Step 3: takes ownership of the complete header words, validates the envelope and the
  // payload sizes, and allocates the aligned payload block (a large one from this decoder's
  // BlockPool: a connection receives the same sizes again and again). After this, `payload_buffers()`
  // tells where each padded payload's bytes must be written.
  //
  // With `placer` (and payloads), it is asked where the payloads go once the header is
  // checked: a destination of exactly a payload's size receives that payload (its padding
  // goes to scratch), and only the other payloads get the frame's own block.
  absl::Status ParseHeader(kj::Array<capnp::word> words, const PayloadPlacer* placer = nullptr);

  struct MutableRange {
    void* data;
    size_t size;  // in order, the ranges hold the payloads each padded to 8
  };
  const std::vector<MutableRange>& payload_buffers() const { return buffers_; }
  size_t total_padded_payload_bytes() const { return total_padded_; }

  // The finished message (after the payload bytes were written into payload_buffers()).
  InMessage Finish();

  // Decodes one whole frame from contiguous bytes (used by tests and fuzzers). Errors for
  // truncated input, trailing garbage is reported via `consumed`.
  static absl::StatusOr<InMessage> DecodeAll(absl::Span<const uint8_t> bytes,
                                             const FrameLimits& limits, size_t* consumed,
                                             const PayloadPlacer* placer = nullptr);

 private:
  // Payload blocks up to these sizes are one allocation with their shared count (glibc's
  // per-thread cache serves them); larger ones come from `pool_`.
  static constexpr size_t kSmallBlockBytes[2] = {128, 768};
  template <size_t N>
  struct alignas(64) SmallBlock {
    static constexpr size_t kBytes = N;
    unsigned char bytes[N];
  };
  std::shared_ptr<void> AllocateBlock(size_t bytes);

  FrameLimits limits_;
  // One idle block at most: a connection's frames are read one after another, and the message
  // read last is usually released before the next one is read.
  BlockPool pool_;
  InMessage message_;
  std::vector<MutableRange> buffers_;
  size_t total_padded_ = 0;
  // Where the padding of placed payloads goes (at most 7 bytes each; never read).
  uint64_t scratch_ = 0;
};

// Finishes `message`'s envelope (payload sizes) and returns the gather list of the whole
// frame: the segment table, the envelope's segments in the builder's own memory, then the
// payloads (tensor memory itself) each followed by its zero padding. Nothing is copied, so the
// ranges are valid while `message` is alive and unmodified.
struct EncodedFrame {
  // The stream-framing segment table when it does not fit the message's own table space
  // (OutMessage::table_space, where it usually goes).
  kj::Array<capnp::word> table;
  struct Range {
    const void* data;
    size_t size;
  };
  // Table, segments..., then payload, padding, payload, padding... A small frame's ranges
  // (one segment, a payload or two) fit inline: no allocation per frame sent.
  absl::InlinedVector<Range, 6> ranges;
  size_t total_bytes = 0;
};
EncodedFrame EncodeFrame(OutMessage& message);

// The whole frame as one string (tests only: copies everything).
std::string EncodeFrameToString(OutMessage& message);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_FRAME_CODEC_H_
