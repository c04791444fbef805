#include "ps/update_rule.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"

namespace asyncps::ps {
namespace {

// Eigen array expressions are vectorised explicitly (SSE/AVX packets, unaligned head and tail
// handled). GCC leaves plain loops scalar here: std::sqrt may set errno, and -O2's cost model
// skips loops of unknown length.
using Vec = Eigen::Map<Eigen::ArrayXf>;
using ConstVec = Eigen::Map<const Eigen::ArrayXf>;

// Optimizers with slots make several passes (slot update, then var update). Walking a dense
// shard in blocks keeps every array of one block in L1 across those passes, so each byte comes
// from memory once per update instead of once per pass. 2048 floats x 4-5 arrays ~ 40 KiB.
constexpr int64_t kBlock = 2048;

// Eigen 3.4 builds with EIGEN_FAST_MATH by default, whose float packet sqrt is rsqrt plus one
// Newton step: a few ulps off, NaN for +inf, and different from the scalar std::sqrt Eigen uses
// for the tail and for rows narrower than a packet. A variable's state must not depend on
// whether its rows went through the dense or the sparse path (and FTRL subtracts two square
// roots, which magnifies any error), so square roots go through this functor: the correctly
// rounded instruction behind std::sqrt, one packet at a time. Redefining EIGEN_FAST_MATH in this
// file instead would give Eigen's psqrt two different definitions in one program.
struct ExactSqrt {
  float operator()(float x) const { return std::sqrt(x); }
#if defined(EIGEN_VECTORIZE_SSE)
  Eigen::internal::Packet4f packetOp(const Eigen::internal::Packet4f& x) const {
    return _mm_sqrt_ps(x);
  }
#endif
#if defined(EIGEN_VECTORIZE_AVX)
  Eigen::internal::Packet8f packetOp(const Eigen::internal::Packet8f& x) const {
    return _mm256_sqrt_ps(x);
  }
#endif
#if defined(EIGEN_VECTORIZE_AVX512)
  Eigen::internal::Packet16f packetOp(const Eigen::internal::Packet16f& x) const {
    // The masked form: GCC 12's _mm512_sqrt_ps passes an undefined vector through, which
    // -Wmaybe-uninitialized reports once inlined here.
    return _mm512_mask_sqrt_ps(x, static_cast<__mmask16>(0xFFFF), x);
  }
#endif
#if defined(EIGEN_VECTORIZE_NEON) && defined(__aarch64__)
  Eigen::internal::Packet4f packetOp(const Eigen::internal::Packet4f& x) const {
    return vsqrtq_f32(x);
  }
#endif
};

#if defined(EIGEN_VECTORIZE_SSE) || (defined(EIGEN_VECTORIZE_NEON) && defined(__aarch64__))
constexpr bool kExactSqrtVectorised = true;
#else
constexpr bool kExactSqrtVectorised = false;  // Eigen falls back to the scalar operator()
#endif

}  // namespace
}  // namespace asyncps::ps

template <>
struct Eigen::internal::functor_traits<asyncps::ps::ExactSqrt> {
  enum {
    Cost = 5 * NumTraits<float>::MulCost,  // what Eigen assumes for its own sqrt
    PacketAccess = asyncps::ps::kExactSqrtVectorised,
  };
};

namespace asyncps::ps {
namespace {

template <typename Derived>
auto Sqrt(const Eigen::ArrayBase<Derived>& x) {
  return x.unaryExpr(ExactSqrt());
}

// x^exponent through std::pow. Eigen's packet pow and std::pow may differ by an ulp, which
// FTRL's difference of two powers magnifies, and dense and per-row updates would drift apart.
// Eigen evaluates an expression holding this functor scalar; that is only FTRL with a
// learning_rate_power other than -0.5, where pow dominates the cost anyway.
struct ScalarPow {
  float exponent;
  float operator()(float x) const { return std::pow(x, exponent); }
};

// The most slots any optimizer here keeps (Adam and FTRL have two).
constexpr size_t kMaxSlots = 2;

// How many rows ahead ForEachRow prefetches: enough to cover a memory latency with the work
// of a few narrow rows. Only the first kPrefetchBytes of a row are prefetched; the hardware
// prefetcher follows a wide row by itself.
constexpr size_t kPrefetchRowsAhead = 6;
constexpr int64_t kPrefetchBytes = 1024;
constexpr int64_t kCacheLine = 64;

void PrefetchForWrite(const float* row, int64_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < bytes; b += kCacheLine) __builtin_prefetch(p + b, 1, 3);
}

void PrefetchForRead(const float* row, int64_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < bytes; b += kCacheLine) __builtin_prefetch(p + b, 0, 3);
}

// Calls update(var_row, grad_row, slot_rows) for each of `rows` of row-major tables laid out as
// UpdateRule::ApplyRows describes. slot_rows points at slots.size() row pointers.
template <typename Fn>
void ForEachRow(float* var, absl::Span<const float* const> grads, absl::Span<float* const> slots,
                int64_t row_elements, absl::Span<const int64_t> rows, Fn&& update) {
  assert(slots.size() <= kMaxSlots);
  assert(grads.size() == rows.size());
  const int64_t prefetch_bytes =
      std::min<int64_t>(kPrefetchBytes, row_elements * static_cast<int64_t>(sizeof(float)));
  auto prefetch = [&](size_t i) {
    const int64_t offset = rows[i] * row_elements;
    PrefetchForWrite(var + offset, prefetch_bytes);
    for (size_t s = 0; s < slots.size(); ++s) PrefetchForWrite(slots[s] + offset, prefetch_bytes);
    PrefetchForRead(grads[i], prefetch_bytes);
  };
  for (size_t i = 0; i < std::min(kPrefetchRowsAhead, rows.size()); ++i) prefetch(i);
  std::array<float*, kMaxSlots> slot_rows{};
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i + kPrefetchRowsAhead < rows.size()) prefetch(i + kPrefetchRowsAhead);
    const int64_t offset = rows[i] * row_elements;
    for (size_t s = 0; s < slots.size(); ++s) slot_rows[s] = slots[s] + offset;
    update(var + offset, grads[i], slot_rows.data());
  }
}

template <typename Fn>
void ForEachBlock(int64_t n, Fn&& fn) {
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    fn(begin, std::min(kBlock, n - begin));
  }
}

// ---------------------------------------------------------------------------------------------
// Hyper-parameter validation.

absl::Status OutOfRange(absl::string_view type, absl::string_view field, float value,
                        absl::string_view wanted) {
  return absl::InvalidArgumentError(absl::StrCat(type, " optimizer: ", field, " = ", value,
                                                 " is invalid, it must be ", wanted));
}

absl::Status RequireNonNegative(absl::string_view type, absl::string_view field, float value) {
  if (std::isfinite(value) && value >= 0.0f) return absl::OkStatus();
  return OutOfRange(type, field, value, "finite and >= 0");
}

absl::Status RequirePositive(absl::string_view type, absl::string_view field, float value) {
  if (std::isfinite(value) && value > 0.0f) return absl::OkStatus();
  return OutOfRange(type, field, value, "finite and > 0");
}

absl::Status RequireDecayRate(absl::string_view type, absl::string_view field, float value) {
  // beta == 1 would make Adam's bias correction divide by zero.
  if (std::isfinite(value) && value >= 0.0f && value < 1.0f) return absl::OkStatus();
  return OutOfRange(type, field, value, "in [0, 1)");
}

absl::Status ValidateMomentum(const OptimizerConfig& c) {
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "learning_rate", c.learning_rate));
  // Same bound as keras.optimizers.SGD.
  if (std::isfinite(c.momentum) && c.momentum >= 0.0f && c.momentum <= 1.0f) {
    return absl::OkStatus();
  }
  return OutOfRange(OptimizerKindName(c.kind), "momentum", c.momentum, "in [0, 1]");
}

absl::Status ValidateAdagrad(const OptimizerConfig& c) {
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "learning_rate", c.learning_rate));
  RETURN_IF_ERROR(
      RequireNonNegative(OptimizerKindName(c.kind), "initial_accumulator_value", c.initial_accumulator_value));
  return RequirePositive(OptimizerKindName(c.kind), "epsilon", c.epsilon);
}

absl::Status ValidateAdam(const OptimizerConfig& c) {
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "learning_rate", c.learning_rate));
  RETURN_IF_ERROR(RequireDecayRate(OptimizerKindName(c.kind), "beta_1", c.beta_1));
  RETURN_IF_ERROR(RequireDecayRate(OptimizerKindName(c.kind), "beta_2", c.beta_2));
  return RequirePositive(OptimizerKindName(c.kind), "epsilon", c.epsilon);
}

absl::Status ValidateFtrl(const OptimizerConfig& c) {
  // TF's FTRL kernels reject lr <= 0 ("lr is not a positive scalar"): the rule divides by it.
  RETURN_IF_ERROR(RequirePositive(OptimizerKindName(c.kind), "learning_rate", c.learning_rate));
  if (!std::isfinite(c.learning_rate_power) || c.learning_rate_power > 0.0f) {
    return OutOfRange(OptimizerKindName(c.kind), "learning_rate_power", c.learning_rate_power, "finite and <= 0");
  }
  RETURN_IF_ERROR(
      RequireNonNegative(OptimizerKindName(c.kind), "initial_accumulator_value", c.initial_accumulator_value));
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "l1", c.l1));
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "l2", c.l2));
  RETURN_IF_ERROR(RequireNonNegative(OptimizerKindName(c.kind), "l2_shrinkage", c.l2_shrinkage));
  return RequireNonNegative(OptimizerKindName(c.kind), "beta", c.beta);
}

// The learning rate of one update: scaling by exactly 1 leaves it untouched (so an unscaled
// update keeps the bits it had before lr_scale existed).
float ScaledLr(const OptimizerConfig& c, float lr_scale) {
  return lr_scale == 1.0f ? c.learning_rate : c.learning_rate * lr_scale;
}

// ---------------------------------------------------------------------------------------------
// Update rules.

// For rules with one slot whose update does not depend on the step: Apply and ApplyRows both
// run Derived::Update(var, grad, slots, n), so the two paths give the same bits.
template <typename Derived>
class OneSlotOptimizer : public UpdateRule {
 public:
  using UpdateRule::UpdateRule;

  void ApplyScaled(float* var, const float* grad, absl::Span<float* const> slots, int64_t n,
                   int64_t /*step*/, float lr_scale) const override {
    assert(slots.size() == 1);
    self().Update(var, grad, slots.data(), n, lr_scale);
  }

  void ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                       absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                       int64_t /*step*/, float lr_scale) const override {
    assert(slots.size() == 1);
    ForEachRow(var, grads, slots, row_elements, rows,
               [&](float* w, const float* g, float* const* s) { self().Update(w, g, s, row_elements, lr_scale); });
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

// Keras SGD without momentum; tf.raw_ops.ApplyGradientDescent: var -= lr * g.
class SgdOptimizer final : public UpdateRule {
  // Shared by Apply and ApplyRows so both give the same bits.
  static void Update(float lr, float* var, const float* grad, int64_t n) {
    if (n <= 0) return;
    Vec(var, n) -= lr * ConstVec(grad, n);
  }

 public:
  explicit SgdOptimizer(const OptimizerConfig& config) : UpdateRule(config) {}

  const std::vector<SlotSpec>& slots() const override { return slots_; }

  void ApplyScaled(float* var, const float* grad, absl::Span<float* const> slots, int64_t n,
                   int64_t /*step*/, float lr_scale) const override {
    assert(slots.empty());
    (void)slots;
    Update(ScaledLr(config(), lr_scale), var, grad, n);
  }

  void ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                       absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                       int64_t /*step*/, float lr_scale) const override {
    assert(slots.empty());
    const float lr = ScaledLr(config(), lr_scale);
    ForEachRow(var, grads, slots, row_elements, rows,
               [&](float* w, const float* g, float* const* /*s*/) {
                 Update(lr, w, g, row_elements);
               });
  }

 private:
  const std::vector<SlotSpec> slots_;
};

// Keras SGD with momentum; tf.raw_ops.ResourceApplyKerasMomentum (training_ops.cc
// ApplyKerasMomentum): v = momentum * v - lr * g; var += v, or with Nesterov
// var += momentum * v - lr * g using the updated v.
class MomentumOptimizer final : public OneSlotOptimizer<MomentumOptimizer> {
 public:
  explicit MomentumOptimizer(const OptimizerConfig& config)
      : OneSlotOptimizer(config), slots_{{"momentum", 0.0f}} {}

  const std::vector<SlotSpec>& slots() const override { return slots_; }

 private:
  friend class OneSlotOptimizer<MomentumOptimizer>;
  void Update(float* var, const float* grad, float* const* slots, int64_t n, float lr_scale) const {
    const float lr = ScaledLr(config(), lr_scale);
    const float momentum = config().momentum;
    const bool nesterov = config().nesterov;
    ForEachBlock(n, [&](int64_t begin, int64_t len) {
      Vec w(var + begin, len);
      ConstVec g(grad + begin, len);
      Vec v(slots[0] + begin, len);
      v = momentum * v - lr * g;
      if (nesterov) {
        w += momentum * v - lr * g;
      } else {
        w += v;
      }
    });
  }

  const std::vector<SlotSpec> slots_;
};

// Keras Adagrad; tf.raw_ops.ResourceApplyAdagradV2 (training_ops.cc ApplyAdagradV2):
// acc += g^2; var -= lr * g / (sqrt(acc) + epsilon).
class AdagradOptimizer final : public OneSlotOptimizer<AdagradOptimizer> {
 public:
  explicit AdagradOptimizer(const OptimizerConfig& config)
      : OneSlotOptimizer(config), slots_{{"accumulator", config.initial_accumulator_value}} {}

  const std::vector<SlotSpec>& slots() const override { return slots_; }

 private:
  friend class OneSlotOptimizer<AdagradOptimizer>;
  void Update(float* var, const float* grad, float* const* slots, int64_t n, float lr_scale) const {
    const float lr = ScaledLr(config(), lr_scale);
    const float epsilon = config().epsilon;
    ForEachBlock(n, [&](int64_t begin, int64_t len) {
      Vec w(var + begin, len);
      ConstVec g(grad + begin, len);
      Vec acc(slots[0] + begin, len);
      acc += g.square();
      w -= lr * g / (Sqrt(acc) + epsilon);
    });
  }

  const std::vector<SlotSpec> slots_;
};

// Keras (TF2) Adam, which calls tf.raw_ops.ResourceApplyAdam with Keras' epsilon
// (training_ops.cc ApplyAdamNonCuda): lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t);
// m += (g - m) * (1 - beta_1); v += (g^2 - v) * (1 - beta_2);
// var -= lr_t * m / (sqrt(v) + epsilon).
class AdamOptimizer final : public UpdateRule {
 public:
  explicit AdamOptimizer(const OptimizerConfig& config)
      : UpdateRule(config), slots_{{"m", 0.0f}, {"v", 0.0f}} {}

  const std::vector<SlotSpec>& slots() const override { return slots_; }

  void ApplyScaled(float* var, const float* grad, absl::Span<float* const> slots, int64_t n,
                   int64_t step, float lr_scale) const override {
    assert(slots.size() == 2);
    Update(StepConstants(step, lr_scale), var, grad, slots.data(), n);
  }

  void ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                       absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                       int64_t step, float lr_scale) const override {
    assert(slots.size() == 2);
    // The two std::pow calls cost more than updating a 64-float row; do them once.
    const Constants k = StepConstants(step, lr_scale);
    ForEachRow(var, grads, slots, row_elements, rows,
               [&](float* w, const float* g, float* const* s) {
                 Update(k, w, g, s, row_elements);
               });
  }

 private:
  struct Constants {
    float lr_t;
    float one_minus_beta_1;
    float one_minus_beta_2;
    float epsilon;
  };

  Constants StepConstants(int64_t step, float lr_scale) const {
    const OptimizerConfig& c = config();
    // Powers in double: beta^t for large t underflows gracefully and lr_t stays accurate.
    const double t = static_cast<double>(std::max<int64_t>(step, 1));
    const double beta_1_power = std::pow(static_cast<double>(c.beta_1), t);
    const double beta_2_power = std::pow(static_cast<double>(c.beta_2), t);
    return Constants{
        .lr_t = static_cast<float>(static_cast<double>(ScaledLr(c, lr_scale)) *
                                   std::sqrt(1.0 - beta_2_power) / (1.0 - beta_1_power)),
        .one_minus_beta_1 = 1.0f - c.beta_1,
        .one_minus_beta_2 = 1.0f - c.beta_2,
        .epsilon = c.epsilon,
    };
  }

  // One pass over the four arrays, a packet at a time: m, v and var of a packet are updated
  // while in registers (three Eigen statements would load and store m and v twice and pay
  // three loop set-ups per row, which for 64-float rows cost as much as the arithmetic). Each
  // element gets exactly the operations, in the same order, of
  //   m += (g - m) * (1 - beta_1); v += (g^2 - v) * (1 - beta_2);
  //   var -= lr_t * m / (sqrt(v) + epsilon)
  // so the packet body and the scalar tail agree bit for bit.
  static void Update(const Constants& k, float* var, const float* grad, float* const* slots,
                     int64_t n) {
    float* m = slots[0];
    float* v = slots[1];
    int64_t i = 0;
    if constexpr (kExactSqrtVectorised) {
      using Packet = Eigen::internal::packet_traits<float>::type;
      namespace ei = Eigen::internal;
      constexpr int64_t kSize = ei::packet_traits<float>::size;
      const Packet b1 = ei::pset1<Packet>(k.one_minus_beta_1);
      const Packet b2 = ei::pset1<Packet>(k.one_minus_beta_2);
      const Packet lr = ei::pset1<Packet>(k.lr_t);
      const Packet eps = ei::pset1<Packet>(k.epsilon);
      for (; i + kSize <= n; i += kSize) {
        const Packet g = ei::ploadu<Packet>(grad + i);
        Packet pm = ei::ploadu<Packet>(m + i);
        Packet pv = ei::ploadu<Packet>(v + i);
        pm = ei::padd(pm, ei::pmul(ei::psub(g, pm), b1));
        pv = ei::padd(pv, ei::pmul(ei::psub(ei::pmul(g, g), pv), b2));
        const Packet step = ei::pdiv(ei::pmul(lr, pm), ei::padd(ExactSqrt().packetOp(pv), eps));
        ei::pstoreu(m + i, pm);
        ei::pstoreu(v + i, pv);
        ei::pstoreu(var + i, ei::psub(ei::ploadu<Packet>(var + i), step));
      }
    }
    for (; i < n; ++i) {
      const float g = grad[i];
      m[i] += (g - m[i]) * k.one_minus_beta_1;
      v[i] += (g * g - v[i]) * k.one_minus_beta_2;
      var[i] -= k.lr_t * m[i] / (std::sqrt(v[i]) + k.epsilon);
    }
  }

  const std::vector<SlotSpec> slots_;
};

// Keras Ftrl (keras/src/optimizers/ftrl.py update_step) = tf.raw_ops.ApplyFtrlV2 with
// l2 + beta / (2 * lr) as its l2 (training_ops.cc ApplyFtrlV2):
//   g_shrunk = g + 2 * l2_shrinkage * var
//   accum_new = accum + g^2                      (the plain gradient, not g_shrunk)
//   linear += g_shrunk - (accum_new^-p - accum^-p) / lr * var
//   quadratic = accum_new^-p / lr + 2 * (l2 + beta / (2 * lr))
//   var = |linear| > l1 ? (sign(linear) * l1 - linear) / quadratic : 0
// where p = learning_rate_power; p == -0.5 uses sqrt, as TF does.
class FtrlOptimizer final : public UpdateRule {
 public:
  explicit FtrlOptimizer(const OptimizerConfig& config)
      : UpdateRule(config),
        slots_{{"accumulator", config.initial_accumulator_value}, {"linear", 0.0f}} {}

  const std::vector<SlotSpec>& slots() const override { return slots_; }

  void ApplyScaled(float* var, const float* grad, absl::Span<float* const> slots, int64_t n,
                   int64_t /*step*/, float lr_scale) const override {
    assert(slots.size() == 2);
    // accum^-p before and after this step, for one block.
    alignas(64) std::array<float, kBlock> old_pow_buf;
    alignas(64) std::array<float, kBlock> new_pow_buf;
    Update(var, grad, slots.data(), n, lr_scale, old_pow_buf.data(), new_pow_buf.data());
  }

  void ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                       absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                       int64_t /*step*/, float lr_scale) const override {
    assert(slots.size() == 2);
    alignas(64) std::array<float, kBlock> old_pow_buf;
    alignas(64) std::array<float, kBlock> new_pow_buf;
    ForEachRow(var, grads, slots, row_elements, rows,
               [&](float* w, const float* g, float* const* s) {
                 Update(w, g, s, row_elements, lr_scale, old_pow_buf.data(), new_pow_buf.data());
               });
  }

 private:
  // old_pow_buf and new_pow_buf are scratch space of kBlock floats each.
  void Update(float* var, const float* grad, float* const* slots, int64_t n, float lr_scale,
              float* old_pow_buf, float* new_pow_buf) const {
    const OptimizerConfig& c = config();
    const float lr = ScaledLr(c, lr_scale);
    const float l1 = c.l1;
    const float two_l2 = 2.0f * (c.l2 + c.beta / (2.0f * lr));
    const float two_shrinkage = 2.0f * c.l2_shrinkage;
    const float neg_power = -c.learning_rate_power;
    const bool use_sqrt = c.learning_rate_power == -0.5f;
    ForEachBlock(n, [&](int64_t begin, int64_t len) {
      Vec w(var + begin, len);
      ConstVec g(grad + begin, len);
      Vec accum(slots[0] + begin, len);
      Vec linear(slots[1] + begin, len);
      Vec old_pow(old_pow_buf, len);
      Vec new_pow(new_pow_buf, len);
      if (use_sqrt) {
        old_pow = Sqrt(accum);
        accum += g.square();
        new_pow = Sqrt(accum);
      } else {
        old_pow = accum.unaryExpr(ScalarPow{neg_power});
        accum += g.square();
        new_pow = accum.unaryExpr(ScalarPow{neg_power});
      }
      linear += g + two_shrinkage * w - (new_pow - old_pow) / lr * w;
      // Where |linear| > l1, clip(linear, -l1, l1) is exactly sign(linear) * l1, and min/max
      // vectorise where Eigen's sign() does not. The select keeps var at exactly 0 inside the L1
      // ball even when quadratic is 0 (zero accumulator, no L2), where 0 / 0 would give NaN.
      w = (linear.abs() > l1)
              .select((linear.max(-l1).min(l1) - linear) / (new_pow / lr + two_l2), 0.0f);
    });
  }

  const std::vector<SlotSpec> slots_;
};

}  // namespace

UpdateRule::~UpdateRule() = default;

void UpdateRule::ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                                 absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                                 int64_t step, float lr_scale) const {
  ForEachRow(var, grads, slots, row_elements, rows,
             [&](float* w, const float* g, float* const* s) {
               ApplyScaled(w, g, absl::MakeConstSpan(s, slots.size()), row_elements, step, lr_scale);
             });
}

float UpdateRule::LearningRateScale(const OptimizerConfig& config, int64_t staleness) {
  if (!config.staleness_aware_lr || staleness <= 1) return 1.0f;
  return static_cast<float>(1.0 / static_cast<double>(staleness));
}

float UpdateRule::DecayScale(const OptimizerConfig& config, int64_t version) {
  if (config.decay_steps <= 0) return 1.0f;
  const double progress =
      static_cast<double>(std::min(std::max<int64_t>(version, 0), config.decay_steps)) /
      static_cast<double>(config.decay_steps);
  const double cosine = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  const double alpha = config.decay_alpha;
  return static_cast<float>((1.0 - alpha) * cosine + alpha);
}

absl::StatusOr<std::unique_ptr<UpdateRule>> UpdateRule::Create(const OptimizerConfig& config) {
  if (config.max_staleness < kUnboundedStaleness) {
    return absl::InvalidArgumentError(absl::StrCat("max_staleness must be >= 0, or ", kUnboundedStaleness,
                                                   " for no bound; got ", config.max_staleness));
  }
  if (config.decay_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("decay_steps must be >= 0 (0: no decay); got ", config.decay_steps));
  }
  // Written so NaN fails too.
  if (!(config.decay_alpha >= 0.0f && config.decay_alpha <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("decay_alpha must lie in [0, 1]; got ", config.decay_alpha));
  }
  // FTRL divides by its learning rate (ValidateFtrl): a decay whose floor is 0 (decay_alpha 0,
  // or so small that the f32 product underflows) would reach a rate of 0 at version decay_steps
  // and write NaN into the value and slots from then on.
  if (config.kind == OptimizerKind::kFtrl && config.decay_steps > 0 &&
      !(config.learning_rate * config.decay_alpha > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ftrl optimizer: with decay_steps > 0, the decayed rate learning_rate * decay_alpha must be > 0 (FTRL "
        "divides by its rate, which the decay reaches at version decay_steps); got decay_alpha ", config.decay_alpha));
  }
  switch (config.kind) {
    case OptimizerKind::kSgd:
    case OptimizerKind::kMomentum:
      RETURN_IF_ERROR(ValidateMomentum(config));
      // Keras SGD turns into momentum SGD as soon as momentum > 0; kMomentum always keeps the
      // slot so its slot list does not depend on a hyper-parameter value.
      if (config.kind == OptimizerKind::kSgd && config.momentum == 0.0f) {
        return std::unique_ptr<UpdateRule>(new SgdOptimizer(config));
      }
      return std::unique_ptr<UpdateRule>(new MomentumOptimizer(config));
    case OptimizerKind::kAdagrad:
      RETURN_IF_ERROR(ValidateAdagrad(config));
      return std::unique_ptr<UpdateRule>(new AdagradOptimizer(config));
    case OptimizerKind::kAdam:
      RETURN_IF_ERROR(ValidateAdam(config));
      return std::unique_ptr<UpdateRule>(new AdamOptimizer(config));
    case OptimizerKind::kFtrl:
      RETURN_IF_ERROR(ValidateFtrl(config));
      return std::unique_ptr<UpdateRule>(new FtrlOptimizer(config));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer kind ", static_cast<int>(config.kind)));
}

}  // namespace asyncps::ps
