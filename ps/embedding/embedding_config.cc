#include "ps/embedding/embedding_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace asyncps::ps {

const char* EmbeddingInitializerKindName(EmbeddingInitializer::Kind kind) {
  switch (kind) {
    case EmbeddingInitializer::Kind::kZeros:
      return "zeros";
    case EmbeddingInitializer::Kind::kConstant:
      return "constant";
    case EmbeddingInitializer::Kind::kUniform:
      return "uniform";
    case EmbeddingInitializer::Kind::kNormal:
      return "normal";
    case EmbeddingInitializer::Kind::kTruncatedNormal:
      return "truncated_normal";
  }
  return "?";
}

absl::Status ParseEmbeddingInitializerKind(const std::string& name, EmbeddingInitializer::Kind* kind) {
  for (auto k : {EmbeddingInitializer::Kind::kZeros, EmbeddingInitializer::Kind::kConstant,
                 EmbeddingInitializer::Kind::kUniform, EmbeddingInitializer::Kind::kNormal,
                 EmbeddingInitializer::Kind::kTruncatedNormal}) {
    if (name == EmbeddingInitializerKindName(k)) {
      *kind = k;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown embedding initializer '", name,
                                                 "' (zeros, constant, uniform, normal, truncated_normal)"));
}

absl::Status ValidateEmbeddingTableConfig(const EmbeddingTableConfig& c) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("embedding table '", c.name, "': ", parts...));
  };
  if (c.name.empty()) return absl::InvalidArgumentError("embedding table name is empty");
  if (c.dim < 1 || c.dim > kMaxEmbeddingDim) {
    return bad("dim ", c.dim, " is outside 1..", kMaxEmbeddingDim);
  }
  if (c.dtype != DType::kF32) return bad("dtype ", DTypeName(c.dtype), " is not supported; tables are f32");
  const EmbeddingInitializer& i = c.initializer;
  if (!std::isfinite(i.value) || !std::isfinite(i.minval) || !std::isfinite(i.maxval) || !std::isfinite(i.mean) ||
      !std::isfinite(i.stddev)) {
    return bad("initializer parameters must be finite");
  }
  if (i.kind == EmbeddingInitializer::Kind::kUniform && !(i.minval <= i.maxval)) {
    return bad("uniform initializer has minval ", i.minval, " > maxval ", i.maxval);
  }
  if (i.stddev < 0) return bad("initializer stddev ", i.stddev, " is negative");
  const EmbeddingAdmission& a = c.admission;
  if (!(a.probability >= 0.0f && a.probability <= 1.0f)) {
    return bad("admission probability ", a.probability, " is outside [0, 1]");
  }
  if (a.sketch_width > (uint32_t{1} << 26)) return bad("sketch width ", a.sketch_width, " is above 2^26");
  if (c.ttl_steps < 0) return bad("ttl_steps ", c.ttl_steps, " is negative");
  return absl::OkStatus();
}

}  // namespace asyncps::ps
