#ifndef ASYNCPS_PS_UPDATE_RULE_H_
#define ASYNCPS_PS_UPDATE_RULE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/optimizer_config.h"

namespace asyncps::ps {

// One optimizer state array kept beside a variable, with the same shape as the variable, every
// element starting at `initial_value`.
struct SlotSpec {
  std::string name;
  float initial_value = 0.0f;
};

// A stateless update rule over f32 arrays, the server side of an OptimizerConfig (the rules
// are those of the Keras optimizers in TF2; see update_rule.cc for each rule and where it was
// checked). All state lives in the slot arrays owned by the
// caller (the variable store), so one UpdateRule serves every shard and row of a variable and
// checkpoints need nothing but the variable and its slots.
//
// Thread-safety: Apply is const and touches only the arrays passed to it; concurrent calls on
// disjoint arrays are safe. Callers serialise updates to the same elements (the shard or row
// lock).
class UpdateRule {
 public:
  // Validates `config` and builds the optimizer. InvalidArgument on a
  // hyper-parameter outside its documented range (NaN and infinities included):
  //   all:      learning_rate >= 0 (ftrl: > 0, it divides by it)
  //   sgd/momentum: 0 <= momentum <= 1
  //   adagrad:  initial_accumulator_value >= 0, epsilon > 0
  //   adam:     0 <= beta_1 < 1, 0 <= beta_2 < 1, epsilon > 0
  //   ftrl:     learning_rate_power <= 0, initial_accumulator_value >= 0,
  //             l1, l2, l2_shrinkage, beta >= 0
  //   all:      max_staleness >= 0 or kUnboundedStaleness (-1)
  //   all:      decay_steps >= 0, 0 <= decay_alpha <= 1 (ftrl with decay_steps > 0:
  //             learning_rate * decay_alpha > 0 in f32)
  static absl::StatusOr<std::unique_ptr<UpdateRule>> Create(const OptimizerConfig& config);

  virtual ~UpdateRule();

  UpdateRule(const UpdateRule&) = delete;
  UpdateRule& operator=(const UpdateRule&) = delete;

  // The slots this optimizer needs, in the order Apply expects them. Empty for plain SGD.
  //   momentum: {"momentum", 0}
  //   adagrad:  {"accumulator", initial_accumulator_value}
  //   adam:     {"m", 0}, {"v", 0}
  //   ftrl:     {"accumulator", initial_accumulator_value}, {"linear", 0}
  virtual const std::vector<SlotSpec>& slots() const = 0;

  // Applies one update in place to `n` contiguous elements: `var`, `grad` and every `slots[i]`
  // (parallel to slots(), so slots.size() == slots().size()) each point at n floats, and none of
  // these arrays overlap. `step` is the 1-based count of updates applied to this variable,
  // including this one; only Adam reads it (bias correction), values below 1 count as 1.
  //
  // Used for a whole dense shard and for one row of a sparse update alike. For a sparse push the
  // caller sums duplicate row ids first and calls Apply once per touched row with the same
  // `step` for every row, as TF's sparse apply ops do (untouched rows keep their slots).
  void Apply(float* var, const float* grad, absl::Span<float* const> slots, int64_t n, int64_t step) const {
    ApplyScaled(var, grad, slots, n, step, 1.0f);
  }

  // Apply with the learning rate multiplied by `lr_scale` (> 0) for this one update: what the
  // staleness-aware learning rate uses (LearningRateScale). With 1 it is Apply, bit for bit.
  virtual void ApplyScaled(float* var, const float* grad, absl::Span<float* const> slots, int64_t n,
                           int64_t step, float lr_scale) const = 0;

  // Applies one update, with one `step`, to many rows of row-major tables: row r of the
  // variable is the `row_elements` floats at var + r * row_elements, and likewise in every
  // slots[i]. grads[i] points at the `row_elements` floats of gradient for rows[i] (so
  // grads.size() == rows.size()). `rows` must be distinct. The result is bit-identical to
  // calling Apply once per row; the point is that per-step constants (Adam's bias-corrected
  // learning rate, ...) are computed once per call instead of once per row, which dominates for
  // narrow embedding rows, and that the rows a few places ahead are prefetched while one is
  // updated (the rows of a large table are cache misses).
  void ApplyRows(float* var, absl::Span<float* const> slots, int64_t row_elements,
                 absl::Span<const int64_t> rows, absl::Span<const float* const> grads, int64_t step) const {
    ApplyRowsScaled(var, slots, row_elements, rows, grads, step, 1.0f);
  }
  // ApplyRows with the learning rate multiplied by `lr_scale`, like ApplyScaled.
  virtual void ApplyRowsScaled(float* var, absl::Span<float* const> slots, int64_t row_elements,
                               absl::Span<const int64_t> rows, absl::Span<const float* const> grads,
                               int64_t step, float lr_scale) const;

  // The learning-rate factor of an update with `staleness` (>= 0) under `config`:
  // 1 / max(1, staleness) with staleness_aware_lr (Zhang et al. 2016, "Staleness-aware
  // async-SGD"), else 1. So a fresh update (staleness 0) and one that missed a single other
  // update (staleness 1) both get the full rate, one that missed 4 gets a quarter.
  static float LearningRateScale(const OptimizerConfig& config, int64_t staleness);

  // The learning-rate factor of an update applied at `version` (updates applied before it, >= 0)
  // under `config`'s cosine decay (OptimizerConfig::decay_steps; Keras CosineDecay): exactly 1
  // when decay_steps is 0, else (1 - decay_alpha) * 0.5 * (1 + cos(pi * min(version,
  // decay_steps) / decay_steps)) + decay_alpha. Variable multiplies it into the scale of every
  // apply, so it composes with LearningRateScale.
  static float DecayScale(const OptimizerConfig& config, int64_t version);

  const OptimizerConfig& config() const { return config_; }

 protected:
  explicit UpdateRule(const OptimizerConfig& config) : config_(config) {}

 private:
  OptimizerConfig config_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_UPDATE_RULE_H_
