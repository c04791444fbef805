#ifndef ASYNCPS_CORE_COMPRESSION_H_
#define ASYNCPS_CORE_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// Gradient compression (issue 38, docs/performance.md "Gradient compression"): the lossy wire
// forms a worker may push an f32 gradient in, and their codecs. Like bf16 (core/bf16.h), each
// is only a wire encoding: never a Tensor's dtype, never stored by a PS, which decodes a
// compressed gradient to f32 and then checks and applies it like any other. Only dense f32
// gradients are ever compressed; every other dtype (integer counters included) and every row
// gradient travels exactly as it is.

// What a worker pushes its dense f32 gradients as.
//   kNone  f32 (exact; 4 bytes an element)
//   kBf16  bf16 (2 bytes an element; core/bf16.h)
//   kInt8  int8 with one f32 scale per block of kInt8BlockSize elements (~1.016 bytes an
//          element): q = round(x / s), s = max|x| of the block / 127
//   kTopK  the `topk_fraction` of elements largest in magnitude, as (u32 index, f32 value)
//          pairs (8 bytes each; 0.08 bytes an element at 1%)
// Every lossy mode keeps on the worker what it did not send (error feedback): see
// worker/gradient_residuals.h.
enum class CompressionKind { kNone, kBf16, kInt8, kTopK };

struct Compression {
  CompressionKind kind = CompressionKind::kNone;
  double topk_fraction = 0.01;  // kTopK: in (0, 1]

  bool lossy() const { return kind != CompressionKind::kNone; }
  friend bool operator==(const Compression& a, const Compression& b) {
    return a.kind == b.kind && (a.kind != CompressionKind::kTopK || a.topk_fraction == b.topk_fraction);
  }
};

// "none", "bf16", "int8" or "topk:FRACTION" (FRACTION in (0, 1], e.g. "topk:0.01"; "topk"
// alone is 0.01). InvalidArgument naming the text otherwise.
absl::StatusOr<Compression> ParseCompression(absl::string_view text);
// The text ParseCompression reads back: "none", "bf16", "int8", "topk:0.01".
std::string CompressionName(const Compression& compression);

// Wire codes in a TensorRef's dtype field (net/envelope.capnp), beside the DType values and
// bf16's 7, which never take them: a peer that predates them refuses such a tensor as an
// unknown dtype rather than misreading its bytes. The TensorRef's shape is the decoded
// tensor's; the payload is the encoded bytes below.
inline constexpr uint8_t kInt8BlockWireCode = 8;
inline constexpr uint8_t kTopKWireCode = 9;

// int8 payload: ceil(n / kInt8BlockSize) f32 scales, then n int8 codes.
inline constexpr size_t kInt8BlockSize = 256;
// Bytes of the int8 payload of `n` elements.
size_t Int8EncodedBytes(size_t n);
// Encodes the `n` floats at `values` into `out` (Int8EncodedBytes(n) bytes) and leaves in
// `values` what the encoding lost (each value minus its decoded form): the residual. A block
// holding NaN or Inf gets a NaN scale, so it decodes to NaN and the PS refuses the gradient
// as non-finite rather than applying a value that is not the one computed.
void EncodeInt8InPlace(float* values, size_t n, uint8_t* out);
// Error feedback in one pass: encodes v = gradient + held (each of the `n` elements; `held`
// null: v = gradient) into `out` (Int8EncodedBytes(n) bytes) and writes into `residual` (`n`
// floats; it may be `gradient` but not `held`) v minus its decoded form. The same bytes and
// residual as adding `held` into the gradient and EncodeInt8InPlace, without the passes over
// memory between them; `held` is left as it is (a push the PS does not apply gives it back).
void EncodeInt8WithFeedback(const float* gradient, const float* held, size_t n, uint8_t* out, float* residual);
// The same encoding of `n` floats at `in`, which it leaves as they are (quantized reads: the
// PS answers a variable's values so without touching them).
void EncodeInt8(const float* in, size_t n, uint8_t* out);
// Decodes an int8 payload of `bytes` bytes into `n` floats at `out`. InvalidArgument, before
// anything is written, when `bytes` is not Int8EncodedBytes(n).
absl::Status DecodeInt8(const uint8_t* payload, size_t bytes, size_t n, float* out);

// top-k payload: k u32 indices, strictly increasing, each < n; then k f32 values.
// The k of `fraction` of `n` elements: ceil(n * fraction), at least 1 (0 when n is 0), at most n.
size_t TopKCount(size_t n, double fraction);
inline size_t TopKEncodedBytes(size_t k) { return k * (sizeof(uint32_t) + sizeof(float)); }
// Encodes the k of the `n` floats at `values` largest in magnitude (k = TopKCount(n, fraction);
// NaN counts as largest, so a non-finite gradient reaches the PS and is refused there) into
// `out` (TopKEncodedBytes(k) bytes) and sets them to 0 in `values`, which is then the residual
// (the values sent are exact). Returns k. n must be below 2^32.
size_t EncodeTopKInPlace(float* values, size_t n, double fraction, uint8_t* out);
// Decodes a top-k payload of `bytes` bytes into `n` floats at `out` (zeros but for the listed
// elements). InvalidArgument, before anything is written, when `bytes` is not a whole number
// of pairs, names more than `n` of them, or an index is out of range or not above the one
// before it.
absl::Status DecodeTopK(const uint8_t* payload, size_t bytes, size_t n, float* out);

// bf16 with error feedback: narrows `n` floats at `values` into `out` (2n bytes) and leaves
// in `values` each value minus its bf16 rounding.
void EncodeBf16InPlace(float* values, size_t n, uint16_t* out);

// The forms a worker may ask its pulls (reads) in: none (f32), bf16 or int8 (core/bf16.h and
// the int8 encoding above; no error feedback: a read's rounding is not carried anywhere).
// "none", "bf16" or "int8"; InvalidArgument otherwise (top-k is for gradients only).
absl::StatusOr<Compression> ParsePullCompression(absl::string_view text);

// Bytes of the payload `n` f32 elements take compressed as `compression`.
size_t EncodedBytes(const Compression& compression, size_t n);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_COMPRESSION_H_
