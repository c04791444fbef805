#include "coordinator/sharded_variable.h"

namespace asyncps {

absl::StatusOr<Tensor> ShardedVariable::Read() const {
  auto values = ps_->Read({placement_->name});
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

absl::Status ShardedVariable::Apply(UpdateKind kind, const Tensor& value, const Tensor* ids) const {
  VariableUpdate u{placement_->name, kind, value, std::nullopt};
  if (ids != nullptr) u.ids = *ids;
  return ps_->Update({u});
}

absl::Status ShardedVariable::Assign(const Tensor& v) const { return Apply(UpdateKind::kAssign, v, nullptr); }
absl::Status ShardedVariable::AssignAdd(const Tensor& v) const { return Apply(UpdateKind::kAdd, v, nullptr); }
absl::Status ShardedVariable::AssignSub(const Tensor& v) const { return Apply(UpdateKind::kSub, v, nullptr); }

absl::StatusOr<Tensor> ShardedVariable::Gather(const Tensor& ids) const { return ps_->Gather(placement_->name, ids); }

absl::Status ShardedVariable::ScatterUpdate(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kAssign, v, &ids);
}
absl::Status ShardedVariable::ScatterAdd(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kAdd, v, &ids);
}
absl::Status ShardedVariable::ScatterSub(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kSub, v, &ids);
}
absl::Status ShardedVariable::ScatterMin(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kMin, v, &ids);
}
absl::Status ShardedVariable::ScatterMax(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kMax, v, &ids);
}
absl::Status ShardedVariable::ScatterMul(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kMul, v, &ids);
}
absl::Status ShardedVariable::ScatterDiv(const Tensor& ids, const Tensor& v) const {
  return Apply(UpdateKind::kDiv, v, &ids);
}

}  // namespace asyncps
