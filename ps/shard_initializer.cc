#include "ps/shard_initializer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace asyncps::ps {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// splitmix64's output function: a bijective mix of 64 bits.
uint64_t Mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The random numbers of one element: a splitmix64 stream whose start is a hash of (seed,
// global element index). Starting a stream costs one multiply-xorshift, so the cost of a fill
// follows the number of elements (not rows), and an element's value depends only on the seed
// and its position in the whole variable, never on how the variable is sharded.
class ElementStream {
 public:
  ElementStream(uint64_t key, uint64_t index) : state_(Mix64(key ^ Mix64(index * kGolden + kGolden))) {}

  uint64_t Next() {
    state_ += kGolden;
    return Mix64(state_);
  }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Two independent standard normals by Marsaglia's polar method (no trigonometry, and
  // both values are used). v1, v2 step by 2^-52, so r2 >= 2^-104 and
  // |z| <= sqrt(-2 ln r2) <= sqrt(208 ln 2) < kMaxNormal.
  void NormalPair(double* z0, double* z1) {
    double v1, v2, r2;
    do {
      v1 = 2.0 * Uniform() - 1.0;
      v2 = 2.0 * Uniform() - 1.0;
      r2 = v1 * v1 + v2 * v2;
    } while (r2 >= 1.0 || r2 == 0.0);
    const double f = std::sqrt(-2.0 * std::log(r2) / r2);
    *z0 = v1 * f;
    *z1 = v2 * f;
  }

 private:
  uint64_t state_;
};

// Largest |z| ElementStream::NormalPair can return (12.01...), rounded up.
constexpr double kMaxNormal = 12.5;

// Keras fan computation: fan_in/fan_out of the whole variable.
void Fans(const Shape& shape, double* fan_in, double* fan_out) {
  if (shape.empty()) {
    *fan_in = *fan_out = 1;
  } else if (shape.size() == 1) {
    *fan_in = *fan_out = static_cast<double>(shape[0]);
  } else if (shape.size() == 2) {
    *fan_in = static_cast<double>(shape[0]);
    *fan_out = static_cast<double>(shape[1]);
  } else {
    double receptive = 1;
    for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
    *fan_in = static_cast<double>(shape[shape.size() - 2]) * receptive;
    *fan_out = static_cast<double>(shape.back()) * receptive;
  }
}

// Fills `n` elements whose first has global index `first`: data[i] = draw(stream of first+i).
template <typename T, typename Draw>
void FillElements(uint64_t key, uint64_t first, T* data, int64_t n, Draw draw) {
  for (int64_t i = 0; i < n; ++i) {
    ElementStream stream(key, first + static_cast<uint64_t>(i));
    data[i] = draw(stream);
  }
}

// Normal values for elements [first, first + n): global elements 2k and 2k + 1 share the
// stream of pair k, element 2k taking the first of each polar pair and 2k + 1 the second. With
// `truncated` (TF's truncated normal), an element's draws beyond two standard deviations are
// dropped and it takes its next one (about 4.6% are redrawn), not clipped. An element's value
// depends only on its own half of its pair's stream, so it is the same whether or not its
// partner is in the shard, and the two are independent.
template <typename T>
void FillNormal(uint64_t key, uint64_t first, T* data, int64_t n, double mean, double stddev, bool truncated) {
  const uint64_t end = first + static_cast<uint64_t>(n);
  for (uint64_t pair = first / 2; pair * 2 < end; ++pair) {
    ElementStream stream(key, pair);
    const uint64_t element[2] = {2 * pair, 2 * pair + 1};
    bool need[2] = {element[0] >= first, element[1] < end};
    double z[2];
    while (need[0] || need[1]) {
      stream.NormalPair(&z[0], &z[1]);
      for (int i = 0; i < 2; ++i) {
        if (need[i] && (!truncated || std::fabs(z[i]) <= 2.0)) {
          data[element[i] - first] = static_cast<T>(mean + stddev * z[i]);
          need[i] = false;
        }
      }
    }
  }
}

// The largest magnitude T can hold, as a double.
template <typename T>
double MaxOf() {
  return static_cast<double>(std::numeric_limits<T>::max());
}

// The range of a uniform-like initializer: [minval, maxval), or glorot's +-limit from the
// whole variable's fans.
void UniformRange(const InitializerSpec& spec, const Shape& full_shape, double* lo, double* hi) {
  *lo = spec.minval;
  *hi = spec.maxval;
  if (spec.kind == "glorot_uniform") {
    double fan_in, fan_out;
    Fans(full_shape, &fan_in, &fan_out);
    const double limit = std::sqrt(6.0 / std::max(1.0, fan_in + fan_out));
    *lo = -limit;
    *hi = limit;
  }
}

bool IsNormal(const std::string& kind) { return kind == "normal" || kind == "truncated_normal"; }

// Every value a random initializer can produce must be representable in `dtype`: converting a
// double beyond float's range to float is undefined behaviour, and an infinite width would
// turn uniform draws into NaN.
absl::Status CheckRandomRange(const InitializerSpec& spec, DType dtype, const Shape& full_shape) {
  const double max = dtype == DType::kF32 ? MaxOf<float>() : MaxOf<double>();
  if (IsNormal(spec.kind)) {
    const double reach = spec.kind == "truncated_normal" ? 2.0 : kMaxNormal;
    if (!(std::fabs(spec.mean) + reach * spec.stddev <= max)) {
      return absl::InvalidArgumentError(absl::StrCat("initializer '", spec.kind, "' with mean ", spec.mean,
                                                     " and stddev ", spec.stddev, " exceeds the range of ",
                                                     DTypeName(dtype)));
    }
    return absl::OkStatus();
  }
  double lo, hi;
  UniformRange(spec, full_shape, &lo, &hi);
  if (!(std::fabs(lo) <= max && std::fabs(hi) <= max && std::isfinite(hi - lo))) {
    return absl::InvalidArgumentError(absl::StrCat("initializer '", spec.kind, "' range [", lo, ", ", hi,
                                                   ") exceeds the range of ", DTypeName(dtype)));
  }
  return absl::OkStatus();
}

// Fills `out`, whose first element has global index `first`. CheckRandomRange passed.
template <typename T>
void FillRandom(const InitializerSpec& spec, const Shape& full_shape, uint64_t first, Tensor& out) {
  T* data = out.data<T>();
  const int64_t n = out.num_elements();
  const uint64_t key = Mix64(spec.seed + kGolden);
  if (IsNormal(spec.kind)) {
    FillNormal(key, first, data, n, spec.mean, spec.stddev, spec.kind == "truncated_normal");
    return;
  }
  double lo, hi;
  UniformRange(spec, full_shape, &lo, &hi);
  // Rounding a draw just below maxval to T can reach maxval; keep the range half-open.
  const T t_lo = static_cast<T>(lo), t_hi = static_cast<T>(hi);
  const T below_hi = t_lo < t_hi ? std::nextafter(t_hi, t_lo) : t_hi;
  const double width = hi - lo;
  FillElements(key, first, data, n, [lo, width, t_hi, below_hi](ElementStream& s) {
    const T x = static_cast<T>(lo + width * s.Uniform());
    return x >= t_hi ? below_hi : x;
  });
}

// `value` converted to T, or InvalidArgument when T cannot hold it exactly (integers) or at
// all (a finite value beyond float's range).
template <typename T>
absl::StatusOr<T> ConstantAs(double value, DType dtype) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isfinite(value) && std::fabs(value) > MaxOf<T>()) {
      return absl::InvalidArgumentError(
          absl::StrCat("constant ", value, " is out of the range of ", DTypeName(dtype)));
    }
    return static_cast<T>(value);
  } else {
    // Both bounds are exact doubles (-2^63 and 2^63 for i64), so the comparison is exact; the
    // upper one is exclusive because max() + 1 is the power of two a double can hold.
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = dtype == DType::kBool ? 2.0 : static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
    if (!std::isfinite(value) || value != std::trunc(value) || value < lo || value >= hi) {
      return absl::InvalidArgumentError(absl::StrCat("constant ", value, " is not a value of ",
                                                     DTypeName(dtype)));
    }
    return static_cast<T>(value);
  }
}

template <typename T>
absl::Status FillConstant(double value, Tensor& out) {
  auto v = ConstantAs<T>(value, out.dtype());
  if (!v.ok()) return v.status();
  std::fill_n(out.data<T>(), out.num_elements(), *v);
  return absl::OkStatus();
}

absl::Status FillConstantAny(double value, Tensor& out) {
  switch (out.dtype()) {
    case DType::kF32:
      return FillConstant<float>(value, out);
    case DType::kF64:
      return FillConstant<double>(value, out);
    case DType::kI32:
      return FillConstant<int32_t>(value, out);
    case DType::kI64:
      return FillConstant<int64_t>(value, out);
    case DType::kU8:
    case DType::kBool:
      return FillConstant<uint8_t>(value, out);
  }
  return absl::InvalidArgumentError("invalid dtype");
}

absl::Status CheckConstant(double value, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ConstantAs<float>(value, dtype).status();
    case DType::kF64:
      return ConstantAs<double>(value, dtype).status();
    case DType::kI32:
      return ConstantAs<int32_t>(value, dtype).status();
    case DType::kI64:
      return ConstantAs<int64_t>(value, dtype).status();
    case DType::kU8:
    case DType::kBool:
      return ConstantAs<uint8_t>(value, dtype).status();
  }
  return absl::InvalidArgumentError("invalid dtype");
}

// Checks where the shard lies in the whole variable and returns the global index of its first
// element.
absl::StatusOr<uint64_t> FirstElement(const InitializerSpec& spec, DType dtype, const Shape& shard_shape) {
  if (spec.row_offset < 0) return absl::InvalidArgumentError("negative initializer row offset");
  if (spec.full_shape.empty()) {
    if (spec.row_offset != 0) {
      return absl::InvalidArgumentError("initializer row offset given without the full shape");
    }
    return 0;
  }
  const Shape& full = spec.full_shape;
  if (absl::Status s = ValidateShape(full, dtype); !s.ok()) return s;
  if (full.size() != shard_shape.size() || shard_shape.empty() ||
      !std::equal(full.begin() + 1, full.end(), shard_shape.begin() + 1) ||
      spec.row_offset > full[0] - shard_shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", ShapeString(shard_shape), " at row ", spec.row_offset,
                                                   " does not fit in the full shape ", ShapeString(full)));
  }
  // Fits: the whole variable's element count was validated above.
  return static_cast<uint64_t>(spec.row_offset) * static_cast<uint64_t>(NumElements({full.begin() + 1, full.end()}));
}

}  // namespace

absl::StatusOr<Tensor> Initialize(const InitializerSpec& spec, DType dtype, const Shape& shard_shape) {
  if (absl::Status s = ValidateShape(shard_shape, dtype); !s.ok()) return s;
  if (spec.kind == "tensor") {
    if (spec.tensor.dtype() != dtype || spec.tensor.shape() != shard_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "initial value is ", DTypeName(spec.tensor.dtype()), ShapeString(spec.tensor.shape()),
          ", variable is ", DTypeName(dtype), ShapeString(shard_shape)));
    }
    return spec.tensor.Clone();
  }
  const bool constant = spec.kind == "zeros" || spec.kind == "ones" || spec.kind == "constant";
  const bool random = spec.kind == "uniform" || spec.kind == "normal" || spec.kind == "truncated_normal" ||
                      spec.kind == "glorot_uniform";
  if (!constant && !random) return absl::InvalidArgumentError(absl::StrCat("unknown initializer '", spec.kind, "'"));
  if (random) {
    if (dtype != DType::kF32 && dtype != DType::kF64) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", spec.kind, "' needs a float dtype, not ", DTypeName(dtype)));
    }
    // Written so that NaN (possible from the wire) fails every comparison and is rejected.
    if (!(spec.stddev >= 0) || !(spec.minval <= spec.maxval) || !std::isfinite(spec.mean) ||
        !std::isfinite(spec.stddev) || !std::isfinite(spec.minval) || !std::isfinite(spec.maxval)) {
      return absl::InvalidArgumentError(absl::StrCat("bad parameters for initializer '", spec.kind, "'"));
    }
  }
  // Checked before allocating anything.
  if (spec.kind == "constant") {
    if (absl::Status s = CheckConstant(spec.value, dtype); !s.ok()) return s;
  }
  auto first = FirstElement(spec, dtype, shard_shape);
  if (!first.ok()) return first.status();
  const Shape& full = spec.full_shape.empty() ? shard_shape : spec.full_shape;
  if (random) {
    if (absl::Status s = CheckRandomRange(spec, dtype, full); !s.ok()) return s;
  }

  Tensor out(dtype, shard_shape);
  if (spec.kind == "zeros") return out;
  if (constant) {
    if (absl::Status s = FillConstantAny(spec.kind == "ones" ? 1.0 : spec.value, out); !s.ok()) return s;
    return out;
  }
  if (dtype == DType::kF32) {
    FillRandom<float>(spec, full, *first, out);
  } else {
    FillRandom<double>(spec, full, *first, out);
  }
  return out;
}

}  // namespace asyncps::ps
