#include "core/sync.h"
#include "ps/variable.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "ps/parallel_apply.h"
#include "ps/row_batch.h"

namespace asyncps::ps {
namespace {

// Two's-complement wrapping arithmetic for integers (TensorFlow's integer ops wrap): the
// operation is done on the unsigned type, where overflow is defined, and converted back
// (modular since C++20). Floats use their own IEEE arithmetic.
template <typename T>
struct Arith {
  static T Add(T a, T b) { return a + b; }
  static T Sub(T a, T b) { return a - b; }
  static T Mul(T a, T b) { return a * b; }
  static T Div(T a, T b) { return a / b; }
};

template <typename T>
  requires std::is_integral_v<T>
struct Arith<T> {
  using U = std::make_unsigned_t<T>;
  // unsigned int at least, so uint8_t's promotion to int cannot overflow a multiply.
  using W = std::common_type_t<U, unsigned int>;
  static T Add(T a, T b) { return static_cast<T>(static_cast<W>(static_cast<U>(a)) + static_cast<U>(b)); }
  static T Sub(T a, T b) { return static_cast<T>(static_cast<W>(static_cast<U>(a)) - static_cast<U>(b)); }
  static T Mul(T a, T b) { return static_cast<T>(static_cast<W>(static_cast<U>(a)) * static_cast<U>(b)); }
  // b != 0 (checked before). MIN / -1 would trap (SIGFPE on x86): it wraps to MIN, which is
  // 0 - MIN in unsigned arithmetic.
  static T Div(T a, T b) {
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return Sub(0, a);
    }
    return static_cast<T>(a / b);
  }
};

// dst[i] = dst[i] (op) src[i] for n elements; the loops are simple so they vectorise.
template <typename T>
void Combine(UpdateKind kind, T* __restrict dst, const T* __restrict src, int64_t n) {
  using A = Arith<T>;
  switch (kind) {
    case UpdateKind::kAssign:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
      return;
    case UpdateKind::kAdd:
      for (int64_t i = 0; i < n; ++i) dst[i] = A::Add(dst[i], src[i]);
      return;
    case UpdateKind::kSub:
      for (int64_t i = 0; i < n; ++i) dst[i] = A::Sub(dst[i], src[i]);
      return;
    case UpdateKind::kMin:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      return;
    case UpdateKind::kMax:
      for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      return;
    case UpdateKind::kMul:
      for (int64_t i = 0; i < n; ++i) dst[i] = A::Mul(dst[i], src[i]);
      return;
    case UpdateKind::kDiv:
      for (int64_t i = 0; i < n; ++i) dst[i] = A::Div(dst[i], src[i]);
      return;
  }
}

void CombineBytes(DType dtype, UpdateKind kind, void* dst, const void* src, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      return Combine(kind, static_cast<float*>(dst), static_cast<const float*>(src), n);
    case DType::kF64:
      return Combine(kind, static_cast<double*>(dst), static_cast<const double*>(src), n);
    case DType::kI32:
      return Combine(kind, static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n);
    case DType::kI64:
      return Combine(kind, static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n);
    case DType::kU8:
    case DType::kBool:
      return Combine(kind, static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
  }
}

bool IsInteger(DType d) { return d == DType::kI32 || d == DType::kI64 || d == DType::kU8; }

// Rejects combinations that are undefined: arithmetic on booleans, a bool byte other than 0
// or 1, integer division by zero.
absl::Status CheckKind(const std::string& name, DType dtype, UpdateKind kind, const Tensor& value) {
  if (dtype == DType::kBool) {
    if (kind != UpdateKind::kAssign) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' is bool; only assign is allowed, not ", UpdateKindName(kind)));
    }
    const uint8_t* bytes = static_cast<const uint8_t*>(value.raw_data());
    uint8_t high = 0;
    for (int64_t i = 0; i < value.num_elements(); ++i) high |= bytes[i];
    if ((high & 0xfe) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("bool value other than 0 or 1 in update of '", name, "'"));
    }
  }
  if (kind == UpdateKind::kDiv && IsInteger(dtype)) {
    const size_t size = DTypeSize(dtype);
    const char* bytes = static_cast<const char*>(value.raw_data());
    for (int64_t i = 0; i < value.num_elements(); ++i) {
      bool zero = true;
      for (size_t b = 0; b < size; ++b) zero = zero && bytes[static_cast<size_t>(i) * size + b] == 0;
      if (zero) {
        return absl::InvalidArgumentError(absl::StrCat("integer division by zero in update of '", name, "'"));
      }
    }
  }
  return absl::OkStatus();
}

template <typename T, typename Bits>
bool AllFiniteAs(const void* data, int64_t n) {
  // Exponent bits all set is infinity or NaN. A count over the whole array (no early exit) in
  // fixed-length chunks vectorises at -O2; a gradient is read once more anyway when applied.
  constexpr Bits kExponent = static_cast<Bits>(std::is_same_v<T, float> ? 0x7f800000ULL : 0x7ff0000000000000ULL);
  constexpr int64_t kChunk = 64;
  const Bits* bits = static_cast<const Bits*>(data);
  Bits bad = 0;
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) bad += (bits[i + j] & kExponent) == kExponent ? 1 : 0;
  }
  for (; i < n; ++i) bad += (bits[i] & kExponent) == kExponent ? 1 : 0;
  return bad == 0;
}

// Prefetches the first bytes of the row `ahead` places further in `order`, if any: gathered and
// scattered rows of a large table are cache misses, and a row's copy is too short to hide one.
constexpr size_t kPrefetchRowsAhead = 8;
constexpr size_t kPrefetchBytes = 512;

// A gather of at most this many ids holds every stripe it touches for its whole copy (a few
// microseconds of row copies at most); a larger one takes one stripe at a time, so that it does
// not hold writers off every stripe at once for long.
constexpr size_t kGatherHoldingStripesRows = 2048;

void PrefetchRow(const char* row, size_t bytes, int write) {
  for (size_t b = 0; b < std::min(bytes, kPrefetchBytes); b += 64) {
    if (write) {
      __builtin_prefetch(row + b, 1, 3);
    } else {
      __builtin_prefetch(row + b, 0, 3);
    }
  }
}

// Calls visit(i) for each request row i of stripe `s` (rows[i] is its row in the table at
// `base`), prefetching the row kPrefetchRowsAhead further on. The caller holds the stripe.
template <typename Visit>
void VisitStripeRows(const StripeGroups& groups, int s, absl::Span<const int64_t> rows,
                     const char* base, size_t bytes, int write, Visit visit) {
  const size_t end = groups.begin[s + 1];
  for (size_t j = groups.begin[s]; j < end; ++j) {
    if (j + kPrefetchRowsAhead < end) {
      PrefetchRow(base + rows[groups.order[j + kPrefetchRowsAhead]] * bytes, bytes, write);
    }
    visit(groups.order[j]);
  }
}

// The most slots an optimizer keeps (Adam and FTRL have two).
constexpr size_t kVariableMaxSlots = 4;

// Where each of `parts` runs of whole stripes begins, for about equal numbers of rows:
// part p applies stripes [first[p], first[p + 1]); first[parts] is kRowStripes.
std::array<int, ApplyPool::kMaxParts + 1> VariableStripeRuns(const SummedRowGradients& summed, int parts) {
  std::array<int, ApplyPool::kMaxParts + 1> first{};
  first[static_cast<size_t>(parts)] = kRowStripes;
  const size_t total = summed.num_distinct();
  size_t seen = 0;
  int p = 1;
  for (int s = 0; s < kRowStripes && p < parts; ++s) {
    seen += summed.rows(s).size();
    // Part p starts after the stripe that brings the count to p / parts of the rows.
    while (p < parts && seen * static_cast<size_t>(parts) >= total * static_cast<size_t>(p)) {
      first[static_cast<size_t>(p++)] = s + 1;
    }
  }
  while (p < parts) first[static_cast<size_t>(p++)] = kRowStripes;
  return first;
}

// [begin, end) of part `p` of `parts` of n elements, the boundaries on whole cache lines so
// that a part's vector loop sees the alignment the whole array has.
std::pair<int64_t, int64_t> VariablePartRange(int64_t n, int parts, int p) {
  constexpr int64_t kGrain = 16;
  auto boundary = [&](int q) { return q == parts ? n : std::min(n, n * q / parts / kGrain * kGrain); };
  return {boundary(p), boundary(p + 1)};
}

}  // namespace

bool AllFinite(const Tensor& t, ApplyPool* pool) {
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kF64) return true;
  const bool f32 = t.dtype() == DType::kF32;
  const char* base = static_cast<const char*>(t.raw_data());
  const size_t size = DTypeSize(t.dtype());
  auto check = [&](int64_t begin, int64_t end) {
    const char* data = base + static_cast<size_t>(begin) * size;
    return f32 ? AllFiniteAs<float, uint32_t>(data, end - begin) : AllFiniteAs<double, uint64_t>(data, end - begin);
  };
  const int parts = ApplyParts(pool, t.num_elements(), &ApplyPool::Options::min_check_elements);
  if (parts == 1) return check(0, t.num_elements());
  // A large gradient is checked in parts on the pool's threads.
  std::array<bool, ApplyPool::kMaxParts> finite{};
  ApplyInParts(pool, parts, [&](int p) {
    const auto [begin, end] = VariablePartRange(t.num_elements(), parts, p);
    finite[static_cast<size_t>(p)] = check(begin, end);
  });
  return std::all_of(finite.begin(), finite.begin() + parts, [](bool f) { return f; });
}

absl::StatusOr<std::unique_ptr<Variable>> Variable::Create(std::string name, Tensor initial,
                                                           const OptimizerConfig* optimizer, ApplyPool* apply_pool) {
  std::unique_ptr<Variable> v(new Variable());
  v->apply_pool_ = apply_pool;
  v->name_ = std::move(name);
  v->dtype_ = initial.dtype();
  v->shape_ = initial.shape();
  v->value_ = std::move(initial);
  if (optimizer != nullptr) {
    if (v->dtype_ != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", v->name_, "' is ",
                                                     DTypeName(v->dtype_),
                                                     "; server-side optimizers need f32"));
    }
    auto opt = UpdateRule::Create(*optimizer);
    if (!opt.ok()) return opt.status();
    v->optimizer_ = std::move(*opt);
    for (const SlotSpec& slot : v->optimizer_->slots()) {
      Tensor t(DType::kF32, v->shape_);
      std::fill_n(t.data<float>(), t.num_elements(), slot.initial_value);
      v->slots_.push_back(std::move(t));
      v->slot_data_.push_back(v->slots_.back().data<float>());
    }
  }
  return v;
}

absl::StatusOr<std::unique_ptr<Variable>> Variable::CreateFromState(std::string name, State state,
                                                                    const OptimizerConfig* optimizer,
                                                                    ApplyPool* apply_pool) {
  RETURN_IF_ERROR(CheckIterations(name, state.iterations));
  const Shape shape = state.value.shape();
  std::unique_ptr<UpdateRule> rule;
  if (optimizer != nullptr) {
    if (state.value.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' is ", DTypeName(state.value.dtype()),
                                                     "; server-side optimizers need f32"));
    }
    ASSIGN_OR_RETURN(rule, UpdateRule::Create(*optimizer));
  }
  const size_t expected_slots = rule == nullptr ? 0 : rule->slots().size();
  if (state.slots.size() != expected_slots) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' has ", expected_slots,
                                                   " optimizer slots, its state gives ", state.slots.size()));
  }
  for (const Tensor& slot : state.slots) {
    if (slot.dtype() != DType::kF32 || slot.shape() != shape) {
      return absl::InvalidArgumentError(absl::StrCat("slot of '", name, "' must be f32", ShapeString(shape), ", got ",
                                                     DTypeName(slot.dtype()), ShapeString(slot.shape())));
    }
  }
  // Create with the received value and no optimizer (so no slots are allocated), then the
  // optimizer and the received slots.
  ASSIGN_OR_RETURN(std::unique_ptr<Variable> v, Create(std::move(name), std::move(state.value), nullptr, apply_pool));
  v->optimizer_ = std::move(rule);
  for (Tensor& slot : state.slots) {
    v->slots_.push_back(std::move(slot));
    v->slot_data_.push_back(v->slots_.back().data<float>());
  }
  v->iterations_.store(state.iterations, std::memory_order_relaxed);
  v->version_.store(state.iterations, std::memory_order_release);
  return v;
}

absl::Status Variable::CheckIterations(const std::string& name, int64_t iterations) {
  if (iterations >= 0 && iterations <= kMaxIterations) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("step counter ", iterations, " for '", name, "' is negative or over ",
                                                 kMaxIterations));
}

uint64_t Variable::ChargedBytes(const std::string& name, DType dtype, const Shape& shape, size_t num_slots) {
  const uint64_t elements = static_cast<uint64_t>(NumElements(shape));
  return elements * DTypeSize(dtype) + elements * sizeof(float) * num_slots + name.size() + kOverheadBytes;
}

const OptimizerConfig* Variable::optimizer_config() const {
  return optimizer_ == nullptr ? nullptr : &optimizer_->config();
}

size_t Variable::row_bytes() const {
  // From shape_, which never changes (value_ may move to new storage).
  int64_t elements = 1;
  for (size_t i = 1; i < shape_.size(); ++i) elements *= shape_[i];
  return static_cast<size_t>(elements) * DTypeSize(dtype_);
}

bool Variable::ValueShared() const { return shared_reads_->count.load(std::memory_order_acquire) > 0; }

void Variable::UnshareValueLocked(bool keep_bytes) {
  if (!ValueShared()) return;
  // The snapshots keep the old storage (and their SharedReads) alive until they are gone.
  std::shared_ptr<void> block = AllocateAlignedUninitialized(value_.num_bytes());
  if (keep_bytes && value_.num_bytes() > 0) std::memcpy(block.get(), value_.raw_data(), value_.num_bytes());
  void* data = block.get();
  value_ = Tensor::View(dtype_, shape_, std::move(block), data);
  shared_reads_ = std::make_shared<SharedReads>();
}

bool Variable::SlotsShared() const { return shared_slots_->count.load(std::memory_order_acquire) > 0; }

void Variable::UnshareSlotsLocked(bool keep_bytes) {
  if (!SlotsShared()) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const size_t bytes = slots_[i].num_bytes();
    std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
    if (keep_bytes && bytes > 0) std::memcpy(block.get(), slots_[i].raw_data(), bytes);
    void* data = block.get();
    slots_[i] = Tensor::View(DType::kF32, shape_, std::move(block), data);
    slot_data_[i] = slots_[i].data<float>();
  }
  shared_slots_ = std::make_shared<SharedReads>();
}

template <typename Write>
void Variable::WithUnsharedValueShared(bool slots_too, Write&& write) {
  for (;;) {
    {
      ReaderMutexLock lock(&mu_);
      // No snapshot can be taken while mu_ is held shared, so unshared storage stays so.
      if (!ValueShared() && !(slots_too && SlotsShared())) {
        write();
        return;
      }
    }
    MutexLock lock(&mu_);
    UnshareValueLocked(/*keep_bytes=*/true);
    if (slots_too) UnshareSlotsLocked(/*keep_bytes=*/true);
  }
}

char* Variable::row_ptr(int64_t row) const {
  return static_cast<char*>(const_cast<void*>(value_.raw_data())) + row * row_bytes();
}

Tensor Variable::Read() const {
  int64_t version = 0;
  return ReadVersioned(&version);
}

namespace {

// A view of `storage` counted in `reads` until its last copy is gone.
template <typename Reads>
Tensor CountedView(const Tensor& storage, const std::shared_ptr<Reads>& reads) {
  reads->count.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<const void> owner(storage.raw_data(), [storage, reads](const void*) {
    // Release: the snapshot's last reads of the bytes happen before a writer's check.
    reads->count.fetch_sub(1, std::memory_order_release);
  });
  return Tensor::View(storage.dtype(), storage.shape(), std::move(owner), const_cast<void*>(storage.raw_data()));
}

}  // namespace

Tensor Variable::SharedValueLocked() const { return CountedView(value_, shared_reads_); }

Tensor Variable::SharedSlotLocked(size_t i) const { return CountedView(slots_[i], shared_slots_); }

Tensor Variable::ReadVersioned(int64_t* version) const {
  if (value_bytes() >= kSharedReadBytes) {
    // Exclusive: no row writer is part way through (they hold mu_ shared), and none starts
    // before the snapshot is counted, so every later write sees it and copies first.
    MutexLock lock(&mu_);
    *version = version_.load(std::memory_order_acquire);
    return SharedValueLocked();
  }
  ReaderMutexLock lock(&mu_);
  for (auto& s : stripes_) s.ReaderLock();
  // Dense writers are excluded here, and they count their update under their exclusive lock.
  *version = version_.load(std::memory_order_acquire);
  Tensor copy = value_.Clone();
  for (auto& s : stripes_) s.ReaderUnlock();
  return copy;
}

int64_t Variable::StalenessOf(int64_t base_version) const {
  const int64_t current = version();
  return base_version < current ? current - base_version : 0;
}

int64_t Variable::max_staleness() const {
  const OptimizerConfig* config = optimizer_config();
  return config == nullptr || config->max_staleness < 0 ? kUnboundedStaleness : config->max_staleness;
}

std::vector<std::pair<std::string, Tensor>> Variable::Snapshot() const {
  ReaderMutexLock lock(&mu_);
  for (auto& s : stripes_) s.ReaderLock();
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back(name_, value_.Clone());
  for (size_t i = 0; i < slots_.size(); ++i) {
    out.emplace_back(absl::StrCat(name_, "/", optimizer_->slots()[i].name), slots_[i].Clone());
  }
  for (auto& s : stripes_) s.ReaderUnlock();
  return out;
}

std::vector<std::string> Variable::slot_names() const {
  std::vector<std::string> names;
  if (optimizer_ != nullptr) {
    for (const SlotSpec& slot : optimizer_->slots()) names.push_back(slot.name);
  }
  return names;
}

Variable::State Variable::CheckpointState() const {
  // Exclusive: row writers hold mu_ shared for a whole push, so none is half applied here.
  MutexLock lock(&mu_);
  State state;
  state.value = value_.Clone();
  for (const Tensor& slot : slots_) state.slots.push_back(slot.Clone());
  state.iterations = iterations_.load(std::memory_order_relaxed);
  return state;
}

Variable::State Variable::SharedState() const {
  // Exclusive, as for CheckpointState (and as a shared snapshot must be taken).
  MutexLock lock(&mu_);
  State state;
  state.value = value_bytes() >= kSharedReadBytes ? SharedValueLocked() : value_.Clone();
  for (size_t i = 0; i < slots_.size(); ++i) {
    state.slots.push_back(slots_[i].num_bytes() >= kSharedReadBytes ? SharedSlotLocked(i) : slots_[i].Clone());
  }
  state.iterations = iterations_.load(std::memory_order_relaxed);
  return state;
}

int64_t Variable::CopyCheckpointState(void* value, absl::Span<void* const> slots) const {
  MutexLock lock(&mu_);
  std::memcpy(value, value_.raw_data(), value_.num_bytes());
  for (size_t i = 0; i < slots_.size() && i < slots.size(); ++i) {
    std::memcpy(slots[i], slots_[i].raw_data(), slots_[i].num_bytes());
  }
  return iterations_.load(std::memory_order_relaxed);
}

absl::Status Variable::RestoreState(const State& state) {
  if (absl::Status s = CheckDense(state.value); !s.ok()) return s;
  if (state.slots.size() != slots_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name_, "' has ", slots_.size(),
                                                   " optimizer slots, restore gives ", state.slots.size()));
  }
  for (const Tensor& slot : state.slots) {
    if (slot.dtype() != DType::kF32 || slot.shape() != shape_) {
      return absl::InvalidArgumentError(absl::StrCat("slot of '", name_, "' must be f32", ShapeString(shape_), ", got ",
                                                     DTypeName(slot.dtype()), ShapeString(slot.shape())));
    }
  }
  RETURN_IF_ERROR(CheckIterations(name_, state.iterations));
  MutexLock lock(&mu_);
  UnshareValueLocked(/*keep_bytes=*/false);
  UnshareSlotsLocked(/*keep_bytes=*/false);
  std::memcpy(value_.raw_data(), state.value.raw_data(), value_.num_bytes());
  for (size_t i = 0; i < slots_.size(); ++i) {
    std::memcpy(slots_[i].raw_data(), state.slots[i].raw_data(), slots_[i].num_bytes());
  }
  iterations_.store(state.iterations, std::memory_order_relaxed);
  version_.store(state.iterations, std::memory_order_release);
  restores_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Variable::CheckDense(const Tensor& value) const {
  if (value.dtype() != dtype_ || value.shape() != shape_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", name_, "' is ", DTypeName(dtype_), ShapeString(shape_), ", update is ",
        DTypeName(value.dtype()), ShapeString(value.shape())));
  }
  return absl::OkStatus();
}

absl::Status Variable::CheckIds(const Tensor& ids) const {
  if (shape_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", name_, "' is a scalar; it has no rows"));
  }
  return CheckRowIds(ids, shape_[0], name_);
}

absl::Status Variable::CheckRows(const Tensor& ids, const Tensor& values) const {
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  Shape expected = shape_;
  expected[0] = ids.num_elements();
  if (values.dtype() != dtype_ || values.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "row values for '", name_, "' must be ", DTypeName(dtype_), ShapeString(expected), ", got ",
        DTypeName(values.dtype()), ShapeString(values.shape())));
  }
  return absl::OkStatus();
}

absl::Status Variable::CheckGradient(const Tensor* ids, const Tensor& gradient) const {
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("variable '", name_, "' has no optimizer"));
  }
  return ids == nullptr ? CheckDense(gradient) : CheckRows(*ids, gradient);
}

absl::Status Variable::CheckUpdate(UpdateKind kind, const Tensor* ids, const Tensor& value) const {
  if (absl::Status s = ids == nullptr ? CheckDense(value) : CheckRows(*ids, value); !s.ok()) return s;
  return CheckKind(name_, dtype_, kind, value);
}

absl::Status Variable::Update(UpdateKind kind, const Tensor& value) {
  if (absl::Status s = CheckUpdate(kind, nullptr, value); !s.ok()) return s;
  MutexLock lock(&mu_);
  UnshareValueLocked(/*keep_bytes=*/kind != UpdateKind::kAssign);
  CombineBytes(dtype_, kind, value_.raw_data(), value.raw_data(),
               value.num_elements());
  version_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Variable::UpdateRows(UpdateKind kind, const Tensor& ids, const Tensor& values) {
  if (absl::Status s = CheckUpdate(kind, &ids, values); !s.ok()) return s;
  const RowIds row_ids(ids);
  const absl::Span<const int64_t> rows = row_ids.span();
  const size_t bytes = row_bytes();
  const int64_t row_elements = static_cast<int64_t>(bytes / DTypeSize(dtype_));
  const char* src = static_cast<const char*>(values.raw_data());
  const StripeGroups groups(rows);
  WithUnsharedValueShared(/*slots_too=*/false, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    char* base = row_ptr(0);
    version_.fetch_add(1, std::memory_order_release);
    // One stripe at a time, in ascending order (the documented lock order).
    for (int s = 0; s < kStripes; ++s) {
      if (groups.begin[s] == groups.begin[s + 1]) continue;
      MutexLock stripe(&stripes_[static_cast<size_t>(s)]);
      VisitStripeRows(groups, s, rows, base, bytes, /*write=*/1, [&](size_t i) {
        CombineBytes(dtype_, kind, base + rows[i] * bytes, src + i * bytes, row_elements);
      });
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Variable::Gather(const Tensor& ids) const {
  int64_t version = 0;
  return GatherVersioned(ids, &version);
}

absl::StatusOr<Tensor> Variable::GatherVersioned(const Tensor& ids, int64_t* version) const {
  if (absl::Status s = CheckIds(ids); !s.ok()) return s;
  const RowIds row_ids(ids);
  const absl::Span<const int64_t> rows = row_ids.span();
  Shape out_shape = shape_;
  out_shape[0] = ids.num_elements();
  // Every byte of the answer is a copied row: no zero fill first.
  const size_t bytes = row_bytes();
  std::shared_ptr<void> block = AllocateAlignedUninitialized(rows.size() * bytes);
  char* dst = static_cast<char*>(block.get());
  Tensor out = Tensor::View(dtype_, std::move(out_shape), block, block.get());
  if (rows.size() <= kGatherHoldingStripesRows) {
    // The stripes the ids touch, held together for the whole copy (ascending: the documented
    // order), so the rows are copied in request order without a grouping pass and the answer is
    // written front to back.
    static_assert(kStripes <= 32, "one bit per stripe");
    uint32_t touched = 0;
    for (int64_t row : rows) touched |= uint32_t{1} << (static_cast<uint64_t>(row) % kStripes);
    ReaderMutexLock lock(&mu_);
    const char* base = row_ptr(0);
    *version = version_.load(std::memory_order_acquire);
    [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (int s = 0; s < kStripes; ++s) {
        if ((touched >> s) & 1) stripes_[static_cast<size_t>(s)].ReaderLock();
      }
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i + kPrefetchRowsAhead < rows.size()) {
          PrefetchRow(base + rows[i + kPrefetchRowsAhead] * bytes, bytes, /*write=*/0);
        }
        std::memcpy(dst + i * bytes, base + rows[i] * bytes, bytes);
      }
      for (int s = 0; s < kStripes; ++s) {
        if ((touched >> s) & 1) stripes_[static_cast<size_t>(s)].ReaderUnlock();
      }
    }();
    return out;
  }
  const StripeGroups groups(rows);
  ReaderMutexLock lock(&mu_);
  const char* base = row_ptr(0);
  *version = version_.load(std::memory_order_acquire);
  for (int s = 0; s < kStripes; ++s) {
    if (groups.begin[s] == groups.begin[s + 1]) continue;
    ReaderMutexLock stripe(&stripes_[static_cast<size_t>(s)]);
    VisitStripeRows(groups, s, rows, base, bytes, /*write=*/0,
                    [&](size_t i) { std::memcpy(dst + i * bytes, base + rows[i] * bytes, bytes); });
  }
  return out;
}

float Variable::DecayScaleAt(int64_t version) const {
  return optimizer_->config().decay_steps == 0 ? 1.0f : UpdateRule::DecayScale(optimizer_->config(), version);
}

absl::Status Variable::ApplyGradient(const Tensor& gradient, float lr_scale) {
  if (absl::Status s = CheckGradient(nullptr, gradient); !s.ok()) return s;
  MutexLock lock(&mu_);
  UnshareValueLocked(/*keep_bytes=*/true);
  UnshareSlotsLocked(/*keep_bytes=*/true);
  const int64_t step = iterations_.fetch_add(1, std::memory_order_relaxed) + 1;
  // Nothing else changes the version under the exclusive lock.
  lr_scale *= DecayScaleAt(version_.load(std::memory_order_relaxed));
  // Every optimizer here updates each element from that element alone (one step for all), so
  // a large value is updated in parts on the pool's threads with the very bits of one pass;
  // they run inside this exclusive lock.
  const int64_t n = value_.num_elements();
  const int parts = ApplyParts(apply_pool_, n, &ApplyPool::Options::min_dense_elements);
  if (parts == 1) {
    optimizer_->ApplyScaled(value_.data<float>(), gradient.data<float>(), slot_data_, n, step, lr_scale);
  } else {
    assert(slot_data_.size() <= kVariableMaxSlots);
    float* const value = value_.data<float>();
    const float* const grad = gradient.data<float>();
    ApplyInParts(apply_pool_, parts, [&](int p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const auto [begin, end] = VariablePartRange(n, parts, p);
      std::array<float*, kVariableMaxSlots> slots{};
      for (size_t i = 0; i < slot_data_.size(); ++i) slots[i] = slot_data_[i] + begin;
      optimizer_->ApplyScaled(value + begin, grad + begin, absl::MakeConstSpan(slots.data(), slot_data_.size()),
                              end - begin, step, lr_scale);
    });
  }
  version_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status Variable::ApplyRowGradients(const Tensor& ids, const Tensor& gradients, float lr_scale) {
  ASSIGN_OR_RETURN(std::unique_ptr<const RowGradientBatch> batch, PrepareRowGradients(ids, gradients));
  ApplyRowGradients(*batch, lr_scale);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<const RowGradientBatch>> Variable::PrepareRowGradients(const Tensor& ids,
                                                                                     const Tensor& gradients) const {
  RETURN_IF_ERROR(CheckGradient(&ids, gradients));
  // Duplicate ids summed in request order (TF's sparse apply semantics: sum, then apply once),
  // distinct rows grouped by stripe; rows that occur once use the request's gradient in place.
  return std::make_unique<const RowGradientBatch>(ids, gradients, static_cast<int64_t>(row_bytes() / sizeof(float)));
}

void Variable::ApplyRowGradients(const RowGradientBatch& batch, float lr_scale) {
  const SummedRowGradients& summed = batch.summed();
  const int64_t row_elements = batch.width();
  assert(row_elements == static_cast<int64_t>(row_bytes() / sizeof(float)));
  WithUnsharedValueShared(/*slots_too=*/true, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    float* value = value_.data<float>();
    const int64_t step = iterations_.fetch_add(1, std::memory_order_relaxed) + 1;
    const float scale = lr_scale * DecayScaleAt(version_.fetch_add(1, std::memory_order_release));
    // Each stripe lock once, ascending; all of the stripe's rows go through one ApplyRows,
    // which computes the per-step constants once. The rows are distinct, so a large push is
    // applied as runs of whole stripes on the pool's threads, each row getting the same bits
    // as in one pass; each part takes its stripes in ascending order, one at a time, inside
    // this call's shared mu_.
    const int parts = ApplyParts(apply_pool_, static_cast<int64_t>(summed.num_distinct()) * row_elements,
                                 &ApplyPool::Options::min_row_elements);
    const std::array<int, ApplyPool::kMaxParts + 1> first = VariableStripeRuns(summed, parts);
    ApplyInParts(apply_pool_, parts, [&](int p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (int s = first[static_cast<size_t>(p)]; s < first[static_cast<size_t>(p) + 1]; ++s) {
        if (summed.rows(s).empty()) continue;
        MutexLock stripe(&stripes_[static_cast<size_t>(s)]);
        optimizer_->ApplyRowsScaled(value, slot_data_, row_elements, summed.rows(s), summed.grads(s), step,
                                    scale);
      }
    });
  });
}

}  // namespace asyncps::ps
