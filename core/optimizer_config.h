#ifndef ASYNCPS_CORE_OPTIMIZER_CONFIG_H_
#define ASYNCPS_CORE_OPTIMIZER_CONFIG_H_


#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps {

// The server-side optimizers, with Keras' update rules (ps/update_rule.h applies them).
enum class OptimizerKind {
  kSgd,       // Keras SGD; with momentum > 0 it behaves exactly as kMomentum
  kMomentum,  // SGD with a momentum slot (kept even when momentum == 0)
  kAdagrad,
  kAdam,
  kFtrl,
};

// The stable name of `kind` ("sgd", "momentum", "adagrad", "adam", "ftrl"): what checkpoint
// manifests and the wire carry. Never fails.
const char* OptimizerKindName(OptimizerKind kind);
// The inverse of OptimizerKindName (case-sensitive); InvalidArgument naming the accepted
// names for anything else, the empty string included.
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);

// Keras' defaults, each written once: OptimizerConfig's field initialisers and the opt::
// builders' default arguments both read them.
inline constexpr float kDefaultSgdLearningRate = 0.01f;
inline constexpr float kDefaultAdagradLearningRate = 0.001f;
inline constexpr float kDefaultAdamLearningRate = 0.001f;
inline constexpr float kDefaultFtrlLearningRate = 0.001f;
inline constexpr float kDefaultBeta1 = 0.9f;
inline constexpr float kDefaultBeta2 = 0.999f;
inline constexpr float kDefaultEpsilon = 1e-7f;
inline constexpr float kDefaultInitialAccumulatorValue = 0.1f;
inline constexpr float kDefaultLearningRatePower = -0.5f;
inline constexpr int64_t kUnboundedStaleness = -1;

// Hyper-parameters of a server-side optimizer. Chosen per variable when the variable is
// created and sent to the PS that hosts it; plain data, copied freely. Fields a kind does not
// use are ignored (and not validated) for that kind; ps::UpdateRule::Create validates the rest.
// Build one with the opt:: functions below rather than by hand.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = kDefaultSgdLearningRate;

  // sgd / momentum. momentum must lie in [0, 1] (as Keras requires).
  float momentum = 0.0f;
  bool nesterov = false;

  // adam. epsilon is also adagrad's; it is Kingma & Ba's "epsilon hat", added to sqrt(v) after
  // bias correction has been folded into the learning rate.
  float beta_1 = kDefaultBeta1;
  float beta_2 = kDefaultBeta2;
  float epsilon = kDefaultEpsilon;

  // adagrad and ftrl: starting value of the "accumulator" slot.
  float initial_accumulator_value = kDefaultInitialAccumulatorValue;

  // ftrl (Keras names: learning_rate_power, l1_regularization_strength,
  // l2_regularization_strength, l2_shrinkage_regularization_strength, beta).
  float learning_rate_power = kDefaultLearningRatePower;
  float l1 = 0.0f;
  float l2 = 0.0f;
  float l2_shrinkage = 0.0f;
  float beta = 0.0f;

  // Staleness (docs/staleness.md), for every kind. A variable's version counts the updates
  // applied to it; a push that names the version its gradient was computed from has staleness
  // = the version when it is applied - that version (0 for a gradient of the current value).
  // Pushes that name no version are never checked or scaled.
  //
  // Staleness-aware learning rate (Zhang et al. 2016): the update uses
  // learning_rate / max(1, staleness).
  bool staleness_aware_lr = false;
  // Bounded staleness: a push staler than this is refused, nothing of it applied, with
  // Aborted (IsStaleGradientError), and the coordinator runs the closure again on fresh
  // values. kUnboundedStaleness (any negative value): no bound.
  int64_t max_staleness = kUnboundedStaleness;

  // Learning-rate decay, for every kind: Keras' CosineDecay keyed on the variable's version
  // (updates applied before this one, the count staleness uses), so an update applied at
  // version v uses learning_rate * ((1 - decay_alpha) * 0.5 * (1 + cos(pi * min(v, decay_steps)
  // / decay_steps)) + decay_alpha): the full rate at version 0, decay_alpha of it from version
  // decay_steps on. It multiplies the staleness-aware factor. decay_steps 0: no decay (the
  // default; the configured rate, bit for bit). decay_steps >= 0, decay_alpha in [0, 1] (FTRL,
  // which divides by its rate, with decay_steps > 0: learning_rate * decay_alpha > 0).
  int64_t decay_steps = 0;
  float decay_alpha = 0.0f;
};

// Optimizer choices for ParameterServerStrategy::CreateVariable, with Keras names and
// defaults. Each returns a config of its kind; nothing is validated until the PS builds the
// update rule (CreateVariable then fails with InvalidArgument).
namespace opt {

OptimizerConfig SGD(float learning_rate = kDefaultSgdLearningRate);
OptimizerConfig Momentum(float learning_rate, float momentum, bool nesterov = false);
OptimizerConfig Adagrad(float learning_rate = kDefaultAdagradLearningRate,
                        float initial_accumulator_value = kDefaultInitialAccumulatorValue,
                        float epsilon = kDefaultEpsilon);
OptimizerConfig Adam(float learning_rate = kDefaultAdamLearningRate, float beta_1 = kDefaultBeta1,
                     float beta_2 = kDefaultBeta2, float epsilon = kDefaultEpsilon);
OptimizerConfig Ftrl(float learning_rate = kDefaultFtrlLearningRate, float l1 = 0.0f,
                     float l2 = 0.0f, float learning_rate_power = kDefaultLearningRatePower,
                     float initial_accumulator_value = kDefaultInitialAccumulatorValue);

// `config` with the staleness-aware learning rate on, e.g. opt::StalenessAwareLr(opt::Adam(1e-3)).
OptimizerConfig StalenessAwareLr(OptimizerConfig config);
// `config` with pushes staler than `max_staleness` refused (see OptimizerConfig::max_staleness),
// e.g. opt::MaxStaleness(opt::Adam(1e-3), 4).
OptimizerConfig MaxStaleness(OptimizerConfig config, int64_t max_staleness);
// `config` with its learning rate decayed by a cosine over `decay_steps` updates down to
// `alpha` times the rate (see OptimizerConfig::decay_steps), e.g.
// opt::CosineDecay(opt::Adam(1e-3), 4690, 0.0f).
OptimizerConfig CosineDecay(OptimizerConfig config, int64_t decay_steps, float alpha = 0.0f);

}  // namespace opt
}  // namespace asyncps

#endif  // ASYNCPS_CORE_OPTIMIZER_CONFIG_H_
