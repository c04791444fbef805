#include "data/crc32c.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

// RFC 3720 appendix B.4 and the common "123456789" check value.
TEST(Crc32cTest, StandardVectors) {
  std::vector<unsigned char> buf(32, 0);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x8A9136AAu);
  buf.assign(32, 0xFF);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(Crc32c(buf.data(), buf.size()), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

// The 8-byte main loop and the byte tail must agree at every split and alignment.
TEST(Crc32cTest, ExtendMatchesOneShotAtEverySplitAndOffset) {
  std::string data;
  for (int i = 0; i < 100; ++i) data.push_back(static_cast<char>(i * 37 + 11));
  // Bytewise reference: the plain bit-at-a-time definition.
  auto reference = [](const char* p, size_t n) {
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; ++i) {
      c ^= static_cast<unsigned char>(p[i]);
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0);
    }
    return ~c;
  };
  for (size_t offset = 0; offset < 9; ++offset) {
    const char* p = data.data() + offset;
    const size_t n = data.size() - offset;
    const uint32_t whole = Crc32c(p, n);
    ASSERT_EQ(whole, reference(p, n)) << "offset " << offset;
    for (size_t split = 0; split <= n; split += 7) {
      EXPECT_EQ(Crc32cExtend(Crc32c(p, split), p + split, n - split), whole)
          << "offset " << offset << " split " << split;
    }
  }
}

TEST(Crc32cTest, TFRecordMasking) {
  // Masking rotates right by 15 then adds 0xa282ead8; unmasking inverts it.
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  const uint32_t crc = Crc32c("123456789", 9);  // 0xE3069283
  EXPECT_EQ(MaskCrc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(crc), 0xC78AB0E5u);  // rotr15(0xE3069283) = 0x2507C60D
  for (uint32_t v : {0u, 1u, 0x8A9136AAu, 0xFFFFFFFFu, crc}) {
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(v)), v);
    EXPECT_NE(MaskCrc32c(v), v);
  }
}

}  // namespace
}  // namespace asyncps::data
