#ifndef ASYNCPS_CORE_BF16_H_
#define ASYNCPS_CORE_BF16_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// bfloat16: the upper 16 bits of an IEEE f32 (sign, 8 exponent bits, 7 mantissa bits). Used
// only as a wire encoding of f32 values (reduced-precision transport, docs/performance.md):
// never a Tensor's dtype, never stored by a PS.
//
// f32 -> bf16 rounds to nearest, ties to even, on the bits: finite values too large for bf16
// (at least the largest bf16 plus half its last place) become +-Inf, subnormals round like any
// other value (bf16 keeps f32's exponent range, subnormals included), +-Inf stays +-Inf, and
// every NaN becomes a quiet NaN with the same sign (the quiet bit set, so a NaN whose payload
// lies in the low 16 bits never turns into Inf). bf16 -> f32 is exact (a shift).

// The wire code of bf16 in a TensorRef's dtype field (net/envelope.capnp): beside the DType
// values (core/dtype.h), which never take it. A peer that does not know it refuses the tensor
// as an unknown dtype rather than misreading its bytes.
inline constexpr uint8_t kBf16WireCode = 7;

inline uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// The precision f32 values travel in between workers and parameter servers (PsClient::Options,
// the --transport process flag): f32 (exact, the default) or bf16 (half the bytes; values and
// gradients rounded as FloatToBf16 does).
enum class WirePrecision { kF32, kBf16 };
// "f32" or "bf16"; InvalidArgument naming `name` otherwise.
absl::StatusOr<WirePrecision> ParseWirePrecision(absl::string_view name);
absl::string_view WirePrecisionName(WirePrecision precision);

// FloatToBf16 of `n` floats at `in` into `out`, and Bf16ToFloat of `n` bf16 at `in`; the
// ranges must not overlap. Vectorised loops (SSE2, AVX2 or AVX-512, whichever the CPU has): on
// 235k floats in cache 1.4-2x the time of a memcpy of the f32 bytes to narrow, about 1x to
// widen; past the caches about memcpy's time both ways (bench/bf16_bench.cc).
void NarrowToBf16(const float* in, uint16_t* out, size_t n);
void WidenFromBf16(const uint16_t* in, float* out, size_t n);

namespace bf16_internal {
// For tests: the loop bodies this CPU can run (SSE2, then AVX2, then AVX-512 where it has them),
// each callable directly, so that every body is checked, not only the one the CPU picks.
size_t NumNarrowBodies();
size_t NumWidenBodies();
void NarrowWithBody(size_t body, const float* in, uint16_t* out, size_t n);
void WidenWithBody(size_t body, const uint16_t* in, float* out, size_t n);
}  // namespace bf16_internal

}  // namespace asyncps

#endif  // ASYNCPS_CORE_BF16_H_
