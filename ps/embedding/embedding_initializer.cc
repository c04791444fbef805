#include "ps/embedding/embedding_initializer.h"

#include <cmath>

#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace {

// 24-bit uniform in [0, 1) from 32 bits.
inline float Unit(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// MurmurHash3's 32-bit finaliser.
inline uint32_t Fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

// The hash of counter `c` of a row: keyed by seed and key, distinct per counter.
inline uint64_t RowHash(uint64_t row_seed, uint64_t c) { return MixKey(row_seed + c * 0xd1b54a32d192ed03ULL); }

// One standard normal pair from counter `c` (Box-Muller; u1 is kept away from 0).
inline void NormalPair(uint64_t row_seed, uint64_t c, float* z0, float* z1) {
  const uint64_t h = RowHash(row_seed, c);
  const double u1 = (static_cast<double>(static_cast<uint32_t>(h >> 32) >> 8) + 0.5) / 16777216.0;
  const double u2 = Unit(static_cast<uint32_t>(h));
  const double r = std::sqrt(-2.0 * std::log(u1));
  *z0 = static_cast<float>(r * std::cos(2.0 * M_PI * u2));
  *z1 = static_cast<float>(r * std::sin(2.0 * M_PI * u2));
}

}  // namespace

void EmbeddingInitialValue(const EmbeddingInitializer& init, int64_t key, int64_t dim, float* out) {
  const uint64_t row_seed = MixKey(static_cast<uint64_t>(key) ^ MixKey(init.seed));
  switch (init.kind) {
    case EmbeddingInitializer::Kind::kZeros:
      for (int64_t i = 0; i < dim; ++i) out[i] = 0.0f;
      return;
    case EmbeddingInitializer::Kind::kConstant:
      for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<float>(init.value);
      return;
    case EmbeddingInitializer::Kind::kUniform: {
      // The hot case (half the keys of a training lookup may have no row): 32-bit
      // MurmurHash3 finalisers of (row seed, element), in blocks of 8 the compiler vectorises.
      const float lo = static_cast<float>(init.minval);
      const float span = static_cast<float>(init.maxval - init.minval);
      const uint32_t s0 = static_cast<uint32_t>(row_seed), s1 = static_cast<uint32_t>(row_seed >> 32);
      auto value = [&](uint32_t i) { return lo + span * Unit(Fmix32((s0 + i * 0x9e3779b9u) ^ s1)); };
      int64_t i = 0;
      for (; i + 8 <= dim; i += 8) {
        for (uint32_t j = 0; j < 8; ++j) out[i + j] = value(static_cast<uint32_t>(i) + j);
      }
      for (; i < dim; ++i) out[i] = value(static_cast<uint32_t>(i));
      return;
    }
    case EmbeddingInitializer::Kind::kNormal: {
      const float mean = static_cast<float>(init.mean);
      const float sd = static_cast<float>(init.stddev);
      for (int64_t i = 0; i < dim; i += 2) {
        float z0, z1;
        NormalPair(row_seed, static_cast<uint64_t>(i / 2), &z0, &z1);
        out[i] = mean + sd * z0;
        if (i + 1 < dim) out[i + 1] = mean + sd * z1;
      }
      return;
    }
    case EmbeddingInitializer::Kind::kTruncatedNormal: {
      const float mean = static_cast<float>(init.mean);
      const float sd = static_cast<float>(init.stddev);
      // Counters past the row's pairs feed the redraws: c = dim + k for the k-th redraw.
      uint64_t next = static_cast<uint64_t>(dim);
      for (int64_t i = 0; i < dim; i += 2) {
        float z[2];
        NormalPair(row_seed, static_cast<uint64_t>(i / 2), &z[0], &z[1]);
        for (float& v : z) {
          while (std::fabs(v) > 2.0f) {
            float a, b;
            NormalPair(row_seed, next++, &a, &b);
            v = std::fabs(a) <= 2.0f ? a : b;
          }
        }
        out[i] = mean + sd * z[0];
        if (i + 1 < dim) out[i + 1] = mean + sd * z[1];
      }
      return;
    }
  }
}

}  // namespace asyncps::ps
