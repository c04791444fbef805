#include "ps/ps_wire.h"

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps::ps {

void OptimizerToWire(const OptimizerConfig* c, wire::OptimizerConfig::Builder out) {
  if (c == nullptr) return;
  out.setType(OptimizerKindName(c->kind));
  out.setLearningRate(c->learning_rate);
  out.setMomentum(c->momentum);
  out.setNesterov(c->nesterov);
  out.setBeta1(c->beta_1);
  out.setBeta2(c->beta_2);
  out.setEpsilon(c->epsilon);
  out.setInitialAccumulatorValue(c->initial_accumulator_value);
  out.setLearningRatePower(c->learning_rate_power);
  out.setL1(c->l1);
  out.setL2(c->l2);
  out.setL2Shrinkage(c->l2_shrinkage);
  out.setBeta(c->beta);
  out.setStalenessAwareLr(c->staleness_aware_lr);
  out.setMaxStaleness(c->max_staleness);
  out.setDecaySteps(c->decay_steps);
  out.setDecayAlpha(c->decay_alpha);
}

absl::StatusOr<std::unique_ptr<OptimizerConfig>> OptimizerFromWire(
    wire::OptimizerConfig::Reader in) {
  if (in.getType().size() == 0) return nullptr;
  auto c = std::make_unique<OptimizerConfig>();
  ASSIGN_OR_RETURN(c->kind, ParseOptimizerKind(absl::string_view(in.getType().cStr(), in.getType().size())));
  c->learning_rate = in.getLearningRate();
  c->momentum = in.getMomentum();
  c->nesterov = in.getNesterov();
  c->beta_1 = in.getBeta1();
  c->beta_2 = in.getBeta2();
  c->epsilon = in.getEpsilon();
  c->initial_accumulator_value = in.getInitialAccumulatorValue();
  c->learning_rate_power = in.getLearningRatePower();
  c->l1 = in.getL1();
  c->l2 = in.getL2();
  c->l2_shrinkage = in.getL2Shrinkage();
  c->beta = in.getBeta();
  c->staleness_aware_lr = in.getStalenessAwareLr();
  c->max_staleness = in.getMaxStaleness();
  c->decay_steps = in.getDecaySteps();
  c->decay_alpha = in.getDecayAlpha();
  return c;
}

void InitializerToWire(const InitializerSpec& spec, net::OutMessage& message,
                       wire::InitializerSpec::Builder out) {
  out.setKind(spec.kind);
  out.setValue(spec.value);
  out.setMinval(spec.minval);
  out.setMaxval(spec.maxval);
  out.setMean(spec.mean);
  out.setStddev(spec.stddev);
  out.setSeed(spec.seed);
  net::SetShape(out.initFullShape(static_cast<unsigned>(spec.full_shape.size())), spec.full_shape);
  out.setRowOffset(spec.row_offset);
  if (spec.kind == "tensor") message.AddTensor(spec.tensor, out.initTensor());
}

absl::StatusOr<InitializerSpec> InitializerFromWire(const net::InMessage& message,
                                                    wire::InitializerSpec::Reader in) {
  InitializerSpec spec;
  spec.kind = in.getKind().size() == 0 ? "zeros" : in.getKind().cStr();
  spec.value = in.getValue();
  spec.minval = in.getMinval();
  spec.maxval = in.getMaxval();
  spec.mean = in.getMean();
  spec.stddev = in.getStddev();
  spec.seed = in.getSeed();
  spec.full_shape = net::GetShape(in.getFullShape());
  spec.row_offset = in.getRowOffset();
  if (spec.row_offset < 0) return absl::InvalidArgumentError("negative initializer row offset");
  if (spec.kind == "tensor") {
    if (!in.hasTensor()) return absl::InvalidArgumentError("initializer 'tensor' carries no tensor");
    auto t = message.TensorAt(in.getTensor());
    if (!t.ok()) return t.status();
    spec.tensor = *t;
  }
  return spec;
}

wire::UpdateKind UpdateKindToWire(UpdateKind kind) { return static_cast<wire::UpdateKind>(kind); }

absl::StatusOr<UpdateKind> UpdateKindFromWire(wire::UpdateKind kind) {
  const auto v = static_cast<uint16_t>(kind);
  if (v > static_cast<uint16_t>(UpdateKind::kDiv)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown update kind ", v));
  }
  return static_cast<UpdateKind>(v);
}

void UpdateTagToWire(const UpdateTag& tag, wire::UpdateTag::Builder out) {
  out.setCoordinator(tag.coordinator);
  out.setClosure(tag.closure);
  out.setSequence(tag.sequence);
  out.setWatermark(tag.watermark);
}

UpdateTag UpdateTagFromWire(wire::UpdateTag::Reader in) {
  return UpdateTag{in.getCoordinator(), in.getClosure(), in.getSequence(), in.getWatermark()};
}

}  // namespace asyncps::ps
