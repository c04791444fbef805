#include "worker/step_context.h"

#include "worker/dataset_resources.h"

namespace asyncps {

absl::StatusOr<Tensor> StepContext::arg(size_t i) const {
  if (i >= args_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("argument ", i, " requested; the closure has ", args_.size()));
  }
  if (!std::holds_alternative<Tensor>(args_[i])) {
    return absl::InvalidArgumentError(absl::StrCat("argument ", i, " is a per-worker resource, not a tensor"));
  }
  return std::get<Tensor>(args_[i]);
}

absl::StatusOr<data::Element> StepContext::Next(size_t i) {
  absl::StatusOr<ElementSource*> iterator = resource<ElementSource>(i);
  if (!iterator.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("argument ", i, " is not a per-worker iterator"));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<data::Element> element = (*iterator)->Next();
  input_wait_ += absl::Now() - start;
  if (element.ok() && !element->empty() && !element->front().shape().empty()) {
    examples_ += element->front().shape()[0];
  }
  return element;
}

absl::Status StepContext::Track(absl::Status status) {
  if (IsPsUnreachable(status)) ps_unreachable_ = true;
  if (IsPsStateLost(status)) ps_state_lost_ = true;
  return status;
}

absl::Status StepContext::CheckCancelled() const {
  return cancelled() ? absl::CancelledError("closure cancelled by the coordinator") : absl::OkStatus();
}

absl::StatusOr<Tensor> StepContext::Read(const std::string& name) {
  auto values = ReadMany({name});
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

absl::StatusOr<std::vector<Tensor>> StepContext::ReadMany(const std::vector<std::string>& names) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.Read(names));
}

absl::Status StepContext::Assign(const std::string& name, const Tensor& value) {
  return Update({{name, ps::UpdateKind::kAssign, value, std::nullopt}});
}

absl::Status StepContext::AssignAdd(const std::string& name, const Tensor& value) {
  return Update({{name, ps::UpdateKind::kAdd, value, std::nullopt}});
}

absl::Status StepContext::AssignSub(const std::string& name, const Tensor& value) {
  return Update({{name, ps::UpdateKind::kSub, value, std::nullopt}});
}

ps::UpdateTag StepContext::NextTag() {
  if (!closure_.tagged()) return {};
  ++closure_.sequence;
  return closure_;
}

absl::Status StepContext::Update(const std::vector<VariableUpdate>& updates) {
  // Numbered before anything can fail, so every attempt numbers its calls alike.
  const ps::UpdateTag tag = NextTag();
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.Update(updates, tag));
}

absl::StatusOr<Tensor> StepContext::Gather(const std::string& name, const Tensor& ids) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.Gather(name, ids));
}

absl::Status StepContext::Scatter(ps::UpdateKind kind, const std::string& name, const Tensor& ids,
                                  const Tensor& values) {
  return Update({{name, kind, values, ids}});
}

absl::Status StepContext::PushGradients(const std::vector<GradientUpdate>& gradients) {
  const ps::UpdateTag tag = NextTag();
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.PushGradients(gradients, tag));
}

}  // namespace asyncps
