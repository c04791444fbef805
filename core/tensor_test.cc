#include "core/tensor.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

bool IsAligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(AllocateAlignedTest, AlignedAndZeroedForAnySize) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4097}}) {
    std::shared_ptr<void> block = AllocateAligned(bytes);
    ASSERT_NE(block, nullptr) << bytes;
    EXPECT_TRUE(IsAligned64(block.get())) << bytes;
    const auto* p = static_cast<const unsigned char*>(block.get());
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
  }
}

TEST(TensorTest, NewTensorIsAlignedAndZeroed) {
  Tensor t(DType::kF32, {3, 5});
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.shape(), (Shape{3, 5}));
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.dim(1), 5);
  EXPECT_EQ(t.num_elements(), 15);
  EXPECT_EQ(t.num_bytes(), 60u);
  EXPECT_EQ(t.row_elements(), 5);
  EXPECT_TRUE(IsAligned64(t.raw_data()));
  for (float v : t.flat<float>()) EXPECT_EQ(v, 0.0f);

  Tensor odd(DType::kU8, {7});
  EXPECT_TRUE(IsAligned64(odd.raw_data()));
  for (uint8_t v : odd.flat<uint8_t>()) EXPECT_EQ(v, 0);
}

TEST(TensorTest, DefaultIsEmptyF32) {
  Tensor t;
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.shape(), (Shape{0}));
  EXPECT_EQ(t.num_elements(), 0);
  EXPECT_EQ(t.num_bytes(), 0u);
}

TEST(TensorTest, ZeroSizedTensorHasAlignedStorage) {
  Tensor t(DType::kF64, {0, 4});
  EXPECT_EQ(t.num_elements(), 0);
  EXPECT_EQ(t.row_elements(), 4);
  EXPECT_TRUE(IsAligned64(t.raw_data()));
}

TEST(TensorTest, Scalar) {
  Tensor f = Tensor::Scalar(3.5f);
  EXPECT_EQ(f.dtype(), DType::kF32);
  EXPECT_EQ(f.rank(), 0);
  EXPECT_TRUE(f.shape().empty());
  EXPECT_EQ(f.num_elements(), 1);
  EXPECT_EQ(f.row_elements(), 1);
  EXPECT_EQ(f.ScalarAsDouble(), 3.5);

  Tensor i = Tensor::Scalar<int64_t>(-7);
  EXPECT_EQ(i.dtype(), DType::kI64);
  EXPECT_EQ(*i.data<int64_t>(), -7);
  EXPECT_EQ(i.ScalarAsDouble(), -7.0);

  Tensor b = Tensor::Scalar(true);
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_EQ(b.ScalarAsDouble(), 1.0);
}

TEST(TensorTest, FromVector) {
  Tensor t = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_THAT(t.flat<float>(), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_TRUE(IsAligned64(t.raw_data()));

  Tensor v = Tensor::FromVector(std::vector<int32_t>{4, 5, 6});
  EXPECT_EQ(v.dtype(), DType::kI32);
  EXPECT_EQ(v.shape(), (Shape{3}));
  EXPECT_THAT(v.flat<int32_t>(), ElementsAre(4, 5, 6));

  const std::vector<double> values{0.5, 1.5, 2.5, 3.5};
  absl::StatusOr<Tensor> d = Tensor::FromSpan<double>({2, 2}, values);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->shape(), (Shape{2, 2}));
  EXPECT_THAT(d->flat<double>(), ElementsAre(0.5, 1.5, 2.5, 3.5));

  absl::StatusOr<Tensor> empty = Tensor::FromSpan<float>({0, 1000}, {});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->num_elements(), 0);
}

TEST(TensorTest, FromSpanRejectsACountThatDoesNotFitTheShape) {
  const std::vector<float> three{1, 2, 3};
  absl::StatusOr<Tensor> short_by_one = Tensor::FromSpan<float>({2, 2}, three);
  EXPECT_EQ(short_by_one.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(short_by_one.status().message()), ::testing::HasSubstr("3 value(s) given for shape [2, 2]"));
  EXPECT_EQ(Tensor::FromSpan<float>({2}, three).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::FromSpan<float>({}, three).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::FromSpan<float>({-1, -3}, three).status().code(), absl::StatusCode::kInvalidArgument);
  // A product that would overflow int64 is a mismatch, not a wrap-around to a small number.
  EXPECT_EQ(Tensor::FromSpan<float>({int64_t{1} << 62, 4, 3}, three).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::FromSpan<float>({0}, three).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorDeathTest, FromVectorThatDoesNotFitItsShapeAborts) {
  EXPECT_DEATH(Tensor::FromVector<float>({2, 2}, {1, 2, 3}), "3 value\\(s\\) given for shape \\[2, 2\\]");
  const std::vector<int32_t> five{1, 2, 3, 4, 5};
  EXPECT_DEATH(Tensor::FromVector<int32_t>({2, 3}, five), "5 value\\(s\\) given for shape \\[2, 3\\]");
}

TEST(TensorTest, ViewDoesNotCopy) {
  auto block = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  Tensor t = Tensor::View(DType::kF32, {2, 2}, block, block->data());
  EXPECT_EQ(t.raw_data(), block->data());
  (*block)[3] = 9;
  EXPECT_EQ(t.data<float>()[3], 9);
}

TEST(TensorTest, SliceSharesStorage) {
  Tensor t = Tensor::FromVector<int32_t>({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  absl::StatusOr<Tensor> s = t.Slice(1, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape(), (Shape{2, 2}));
  EXPECT_THAT(s->flat<int32_t>(), ElementsAre(2, 3, 4, 5));
  EXPECT_TRUE(s->SharesStorageWith(t));
  EXPECT_EQ(s->raw_data(), t.data<int32_t>() + 2);

  s->data<int32_t>()[0] = 42;  // writes through the slice are visible in the parent
  EXPECT_EQ(t.data<int32_t>()[2], 42);

  absl::StatusOr<Tensor> empty = t.Slice(4, 4);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape(), (Shape{0, 2}));
  absl::StatusOr<Tensor> all = t.Slice(0, 4);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->Equals(t));
}

TEST(TensorTest, SliceBoundsErrors) {
  Tensor t(DType::kF32, {4, 2});
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {0, 5}, {3, 2}, {5, 5}}) {
    absl::StatusOr<Tensor> s = t.Slice(begin, end);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << begin << ".." << end;
  }
  EXPECT_EQ(Tensor::Scalar(1.0f).Slice(0, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, Reshape) {
  Tensor t = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  absl::StatusOr<Tensor> r = t.Reshape({3, 2});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shape(), (Shape{3, 2}));
  EXPECT_EQ(r->raw_data(), t.raw_data());
  EXPECT_THAT(r->flat<float>(), ElementsAre(1, 2, 3, 4, 5, 6));

  absl::StatusOr<Tensor> flat = t.Reshape({6});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->rank(), 1);

  absl::StatusOr<Tensor> bad = t.Reshape({4, 2});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("[2, 3]"));
}

TEST(TensorTest, CopyIsShallowCloneIsDeep) {
  Tensor t = Tensor::FromVector<float>({3}, {1, 2, 3});
  Tensor copy = t;
  EXPECT_TRUE(copy.SharesStorageWith(t));

  Tensor clone = t.Clone();
  EXPECT_FALSE(clone.SharesStorageWith(t));
  EXPECT_NE(clone.raw_data(), t.raw_data());
  EXPECT_TRUE(IsAligned64(clone.raw_data()));
  EXPECT_TRUE(clone.Equals(t));
  clone.data<float>()[0] = 100;
  EXPECT_EQ(t.data<float>()[0], 1);

  // Cloning a slice copies only the slice's rows.
  Tensor rows = Tensor::FromVector<int64_t>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor middle = rows.Slice(1, 2)->Clone();
  EXPECT_EQ(middle.shape(), (Shape{1, 2}));
  EXPECT_THAT(middle.flat<int64_t>(), ElementsAre(3, 4));
  EXPECT_FALSE(middle.SharesStorageWith(rows));
}

TEST(TensorTest, Equals) {
  Tensor a = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(a.Equals(Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4})));
  EXPECT_FALSE(a.Equals(Tensor::FromVector<float>({2, 2}, {1, 2, 3, 5})));
  EXPECT_FALSE(a.Equals(Tensor::FromVector<float>({4}, {1, 2, 3, 4})));
  // Same bytes (all zero), different dtype.
  EXPECT_FALSE(Tensor(DType::kF32, {2}).Equals(Tensor(DType::kI32, {2})));
  EXPECT_TRUE(Tensor(DType::kF32, {0}).Equals(Tensor()));
}

TEST(AllCloseTest, Tolerance) {
  Tensor a = Tensor::FromVector<float>({3}, {1.0f, 2.0f, 3.0f});
  EXPECT_TRUE(AllClose(a, a));
  EXPECT_TRUE(AllClose(a, Tensor::FromVector<float>({3}, {1.0f, 2.0f, 3.000001f})));
  EXPECT_FALSE(AllClose(a, Tensor::FromVector<float>({3}, {1.0f, 2.0f, 3.1f})));
  EXPECT_TRUE(AllClose(a, Tensor::FromVector<float>({3}, {1.0f, 2.0f, 3.1f}), /*atol=*/0.2));
  // rtol scales with |b|: 100 vs 101 is within 2%.
  Tensor big = Tensor::FromVector<double>({1}, {100.0});
  Tensor bigger = Tensor::FromVector<double>({1}, {101.0});
  EXPECT_FALSE(AllClose(big, bigger));
  EXPECT_TRUE(AllClose(big, bigger, /*atol=*/0, /*rtol=*/0.02));
}

TEST(AllCloseTest, DTypeAndShapeMismatch) {
  EXPECT_FALSE(AllClose(Tensor(DType::kF32, {2}), Tensor(DType::kF64, {2})));
  EXPECT_FALSE(AllClose(Tensor(DType::kF32, {2, 1}), Tensor(DType::kF32, {2})));
  EXPECT_FALSE(AllClose(Tensor(DType::kF32, {2}), Tensor(DType::kF32, {3})));
}

TEST(AllCloseTest, NaNIsNeverClose) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = Tensor::FromVector<float>({2}, {1.0f, nan});
  EXPECT_FALSE(AllClose(a, a));
  EXPECT_FALSE(AllClose(a, Tensor::FromVector<float>({2}, {1.0f, 0.0f})));
  EXPECT_FALSE(AllClose(a, a, /*atol=*/1e9, /*rtol=*/1e9));
}

TEST(AllCloseTest, IntegersAndBooleans) {
  EXPECT_TRUE(AllClose(Tensor::FromVector<int32_t>({2}, {1, 2}), Tensor::FromVector<int32_t>({2}, {1, 2})));
  EXPECT_FALSE(AllClose(Tensor::FromVector<int32_t>({2}, {1, 2}), Tensor::FromVector<int32_t>({2}, {1, 3})));
  EXPECT_TRUE(AllClose(Tensor::FromVector<bool>({2}, {true, false}), Tensor::FromVector<bool>({2}, {true, false})));
  EXPECT_FALSE(AllClose(Tensor::FromVector<bool>({2}, {true, false}), Tensor::FromVector<bool>({2}, {true, true})));
}

// The header promises exact integer comparison when atol < 1, but tensor.cc applies rtol to
// integers too, so 1000000 vs 1000001 compares "close" with the default rtol (1e-5 * 1e6 = 10).
// Disabled until tensor.cc (not owned by this test's author) is fixed; enable to check the fix.
TEST(AllCloseTest, LargeIntegersCompareExactly) {
  EXPECT_FALSE(AllClose(Tensor::FromVector<int64_t>({1}, {1000000}), Tensor::FromVector<int64_t>({1}, {1000001})));
}

TEST(ConcatTest, ConcatenatesAlongAxisZero) {
  Tensor a = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::FromVector<float>({1, 2}, {5, 6});
  Tensor empty(DType::kF32, {0, 2});
  absl::StatusOr<Tensor> c = Concat({a, empty, b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->shape(), (Shape{3, 2}));
  EXPECT_THAT(c->flat<float>(), ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_FALSE(c->SharesStorageWith(a));
  EXPECT_TRUE(IsAligned64(c->raw_data()));

  // Concat of the slices of a tensor gives it back.
  Tensor t = Tensor::FromVector<int32_t>({5}, {1, 2, 3, 4, 5});
  absl::StatusOr<Tensor> back = Concat({*t.Slice(0, 2), *t.Slice(2, 5)});
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->Equals(t));
}

TEST(ConcatTest, Errors) {
  EXPECT_EQ(Concat({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Concat({Tensor::Scalar(1.0f), Tensor::Scalar(2.0f)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Concat({Tensor(DType::kF32, {1, 2}), Tensor(DType::kF64, {1, 2})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Concat({Tensor(DType::kF32, {1, 2}), Tensor(DType::kF32, {1, 3})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Concat({Tensor(DType::kF32, {1, 2}), Tensor(DType::kF32, {2})}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateShapeTest, AcceptsReasonableShapes) {
  EXPECT_TRUE(ValidateShape({}, DType::kF32).ok());
  EXPECT_TRUE(ValidateShape({0}, DType::kF32).ok());
  EXPECT_TRUE(ValidateShape({1024, 1024}, DType::kF64).ok());
  EXPECT_TRUE(ValidateShape({1024}, DType::kF32, /*max_bytes=*/4096).ok());
}

TEST(ValidateShapeTest, Errors) {
  auto code = [](const Shape& shape, DType dtype, uint64_t max_bytes = uint64_t{1} << 40) {
    return ValidateShape(shape, dtype, max_bytes).code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code({2, -1}, DType::kF32), kInvalid);
  EXPECT_EQ(code({1025}, DType::kF32, 4096), kInvalid);  // 4100 bytes
  EXPECT_EQ(code({int64_t{1} << 40, int64_t{1} << 40}, DType::kU8), kInvalid);  // overflows int64
  EXPECT_EQ(code({std::numeric_limits<int64_t>::max(), 2}, DType::kU8), kInvalid);
  EXPECT_EQ(code({1, 1, 1, 1, 1, 1, 1, 1, 1}, DType::kF32), kInvalid);  // rank 9
  EXPECT_EQ(code({2}, static_cast<DType>(99)), kInvalid);
  EXPECT_THAT(ValidateShape({3, -4}, DType::kF32).message(), HasSubstr("[3, -4]"));
}

// A zero dimension makes a tensor empty but must not hide huge dimensions after it: their
// product is still a row size (or a row count) that code multiplies and loops over.
TEST(ValidateShapeTest, ZeroDimensionDoesNotHideHugeOnes) {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(ValidateShape({0, huge, huge}, DType::kF32).code(), kInvalid);  // row size 2^80
  EXPECT_EQ(ValidateShape({huge, huge, 0}, DType::kF32).code(), kInvalid);
  EXPECT_EQ(ValidateShape({0, std::numeric_limits<int64_t>::max()}, DType::kU8).code(), kInvalid);
  EXPECT_EQ(ValidateShape({int64_t{1} << 31, 0}, DType::kF32, /*max_bytes=*/uint64_t{1} << 32).code(), kInvalid);
  // Empty shapes with modest dims stay valid.
  EXPECT_TRUE(ValidateShape({0, 1024, 1024}, DType::kF32).ok());
  EXPECT_TRUE(ValidateShape({1024, 0}, DType::kF32).ok());
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeSize(DType::kU8), 1u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(0)), 0u);
  EXPECT_EQ(DTypeName(DType::kI64), "i64");
  EXPECT_EQ(DTypeSafetensorsName(DType::kBool), "BOOL");
}

TEST(DTypeTest, FromNameAcceptsBothSpellings) {
  for (DType d : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kU8, DType::kBool}) {
    absl::StatusOr<DType> by_name = DTypeFromName(DTypeName(d));
    ASSERT_TRUE(by_name.ok()) << DTypeName(d);
    EXPECT_EQ(*by_name, d);
    absl::StatusOr<DType> by_st = DTypeFromName(DTypeSafetensorsName(d));
    ASSERT_TRUE(by_st.ok()) << DTypeSafetensorsName(d);
    EXPECT_EQ(*by_st, d);
  }
  for (const char* bad : {"", "float32", "F16", "BF16", "f 32"}) {
    absl::StatusOr<DType> d = DTypeFromName(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(DTypeFromName("float32").status().message(), HasSubstr("float32"));
}

TEST(DTypeTest, FromWire) {
  for (uint32_t v = 1; v <= 6; ++v) {
    absl::StatusOr<DType> d = DTypeFromWire(v);
    ASSERT_TRUE(d.ok()) << v;
    EXPECT_EQ(static_cast<uint32_t>(*d), v);
  }
  EXPECT_EQ(*DTypeFromWire(1), DType::kF32);
  EXPECT_EQ(*DTypeFromWire(6), DType::kBool);
  for (uint32_t bad : {0u, 7u, 255u, 0xffffffffu}) {
    EXPECT_EQ(DTypeFromWire(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(DebugStringTest, Formats) {
  Tensor t = Tensor::FromVector<float>({2, 2}, {1, 2.5f, 3, 4});
  EXPECT_EQ(t.DebugString(), "f32[2, 2]{1, 2.5, 3, 4}");
  EXPECT_EQ(t.DebugString(2), "f32[2, 2]{1, 2.5, ...}");
  EXPECT_EQ(Tensor::Scalar<int64_t>(7).DebugString(), "i64[]{7}");
  EXPECT_EQ(Tensor::FromVector<bool>({2}, {true, false}).DebugString(), "bool[2]{1, 0}");
  EXPECT_EQ(Tensor(DType::kU8, {0}).DebugString(), "u8[0]{}");
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({3, 4}), "[3, 4]");
}

}  // namespace
}  // namespace asyncps
