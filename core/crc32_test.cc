#include "core/crc32.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace crc32_test_internal {
namespace {

using crc32_internal::FoldedCrc32;
using crc32_internal::FoldingSupported;
using crc32_internal::ZlibCrc32;

std::vector<unsigned char> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) b = static_cast<unsigned char>(rng());
  return out;
}

TEST(Crc32Test, KnownValues) {
  const std::string check = "123456789";  // the CRC catalogue's check input
  EXPECT_EQ(Crc32(0, check.data(), check.size()), 0xCBF43926u);
  EXPECT_EQ(Crc32(0, nullptr, 0), 0u);
  EXPECT_EQ(Crc32(0x12345678u, nullptr, 0), 0x12345678u);
  // 64 bytes and more take the folded path where the CPU has it.
  const std::string zeros(4096, '\0');
  EXPECT_EQ(Crc32(0, zeros.data(), zeros.size()), ZlibCrc32(0, zeros.data(), zeros.size()));
}

// Every length from 0 to past several 64-byte blocks, at every alignment, from several
// starting values: covers the zlib-only lengths, the fold's edges (64, multiples of 16, the
// 16-byte tail loop) and the zlib tail after the fold.
TEST(Crc32Test, FoldedEqualsZlibForEveryLengthAlignmentAndStart) {
  if (!FoldingSupported()) GTEST_SKIP() << "this CPU has no PCLMULQDQ/SSE4.1";
  const std::vector<unsigned char> data = RandomBytes(1200 + 16, 1);
  for (uint32_t start : {0u, 0xFFFFFFFFu, 0xCBF43926u, 0x00000001u}) {
    for (size_t align = 0; align < 16; ++align) {
      for (size_t n = 0; n <= 1200; ++n) {
        const unsigned char* p = data.data() + align;
        ASSERT_EQ(FoldedCrc32(start, p, n), ZlibCrc32(start, p, n))
            << "start " << start << " alignment " << align << " length " << n;
      }
    }
  }
}

TEST(Crc32Test, FoldedEqualsZlibOnLargeRandomBuffers) {
  if (!FoldingSupported()) GTEST_SKIP() << "this CPU has no PCLMULQDQ/SSE4.1";
  std::mt19937_64 rng(2);
  for (size_t n : {size_t{1} << 16, (size_t{1} << 20) + 13, (size_t{9} << 20) + 63}) {
    for (int trial = 0; trial < 3; ++trial) {
      const std::vector<unsigned char> data = RandomBytes(n + 7, rng());
      const size_t align = rng() % 8;
      const uint32_t start = static_cast<uint32_t>(rng());
      ASSERT_EQ(FoldedCrc32(start, data.data() + align, n), ZlibCrc32(start, data.data() + align, n))
          << "length " << n << " alignment " << align;
    }
  }
}

// Patterns that a wrong constant or a lost carry can map to the right value by accident on
// random data are unlikely, but all-zero and all-one inputs are where such slips show first.
TEST(Crc32Test, FoldedEqualsZlibOnConstantBytes) {
  if (!FoldingSupported()) GTEST_SKIP() << "this CPU has no PCLMULQDQ/SSE4.1";
  for (unsigned char fill : {0x00, 0xFF, 0x80, 0x01}) {
    const std::vector<unsigned char> data(100000, fill);
    for (size_t n : {64, 65, 80, 127, 128, 1000, 4096, 99999, 100000}) {
      ASSERT_EQ(FoldedCrc32(0, data.data(), n), ZlibCrc32(0, data.data(), n))
          << "fill " << int{fill} << " length " << n;
    }
  }
}

// The combine path: a CRC continued piece by piece (as DurableFileWriter does per chunk) equals
// the CRC of the whole, whichever path each piece takes (pieces under 64 bytes go to zlib,
// longer ones are folded and end in zlib).
TEST(Crc32Test, FoldedEqualsZlibWhenContinuedAcrossRandomSplits) {
  const std::vector<unsigned char> data = RandomBytes(1 << 18, 3);
  const uint32_t whole = ZlibCrc32(0, data.data(), data.size());
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    uint32_t crc = 0;
    uint32_t folded = 0;
    size_t at = 0;
    while (at < data.size()) {
      // Short and long pieces alike: mostly under 200 bytes, sometimes up to 16 KiB.
      const size_t limit = rng() % 4 == 0 ? 16384 : 200;
      const size_t n = std::min<size_t>(data.size() - at, rng() % limit);
      crc = Crc32(crc, data.data() + at, n);
      if (FoldingSupported()) folded = FoldedCrc32(folded, data.data() + at, n);
      at += n;
    }
    ASSERT_EQ(crc, whole) << "trial " << trial;
    if (FoldingSupported()) {
      ASSERT_EQ(folded, whole) << "trial " << trial;
    }
  }
}

TEST(Crc32Test, DispatchedCrc32EqualsZlib) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const size_t n = rng() % 70000;
    const std::vector<unsigned char> data = RandomBytes(n, rng());
    ASSERT_EQ(Crc32(7, data.data(), n), ZlibCrc32(7, data.data(), n)) << "length " << n;
  }
}

}  // namespace
}  // namespace crc32_test_internal
}  // namespace asyncps
