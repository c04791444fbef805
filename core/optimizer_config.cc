#include "core/optimizer_config.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace asyncps {

const char* OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kMomentum:
      return "momentum";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kFtrl:
      return "ftrl";
  }
  return "unknown";
}

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum, OptimizerKind::kAdagrad,
                             OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    if (name == OptimizerKindName(kind)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer type \"", absl::CEscape(name),
                   "\"; expected one of sgd, momentum, adagrad, adam, ftrl"));
}

namespace opt {
namespace {

OptimizerConfig Make(OptimizerKind kind, float learning_rate) {
  OptimizerConfig c;
  c.kind = kind;
  c.learning_rate = learning_rate;
  return c;
}

}  // namespace

OptimizerConfig SGD(float learning_rate) { return Make(OptimizerKind::kSgd, learning_rate); }

OptimizerConfig Momentum(float learning_rate, float momentum, bool nesterov) {
  OptimizerConfig c = Make(OptimizerKind::kMomentum, learning_rate);
  c.momentum = momentum;
  c.nesterov = nesterov;
  return c;
}

OptimizerConfig Adagrad(float learning_rate, float initial_accumulator_value, float epsilon) {
  OptimizerConfig c = Make(OptimizerKind::kAdagrad, learning_rate);
  c.initial_accumulator_value = initial_accumulator_value;
  c.epsilon = epsilon;
  return c;
}

OptimizerConfig Adam(float learning_rate, float beta_1, float beta_2, float epsilon) {
  OptimizerConfig c = Make(OptimizerKind::kAdam, learning_rate);
  c.beta_1 = beta_1;
  c.beta_2 = beta_2;
  c.epsilon = epsilon;
  return c;
}

OptimizerConfig Ftrl(float learning_rate, float l1, float l2, float learning_rate_power,
                     float initial_accumulator_value) {
  OptimizerConfig c = Make(OptimizerKind::kFtrl, learning_rate);
  c.l1 = l1;
  c.l2 = l2;
  c.learning_rate_power = learning_rate_power;
  c.initial_accumulator_value = initial_accumulator_value;
  return c;
}

OptimizerConfig StalenessAwareLr(OptimizerConfig config) {
  config.staleness_aware_lr = true;
  return config;
}

OptimizerConfig MaxStaleness(OptimizerConfig config, int64_t max_staleness) {
  config.max_staleness = max_staleness;
  return config;
}

OptimizerConfig CosineDecay(OptimizerConfig config, int64_t decay_steps, float alpha) {
  config.decay_steps = decay_steps;
  config.decay_alpha = alpha;
  return config;
}

}  // namespace opt
}  // namespace asyncps
