#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_CONFIG_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/optimizer_config.h"

namespace asyncps::ps {

// Plain-data description of an embedding table, what ps.CreateEmbeddingTable carries (see
// ps/embedding/embedding.capnp for the wire form and embedding_wire.h for the conversions).

// The largest row a table accepts, in floats: beyond it a "dim" is a mistake, not a model.
inline constexpr int64_t kMaxEmbeddingDim = 65536;

// A key's initial row: a pure function of (seed, key, element), the same on every PS and every
// time the row is created (EmbeddingInitialValue in embedding_initializer.h).
struct EmbeddingInitializer {
  enum class Kind : uint8_t { kZeros, kConstant, kUniform, kNormal, kTruncatedNormal };
  Kind kind = Kind::kUniform;
  double value = 0.0;    // kConstant
  double minval = -0.05;  // kUniform (Keras' RandomUniform defaults)
  double maxval = 0.05;
  double mean = 0.0;     // kNormal, kTruncatedNormal (cut at 2 stddev)
  double stddev = 0.05;
  uint64_t seed = 0;
};

// Wire names: "zeros", "constant", "uniform", "normal", "truncated_normal".
const char* EmbeddingInitializerKindName(EmbeddingInitializer::Kind kind);
// InvalidArgument naming the accepted names for anything else.
absl::Status ParseEmbeddingInitializerKind(const std::string& name, EmbeddingInitializer::Kind* kind);

// When a key gets a row (see EmbeddingTable): after `min_count` training lookups counted in a
// count-min sketch of `sketch_width` x 4 16-bit counters, and/or by chance `probability` per
// counted lookup. min_count <= 1 and probability == 0: every key is admitted at its first push.
struct EmbeddingAdmission {
  static constexpr uint32_t kDefaultSketchWidth = 1 << 18;  // 2 MiB per table
  uint32_t min_count = 0;
  float probability = 0.0f;
  uint32_t sketch_width = 0;  // 0: kDefaultSketchWidth
};

struct EmbeddingTableConfig {
  std::string name;
  int64_t dim = 0;
  DType dtype = DType::kF32;
  EmbeddingInitializer initializer;
  OptimizerConfig optimizer;  // every table has one (default: SGD 0.01)
  EmbeddingAdmission admission;
  int64_t ttl_steps = 0;          // 0: no TTL eviction
  uint64_t memory_cap_bytes = 0;  // 0: no cap
};

// InvalidArgument naming the table for: an empty name, dim outside 1..kMaxEmbeddingDim, a dtype
// other than f32, a non-finite or inverted initializer range, a negative stddev, probability
// outside [0, 1], negative ttl_steps, a sketch width above 2^26. (The optimizer's
// hyper-parameters are validated by UpdateRule::Create.)
absl::Status ValidateEmbeddingTableConfig(const EmbeddingTableConfig& config);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_CONFIG_H_
