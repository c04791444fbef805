#include "ps/variable.h"

#include <atomic>
#include <cstdint>
#include <latch>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ps/update_rule.h"

namespace asyncps::ps {
namespace variable_test_internal {
namespace {

std::unique_ptr<Variable> MakeVariable(const std::string& name, Tensor initial,
                                       const OptimizerConfig* optimizer = nullptr) {
  auto v = Variable::Create(name, std::move(initial), optimizer);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.flat<T>().begin(), t.flat<T>().end());
}

Tensor Ids64(std::vector<int64_t> ids) { return Tensor::FromVector(ids); }
Tensor Ids32(std::vector<int32_t> ids) { return Tensor::FromVector(ids); }

// A [rows, cols] f32 tensor whose row r holds r * 10 + c in column c.
Tensor RowNumbered(int64_t rows, int64_t cols) {
  Tensor t(DType::kF32, {rows, cols});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t.data<float>()[r * cols + c] = static_cast<float>(r * 10 + c);
  }
  return t;
}

TEST(VariableTest, ReadReturnsAnIndependentCopy) {
  auto v = MakeVariable("w", Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4}));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->name(), "w");
  EXPECT_EQ(v->dtype(), DType::kF32);
  EXPECT_EQ(v->shape(), (Shape{2, 2}));
  EXPECT_EQ(v->rows(), 2);

  Tensor first = v->Read();
  first.data<float>()[0] = 100;
  Tensor second = v->Read();
  EXPECT_FALSE(second.SharesStorageWith(first));
  EXPECT_EQ(Values<float>(second), (std::vector<float>{1, 2, 3, 4}));

  // Later updates do not reach a copy already handed out either.
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1})).ok());
  EXPECT_EQ(Values<float>(second), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{2, 3, 4, 5}));
}

// Every update kind, per numeric dtype, dense and by row. Start values and operands are chosen so
// that every result (integer division included) is exact.
template <typename T>
class UpdateKindTest : public ::testing::Test {};
using NumericTypes = ::testing::Types<float, double, int32_t, int64_t>;
TYPED_TEST_SUITE(UpdateKindTest, NumericTypes);

struct KindCase {
  UpdateKind kind;
  std::vector<double> expected;
};

const std::vector<double> kStart = {6, 8, -10, 9};
const std::vector<double> kOperand = {2, -4, 5, 3};
const std::vector<KindCase> kKindCases = {
    {UpdateKind::kAssign, {2, -4, 5, 3}},    {UpdateKind::kAdd, {8, 4, -5, 12}},
    {UpdateKind::kSub, {4, 12, -15, 6}},     {UpdateKind::kMin, {2, -4, -10, 3}},
    {UpdateKind::kMax, {6, 8, 5, 9}},        {UpdateKind::kMul, {12, -32, -50, 27}},
    {UpdateKind::kDiv, {3, -2, -2, 3}},
};

template <typename T>
std::vector<T> Cast(const std::vector<double>& in) {
  std::vector<T> out;
  for (double d : in) out.push_back(static_cast<T>(d));
  return out;
}

TYPED_TEST(UpdateKindTest, DenseUpdateAppliesEveryKind) {
  using T = TypeParam;
  for (const KindCase& c : kKindCases) {
    SCOPED_TRACE(std::string(UpdateKindName(c.kind)));
    auto v = MakeVariable("v", Tensor::FromVector<T>({4}, absl::MakeConstSpan(Cast<T>(kStart))));
    ASSERT_NE(v, nullptr);
    ASSERT_TRUE(v->Update(c.kind, Tensor::FromVector<T>({4}, absl::MakeConstSpan(Cast<T>(kOperand)))).ok());
    EXPECT_EQ(Values<T>(v->Read()), Cast<T>(c.expected));
  }
}

TYPED_TEST(UpdateKindTest, RowUpdateAppliesEveryKind) {
  using T = TypeParam;
  for (const KindCase& c : kKindCases) {
    SCOPED_TRACE(std::string(UpdateKindName(c.kind)));
    // [4, 1]: row r holds kStart[r]; update rows 3 and 1 only.
    auto v = MakeVariable("v", Tensor::FromVector<T>({4, 1}, absl::MakeConstSpan(Cast<T>(kStart))));
    ASSERT_NE(v, nullptr);
    const std::vector<T> operand = {static_cast<T>(kOperand[3]), static_cast<T>(kOperand[1])};
    ASSERT_TRUE(v->UpdateRows(c.kind, Ids64({3, 1}), Tensor::FromVector<T>({2, 1}, absl::MakeConstSpan(operand))).ok());
    std::vector<double> expected = kStart;
    expected[1] = c.expected[1];
    expected[3] = c.expected[3];
    EXPECT_EQ(Values<T>(v->Read()), Cast<T>(expected));
  }
}

// A variable whose reads share its storage (Variable::kSharedReadBytes), rows numbered.
std::unique_ptr<Variable> LargeVariable(const OptimizerConfig* optimizer = nullptr) {
  const int64_t cols = 64;
  const int64_t rows = static_cast<int64_t>(2 * Variable::kSharedReadBytes / (cols * sizeof(float)));
  return MakeVariable("large", RowNumbered(rows, cols), optimizer);
}

TEST(VariableTest, LargeReadIsASnapshotThatNoWriteReaches) {
  const OptimizerConfig sgd = opt::SGD(0.5);
  auto v = LargeVariable(&sgd);
  ASSERT_NE(v, nullptr);
  const Shape shape = v->shape();
  const Tensor original = v->Read().Clone();

  // Two reads with no write between share one storage: nothing was copied.
  Tensor first = v->Read();
  Tensor second = v->Read();
  EXPECT_EQ(first.raw_data(), second.raw_data());
  EXPECT_TRUE(first.Equals(original));

  Tensor ones(DType::kF32, shape);
  for (float& x : ones.flat<float>()) x = 1;
  const Tensor row_ids = Ids64({0, 5, 5, shape[0] - 1});
  Tensor row_ones(DType::kF32, {4, shape[1]});
  for (float& x : row_ones.flat<float>()) x = 1;

  // Every kind of write, each while snapshots are held: each moves the variable to storage
  // of its own, and every snapshot keeps the value it was taken at.
  std::vector<std::pair<Tensor, Tensor>> snapshots;  // snapshot, copy of it when taken
  auto hold = [&] {
    Tensor s = v->Read();
    snapshots.emplace_back(s, s.Clone());
  };
  hold();
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, ones).ok());
  hold();
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAdd, row_ids, row_ones).ok());
  hold();
  ASSERT_TRUE(v->ApplyGradient(ones).ok());
  hold();
  ASSERT_TRUE(v->ApplyRowGradients(row_ids, row_ones).ok());
  hold();
  Variable::State state;
  state.value = original;
  ASSERT_TRUE(v->RestoreState(state).ok());
  for (size_t i = 0; i < snapshots.size(); ++i) {
    EXPECT_TRUE(snapshots[i].first.Equals(snapshots[i].second)) << "snapshot " << i << " changed";
    if (i > 0) {
      EXPECT_FALSE(snapshots[i].first.Equals(snapshots[i - 1].first)) << "write " << i << " was not applied";
    }
  }
  EXPECT_TRUE(first.Equals(original));
  EXPECT_TRUE(v->Read().Equals(original));  // the restore
  // The value written before the restore, checked through the rows: +1 dense, +1 (row 5:
  // +2) by row, -0.5 by SGD, -0.5 (row 5: -1) by row SGD.
  const Tensor before_restore = snapshots.back().first;
  const int64_t cols = shape[1];
  EXPECT_EQ(before_restore.data<float>()[1], original.data<float>()[1] + 1 + 1 - 0.5f - 0.5f);
  EXPECT_EQ(before_restore.data<float>()[5 * cols], original.data<float>()[5 * cols] + 1 + 2 - 0.5f - 1.0f);
  EXPECT_EQ(before_restore.data<float>()[2 * cols], original.data<float>()[2 * cols] + 1 - 0.5f);
}

TEST(VariableTest, LargeReadWithoutSnapshotsAliveWritesInPlace) {
  auto v = LargeVariable();
  ASSERT_NE(v, nullptr);
  const void* storage = nullptr;
  {
    Tensor snapshot = v->Read();
    storage = snapshot.raw_data();
  }
  // The snapshot is gone: the write needs no copy, and the next read shares the same storage.
  Tensor ones(DType::kF32, v->shape());
  for (float& x : ones.flat<float>()) x = 1;
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, ones).ok());
  EXPECT_EQ(v->Read().raw_data(), storage);
}

TEST(VariableTest, SharedStateSharesLargeArraysAndNoWriteReachesThem) {
  const OptimizerConfig adam = opt::Adam(0.1f);
  auto v = LargeVariable(&adam);
  ASSERT_NE(v, nullptr);
  const Shape shape = v->shape();
  Tensor ones(DType::kF32, shape);
  for (float& x : ones.flat<float>()) x = 1;
  const Tensor row_ids = Ids64({0, 5, 5, shape[0] - 1});
  Tensor row_ones(DType::kF32, {4, shape[1]});
  for (float& x : row_ones.flat<float>()) x = 1;
  ASSERT_TRUE(v->ApplyGradient(ones).ok());

  // Two states with no write between share one storage for the value and each slot.
  Variable::State first = v->SharedState();
  Variable::State second = v->SharedState();
  EXPECT_EQ(first.value.raw_data(), second.value.raw_data());
  EXPECT_EQ(first.value.raw_data(), v->Read().raw_data());
  ASSERT_EQ(first.slots.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(first.slots[i].raw_data(), second.slots[i].raw_data()) << "slot " << i;
  EXPECT_EQ(first.iterations, 1);

  // Every kind of write of value and slots, each while states are held: each state keeps what
  // it was taken at (compared with a copy made then), and the writes are applied.
  std::vector<std::pair<Variable::State, Variable::State>> held;  // shared, copy when taken
  auto hold = [&] { held.emplace_back(v->SharedState(), v->CheckpointState()); };
  hold();
  ASSERT_TRUE(v->ApplyGradient(ones).ok());
  hold();
  ASSERT_TRUE(v->ApplyRowGradients(row_ids, row_ones).ok());
  hold();
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, ones).ok());
  hold();
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAdd, row_ids, row_ones).ok());
  hold();
  ASSERT_TRUE(v->RestoreState(first).ok());
  for (size_t i = 0; i < held.size(); ++i) {
    const Variable::State& shared = held[i].first;
    const Variable::State& copy = held[i].second;
    EXPECT_TRUE(shared.value.Equals(copy.value)) << "state " << i << " value changed";
    for (size_t j = 0; j < 2; ++j) EXPECT_TRUE(shared.slots[j].Equals(copy.slots[j])) << "state " << i << " slot " << j;
    if (i > 0) {
      EXPECT_FALSE(shared.value.Equals(held[i - 1].first.value)) << "write " << i << " was not applied";
    }
  }
  // The two optimizer steps moved the slots; the restore brought back the first state.
  EXPECT_FALSE(held[2].first.slots[0].Equals(held[0].first.slots[0]));
  const Variable::State now = v->CheckpointState();
  EXPECT_TRUE(now.value.Equals(held[0].second.value));
  for (size_t j = 0; j < 2; ++j) EXPECT_TRUE(now.slots[j].Equals(held[0].second.slots[j])) << "slot " << j;
}

TEST(VariableTest, CreateFromStateTakesTheArraysAsItsStorage) {
  const OptimizerConfig adam = opt::Adam(0.1f);
  auto source = MakeVariable("w", RowNumbered(4, 2), &adam);
  ASSERT_NE(source, nullptr);
  ASSERT_TRUE(source->ApplyGradient(RowNumbered(4, 2)).ok());
  ASSERT_TRUE(source->ApplyGradient(RowNumbered(4, 2)).ok());
  Variable::State state = source->CheckpointState();
  const void* value_storage = state.value.raw_data();
  const Variable::State expected = source->CheckpointState();

  auto made = Variable::CreateFromState("w", state, &adam);
  ASSERT_TRUE(made.ok()) << made.status();
  Variable& v = **made;
  EXPECT_EQ(v.shape(), (Shape{4, 2}));
  EXPECT_EQ(v.iterations(), 2);
  EXPECT_EQ(v.version(), 2);
  EXPECT_EQ(v.restores(), 0u);
  const Variable::State got = v.CheckpointState();
  EXPECT_TRUE(got.value.Equals(expected.value));
  ASSERT_EQ(got.slots.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(got.slots[i].Equals(expected.slots[i])) << "slot " << i;
  // Not copied: the variable writes into the arrays it was given.
  ASSERT_TRUE(v.Update(UpdateKind::kAdd, RowNumbered(4, 2)).ok());
  EXPECT_NE(state.value.data<float>()[1], expected.value.data<float>()[1]);
  EXPECT_EQ(state.value.raw_data(), value_storage);
  // And it trains on as the source does (Adam's slots and step counter came along).
  ASSERT_TRUE(source->Update(UpdateKind::kAdd, RowNumbered(4, 2)).ok());
  ASSERT_TRUE(source->ApplyGradient(RowNumbered(4, 2)).ok());
  ASSERT_TRUE(v.ApplyGradient(RowNumbered(4, 2)).ok());
  EXPECT_TRUE(v.Read().Equals(source->Read()));

  // A state that does not fit the optimizer is refused.
  Variable::State no_slots = source->CheckpointState();
  no_slots.slots.clear();
  EXPECT_FALSE(Variable::CreateFromState("w", no_slots, &adam).ok());
  Variable::State wrong_slot = source->CheckpointState();
  wrong_slot.slots[1] = Tensor(DType::kF32, {2, 4});
  EXPECT_FALSE(Variable::CreateFromState("w", wrong_slot, &adam).ok());
  Variable::State negative = source->CheckpointState();
  negative.iterations = -1;
  EXPECT_FALSE(Variable::CreateFromState("w", negative, &adam).ok());
  Variable::State ints;
  ints.value = Tensor(DType::kI32, {4, 2});
  EXPECT_FALSE(Variable::CreateFromState("w", ints, &adam).ok());
  EXPECT_TRUE(Variable::CreateFromState("w", ints, nullptr).ok());
}

TEST(VariableTest, BoolVariableAllowsOnlyAssign) {
  auto v = MakeVariable("mask", Tensor::FromVector<bool>({3}, {true, false, true}));
  ASSERT_NE(v, nullptr);
  const Tensor operand = Tensor::FromVector<bool>({3}, {false, true, true});
  for (UpdateKind kind : {UpdateKind::kAdd, UpdateKind::kSub, UpdateKind::kMin, UpdateKind::kMax,
                          UpdateKind::kMul, UpdateKind::kDiv}) {
    SCOPED_TRACE(std::string(UpdateKindName(kind)));
    EXPECT_EQ(v->Update(kind, operand).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(v->UpdateRows(kind, Ids64({0}), Tensor::FromVector<bool>({1}, {false})).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Values<bool>(v->Read()), (std::vector<bool>{true, false, true}));
  }
  ASSERT_TRUE(v->Update(UpdateKind::kAssign, operand).ok());
  EXPECT_EQ(Values<bool>(v->Read()), (std::vector<bool>{false, true, true}));
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAssign, Ids64({0}), Tensor::FromVector<bool>({1}, {true})).ok());
  EXPECT_EQ(Values<bool>(v->Read()), (std::vector<bool>{true, true, true}));
}

TEST(VariableTest, IntegerDivisionByZeroIsRejectedAndChangesNothing) {
  auto i32 = MakeVariable("i32", Tensor::FromVector<int32_t>({3, 1}, {6, 8, 10}));
  auto i64 = MakeVariable("i64", Tensor::FromVector<int64_t>({3}, {6, 8, 10}));
  ASSERT_NE(i32, nullptr);
  ASSERT_NE(i64, nullptr);

  EXPECT_EQ(i32->Update(UpdateKind::kDiv, Tensor::FromVector<int32_t>({3, 1}, {2, 0, 5})).code(),
            absl::StatusCode::kInvalidArgument);
  // The zero is in the last row: the first rows must not have been divided already.
  EXPECT_EQ(i32->UpdateRows(UpdateKind::kDiv, Ids64({0, 2}), Tensor::FromVector<int32_t>({2, 1}, {2, 0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<int32_t>(i32->Read()), (std::vector<int32_t>{6, 8, 10}));

  EXPECT_EQ(i64->Update(UpdateKind::kDiv, Tensor::FromVector<int64_t>({3}, {1, 2, 0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<int64_t>(i64->Read()), (std::vector<int64_t>{6, 8, 10}));

  // Float division by zero is IEEE arithmetic, not an error.
  auto f = MakeVariable("f", Tensor::FromVector<float>({2}, {1, -1}));
  ASSERT_TRUE(f->Update(UpdateKind::kDiv, Tensor::FromVector<float>({2}, {0, 0})).ok());
  EXPECT_EQ(Values<float>(f->Read()),
            (std::vector<float>{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}));
}

// Integer arithmetic wraps in two's complement, as TensorFlow's integer ops do, and never
// traps: MIN / -1 (SIGFPE on x86 if done natively) wraps to MIN. Checked at every integer
// dtype, dense and by rows (including a row hit twice).
template <typename T>
class IntegerArithmeticTest : public ::testing::Test {};
using IntegerTypes = ::testing::Types<int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(IntegerArithmeticTest, IntegerTypes);

TYPED_TEST(IntegerArithmeticTest, OverflowWrapsDenseAndByRows) {
  using T = TypeParam;
  using L = std::numeric_limits<T>;
  const T max = L::max(), min = L::min();
  // Expected results written out from the wrapping rule, per case: {initial, operand, result}.
  struct Case {
    UpdateKind kind;
    std::vector<T> initial, operand, expected;
  };
  std::vector<Case> cases;
  if constexpr (std::is_signed_v<T>) {
    cases = {
        {UpdateKind::kAdd, {max, min, max, 5}, {1, -1, max, -7}, {min, max, T(-2), T(-2)}},
        {UpdateKind::kSub, {min, max, min, 5}, {1, -1, max, 7}, {max, min, T(1), T(-2)}},
        {UpdateKind::kMul, {max, min, min, max}, {2, -1, 2, max}, {T(-2), min, T(0), T(1)}},
        {UpdateKind::kDiv, {min, max, 7, -7}, {-1, -1, -2, 2}, {min, T(-max), T(-3), T(-3)}},
        {UpdateKind::kMin, {min, max, 0, 3}, {max, min, 0, -3}, {min, min, 0, T(-3)}},
        {UpdateKind::kMax, {min, max, 0, 3}, {max, min, 0, -3}, {max, max, 0, 3}},
    };
  } else {
    cases = {
        {UpdateKind::kAdd, {max, 200, 0, 5}, {1, 100, max, 7}, {0, 44, max, 12}},
        {UpdateKind::kSub, {0, 5, 0, 200}, {1, 7, max, 100}, {max, 254, 1, 100}},
        {UpdateKind::kMul, {max, 16, 128, 15}, {2, 16, 2, 17}, {254, 0, 0, 255}},
        {UpdateKind::kDiv, {max, 7, 0, 200}, {2, 2, 9, max}, {127, 3, 0, 0}},
    };
  }
  const DType dtype = DTypeOf<T>::value;
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", UpdateKindName(c.kind)));
    auto dense = MakeVariable("dense", Tensor::FromVector<T>({4, 1}, absl::MakeConstSpan(c.initial)));
    ASSERT_NE(dense, nullptr);
    ASSERT_TRUE(dense->Update(c.kind, Tensor::FromVector<T>({4, 1}, absl::MakeConstSpan(c.operand))).ok());
    EXPECT_EQ(Values<T>(dense->Read()), c.expected);

    // The same by rows, given in reverse order.
    auto rows = MakeVariable("rows", Tensor::FromVector<T>({4, 1}, absl::MakeConstSpan(c.initial)));
    ASSERT_NE(rows, nullptr);
    const std::vector<T> reversed(c.operand.rbegin(), c.operand.rend());
    ASSERT_TRUE(rows->UpdateRows(c.kind, Ids64({3, 2, 1, 0}), Tensor::FromVector<T>({4, 1}, absl::MakeConstSpan(reversed)))
                    .ok());
    EXPECT_EQ(Values<T>(rows->Read()), c.expected);
  }

  // A row hit twice wraps twice: max + max + max == max - 2 (mod 2^bits).
  auto twice = MakeVariable("twice", Tensor::FromVector<T>({2}, {max, 0}));
  ASSERT_TRUE(twice->UpdateRows(UpdateKind::kAdd, Ids32({0, 0}), Tensor::FromVector<T>({2}, {max, max})).ok());
  EXPECT_EQ(Values<T>(twice->Read())[0], static_cast<T>(max - 2));

  // Division by zero stays an error at every integer dtype, dense and by rows, and changes
  // nothing (the zero is last, so nothing before it may have been applied).
  auto v = MakeVariable("v", Tensor::FromVector<T>({3}, {6, 8, 10}));
  EXPECT_EQ(v->Update(UpdateKind::kDiv, Tensor::FromVector<T>({3}, {1, 2, 0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kDiv, Ids64({0, 1}), Tensor::FromVector<T>({2}, {2, 0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<T>(v->Read()), (std::vector<T>{6, 8, 10}));
}

TEST(VariableTest, BoolAcceptsOnlyZeroAndOneBytes) {
  auto v = MakeVariable("mask", Tensor::FromVector<bool>({2}, {true, false}));
  ASSERT_NE(v, nullptr);
  // A bool tensor from the wire may carry any byte; 2 is not a bool (reading it as one is UB).
  Tensor two(DType::kBool, {2});
  two.data<uint8_t>()[1] = 2;
  EXPECT_EQ(v->Update(UpdateKind::kAssign, two).code(), absl::StatusCode::kInvalidArgument);
  Tensor row(DType::kBool, {1});
  row.data<uint8_t>()[0] = 0x80;
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({1}), row).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<uint8_t>(v->Read()), (std::vector<uint8_t>{1, 0}));
}

TEST(VariableTest, AllFiniteFindsNanAndInfinityInFloatTensors) {
  EXPECT_TRUE(AllFinite(Tensor::FromVector<float>({3}, {1, -1e38f, 0})));
  EXPECT_TRUE(AllFinite(Tensor(DType::kF32, {0})));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    Tensor t(DType::kF32, {1000});
    t.data<float>()[999] = bad;
    EXPECT_FALSE(AllFinite(t)) << bad;
  }
  Tensor d(DType::kF64, {4});
  EXPECT_TRUE(AllFinite(d));
  d.data<double>()[2] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(AllFinite(d));
  // Integers are always finite.
  EXPECT_TRUE(AllFinite(Tensor::FromVector<int32_t>({2}, {-1, std::numeric_limits<int32_t>::min()})));
  // The check runs over fixed-length chunks and a scalar tail: a bad value is found anywhere,
  // whatever the length.
  for (int64_t n : {1, 63, 64, 65, 130, 200}) {
    for (int64_t at = 0; at < n; ++at) {
      Tensor f(DType::kF32, {n});
      f.data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_FALSE(AllFinite(f)) << "f32 n " << n << " at " << at;
      Tensor g(DType::kF64, {n});
      g.data<double>()[at] = -std::numeric_limits<double>::infinity();
      EXPECT_FALSE(AllFinite(g)) << "f64 n " << n << " at " << at;
    }
  }
}

TEST(VariableTest, ChargedBytesCountValueSlotsAndName) {
  EXPECT_EQ(Variable::ChargedBytes("w", DType::kF32, {10, 4}, 0), 160 + 1 + Variable::kOverheadBytes);
  EXPECT_EQ(Variable::ChargedBytes("w", DType::kF32, {10, 4}, 2), 3 * 160 + 1 + Variable::kOverheadBytes);
  EXPECT_EQ(Variable::ChargedBytes("emb", DType::kI64, {0, 1000}, 0), 3 + Variable::kOverheadBytes);
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  auto v = MakeVariable("w", Tensor(DType::kF32, {10, 4}), &adam);
  EXPECT_EQ(v->charged_bytes(), Variable::ChargedBytes("w", DType::kF32, {10, 4}, 2));
}

TEST(VariableTest, WrongShapeOrDtypeIsRejectedAndChangesNothing) {
  auto v = MakeVariable("w", RowNumbered(2, 3));
  ASSERT_NE(v, nullptr);
  const Tensor before = v->Read();

  // Dense: same element count but another shape; right shape but another dtype.
  EXPECT_EQ(v->Update(UpdateKind::kAssign, Tensor(DType::kF32, {3, 2})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->Update(UpdateKind::kAssign, Tensor(DType::kF64, {2, 3})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->Update(UpdateKind::kAssign, Tensor(DType::kF32, {6})).code(), absl::StatusCode::kInvalidArgument);
  // Rows: wrong row width, wrong row count, wrong dtype, non-vector ids, float ids.
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({0}), Tensor(DType::kF32, {1, 2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({0, 1}), Tensor(DType::kF32, {1, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({0}), Tensor(DType::kI32, {1, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Tensor::FromVector<int64_t>({1, 1}, {0}), Tensor(DType::kF32, {1, 3}))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Tensor::FromVector<float>({1}, {0}), Tensor(DType::kF32, {1, 3})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->Gather(Tensor::FromVector<float>({1}, {0})).status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(v->Read().Equals(before));
}

TEST(VariableTest, UpdateRowsAppliesDuplicateIdsInOrder) {
  auto v = MakeVariable("w", Tensor(DType::kF32, {3, 2}));
  ASSERT_NE(v, nullptr);
  // Assign is not commutative: the last write of a duplicated row must win.
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAssign, Ids64({1, 1, 0}),
                            Tensor::FromVector<float>({3, 2}, {1, 1, 2, 2, 3, 3}))
                  .ok());
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{3, 3, 2, 2, 0, 0}));
  // Add with duplicates accumulates every occurrence.
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAdd, Ids32({2, 2, 2}), Tensor::FromVector<float>({3, 2}, {1, 2, 3, 4, 5, 6}))
                  .ok());
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{3, 3, 2, 2, 9, 12}));
  // The same again with the duplicates first in the list.
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAssign, Ids64({0, 0}), Tensor::FromVector<float>({2, 2}, {7, 7, 5, 5})).ok());
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{5, 5, 2, 2, 9, 12}));
}

TEST(VariableTest, OutOfRangeIdsAreRejectedAndChangeNothing) {
  auto v = MakeVariable("w", RowNumbered(3, 2));
  ASSERT_NE(v, nullptr);
  const Tensor before = v->Read();
  const Tensor nines = Tensor::FromVector<float>({3, 2}, {9, 9, 9, 9, 9, 9});

  // The bad id comes last, so a row-at-a-time implementation would already have written rows.
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({0, 1, 3}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids64({0, 1, -1}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids32({2, 0, 3}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAssign, Ids32({-1, 0, 1}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAdd, Ids64({0, 1, int64_t{1} << 40}), nines).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(v->Read().Equals(before));

  EXPECT_EQ(v->Gather(Ids64({0, 3})).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(v->Gather(Ids32({-1})).status().code(), absl::StatusCode::kOutOfRange);

  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  auto trained = MakeVariable("t", RowNumbered(3, 2), &sgd);
  ASSERT_NE(trained, nullptr);
  EXPECT_EQ(trained->ApplyRowGradients(Ids64({0, 1, 3}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(trained->ApplyRowGradients(Ids64({0, 1, -1}), nines).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(trained->Read().Equals(before));
  EXPECT_EQ(trained->iterations(), 0);
}

// PrepareRowGradients checks what ApplyRowGradients checks and changes nothing; a prepared
// batch then applies exactly what ApplyRowGradients applies (Adam, duplicates summed).
TEST(VariableTest, PreparedRowGradientsCheckFirstAndApplyAsApplyRowGradients) {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  auto prepared = MakeVariable("p", RowNumbered(70, 3), &adam);
  auto direct = MakeVariable("d", RowNumbered(70, 3), &adam);
  ASSERT_NE(prepared, nullptr);
  ASSERT_NE(direct, nullptr);
  const Tensor before = prepared->Read();
  const Tensor grads = RowNumbered(5, 3);

  EXPECT_EQ(prepared->PrepareRowGradients(Ids64({0, 1, 2, 3, 70}), grads).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(prepared->PrepareRowGradients(Ids32({-1, 1, 2, 3, 4}), grads).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(prepared->PrepareRowGradients(Ids64({0, 1, 2, 3}), grads).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prepared->PrepareRowGradients(Tensor::FromVector<float>({5}, {0, 1, 2, 3, 4}), grads).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto plain = MakeVariable("n", RowNumbered(70, 3));
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->PrepareRowGradients(Ids64({0, 1, 2, 3, 4}), grads).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Prepared but never applied: nothing changes.
  Tensor nan_grads = grads.Clone();
  nan_grads.data<float>()[14] = std::numeric_limits<float>::quiet_NaN();
  auto unapplied = prepared->PrepareRowGradients(Ids64({69, 1, 69, 33, 2}), nan_grads);
  ASSERT_TRUE(unapplied.ok()) << unapplied.status();
  EXPECT_FALSE((*unapplied)->all_finite());
  EXPECT_TRUE(prepared->Read().Equals(before));
  EXPECT_EQ(prepared->iterations(), 0);

  for (int round = 0; round < 3; ++round) {
    const Tensor ids = round == 1 ? Ids32({69, 1, 69, 33, 1}) : Ids64({69, 1, 69, 33, 1});
    auto batch = prepared->PrepareRowGradients(ids, grads);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_TRUE((*batch)->all_finite());
    prepared->ApplyRowGradients(**batch);
    ASSERT_TRUE(direct->ApplyRowGradients(ids, grads).ok());
  }
  EXPECT_EQ(prepared->iterations(), 3);
  EXPECT_TRUE(prepared->Read().Equals(direct->Read()));
  EXPECT_FALSE(prepared->Read().Equals(before));
}

TEST(VariableTest, GatherReturnsRowsInIdOrderWithDuplicates) {
  auto v = MakeVariable("emb", RowNumbered(4, 2));
  ASSERT_NE(v, nullptr);
  const std::vector<float> expected = {30, 31, 0, 1, 30, 31, 10, 11};

  auto by64 = v->Gather(Ids64({3, 0, 3, 1}));
  ASSERT_TRUE(by64.ok()) << by64.status();
  EXPECT_EQ(by64->shape(), (Shape{4, 2}));
  EXPECT_EQ(Values<float>(*by64), expected);

  auto by32 = v->Gather(Ids32({3, 0, 3, 1}));
  ASSERT_TRUE(by32.ok()) << by32.status();
  EXPECT_TRUE(by32->Equals(*by64));

  auto none = v->Gather(Ids64({}));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->shape(), (Shape{0, 2}));

  // The gathered rows are a copy.
  by64->data<float>()[0] = -1;
  EXPECT_EQ(Values<float>(v->Read())[6], 30);
}

TEST(VariableTest, ScalarVariableHasNoRows) {
  auto v = MakeVariable("step", Tensor::Scalar<int64_t>(5));
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->Gather(Ids64({0})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->UpdateRows(UpdateKind::kAdd, Ids64({0}), Tensor::FromVector<int64_t>({1}, {1})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->Read().ScalarAsDouble(), 5);
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, Tensor::Scalar<int64_t>(2)).ok());
  EXPECT_EQ(v->Read().shape(), Shape{});
  EXPECT_EQ(v->Read().ScalarAsDouble(), 7);
}

TEST(VariableTest, GradientsWithoutOptimizerAreFailedPrecondition) {
  auto v = MakeVariable("w", RowNumbered(2, 2));
  ASSERT_NE(v, nullptr);
  EXPECT_FALSE(v->has_optimizer());
  EXPECT_EQ(v->optimizer_config(), nullptr);
  EXPECT_EQ(v->ApplyGradient(Tensor(DType::kF32, {2, 2})).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(v->ApplyRowGradients(Ids64({0}), Tensor(DType::kF32, {1, 2})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(v->Read().Equals(RowNumbered(2, 2)));
  EXPECT_EQ(v->iterations(), 0);
}

TEST(VariableTest, OptimizerNeedsAnF32VariableAndAValidConfig) {
  OptimizerConfig sgd;
  EXPECT_EQ(Variable::Create("d", Tensor(DType::kF64, {2}), &sgd).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Variable::Create("i", Tensor(DType::kI32, {2}), &sgd).status().code(), absl::StatusCode::kInvalidArgument);
  OptimizerConfig bad;
  bad.kind = OptimizerKind::kAdam;
  bad.beta_1 = 1.5f;
  EXPECT_EQ(Variable::Create("w", Tensor(DType::kF32, {2}), &bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(VariableTest, SgdAppliesDenseGradient) {
  OptimizerConfig sgd;
  sgd.learning_rate = 0.5f;
  auto v = MakeVariable("w", Tensor::FromVector<float>({3}, {1, 2, 3}), &sgd);
  ASSERT_NE(v, nullptr);
  ASSERT_NE(v->optimizer_config(), nullptr);
  EXPECT_EQ(v->optimizer_config()->learning_rate, 0.5f);

  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({3}, {2, -4, 0.5f})).ok());
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{0, 4, 2.75f}));
  EXPECT_EQ(v->iterations(), 1);

  // Wrong shape or dtype: rejected, nothing changes, not counted.
  EXPECT_EQ(v->ApplyGradient(Tensor(DType::kF32, {4})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v->ApplyGradient(Tensor(DType::kF64, {3})).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<float>(v->Read()), (std::vector<float>{0, 4, 2.75f}));
  EXPECT_EQ(v->iterations(), 1);
}

TEST(VariableTest, SparseGradientSumsDuplicatesAndTouchesOnlyItsRows) {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.1f;
  Tensor ones(DType::kF32, {4, 2});
  for (float& x : ones.flat<float>()) x = 1;
  auto v = MakeVariable("emb", ones, &adam);
  ASSERT_NE(v, nullptr);

  // Row 2 appears twice (1 + 2 = 3), row 0 once with 3: both rows must end up exactly like a
  // dense Adam step with gradient 3. Applying the duplicates one after the other would leave a
  // different m (0.29 instead of 0.3).
  ASSERT_TRUE(v->ApplyRowGradients(Ids64({2, 0, 2}), Tensor::FromVector<float>({3, 2}, {1, 1, 3, 3, 2, 2})).ok());
  EXPECT_EQ(v->iterations(), 1);

  Tensor one_row(DType::kF32, {1, 2});
  for (float& x : one_row.flat<float>()) x = 1;
  auto reference = MakeVariable("ref", one_row, &adam);
  ASSERT_NE(reference, nullptr);
  ASSERT_TRUE(reference->ApplyGradient(Tensor::FromVector<float>({1, 2}, {3, 3})).ok());
  auto ref = reference->Snapshot();
  ASSERT_EQ(ref.size(), 3u);

  auto snapshot = v->Snapshot();
  ASSERT_EQ(snapshot.size(), 3u);
  EXPECT_EQ(snapshot[0].first, "emb");
  EXPECT_EQ(snapshot[1].first, "emb/m");
  EXPECT_EQ(snapshot[2].first, "emb/v");
  for (size_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(snapshot[k].first);
    const std::vector<float> got = Values<float>(snapshot[k].second);
    const std::vector<float> want = Values<float>(ref[k].second);
    const float untouched = k == 0 ? 1.0f : 0.0f;
    // Touched rows 0 and 2 equal the reference row; rows 1 and 3 keep their initial values.
    for (int64_t row : {0, 2}) {
      EXPECT_FLOAT_EQ(got[row * 2], want[0]);
      EXPECT_FLOAT_EQ(got[row * 2 + 1], want[1]);
    }
    for (int64_t row : {1, 3}) {
      EXPECT_EQ(got[row * 2], untouched);
      EXPECT_EQ(got[row * 2 + 1], untouched);
    }
  }
  EXPECT_NEAR(Values<float>(snapshot[1].second)[0], 0.3f, 1e-6);   // m = (1 - beta_1) * 3
  EXPECT_NEAR(Values<float>(snapshot[2].second)[0], 0.009f, 1e-6);  // v = (1 - beta_2) * 9
  EXPECT_LT(Values<float>(snapshot[0].second)[0], 1.0f);
}

// Pushes hitting every stripe, with many duplicates, must leave the variable and its slots
// bit-identical to summing duplicates in request order and calling UpdateRule::Apply per row.
TEST(VariableTest, SparseGradientsOverAllStripesMatchPerRowApply) {
  constexpr int64_t kRows = 3 * Variable::kStripes + 5;
  constexpr int64_t kCols = 6;
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdagrad,
                             OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    SCOPED_TRACE(OptimizerKindName(kind));
    OptimizerConfig config;
    config.kind = kind;
    config.learning_rate = 0.05f;
    config.momentum = kind == OptimizerKind::kMomentum ? 0.9f : 0.0f;
    auto v = MakeVariable("emb", RowNumbered(kRows, kCols), &config);
    ASSERT_NE(v, nullptr);
    auto opt = UpdateRule::Create(config);
    ASSERT_TRUE(opt.ok());
    std::vector<float> var = Values<float>(RowNumbered(kRows, kCols));
    std::vector<std::vector<float>> slots;
    for (const SlotSpec& spec : (*opt)->slots()) {
      slots.emplace_back(static_cast<size_t>(kRows * kCols), spec.initial_value);
    }
    std::mt19937 rng(3);
    std::uniform_int_distribution<int64_t> id(0, kRows - 1);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<int64_t> ids(200);
      for (int64_t& x : ids) x = id(rng);
      std::vector<float> grads(ids.size() * kCols);
      for (float& x : grads) x = value(rng);
      ASSERT_TRUE(v->ApplyRowGradients(Ids64(ids),
                                       Tensor::FromVector<float>({200, kCols}, grads)).ok());
      // Reference: sum in request order, then one Apply per distinct row.
      std::vector<int64_t> distinct;
      std::vector<std::vector<float>> sums(kRows);
      for (size_t i = 0; i < ids.size(); ++i) {
        std::vector<float>& sum = sums[static_cast<size_t>(ids[i])];
        if (sum.empty()) {
          distinct.push_back(ids[i]);
          sum.assign(grads.begin() + i * kCols, grads.begin() + (i + 1) * kCols);
        } else {
          for (int64_t k = 0; k < kCols; ++k) sum[k] += grads[i * kCols + k];
        }
      }
      for (int64_t row : distinct) {
        std::vector<float*> slot_rows;
        for (auto& s : slots) slot_rows.push_back(s.data() + row * kCols);
        (*opt)->Apply(var.data() + row * kCols, sums[static_cast<size_t>(row)].data(), slot_rows,
                      kCols, step);
      }
    }
    auto snapshot = v->Snapshot();
    ASSERT_EQ(snapshot.size(), slots.size() + 1);
    EXPECT_EQ(Values<float>(snapshot[0].second), var);
    for (size_t k = 0; k < slots.size(); ++k) {
      EXPECT_EQ(Values<float>(snapshot[k + 1].second), slots[k]) << snapshot[k + 1].first;
    }
  }
}

// Row updates and gathers group ids by stripe internally; results must still follow request
// order (duplicates applied in order, gathered rows in id order).
TEST(VariableTest, RowUpdatesAndGathersOverAllStripesKeepRequestOrder) {
  constexpr int64_t kRows = 2 * Variable::kStripes + 7;
  constexpr int64_t kCols = 3;
  auto v = MakeVariable("t", RowNumbered(kRows, kCols));
  ASSERT_NE(v, nullptr);
  std::vector<float> expected = Values<float>(RowNumbered(kRows, kCols));
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> id(0, kRows - 1);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (UpdateKind kind : {UpdateKind::kAssign, UpdateKind::kAdd, UpdateKind::kMul}) {
    std::vector<int32_t> ids(150);
    for (int32_t& x : ids) x = id(rng);
    std::vector<float> values(ids.size() * kCols);
    for (float& x : values) x = value(rng);
    ASSERT_TRUE(
        v->UpdateRows(kind, Ids32(ids), Tensor::FromVector<float>({150, kCols}, values)).ok());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < kCols; ++k) {
        float& dst = expected[ids[i] * kCols + k];
        const float src = values[i * kCols + k];
        dst = kind == UpdateKind::kAssign ? src : kind == UpdateKind::kAdd ? dst + src : dst * src;
      }
    }
    EXPECT_EQ(Values<float>(v->Read()), expected) << UpdateKindName(kind);
  }
  std::vector<int64_t> ids(100);
  for (int64_t& x : ids) x = id(rng);
  auto gathered = v->Gather(Ids64(ids));
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  std::vector<float> want;
  for (int64_t row : ids) {
    want.insert(want.end(), expected.begin() + row * kCols, expected.begin() + (row + 1) * kCols);
  }
  EXPECT_EQ(Values<float>(*gathered), want);
}

TEST(VariableTest, IterationsCountsSuccessfulPushes) {
  OptimizerConfig sgd;
  auto v = MakeVariable("w", Tensor(DType::kF32, {4, 2}), &sgd);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->iterations(), 0);
  ASSERT_TRUE(v->ApplyGradient(Tensor(DType::kF32, {4, 2})).ok());
  ASSERT_TRUE(v->ApplyRowGradients(Ids64({1, 1, 3}), Tensor(DType::kF32, {3, 2})).ok());
  ASSERT_TRUE(v->ApplyRowGradients(Ids32({0}), Tensor(DType::kF32, {1, 2})).ok());
  EXPECT_FALSE(v->ApplyGradient(Tensor(DType::kF32, {2, 2})).ok());
  // Plain updates are not optimizer steps.
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, Tensor(DType::kF32, {4, 2})).ok());
  EXPECT_EQ(v->iterations(), 3);
}

// ---- Concurrency --------------------------------------------------------------------------

constexpr int kThreads = 8;
constexpr int kOpsPerThread = 1000;

// Runs fn(0) .. fn(n - 1) on n threads released together, so their work overlaps as much as
// the scheduler allows.
template <typename Fn>
void RunThreads(int n, Fn fn) {
  std::latch start(n);
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&fn, &start, t] {
      start.arrive_and_wait();
      fn(t);
    });
  }
  for (std::thread& th : threads) th.join();
}

TEST(VariableConcurrencyTest, ConcurrentDenseAddsAreNeverLost) {
  auto v = MakeVariable("w", Tensor(DType::kF32, {64, 16}));
  ASSERT_NE(v, nullptr);
  Tensor ones(DType::kF32, {64, 16});
  for (float& x : ones.flat<float>()) x = 1;
  std::atomic<int> failures{0};
  RunThreads(kThreads, [&](int) {
    for (int i = 0; i < kOpsPerThread; ++i) {
      if (!v->Update(UpdateKind::kAdd, ones).ok()) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  const Tensor result = v->Read();
  int wrong = 0;
  for (float x : result.flat<float>()) wrong += x != kThreads * kOpsPerThread;
  EXPECT_EQ(wrong, 0) << result.DebugString();
}

TEST(VariableConcurrencyTest, ConcurrentRowAddsGiveExactTotals) {
  constexpr int64_t kRows = 64, kCols = 8, kIdsPerCall = 4;
  auto v = MakeVariable("emb", Tensor(DType::kF32, {kRows, kCols}));
  ASSERT_NE(v, nullptr);
  // Each thread keeps its own expected totals; integers stay far below 2^24, so float sums are
  // exact whatever the interleaving.
  std::vector<std::vector<int64_t>> expected(kThreads, std::vector<int64_t>(kRows * kCols, 0));
  std::atomic<int> failures{0};
  RunThreads(kThreads, [&](int t) {
    std::mt19937 rng(1234 + t);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    std::uniform_int_distribution<int> value(-3, 5);
    for (int i = 0; i < kOpsPerThread; ++i) {
      std::vector<int64_t> ids;
      Tensor values(DType::kF32, {kIdsPerCall, kCols});
      for (int64_t k = 0; k < kIdsPerCall; ++k) {
        ids.push_back(row(rng));  // duplicates within a call happen and must both count
        for (int64_t c = 0; c < kCols; ++c) {
          const int x = value(rng);
          values.data<float>()[k * kCols + c] = static_cast<float>(x);
          expected[t][ids.back() * kCols + c] += x;
        }
      }
      const Tensor id_tensor = (i % 2 == 0) ? Ids64(ids) : Ids32(std::vector<int32_t>(ids.begin(), ids.end()));
      if (!v->UpdateRows(UpdateKind::kAdd, id_tensor, values).ok()) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  const Tensor result = v->Read();
  int wrong = 0;
  for (int64_t e = 0; e < kRows * kCols; ++e) {
    int64_t total = 0;
    for (int t = 0; t < kThreads; ++t) total += expected[t][e];
    wrong += result.data<float>()[e] != static_cast<float>(total);
  }
  EXPECT_EQ(wrong, 0);
}

TEST(VariableConcurrencyTest, MixedDenseAndRowAddsGiveExactTotals) {
  constexpr int64_t kRows = 32, kCols = 4;
  auto v = MakeVariable("w", Tensor(DType::kF32, {kRows, kCols}));
  ASSERT_NE(v, nullptr);
  Tensor ones(DType::kF32, {kRows, kCols});
  for (float& x : ones.flat<float>()) x = 1;
  std::vector<std::vector<int64_t>> row_hits(kThreads, std::vector<int64_t>(kRows, 0));
  RunThreads(kThreads, [&](int t) {
    std::mt19937 rng(99 + t);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    for (int i = 0; i < kOpsPerThread; ++i) {
      if (t % 2 == 0) {
        ASSERT_TRUE(v->Update(UpdateKind::kAdd, ones).ok());
      } else {
        const int64_t r = row(rng);
        ++row_hits[t][r];
        ASSERT_TRUE(v->UpdateRows(UpdateKind::kAdd, Ids64({r}), Tensor::FromVector<float>({1, kCols}, {2, 2, 2, 2})).ok());
      }
    }
  });
  const Tensor result = v->Read();
  const int64_t dense_total = (kThreads / 2) * kOpsPerThread;
  int wrong = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    int64_t hits = 0;
    for (int t = 0; t < kThreads; ++t) hits += row_hits[t][r];
    for (int64_t c = 0; c < kCols; ++c) wrong += result.data<float>()[r * kCols + c] != dense_total + 2 * hits;
  }
  EXPECT_EQ(wrong, 0);
}

TEST(VariableConcurrencyTest, ConcurrentGradientPushesAreNeverLost) {
  constexpr int64_t kRows = 16, kCols = 256;
  constexpr int kPushes = 500;
  OptimizerConfig sgd;
  sgd.learning_rate = 1;  // var -= g: exact for small integers
  auto v = MakeVariable("w", Tensor(DType::kF32, {kRows, kCols}), &sgd);
  ASSERT_NE(v, nullptr);
  Tensor ones(DType::kF32, {kRows, kCols});
  for (float& x : ones.flat<float>()) x = 1;
  Tensor row_ones(DType::kF32, {2, kCols});
  for (float& x : row_ones.flat<float>()) x = 1;
  std::vector<std::vector<int64_t>> row_hits(kThreads, std::vector<int64_t>(kRows, 0));
  RunThreads(kThreads, [&](int t) {
    std::mt19937 rng(7 + t);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    for (int i = 0; i < kPushes; ++i) {
      if (t % 2 == 0) {
        ASSERT_TRUE(v->ApplyGradient(ones).ok());
      } else {
        const int64_t a = row(rng), b = row(rng);
        ++row_hits[t][a];
        ++row_hits[t][b];
        ASSERT_TRUE(v->ApplyRowGradients(Ids64({a, b}), row_ones).ok());
      }
    }
  });
  EXPECT_EQ(v->iterations(), kThreads * kPushes);
  const Tensor result = v->Read();
  const int64_t dense_total = (kThreads / 2) * kPushes;
  int wrong = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    int64_t hits = 0;
    for (int t = 0; t < kThreads; ++t) hits += row_hits[t][r];
    for (int64_t c = 0; c < kCols; ++c) wrong += result.data<float>()[r * kCols + c] != -(dense_total + hits);
  }
  EXPECT_EQ(wrong, 0);
}

// Large sparse SGD pushes from several threads, each full of duplicates and spread over every
// stripe, to rows the other threads push too: every occurrence of every id counts exactly once
// (duplicates are summed within a push, pushes serialise per stripe).
TEST(VariableConcurrencyTest, SparsePushesWithDuplicatesGiveExactSums) {
  constexpr int64_t kRows = 3 * Variable::kStripes + 1, kCols = 8, kIdsPerPush = 300;
  constexpr int kPushes = 200;
  OptimizerConfig sgd;
  sgd.learning_rate = 1;  // var -= g: exact for small integers
  auto v = MakeVariable("emb", Tensor(DType::kF32, {kRows, kCols}), &sgd);
  ASSERT_NE(v, nullptr);
  std::vector<std::vector<int64_t>> expected(kThreads, std::vector<int64_t>(kRows * kCols, 0));
  std::atomic<int> failures{0};
  RunThreads(kThreads, [&](int t) {
    std::mt19937 rng(500 + t);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    std::uniform_int_distribution<int> value(-2, 3);
    for (int p = 0; p < kPushes; ++p) {
      std::vector<int64_t> ids(kIdsPerPush);
      Tensor grads(DType::kF32, {kIdsPerPush, kCols});
      for (int64_t k = 0; k < kIdsPerPush; ++k) {
        ids[k] = row(rng);
        for (int64_t c = 0; c < kCols; ++c) {
          const int x = value(rng);
          grads.data<float>()[k * kCols + c] = static_cast<float>(x);
          expected[t][ids[k] * kCols + c] -= x;
        }
      }
      const Tensor id_tensor = p % 2 == 0 ? Ids64(ids) : Ids32(std::vector<int32_t>(ids.begin(), ids.end()));
      if (!v->ApplyRowGradients(id_tensor, grads).ok()) failures.fetch_add(1);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(v->iterations(), kThreads * kPushes);
  const Tensor result = v->Read();
  int wrong = 0;
  for (int64_t e = 0; e < kRows * kCols; ++e) {
    int64_t total = 0;
    for (int t = 0; t < kThreads; ++t) total += expected[t][e];
    wrong += result.data<float>()[e] != static_cast<float>(total);
  }
  EXPECT_EQ(wrong, 0);
}

// Writers assign whole rows (writer k writes k + 1 into every element of the row, and a dense
// writer assigns whole tensors of uniform rows) while readers Gather and Read: every row a reader
// sees must be uniform, i.e. come entirely from one write.
TEST(VariableConcurrencyTest, ReadersNeverSeeTornRows) {
  // Wide rows make a copy slow enough for an unlocked reader to overlap a writer.
  constexpr int64_t kRows = 8, kCols = 8192;
  constexpr int kWriters = 4, kReaders = 3, kMinReads = 200;
  auto v = MakeVariable("emb", Tensor(DType::kF32, {kRows, kCols}));
  ASSERT_NE(v, nullptr);
  std::atomic<int> writers_left{kWriters + 1};
  std::atomic<int64_t> torn{0}, rows_seen{0};
  std::atomic<int> failures{0};

  auto count_torn = [&](const Tensor& t) {
    const int64_t rows = t.dim(0);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = t.data<float>() + r * kCols;
      bool uniform = row[0] >= 0 && row[0] <= kWriters + 1;
      for (int64_t c = 1; c < kCols; ++c) uniform = uniform && row[c] == row[0];
      if (!uniform) torn.fetch_add(1);
    }
    rows_seen.fetch_add(rows);
  };

  std::latch start(kWriters + 1 + kReaders);
  std::vector<std::thread> threads;
  for (int k = 0; k < kWriters; ++k) {
    threads.emplace_back([&, k] {
      start.arrive_and_wait();
      std::mt19937 rng(k);
      std::uniform_int_distribution<int64_t> row(0, kRows - 1);
      constexpr int64_t kBatch = 4;
      Tensor values(DType::kF32, {kBatch, kCols});
      for (float& x : values.flat<float>()) x = static_cast<float>(k + 1);
      for (int i = 0; i < kOpsPerThread; ++i) {
        std::vector<int64_t> ids;
        for (int64_t j = 0; j < kBatch; ++j) ids.push_back(row(rng));
        if (!v->UpdateRows(UpdateKind::kAssign, Ids64(ids), values).ok()) failures.fetch_add(1);
      }
      writers_left.fetch_sub(1);
    });
  }
  threads.emplace_back([&] {
    start.arrive_and_wait();
    // Dense writer: whole tensors whose rows are uniform but differ from row to row.
    for (int i = 0; i < kOpsPerThread / 10; ++i) {
      Tensor values(DType::kF32, {kRows, kCols});
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < kCols; ++c) values.data<float>()[r * kCols + c] = static_cast<float>((r + i) % 2 == 0 ? kWriters + 1 : 0);
      }
      if (!v->Update(UpdateKind::kAssign, values).ok()) failures.fetch_add(1);
    }
    writers_left.fetch_sub(1);
  });
  for (int k = 0; k < kReaders; ++k) {
    threads.emplace_back([&, k] {
      start.arrive_and_wait();
      std::mt19937 rng(100 + k);
      std::uniform_int_distribution<int64_t> row(0, kRows - 1);
      // Keep reading while any writer runs, and at least kMinReads times.
      for (int i = 0; i < kMinReads || writers_left.load() > 0; ++i) {
        if (i % 2 == 0) {
          count_torn(v->Read());
        } else {
          std::vector<int64_t> ids;
          for (int j = 0; j < 16; ++j) ids.push_back(row(rng));
          auto got = v->Gather(Ids64(ids));
          if (!got.ok()) {
            failures.fetch_add(1);
            continue;
          }
          count_torn(*got);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "of " << rows_seen.load() << " rows read";
  EXPECT_GT(rows_seen.load(), 0);
}

// Sparse pushes with repeated ids (prepared, then applied) race gathers of the same rows. Each
// push's gradient is uniform along a row, so a gathered row that is not uniform was torn; once
// every push is in, each element is exactly minus the sum of what was pushed to it.
TEST(VariableConcurrencyTest, SparsePushesAndGathersNeverTearAndSumExactly) {
  constexpr int64_t kRows = 2 * Variable::kStripes + 3, kCols = 64, kIdsPerPush = 200;
  constexpr int kPushers = 3, kGatherers = 2, kPushes = 150, kMinGathers = 100;
  OptimizerConfig sgd;
  sgd.learning_rate = 1;  // var -= g: exact for small integers
  auto v = MakeVariable("emb", Tensor(DType::kF32, {kRows, kCols}), &sgd);
  ASSERT_NE(v, nullptr);
  std::vector<std::vector<int64_t>> expected(kPushers, std::vector<int64_t>(kRows, 0));
  std::atomic<int> pushers_left{kPushers};
  std::atomic<int> failures{0};
  std::atomic<int64_t> torn{0}, rows_seen{0};
  std::latch start(kPushers + kGatherers);
  std::vector<std::thread> threads;
  for (int t = 0; t < kPushers; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      std::mt19937 rng(900 + t);
      // Few distinct rows per push: many repeats.
      std::uniform_int_distribution<int64_t> row(0, kRows - 1);
      std::uniform_int_distribution<int> value(-3, 3);
      for (int p = 0; p < kPushes; ++p) {
        std::vector<int64_t> ids(kIdsPerPush);
        Tensor grads(DType::kF32, {kIdsPerPush, kCols});
        for (int64_t k = 0; k < kIdsPerPush; ++k) {
          ids[static_cast<size_t>(k)] = row(rng);
          const int x = value(rng);
          for (int64_t c = 0; c < kCols; ++c) grads.data<float>()[k * kCols + c] = static_cast<float>(x);
          expected[static_cast<size_t>(t)][static_cast<size_t>(ids[static_cast<size_t>(k)])] -= x;
        }
        auto batch = v->PrepareRowGradients(Ids64(ids), grads);
        if (!batch.ok() || !(*batch)->all_finite()) {
          failures.fetch_add(1);
          continue;
        }
        v->ApplyRowGradients(**batch);
      }
      pushers_left.fetch_sub(1);
    });
  }
  for (int k = 0; k < kGatherers; ++k) {
    threads.emplace_back([&, k] {
      start.arrive_and_wait();
      std::mt19937 rng(950 + k);
      std::uniform_int_distribution<int64_t> row(0, kRows - 1);
      for (int i = 0; i < kMinGathers || pushers_left.load() > 0; ++i) {
        std::vector<int64_t> ids(48);
        for (int64_t& id : ids) id = row(rng);
        auto got = v->Gather(Ids64(ids));
        if (!got.ok()) {
          failures.fetch_add(1);
          continue;
        }
        for (int64_t r = 0; r < got->dim(0); ++r) {
          const float* g = got->data<float>() + r * kCols;
          bool uniform = true;
          for (int64_t c = 1; c < kCols; ++c) uniform = uniform && g[c] == g[0];
          if (!uniform) torn.fetch_add(1);
        }
        rows_seen.fetch_add(got->dim(0));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "of " << rows_seen.load() << " rows gathered";
  EXPECT_EQ(v->iterations(), kPushers * kPushes);
  const Tensor result = v->Read();
  int64_t wrong = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    int64_t total = 0;
    for (int t = 0; t < kPushers; ++t) total += expected[static_cast<size_t>(t)][static_cast<size_t>(r)];
    for (int64_t c = 0; c < kCols; ++c) wrong += result.data<float>()[r * kCols + c] != static_cast<float>(total);
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace variable_test_internal
}  // namespace asyncps::ps
