#include "core/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/bf16.h"

namespace asyncps {

absl::StatusOr<Compression> ParseCompression(absl::string_view text) {
  Compression c;
  if (text == "none") return c;
  if (text == "bf16") {
    c.kind = CompressionKind::kBf16;
    return c;
  }
  if (text == "int8") {
    c.kind = CompressionKind::kInt8;
    return c;
  }
  if (text == "topk") {
    c.kind = CompressionKind::kTopK;
    return c;
  }
  if (absl::ConsumePrefix(&text, "topk:")) {
    double fraction = 0;
    if (absl::SimpleAtod(text, &fraction) && fraction > 0 && fraction <= 1) {
      c.kind = CompressionKind::kTopK;
      c.topk_fraction = fraction;
      return c;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("'topk:", text, "' needs a fraction in (0, 1], e.g. topk:0.01"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a compression (none, bf16, int8 or topk:FRACTION)"));
}

std::string CompressionName(const Compression& compression) {
  switch (compression.kind) {
    case CompressionKind::kNone:
      return "none";
    case CompressionKind::kBf16:
      return "bf16";
    case CompressionKind::kInt8:
      return "int8";
    case CompressionKind::kTopK:
      return absl::StrFormat("topk:%g", compression.topk_fraction);
  }
  return "none";
}

size_t Int8EncodedBytes(size_t n) {
  return (n + kInt8BlockSize - 1) / kInt8BlockSize * sizeof(float) + n;
}

namespace {

// The codec loops below are built twice on x86-64 with GCC, for AVX2 and for the baseline
// (SSE2), and the loader picks one for the CPU it runs on: SSE2 has no unsigned 32-bit max, no
// 8-lane float ops, and the encoder ran at 7% of the main job's CPU with int8 both ways.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define ASYNCPS_CODEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ASYNCPS_CODEC_CLONES
#endif

// One pass for every int8 encoder: each block of v = gradient + held (held may be null: v is
// the gradient) is encoded into `out`, and `residual` (may be null; may be `gradient` itself,
// never `held` unless that is `gradient` too) gets each value of v minus its decoded form. The
// block's v lives in a stack buffer, so error feedback reads the gradient and the residual held
// once and writes the new residual once.
ASYNCPS_CODEC_CLONES
void EncodeInt8Fused(const float* gradient, const float* held, size_t n, uint8_t* out, float* residual) {
  const size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
  int8_t* codes = reinterpret_cast<int8_t*>(out + blocks * sizeof(float));
  alignas(64) float v[kInt8BlockSize];
  for (size_t b = 0; b < blocks; ++b) {
    const size_t begin = b * kInt8BlockSize, len = std::min(n - begin, kInt8BlockSize);
    const float* g = gradient + begin;
    if (held != nullptr) {
      const float* h = held + begin;
      // h + g, as the residual store's own sums are formed (bit for bit the same either way).
      for (size_t i = 0; i < len; ++i) v[i] = h[i] + g[i];
    } else {
      std::memcpy(v, g, len * sizeof(float));
    }
    // The largest magnitude on the bits: without the sign, non-negative floats order as their
    // bits do, Inf and NaN above every finite value; an integer max GCC vectorises.
    uint32_t max_bits = 0;
    for (size_t i = 0; i < len; ++i) {
      uint32_t bits;
      std::memcpy(&bits, v + i, sizeof(bits));
      bits &= 0x7fffffffu;
      max_bits = bits > max_bits ? bits : max_bits;
    }
    const bool finite = max_bits < 0x7f800000u;
    float max_abs;
    std::memcpy(&max_abs, &max_bits, sizeof(max_abs));
    const float scale = !finite ? std::numeric_limits<float>::quiet_NaN() : max_abs / 127.0f;
    std::memcpy(out + b * sizeof(float), &scale, sizeof(scale));
    // 127 / max_abs overflows f32 for a tiny max_abs: such a block is scaled in double.
    const double wide_inverse = finite && max_abs > 0 ? 127.0 / max_abs : 0.0;
    const bool narrow = wide_inverse < 1e30;
    const float inverse = narrow ? static_cast<float>(wide_inverse) : 0.0f;
    // Round to nearest even by adding and subtracting 1.5 * 2^23 (exact for |x| <= 127), clamp
    // with min/max, truncate: plain arithmetic that GCC vectorises (nearbyint is a libm call
    // per value on x86-64 without SSE4.1).
    constexpr float kRound = 12582912.0f;
    int8_t* c = codes + begin;
    if (narrow) {
      for (size_t i = 0; i < len; ++i) {
        const float x = std::min(127.0f, std::max(-127.0f, (v[i] * inverse + kRound) - kRound));
        c[i] = static_cast<int8_t>(static_cast<int32_t>(x));
      }
    } else {
      for (size_t i = 0; i < len; ++i) {
        const float x = static_cast<float>(static_cast<double>(v[i]) * wide_inverse);
        c[i] = static_cast<int8_t>(static_cast<int32_t>(std::min(127.0f, std::max(-127.0f, (x + kRound) - kRound))));
      }
    }
    if (residual != nullptr) {
      // Exactly what DecodeInt8 computes, so the residual is what the PS did not get.
      float* r = residual + begin;
      for (size_t i = 0; i < len; ++i) r[i] = v[i] - static_cast<float>(c[i]) * scale;
    }
  }
}

}  // namespace

void EncodeInt8InPlace(float* values, size_t n, uint8_t* out) { EncodeInt8Fused(values, nullptr, n, out, values); }

void EncodeInt8(const float* in, size_t n, uint8_t* out) { EncodeInt8Fused(in, nullptr, n, out, nullptr); }

void EncodeInt8WithFeedback(const float* gradient, const float* held, size_t n, uint8_t* out, float* residual) {
  EncodeInt8Fused(gradient, held, n, out, residual);
}

namespace {

ASYNCPS_CODEC_CLONES
void DecodeInt8Blocks(const uint8_t* payload, size_t n, float* out) {
  const size_t blocks = (n + kInt8BlockSize - 1) / kInt8BlockSize;
  const int8_t* codes = reinterpret_cast<const int8_t*>(payload + blocks * sizeof(float));
  for (size_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, payload + b * sizeof(float), sizeof(scale));
    const size_t begin = b * kInt8BlockSize, end = std::min(n, begin + kInt8BlockSize);
    for (size_t i = begin; i < end; ++i) out[i] = static_cast<float>(codes[i]) * scale;
  }
}

}  // namespace

absl::Status DecodeInt8(const uint8_t* payload, size_t bytes, size_t n, float* out) {
  if (bytes != Int8EncodedBytes(n)) {
    return absl::InvalidArgumentError(absl::StrCat("int8 payload of ", n, " elements needs ", Int8EncodedBytes(n),
                                                   " bytes, it has ", bytes));
  }
  DecodeInt8Blocks(payload, n, out);
  return absl::OkStatus();
}

size_t TopKCount(size_t n, double fraction) {
  if (n == 0) return 0;
  const double k = std::ceil(static_cast<double>(n) * fraction);
  if (!(k >= 1)) return 1;
  return k >= static_cast<double>(n) ? n : static_cast<size_t>(k);
}

namespace {

// Magnitude for selection: NaN first, so that a non-finite gradient is sent and refused.
inline float Magnitude(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v);
}

}  // namespace

size_t EncodeTopKInPlace(float* values, size_t n, double fraction, uint8_t* out) {
  const size_t k = TopKCount(n, fraction);
  if (k == 0) return 0;
  std::vector<uint32_t> candidates;
  // A threshold from a strided sample keeps about 2k candidates in one pass, so the selection
  // below sorts thousands of elements rather than every one (the variable may hold millions).
  constexpr size_t kSample = 4096;
  if (n > 4 * kSample && k * 4 < n) {
    const size_t stride = n / kSample;
    std::vector<float> sample;
    sample.reserve(kSample + 1);
    for (size_t i = 0; i < n; i += stride) sample.push_back(Magnitude(values[i]));
    const double keep = std::min(1.0, 2.0 * static_cast<double>(k) / static_cast<double>(n));
    const size_t at = std::min(sample.size() - 1, static_cast<size_t>((1.0 - keep) * sample.size()));
    std::nth_element(sample.begin(), sample.begin() + at, sample.end());
    const float threshold = sample[at];
    candidates.reserve(3 * k);
    for (size_t i = 0; i < n; ++i) {
      if (Magnitude(values[i]) >= threshold) candidates.push_back(static_cast<uint32_t>(i));
    }
    if (candidates.size() < k) candidates.clear();  // the sample misjudged: select among all
  }
  if (candidates.empty()) {
    candidates.resize(n);
    for (size_t i = 0; i < n; ++i) candidates[i] = static_cast<uint32_t>(i);
  }
  if (candidates.size() > k) {
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(k - 1), candidates.end(),
                     [values](uint32_t a, uint32_t b) { return Magnitude(values[a]) > Magnitude(values[b]); });
    candidates.resize(k);
  }
  std::sort(candidates.begin(), candidates.end());
  uint8_t* value_bytes = out + k * sizeof(uint32_t);
  for (size_t j = 0; j < k; ++j) {
    const uint32_t index = candidates[j];
    std::memcpy(out + j * sizeof(uint32_t), &index, sizeof(index));
    std::memcpy(value_bytes + j * sizeof(float), &values[index], sizeof(float));
    values[index] = 0;  // sent exactly: nothing of it stays behind
  }
  return k;
}

absl::Status DecodeTopK(const uint8_t* payload, size_t bytes, size_t n, float* out) {
  constexpr size_t kPair = sizeof(uint32_t) + sizeof(float);
  if (bytes % kPair != 0) {
    return absl::InvalidArgumentError(absl::StrCat("top-k payload of ", bytes, " bytes is not a whole number of ",
                                                   kPair, "-byte (index, value) pairs"));
  }
  const size_t k = bytes / kPair;
  if (k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("top-k payload names ", k, " elements of a tensor of ", n));
  }
  // Every index is checked before any element is written: a bad payload leaves `out` as it was.
  uint32_t previous = 0;
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    std::memcpy(&index, payload + j * sizeof(uint32_t), sizeof(index));
    if (index >= n || (j > 0 && index <= previous)) {
      return absl::InvalidArgumentError(absl::StrCat("top-k payload: index ", index, " at position ", j,
                                                     index >= n ? absl::StrCat(" is out of range for ", n, " elements")
                                                                : absl::StrCat(" is not above the one before (", previous, ")")));
    }
    previous = index;
  }
  std::fill(out, out + n, 0.0f);
  const uint8_t* value_bytes = payload + k * sizeof(uint32_t);
  for (size_t j = 0; j < k; ++j) {
    uint32_t index;
    std::memcpy(&index, payload + j * sizeof(uint32_t), sizeof(index));
    std::memcpy(&out[index], value_bytes + j * sizeof(float), sizeof(float));
  }
  return absl::OkStatus();
}

void EncodeBf16InPlace(float* values, size_t n, uint16_t* out) {
  NarrowToBf16(values, out, n);
  for (size_t i = 0; i < n; ++i) values[i] -= Bf16ToFloat(out[i]);
}

absl::StatusOr<Compression> ParsePullCompression(absl::string_view text) {
  absl::StatusOr<Compression> c = ParseCompression(text);
  if (c.ok() && c->kind == CompressionKind::kTopK) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a pull form (none, bf16 or int8)"));
  }
  return c;
}

size_t EncodedBytes(const Compression& compression, size_t n) {
  switch (compression.kind) {
    case CompressionKind::kNone:
      return n * sizeof(float);
    case CompressionKind::kBf16:
      return n * sizeof(uint16_t);
    case CompressionKind::kInt8:
      return Int8EncodedBytes(n);
    case CompressionKind::kTopK:
      return TopKEncodedBytes(TopKCount(n, compression.topk_fraction));
  }
  return n * sizeof(float);
}

}  // namespace asyncps
