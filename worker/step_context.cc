#include "worker/step_context.h"

#include <type_traits>

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

void StepContext::AddPhaseTime(absl::string_view phase, absl::Duration time) {
  for (auto& [name, total] : phase_times_) {
    if (name == phase) {
      total += time;
      return;
    }
  }
  phase_times_.emplace_back(std::string(phase), time);
}

void StepContext::Failures::Track(const absl::Status& status) {
  if (IsPsUnreachable(status)) unreachable.store(true, std::memory_order_release);
  if (IsPsStateLost(status)) state_lost.store(true, std::memory_order_release);
}

absl::Status StepContext::Track(absl::Status status) {
  failures_->Track(status);
  return status;
}

template <typename T, typename Op>
PsFuture<T> StepContext::TrackedAsync(Op op) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return PsFuture<T>::Ready(s);
  auto [future, complete] = PsFuture<T>::Make();
  op([failures = failures_, complete = std::move(complete)](PsResult<T> result) {
    if constexpr (std::is_void_v<T>) {
      failures->Track(result);
    } else {
      failures->Track(result.status());
    }
    complete(std::move(result));
  });
  return future;
}

PsFuture<std::vector<Tensor>> StepContext::ReadManyAsync(const std::vector<std::string>& names) {
  return TrackedAsync<std::vector<Tensor>>(
      [&](PsCallback<std::vector<Tensor>> done) { ps_.ReadAsync(names, std::move(done)); });
}

PsFuture<void> StepContext::UpdateAsync(const std::vector<VariableUpdate>& updates) {
  // Numbered at issue, like the blocking forms: the order of the calls, not of their answers.
  const ps::UpdateTag tag = NextTag();
  return TrackedAsync<void>([&](PsCallback<void> done) { ps_.UpdateAsync(updates, std::move(done), tag); });
}

PsFuture<Tensor> StepContext::GatherAsync(const std::string& name, const Tensor& ids) {
  return TrackedAsync<Tensor>([&](PsCallback<Tensor> done) { ps_.GatherAsync(name, ids, std::move(done)); });
}

PsFuture<void> StepContext::PushGradientsAsync(const std::vector<GradientUpdate>& gradients) {
  const ps::UpdateTag tag = NextTag();
  return TrackedAsync<void>(
      [&](PsCallback<void> done) { ps_.PushGradientsAsync(gradients, std::move(done), tag); });
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
  return Update({{name, UpdateKind::kAssign, value, std::nullopt}});
}

absl::Status StepContext::AssignAdd(const std::string& name, const Tensor& value) {
  return Update({{name, UpdateKind::kAdd, value, std::nullopt}});
}

absl::Status StepContext::AssignSub(const std::string& name, const Tensor& value) {
  return Update({{name, UpdateKind::kSub, value, std::nullopt}});
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

absl::Status StepContext::Scatter(UpdateKind kind, const std::string& name, const Tensor& ids,
                                  const Tensor& values) {
  return Update({{name, kind, values, ids}});
}

absl::Status StepContext::PushGradients(const std::vector<GradientUpdate>& gradients) {
  const ps::UpdateTag tag = NextTag();
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.PushGradients(gradients, tag));
}

absl::StatusOr<Tensor> StepContext::LookupEmbeddings(const std::string& table, const Tensor& keys) {
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(embeddings_.Lookup(table, keys, /*train=*/true));
}

absl::Status StepContext::PushEmbeddingGradients(const std::string& table, const Tensor& keys,
                                                 const Tensor& gradients) {
  const ps::UpdateTag tag = NextTag();
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(embeddings_.Push(table, keys, gradients, tag));
}

PsFuture<Tensor> StepContext::LookupEmbeddingsAsync(const std::string& table, const Tensor& keys) {
  return TrackedAsync<Tensor>(
      [&](PsCallback<Tensor> done) { embeddings_.LookupAsync(table, keys, /*train=*/true, std::move(done)); });
}

PsFuture<void> StepContext::PushEmbeddingGradientsAsync(const std::string& table, const Tensor& keys,
                                                        const Tensor& gradients) {
  const ps::UpdateTag tag = NextTag();
  return TrackedAsync<void>(
      [&](PsCallback<void> done) { embeddings_.PushAsync(table, keys, gradients, std::move(done), tag); });
}

}  // namespace asyncps
