#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_INITIALIZER_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_INITIALIZER_H_

#include <cstdint>

#include "ps/embedding/embedding_config.h"

namespace asyncps::ps {

// Writes the initial row of `key` (`dim` floats) to `out`: a pure function of (initializer,
// key, element index), with no state and no dependence on the table's history, so every PS,
// every re-creation after eviction and every restore computes the same bits. Counter-based,
// from a SplitMix64 row seed of (seed, key): uniforms are a 32-bit MurmurHash3 finaliser of
// (row seed, element) cut to 24 bits; normals come from Box-Muller over SplitMix64 hashes of
// (row seed, pair index); truncated normals redraw (with further counters) outside 2 stddev
// as TF does. Any thread.
void EmbeddingInitialValue(const EmbeddingInitializer& init, int64_t key, int64_t dim, float* out);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_INITIALIZER_H_
