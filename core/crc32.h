#ifndef ASYNCPS_CORE_CRC32_H_
#define ASYNCPS_CORE_CRC32_H_

#include <cstddef>
#include <cstdint>

namespace asyncps {

// CRC-32 (zlib's, the one Python's zlib.crc32 computes: reflected polynomial 0xEDB88320, initial
// and final XOR 0xFFFFFFFF) of `n` bytes, continuing from `crc` (start with 0), so that
// Crc32(Crc32(0, a), b) == Crc32(0, a followed by b). Any length and alignment; thread-safe.
//
// On x86 CPUs with PCLMULQDQ and SSE4.1 (checked once, at run time) the bulk of the bytes is
// folded with carry-less multiplications, several times faster than zlib's tables, which
// handle the rest and every other CPU. The values are the same either way.
uint32_t Crc32(uint32_t crc, const void* data, size_t n);

namespace crc32_internal {

// Exposed for tests and benchmarks, which compare the two paths.

// Whether this CPU can run FoldedCrc32.
bool FoldingSupported();

// Crc32 through carry-less multiplication folding (zlib for lengths under 64 and the last
// n % 16 bytes). Call only when FoldingSupported().
uint32_t FoldedCrc32(uint32_t crc, const void* data, size_t n);

// Crc32 through zlib alone.
uint32_t ZlibCrc32(uint32_t crc, const void* data, size_t n);

}  // namespace crc32_internal
}  // namespace asyncps

#endif  // ASYNCPS_CORE_CRC32_H_
