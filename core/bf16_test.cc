#include "core/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace asyncps {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The value of bf16 bits as a double, with the exponent pattern 0xff read as one more binade
// (2^128): the point past the largest finite bf16 that rounding compares against.
double Bf16Value(uint32_t upper) {
  if ((upper & 0x7f80u) == 0x7f80u) return (upper & 0x8000u) ? -std::ldexp(1.0, 128) : std::ldexp(1.0, 128);
  return static_cast<double>(FromBits(upper << 16));
}

// IEEE round to nearest, ties to even, computed by comparing distances in double (another way
// than the bit arithmetic under test).
uint16_t ReferenceNarrow(float f) {
  const uint32_t bits = Bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  if (std::isinf(f)) return static_cast<uint16_t>(bits >> 16);
  const uint32_t lo = bits >> 16;  // truncation: toward zero
  const uint32_t hi = lo + 1;      // the next bf16 away from zero (same sign)
  const double x = f, dlo = std::fabs(x - Bf16Value(lo)), dhi = std::fabs(Bf16Value(hi) - x);
  if (dlo < dhi) return static_cast<uint16_t>(lo);
  if (dhi < dlo) return static_cast<uint16_t>(hi);
  return static_cast<uint16_t>((lo & 1u) == 0 ? lo : hi);
}

TEST(Bf16Test, EdgeCases) {
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // Ties: exactly half way goes to the even neighbour, in both directions.
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000u)), 0x3f80) << "tie, even below";
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000u)), 0x3f82) << "tie, odd below: up";
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001u)), 0x3f81) << "just over half: up";
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fffu)), 0x3f80) << "just under half: down";
  // The largest finite f32 is past the largest bf16 plus half its last place: Inf.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max()), 0xff80);
  // Just under that half point stays the largest finite bf16.
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f8000u)), 0x7f80) << "tie at the top rounds to even: Inf";
  // Subnormals round like any value; the smallest ones round to zero or up.
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001u)), 0x0000);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000) << "tie at zero: even";
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(FloatToBf16(FromBits(0x007fffffu)), 0x0080) << "largest subnormal rounds to the smallest normal";
  // NaN stays NaN, quiet, sign kept, even when its payload is only in the low 16 bits.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffc0ffffu}) {
    const uint16_t b = FloatToBf16(FromBits(nan));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(b))) << std::hex << nan;
    EXPECT_NE(b & 0x40, 0) << "quiet";
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << "sign";
  }
}

TEST(Bf16Test, WidenIsExactAndNarrowsBack) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    EXPECT_EQ(Bits(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), b) << std::hex << b;
    }
  }
}

// Every upper half (so every sign, exponent and mantissa parity, NaN and Inf) with the low
// halves where rounding decides: zero, one, just under, at and over the tie, all ones, and a
// few random ones. Scalar and vector forms against the reference, and against each other.
TEST(Bf16Test, MatchesReferenceRounding) {
  std::vector<float> in;
  std::mt19937 rng(7);
  for (uint32_t upper = 0; upper <= 0xffff; ++upper) {
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, static_cast<uint32_t>(rng() & 0xffffu), static_cast<uint32_t>(rng() & 0xffffu)}) {
      in.push_back(FromBits(upper << 16 | low));
    }
  }
  std::vector<uint16_t> out(in.size());
  NarrowToBf16(in.data(), out.data(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t expected = ReferenceNarrow(in[i]);
    ASSERT_EQ(FloatToBf16(in[i]), expected) << std::hex << Bits(in[i]);
    ASSERT_EQ(out[i], expected) << std::hex << Bits(in[i]);
  }
  std::vector<float> back(out.size());
  WidenFromBf16(out.data(), back.data(), out.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(Bits(back[i]), static_cast<uint32_t>(out[i]) << 16);
  // Every body this CPU can run (not only the one it picks) gives the same bits.
  ASSERT_GE(bf16_internal::NumNarrowBodies(), 1u);
  for (size_t body = 0; body < bf16_internal::NumNarrowBodies(); ++body) {
    std::vector<uint16_t> other(in.size());
    bf16_internal::NarrowWithBody(body, in.data(), other.data(), in.size());
    ASSERT_EQ(other, out) << "narrowing body " << body;
  }
  for (size_t body = 0; body < bf16_internal::NumWidenBodies(); ++body) {
    std::vector<float> other(out.size());
    bf16_internal::WidenWithBody(body, out.data(), other.data(), out.size());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(Bits(other[i]), Bits(back[i])) << "widening body " << body;
  }
}

// Lengths around the vector widths: the scalar tails agree with the vector bodies.
TEST(Bf16Test, EveryLengthAndOffset) {
  std::vector<float> in(100);
  for (size_t i = 0; i < in.size(); ++i) in[i] = FromBits(0x3f800000u + static_cast<uint32_t>(i) * 0x3333u);
  for (size_t offset = 0; offset < 3; ++offset) {
    for (size_t n = 0; n + offset <= in.size(); ++n) {
      std::vector<uint16_t> out(n + 1, 0xabcd);
      NarrowToBf16(in.data() + offset, out.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], FloatToBf16(in[offset + i])) << n << " " << i;
      EXPECT_EQ(out[n], 0xabcd) << "wrote past the end";
      std::vector<float> back(n + 1, 42.0f);
      WidenFromBf16(out.data(), back.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], Bf16ToFloat(out[i]));
      EXPECT_EQ(back[n], 42.0f);
    }
  }
}

}  // namespace
}  // namespace asyncps
