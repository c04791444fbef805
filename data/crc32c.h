#ifndef ASYNCPS_DATA_CRC32C_H_
#define ASYNCPS_DATA_CRC32C_H_

// CRC-32C (Castagnoli, polynomial 0x1EDC6F41 reflected as 0x82F63B78), as used by TFRecord
// framing. Debian's Abseil 20220623 has no absl/crc, so this is a portable slice-by-8 table
// implementation (no SSE4.2 instruction), checked against the RFC 3720 B.4 vectors.

#include <cstddef>
#include <cstdint>

namespace asyncps::data {

// CRC-32C of `n` bytes at `data`, continuing from `crc` (the CRC of the bytes before them; 0
// for a fresh start). Crc32cExtend(Crc32cExtend(0, a), b) == Crc32c of a followed by b.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

// TFRecord's masking of a stored CRC (rotate right by 15, add a constant), which keeps a CRC
// of data that itself contains CRCs from being degenerate.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace asyncps::data

#endif  // ASYNCPS_DATA_CRC32C_H_
