#include "core/crc32.h"

#include <zlib.h>

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#include <smmintrin.h>
#include <wmmintrin.h>
#define ASYNCPS_CRC32_FOLDING 1
#else
#define ASYNCPS_CRC32_FOLDING 0
#endif

namespace asyncps {
namespace crc32_internal {

uint32_t ZlibCrc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths: feed it at most 1 GiB at a time.
  while (n > 0) {
    const size_t chunk = std::min<size_t>(n, size_t{1} << 30);
    crc = static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(chunk)));
    p += chunk;
    n -= chunk;
  }
  return crc;
}

#if ASYNCPS_CRC32_FOLDING
namespace {

#define ASYNCPS_CRC32_TARGET __attribute__((target("pclmul,sse4.1")))

ASYNCPS_CRC32_TARGET inline __m128i Load(const unsigned char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// `lane` times a power of x (its low half times k's low qword, its high half times k's high
// qword), XORed onto `next`.
ASYNCPS_CRC32_TARGET inline __m128i Fold(__m128i lane, __m128i k, __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(lane, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(lane, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

// Folds `n` bytes (n >= 64, a multiple of 16) into the CRC register `state` (the CRC-32 before
// its final inversion, i.e. ~crc) and returns the new register. The method and constants are
// those of Gopal, Ozturk et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
// Instruction" (Intel, 2009), for the bit-reflected polynomial 0x04C11DB7: four 128-bit lanes
// are each multiplied forward by x^(512) (k1, k2) and XORed with the next 64 bytes, so the four
// multiplications per step are independent and the multiplier's latency is hidden; the lanes
// are then folded into one (k3, k4), reduced to 64 bits (k5) and to 32 by Barrett reduction.
// Compiled for PCLMULQDQ and SSE4.1 only here, so the rest of the program still runs on CPUs
// without them; it is called only when the CPU has both.
ASYNCPS_CRC32_TARGET uint32_t FoldBlocks(const unsigned char* p, size_t n, uint32_t state) {
  // {low qword, high qword}: the paper's constants for this polynomial, bit-reflected (powers
  // of x modulo P for folding by 512 bits, by 128 bits, and from 64 bits; then P and
  // mu = floor(x^64 / P) for the Barrett reduction).
  alignas(16) static const uint64_t kK1K2[2] = {0x0154442bd4, 0x01c6e41596};
  alignas(16) static const uint64_t kK3K4[2] = {0x01751997d0, 0x00ccaa009e};
  alignas(16) static const uint64_t kK5[2] = {0x0163cd6124, 0};
  alignas(16) static const uint64_t kPoly[2] = {0x01db710641, 0x01f7011641};
  __m128i x0 = _mm_xor_si128(Load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x1 = Load(p + 16);
  __m128i x2 = Load(p + 32);
  __m128i x3 = Load(p + 48);
  p += 64;
  n -= 64;
  const __m128i k1k2 = _mm_load_si128(reinterpret_cast<const __m128i*>(kK1K2));
  while (n >= 64) {
    x0 = Fold(x0, k1k2, Load(p));
    x1 = Fold(x1, k1k2, Load(p + 16));
    x2 = Fold(x2, k1k2, Load(p + 32));
    x3 = Fold(x3, k1k2, Load(p + 48));
    p += 64;
    n -= 64;
  }
  const __m128i k3k4 = _mm_load_si128(reinterpret_cast<const __m128i*>(kK3K4));
  x0 = Fold(x0, k3k4, x1);
  x0 = Fold(x0, k3k4, x2);
  x0 = Fold(x0, k3k4, x3);
  while (n >= 16) {
    x0 = Fold(x0, k3k4, Load(p));
    p += 16;
    n -= 16;
  }
  // 128 -> 64 bits: the low qword times k4, onto the high qword.
  const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
  x0 = _mm_xor_si128(_mm_srli_si128(x0, 8), _mm_clmulepi64_si128(x0, k3k4, 0x10));
  // 64 -> 32 bits (plus carry): the low dword times k5, onto the rest.
  const __m128i k5 = _mm_load_si128(reinterpret_cast<const __m128i*>(kK5));
  x0 = _mm_xor_si128(_mm_srli_si128(x0, 4),
                     _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), k5, 0x00));
  // Barrett reduction: T1 = (R mod x^32) * mu, T2 = (T1 mod x^32) * P, CRC = R ^ T2.
  const __m128i poly = _mm_load_si128(reinterpret_cast<const __m128i*>(kPoly));
  __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x0, mask32), poly, 0x10);
  t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x0, t), 1));
}

}  // namespace

bool FoldingSupported() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  }();
  return supported;
}

uint32_t FoldedCrc32(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (n >= 64) {
    const size_t bulk = n & ~size_t{15};
    crc = ~FoldBlocks(p, bulk, ~crc);
    p += bulk;
    n -= bulk;
  }
  return ZlibCrc32(crc, p, n);
}

#else  // !ASYNCPS_CRC32_FOLDING

bool FoldingSupported() { return false; }
uint32_t FoldedCrc32(uint32_t crc, const void* data, size_t n) { return ZlibCrc32(crc, data, n); }

#endif  // ASYNCPS_CRC32_FOLDING

}  // namespace crc32_internal

uint32_t Crc32(uint32_t crc, const void* data, size_t n) {
  // Below 64 bytes the fold's setup and final reduction cost more than zlib's tables.
  if (n >= 64 && crc32_internal::FoldingSupported())
    return crc32_internal::FoldedCrc32(crc, data, n);
  return crc32_internal::ZlibCrc32(crc, data, n);
}

}  // namespace asyncps
