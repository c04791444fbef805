#include "ps/shard_initializer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace asyncps::ps {
namespace {

InitializerSpec Spec(const std::string& kind, uint64_t seed = 42) {
  InitializerSpec spec;
  spec.kind = kind;
  spec.seed = seed;
  return spec;
}

Tensor InitOrDie(const InitializerSpec& spec, DType dtype, const Shape& shape) {
  auto t = Initialize(spec, dtype, shape);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : Tensor();
}

// Element `i` of `t` as a double, whatever its numeric dtype.
double At(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF64:
      return t.data<double>()[i];
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kU8:
    case DType::kBool:
      return t.data<uint8_t>()[i];
  }
  return 0;
}

// Sample mean and standard deviation.
template <typename T>
void Moments(const Tensor& t, double* mean, double* stddev) {
  double sum = 0, sum_sq = 0;
  for (T x : t.flat<T>()) sum += x;
  const double n = static_cast<double>(t.num_elements());
  *mean = sum / n;
  for (T x : t.flat<T>()) sum_sq += (x - *mean) * (x - *mean);
  *stddev = std::sqrt(sum_sq / n);
}

TEST(InitializerTest, ZerosOnesAndConstantFillEveryDtype) {
  for (DType dtype : {DType::kF32, DType::kF64, DType::kI32, DType::kI64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const Tensor zeros = InitOrDie(Spec("zeros"), dtype, {3, 2});
    EXPECT_EQ(zeros.shape(), (Shape{3, 2}));
    EXPECT_EQ(zeros.dtype(), dtype);
    const Tensor ones = InitOrDie(Spec("ones"), dtype, {3, 2});
    InitializerSpec seven = Spec("constant");
    seven.value = 7;
    const Tensor sevens = InitOrDie(seven, dtype, {3, 2});
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(At(zeros, i), 0);
      EXPECT_EQ(At(ones, i), 1);
      EXPECT_EQ(At(sevens, i), 7);
    }
  }
  InitializerSpec half = Spec("constant");
  half.value = 0.5;
  const Tensor halves = InitOrDie(half, DType::kF32, {4});
  for (float x : halves.flat<float>()) EXPECT_EQ(x, 0.5f);
  // A scalar gets one value.
  EXPECT_EQ(InitOrDie(half, DType::kF64, {}).ScalarAsDouble(), 0.5);
}

TEST(InitializerTest, UniformStaysWithinRangeAndCoversIt) {
  InitializerSpec spec = Spec("uniform");
  spec.minval = -2;
  spec.maxval = 3;
  for (DType dtype : {DType::kF32, DType::kF64}) {
    SCOPED_TRACE(std::string(DTypeName(dtype)));
    const Tensor t = InitOrDie(spec, dtype, {1000, 10});
    double lo = 1e9, hi = -1e9;
    int outside = 0;
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const double x = At(t, i);
      outside += !(x >= -2 && x < 3);
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_EQ(outside, 0);
    // 10k samples over a width of 5: the extremes come within 0.01 of the bounds.
    EXPECT_LT(lo, -1.99);
    EXPECT_GT(hi, 2.99);
  }
}

TEST(InitializerTest, UniformF32NeverRoundsUpToMaxval) {
  // Every double in [1, 1 + 2^-23) rounds to one of two floats: 1 or 1 + 2^-23 (== maxval).
  // Half the draws would land on maxval if the rounding were not accounted for.
  InitializerSpec spec = Spec("uniform");
  spec.minval = 1;
  spec.maxval = 1 + std::ldexp(1.0, -23);
  const Tensor t = InitOrDie(spec, DType::kF32, {100, 10});
  const float maxval = static_cast<float>(spec.maxval);
  int at_or_above = 0;
  for (float x : t.flat<float>()) at_or_above += x >= maxval;
  EXPECT_EQ(at_or_above, 0);
}

TEST(InitializerTest, NormalHasTheRequestedMoments) {
  InitializerSpec spec = Spec("normal", 7);
  spec.mean = 1.5;
  spec.stddev = 2;
  double mean, stddev;
  // 100k samples: the standard error of the mean is 0.006, of the stddev 0.0045.
  Moments<double>(InitOrDie(spec, DType::kF64, {1000, 100}), &mean, &stddev);
  EXPECT_NEAR(mean, 1.5, 0.05);
  EXPECT_NEAR(stddev, 2.0, 0.05);
  Moments<float>(InitOrDie(spec, DType::kF32, {100, 1000}), &mean, &stddev);
  EXPECT_NEAR(mean, 1.5, 0.05);
  EXPECT_NEAR(stddev, 2.0, 0.05);
}

TEST(InitializerTest, TruncatedNormalStaysWithinTwoStddevs) {
  InitializerSpec spec = Spec("truncated_normal", 11);
  spec.mean = 0.5;
  spec.stddev = 1;
  const Tensor t = InitOrDie(spec, DType::kF64, {1000, 100});
  int outside = 0;
  for (double x : t.flat<double>()) outside += std::fabs(x - 0.5) > 2;
  EXPECT_EQ(outside, 0);
  double mean, stddev;
  Moments<double>(t, &mean, &stddev);
  EXPECT_NEAR(mean, 0.5, 0.02);
  // A normal truncated at +-2 sigma by redrawing has stddev 0.880; clipping would give ~0.96 and
  // an untruncated normal 1.
  EXPECT_NEAR(stddev, 0.880, 0.02);

  const Tensor f = InitOrDie(spec, DType::kF32, {100, 100});
  outside = 0;
  for (float x : f.flat<float>()) outside += std::fabs(static_cast<double>(x) - 0.5) > 2 + 1e-6;
  EXPECT_EQ(outside, 0);
}

TEST(InitializerTest, GlorotUniformLimitComesFromTheFullShape) {
  // A [20, 50] shard of a [100, 50] kernel: limit sqrt(6 / 150) = 0.2. With the shard's own
  // shape the limit would be sqrt(6 / 70) = 0.29 and about a third of the values would exceed 0.2.
  InitializerSpec spec = Spec("glorot_uniform", 3);
  spec.full_shape = {100, 50};
  spec.row_offset = 40;
  const Tensor t = InitOrDie(spec, DType::kF32, {20, 50});
  const double limit = std::sqrt(6.0 / 150.0);
  double largest = 0;
  for (float x : t.flat<float>()) largest = std::max(largest, std::fabs(static_cast<double>(x)));
  EXPECT_LE(largest, limit + 1e-7);
  EXPECT_GT(largest, 0.95 * limit);

  // Convolution kernel [3, 3, 16, 32]: fan_in = 9 * 16, fan_out = 9 * 32.
  InitializerSpec conv = Spec("glorot_uniform", 5);
  const Tensor k = InitOrDie(conv, DType::kF64, {3, 3, 16, 32});
  const double conv_limit = std::sqrt(6.0 / (144.0 + 288.0));
  largest = 0;
  for (double x : k.flat<double>()) largest = std::max(largest, std::fabs(x));
  EXPECT_LT(largest, conv_limit);
  EXPECT_GT(largest, 0.95 * conv_limit);
}

// Initialising a variable whole and shard by shard gives the same bytes, for every random kind.
TEST(InitializerTest, ValuesDoNotDependOnSharding) {
  for (const char* kind : {"uniform", "normal", "truncated_normal", "glorot_uniform"}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      SCOPED_TRACE(std::string(kind) + " " + std::string(DTypeName(dtype)));
      InitializerSpec spec = Spec(kind, 2024);
      const Tensor whole = InitOrDie(spec, dtype, {10, 4});
      std::vector<Tensor> shards;
      for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 8}, {8, 10}}) {
        InitializerSpec shard_spec = spec;
        shard_spec.full_shape = {10, 4};
        shard_spec.row_offset = begin;
        shards.push_back(InitOrDie(shard_spec, dtype, {end - begin, 4}));
      }
      auto joined = Concat(shards);
      ASSERT_TRUE(joined.ok()) << joined.status();
      EXPECT_TRUE(joined->Equals(whole)) << joined->DebugString() << " vs " << whole.DebugString();

      // Rows are not copies of one another (each global row has its own stream).
      for (int64_t r = 1; r < 10; ++r) {
        EXPECT_NE(std::memcmp(whole.data<char>(), whole.data<char>() + r * 4 * DTypeSize(dtype), 4 * DTypeSize(dtype)),
                  0)
            << "row " << r;
      }
    }
  }
}

TEST(InitializerTest, SameSeedSameValuesDifferentSeedDifferentValues) {
  for (const char* kind : {"uniform", "normal", "truncated_normal", "glorot_uniform"}) {
    SCOPED_TRACE(kind);
    const Tensor a = InitOrDie(Spec(kind, 1), DType::kF32, {8, 8});
    const Tensor b = InitOrDie(Spec(kind, 1), DType::kF32, {8, 8});
    const Tensor c = InitOrDie(Spec(kind, 2), DType::kF32, {8, 8});
    EXPECT_TRUE(a.Equals(b));
    EXPECT_FALSE(a.Equals(c));
    int equal_elements = 0;
    for (int64_t i = 0; i < 64; ++i) equal_elements += a.data<float>()[i] == c.data<float>()[i];
    EXPECT_EQ(equal_elements, 0);
  }
}

TEST(InitializerTest, TensorKindCopiesAndChecksShapeAndDtype) {
  InitializerSpec spec = Spec("tensor");
  spec.tensor = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  auto t = Initialize(spec, DType::kF32, {2, 2});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->Equals(spec.tensor));
  EXPECT_FALSE(t->SharesStorageWith(spec.tensor));
  spec.tensor.data<float>()[0] = 100;
  EXPECT_EQ(t->data<float>()[0], 1);

  EXPECT_EQ(Initialize(spec, DType::kF32, {4}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Initialize(spec, DType::kF32, {2, 3}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Initialize(spec, DType::kF64, {2, 2}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InitializerTest, BadSpecsAreInvalidArgument) {
  EXPECT_EQ(Initialize(Spec("he_normal"), DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Initialize(Spec(""), DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* kind : {"uniform", "normal", "truncated_normal", "glorot_uniform"}) {
    SCOPED_TRACE(kind);
    for (DType dtype : {DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
      EXPECT_EQ(Initialize(Spec(kind), dtype, {2}).status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  InitializerSpec negative_stddev = Spec("normal");
  negative_stddev.stddev = -1;
  EXPECT_EQ(Initialize(negative_stddev, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  negative_stddev.kind = "truncated_normal";
  EXPECT_EQ(Initialize(negative_stddev, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  InitializerSpec reversed = Spec("uniform");
  reversed.minval = 1;
  reversed.maxval = -1;
  EXPECT_EQ(Initialize(reversed, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  // Parameters from the wire may be NaN or infinite; none of them makes sense.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf}) {
    InitializerSpec s = Spec("normal");
    s.stddev = bad;
    EXPECT_EQ(Initialize(s, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
    s = Spec("truncated_normal");
    s.mean = bad;
    EXPECT_EQ(Initialize(s, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
    s = Spec("uniform");
    s.maxval = bad;
    EXPECT_EQ(Initialize(s, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
    s.maxval = 1;
    s.minval = -bad;
    EXPECT_EQ(Initialize(s, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // A negative dimension is not a shape.
  EXPECT_EQ(Initialize(Spec("zeros"), DType::kF32, {-1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InitializerTest, ConstantsOutOfTheDtypesRangeAreInvalidArgument) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    DType dtype;
    std::vector<double> bad;
    std::vector<double> good;
  };
  const std::vector<Case> cases = {
      {DType::kI32, {2147483648.0, -2147483649.0, 1e300, 0.5, -7.25, nan, inf, -inf}, {2147483647.0, -2147483648.0, -3}},
      // 2^63 is the first double past i64's range; -2^63 is in it.
      {DType::kI64, {9223372036854775808.0, -1e19, 1.5, nan, inf}, {-9223372036854775808.0, 9007199254740992.0}},
      {DType::kU8, {256, -1, 0.5, nan, inf}, {0, 255}},
      {DType::kBool, {2, -1, 0.5, nan}, {0, 1}},
      {DType::kF32, {1e39, -1e300}, {3e38, nan, inf, 0.1}},
  };
  for (const Case& c : cases) {
    for (double value : c.bad) {
      SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), " ", value));
      InitializerSpec spec = Spec("constant");
      spec.value = value;
      auto t = Initialize(spec, c.dtype, {3});
      EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    }
    for (double value : c.good) {
      SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), " ", value));
      InitializerSpec spec = Spec("constant");
      spec.value = value;
      const Tensor t = InitOrDie(spec, c.dtype, {3});
      const double want = c.dtype == DType::kF32 ? static_cast<double>(static_cast<float>(value)) : value;
      if (std::isnan(value)) {
        EXPECT_TRUE(std::isnan(At(t, 2)));
      } else {
        EXPECT_EQ(At(t, 2), want);
      }
    }
  }
  // i64 holds its exact extremes.
  InitializerSpec low = Spec("constant");
  low.value = -9223372036854775808.0;
  EXPECT_EQ(InitOrDie(low, DType::kI64, {1}).data<int64_t>()[0], std::numeric_limits<int64_t>::min());
}

TEST(InitializerTest, RandomRangesBeyondTheDtypeAreInvalidArgument) {
  InitializerSpec wide = Spec("uniform");
  wide.minval = -1e39;  // beyond f32
  wide.maxval = 0;
  EXPECT_EQ(Initialize(wide, DType::kF32, {4}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Initialize(wide, DType::kF64, {4}).ok());
  wide.minval = -1.7e308;  // the width overflows a double
  wide.maxval = 1.7e308;
  EXPECT_EQ(Initialize(wide, DType::kF64, {4}).status().code(), absl::StatusCode::kInvalidArgument);
  InitializerSpec normal = Spec("normal");
  normal.stddev = 1e38;  // 12.5 sigma leaves f32
  EXPECT_EQ(Initialize(normal, DType::kF32, {4}).status().code(), absl::StatusCode::kInvalidArgument);
  normal.kind = "truncated_normal";  // 2 sigma does not
  EXPECT_TRUE(Initialize(normal, DType::kF32, {4}).ok());
  normal.stddev = 1e308;
  EXPECT_EQ(Initialize(normal, DType::kF64, {4}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(InitializerTest, ShardMustFitItsFullShape) {
  InitializerSpec spec = Spec("uniform");
  spec.full_shape = {10, 4};
  spec.row_offset = 8;
  EXPECT_TRUE(Initialize(spec, DType::kF32, {2, 4}).ok());
  EXPECT_EQ(Initialize(spec, DType::kF32, {3, 4}).status().code(), absl::StatusCode::kInvalidArgument);  // past the end
  spec.row_offset = 0;
  EXPECT_EQ(Initialize(spec, DType::kF32, {2, 5}).status().code(), absl::StatusCode::kInvalidArgument);  // other row
  EXPECT_EQ(Initialize(spec, DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);     // other rank
  spec.row_offset = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Initialize(spec, DType::kF32, {2, 4}).status().code(), absl::StatusCode::kInvalidArgument);
  spec.full_shape = {int64_t{1} << 62, 4};  // not a valid shape
  spec.row_offset = 0;
  EXPECT_EQ(Initialize(spec, DType::kF32, {2, 4}).status().code(), absl::StatusCode::kInvalidArgument);
  // An offset means nothing without the full shape.
  spec.full_shape.clear();
  spec.row_offset = 3;
  EXPECT_EQ(Initialize(spec, DType::kF32, {2, 4}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Cost follows elements, not rows or dimensions: an empty variable with 2^36 rows, or one whose
// zero dimension comes first, is built at once (a per-row loop would run for hours, and the
// test's timeout would catch it). Shapes that only a zero keeps small are refused.
TEST(InitializerTest, EmptyShapesWithHugeDimensionsCostNothing) {
  for (const char* kind : {"truncated_normal", "uniform", "constant", "zeros"}) {
    SCOPED_TRACE(kind);
    auto t = Initialize(Spec(kind), DType::kF32, {int64_t{1} << 36, 0});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->num_elements(), 0);
    t = Initialize(Spec(kind), DType::kF32, {0, int64_t{1} << 36});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(Initialize(Spec(kind), DType::kF32, {0, int64_t{1} << 40, int64_t{1} << 40}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// Sharding a 1-D vector at arbitrary points gives the same values as the whole: values depend
// on the global element index only.
TEST(InitializerTest, VectorShardsAtAnyOffsetMatchTheWhole) {
  InitializerSpec spec = Spec("truncated_normal", 99);
  const Tensor whole = InitOrDie(spec, DType::kF32, {1000});
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 333}, {333, 999}, {999, 1000}}) {
    InitializerSpec shard = spec;
    shard.full_shape = {1000};
    shard.row_offset = begin;
    const Tensor t = InitOrDie(shard, DType::kF32, {end - begin});
    EXPECT_EQ(std::memcmp(t.data<float>(), whole.data<float>() + begin, static_cast<size_t>(end - begin) * 4), 0)
        << begin;
  }
}

// The counter-based streams must look independent: uniform draws fill ten equal bins evenly
// (chi-square), and neighbouring elements (adjacent stream starts) are uncorrelated, within
// rows and across a row boundary.
TEST(InitializerTest, UniformBinsAreEvenAndNeighboursUncorrelated) {
  InitializerSpec spec = Spec("uniform", 12345);
  spec.minval = 0;
  spec.maxval = 1;
  const Tensor t = InitOrDie(spec, DType::kF64, {1000, 100});
  const int64_t n = t.num_elements();
  std::vector<int64_t> bins(10, 0);
  for (double x : t.flat<double>()) ++bins[static_cast<size_t>(x * 10)];
  double chi2 = 0;
  const double expected = static_cast<double>(n) / 10;
  for (int64_t b : bins) chi2 += (static_cast<double>(b) - expected) * (static_cast<double>(b) - expected) / expected;
  // 9 degrees of freedom: P(chi2 > 27.9) = 0.001.
  EXPECT_LT(chi2, 27.9);
  // Lag-1 and lag-100 (same column, next row) correlation; standard error 1/sqrt(n) ~ 0.003.
  for (int64_t lag : {1, 100}) {
    double sum = 0;
    const double* x = t.data<double>();
    for (int64_t i = 0; i + lag < n; ++i) sum += (x[i] - 0.5) * (x[i + lag] - 0.5);
    const double correlation = sum / static_cast<double>(n - lag) / (1.0 / 12);
    EXPECT_LT(std::fabs(correlation), 0.02) << "lag " << lag;
  }
}

// Normal draws have the standard normal's tails: the share beyond 1, 2 and 3 sigma.
TEST(InitializerTest, NormalTailsMatchTheStandardNormal) {
  InitializerSpec spec = Spec("normal", 77);
  spec.mean = 0;
  spec.stddev = 1;
  const Tensor t = InitOrDie(spec, DType::kF64, {200000});
  int64_t beyond[3] = {0, 0, 0};
  for (double x : t.flat<double>()) {
    for (int k = 0; k < 3; ++k) beyond[k] += std::fabs(x) > k + 1;
  }
  const double n = static_cast<double>(t.num_elements());
  // Two-sided tails 0.3173, 0.0455, 0.0027; tolerances ~5 standard errors.
  EXPECT_NEAR(static_cast<double>(beyond[0]) / n, 0.3173, 0.005);
  EXPECT_NEAR(static_cast<double>(beyond[1]) / n, 0.0455, 0.0025);
  EXPECT_NEAR(static_cast<double>(beyond[2]) / n, 0.0027, 0.0006);
  // Elements 2k and 2k + 1 come from one polar pair: they must still be uncorrelated, for the
  // normal and (where they redraw independently) the truncated normal. Standard error ~0.003.
  for (const char* kind : {"normal", "truncated_normal"}) {
    SCOPED_TRACE(kind);
    InitializerSpec k = Spec(kind, 78);
    k.stddev = 1;
    const Tensor u = InitOrDie(k, DType::kF64, {200000});
    double mean, stddev;
    Moments<double>(u, &mean, &stddev);
    for (int64_t lag : {1, 2}) {
      double sum = 0;
      for (int64_t i = 0; i + lag < u.num_elements(); i += 2) {
        sum += (u.data<double>()[i] - mean) * (u.data<double>()[i + lag] - mean);
      }
      EXPECT_LT(std::fabs(sum / (n / 2) / (stddev * stddev)), 0.02) << "lag " << lag;
    }
  }
}

}  // namespace
}  // namespace asyncps::ps
