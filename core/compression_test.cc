#include "core/compression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.h"

namespace asyncps {
namespace {

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(CompressionTest, ParsesAndNames) {
  for (const char* text : {"none", "bf16", "int8", "topk:0.01", "topk:0.5", "topk:1"}) {
    absl::StatusOr<Compression> c = ParseCompression(text);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status();
    EXPECT_EQ(CompressionName(*c), text);
  }
  EXPECT_EQ(ParseCompression("topk")->topk_fraction, 0.01);
  for (const char* bad : {"", "fp16", "topk:0", "topk:1.5", "topk:-0.1", "topk:x", "int4"}) {
    EXPECT_EQ(ParseCompression(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Decoded + residual gives back the input (to f32 rounding), and each decoded value is within
// half a step (scale / 2) of the input: the quantizer rounds to nearest.
TEST(CompressionTest, Int8RoundTripKeepsWhatItLosesInTheResidual) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{10000}}) {
    const std::vector<float> input = RandomFloats(n, 7);
    std::vector<float> residual = input;
    std::vector<uint8_t> payload(Int8EncodedBytes(n));
    EncodeInt8InPlace(residual.data(), n, payload.data());
    std::vector<float> decoded(n, -1.0f);
    ASSERT_TRUE(DecodeInt8(payload.data(), payload.size(), n, decoded.data()).ok());
    for (size_t i = 0; i < n; ++i) {
      const size_t block = i / kInt8BlockSize;
      float scale;
      std::memcpy(&scale, payload.data() + block * 4, 4);
      EXPECT_LE(std::fabs(decoded[i] - input[i]), scale / 2 * 1.0001f) << i;
      EXPECT_FLOAT_EQ(decoded[i] + residual[i], input[i]) << i;
    }
  }
}

// The one-pass encoder of error feedback gives, bit for bit, the bytes and residual of adding
// the residual held into the gradient and encoding in place, and leaves what it reads as it is.
TEST(CompressionTest, Int8WithFeedbackIsAddThenEncodeInPlace) {
  for (size_t n : {size_t{1}, size_t{255}, size_t{257}, size_t{10000}}) {
    const std::vector<float> gradient = RandomFloats(n, 11), held = RandomFloats(n, 12);
    std::vector<float> sum(n);
    for (size_t i = 0; i < n; ++i) sum[i] = held[i] + gradient[i];
    std::vector<uint8_t> expected(Int8EncodedBytes(n));
    EncodeInt8InPlace(sum.data(), n, expected.data());
    for (const bool with_held : {true, false}) {
      std::vector<float> g = gradient, h = held, residual(n, 7.0f);
      std::vector<uint8_t> payload(Int8EncodedBytes(n));
      EncodeInt8WithFeedback(g.data(), with_held ? h.data() : nullptr, n, payload.data(), residual.data());
      EXPECT_EQ(g, gradient);
      EXPECT_EQ(h, held);
      if (with_held) {
        EXPECT_EQ(payload, expected) << n;
        EXPECT_EQ(0, std::memcmp(residual.data(), sum.data(), n * sizeof(float))) << n;
      } else {
        std::vector<float> alone = gradient;
        std::vector<uint8_t> alone_payload(Int8EncodedBytes(n));
        EncodeInt8InPlace(alone.data(), n, alone_payload.data());
        EXPECT_EQ(payload, alone_payload) << n;
        EXPECT_EQ(0, std::memcmp(residual.data(), alone.data(), n * sizeof(float))) << n;
      }
    }
  }
}

TEST(CompressionTest, Int8BlockWithInfDecodesToNan) {
  std::vector<float> v(300, 1.0f);
  v[3] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> payload(Int8EncodedBytes(v.size()));
  EncodeInt8InPlace(v.data(), v.size(), payload.data());
  std::vector<float> decoded(v.size());
  ASSERT_TRUE(DecodeInt8(payload.data(), payload.size(), v.size(), decoded.data()).ok());
  EXPECT_TRUE(std::isnan(decoded[0]));         // the poisoned block
  EXPECT_FLOAT_EQ(decoded[299], 1.0f);         // the next block is exact (1.0 = 127 * 1/127)
}

TEST(CompressionTest, Int8RefusesAPayloadOfTheWrongSize) {
  std::vector<uint8_t> payload(Int8EncodedBytes(100) + 1);
  std::vector<float> out(100, 5.0f);
  EXPECT_EQ(DecodeInt8(payload.data(), payload.size(), 100, out.data()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeInt8(payload.data(), payload.size() - 2, 100, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out[0], 5.0f) << "nothing written";
}

// The k largest magnitudes are sent exactly and zeroed in the residual; the others stay there.
TEST(CompressionTest, TopKSendsTheLargestExactly) {
  for (size_t n : {size_t{1}, size_t{10}, size_t{1000}, size_t{100000}}) {
    for (double fraction : {0.01, 0.1, 1.0}) {
      const std::vector<float> input = RandomFloats(n, 11);
      std::vector<float> residual = input;
      const size_t k = TopKCount(n, fraction);
      std::vector<uint8_t> payload(TopKEncodedBytes(k));
      ASSERT_EQ(EncodeTopKInPlace(residual.data(), n, fraction, payload.data()), k);
      std::vector<float> decoded(n, -1.0f);
      ASSERT_TRUE(DecodeTopK(payload.data(), payload.size(), n, decoded.data()).ok());
      float smallest_sent = std::numeric_limits<float>::infinity(), largest_kept = 0;
      size_t sent = 0;
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(decoded[i] + residual[i], input[i]) << i;  // exact: one of them is 0
        if (decoded[i] != 0) {
          ++sent;
          EXPECT_EQ(residual[i], 0.0f);
          smallest_sent = std::min(smallest_sent, std::fabs(decoded[i]));
        } else {
          largest_kept = std::max(largest_kept, std::fabs(residual[i]));
        }
      }
      EXPECT_EQ(sent, k) << n << " " << fraction;
      EXPECT_LE(largest_kept, smallest_sent) << n << " " << fraction;
    }
  }
}

TEST(CompressionTest, TopKSendsNanSoThePsRefusesIt) {
  std::vector<float> v = RandomFloats(50000, 3);
  v[12345] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> payload(TopKEncodedBytes(TopKCount(v.size(), 0.001)));
  EncodeTopKInPlace(v.data(), v.size(), 0.001, payload.data());
  std::vector<float> decoded(v.size());
  ASSERT_TRUE(DecodeTopK(payload.data(), payload.size(), v.size(), decoded.data()).ok());
  EXPECT_TRUE(std::isnan(decoded[12345]));
}

std::vector<uint8_t> TopKPayload(const std::vector<uint32_t>& indices) {
  std::vector<uint8_t> payload(indices.size() * 8);
  for (size_t j = 0; j < indices.size(); ++j) {
    std::memcpy(payload.data() + 4 * j, &indices[j], 4);
    const float value = 1.0f;
    std::memcpy(payload.data() + 4 * indices.size() + 4 * j, &value, 4);
  }
  return payload;
}

TEST(CompressionTest, TopKRefusesBadPayloadsBeforeWriting) {
  std::vector<float> out(10, 5.0f);
  auto decode = [&](const std::vector<uint8_t>& p) { return DecodeTopK(p.data(), p.size(), out.size(), out.data()); };
  EXPECT_TRUE(decode(TopKPayload({0, 3, 9})).ok());
  std::fill(out.begin(), out.end(), 5.0f);
  EXPECT_EQ(decode(TopKPayload({0, 10})).code(), absl::StatusCode::kInvalidArgument) << "out of range";
  EXPECT_EQ(decode(TopKPayload({3, 3})).code(), absl::StatusCode::kInvalidArgument) << "duplicate";
  EXPECT_EQ(decode(TopKPayload({4, 3})).code(), absl::StatusCode::kInvalidArgument) << "not increasing";
  EXPECT_EQ(decode(TopKPayload({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})).code(), absl::StatusCode::kInvalidArgument)
      << "more pairs than elements";
  std::vector<uint8_t> ragged = TopKPayload({1});
  ragged.push_back(0);
  EXPECT_EQ(decode(ragged).code(), absl::StatusCode::kInvalidArgument) << "not whole pairs";
  for (float v : out) EXPECT_EQ(v, 5.0f) << "a refused payload writes nothing";
}

TEST(CompressionTest, Bf16KeepsItsRoundingInTheResidual) {
  const std::vector<float> input = RandomFloats(1000, 5);
  std::vector<float> residual = input;
  std::vector<uint16_t> out(input.size());
  EncodeBf16InPlace(residual.data(), input.size(), out.data());
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_FLOAT_EQ(Bf16ToFloat(out[i]) + residual[i], input[i]);
    EXPECT_LE(std::fabs(residual[i]), std::fabs(input[i]) / 128);
  }
}

TEST(CompressionTest, EncodedBytes) {
  EXPECT_EQ(EncodedBytes({CompressionKind::kNone}, 1000), 4000u);
  EXPECT_EQ(EncodedBytes({CompressionKind::kBf16}, 1000), 2000u);
  EXPECT_EQ(EncodedBytes({CompressionKind::kInt8}, 1000), 1000u + 4 * 4);
  EXPECT_EQ(EncodedBytes({CompressionKind::kTopK, 0.01}, 1000), 80u);
}

}  // namespace
}  // namespace asyncps
