#include "worker/step_context.h"

#include <tuple>
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

void StepContext::Pulled::Note(const ShardVersions& v) {
  MutexLock lock(&mu);
  for (const auto& [shard, version] : v) {
    auto [it, inserted] = versions.try_emplace(shard, version);
    if (!inserted && version < it->second) it->second = version;
  }
}

ShardVersions StepContext::versions() const {
  MutexLock lock(&pulled_->mu);
  return pulled_->versions;
}

void StepContext::NoteVersions(const ShardVersions& versions) { pulled_->Note(versions); }

PsFuture<VersionedValues> StepContext::ReadManyVersionedAsync(const std::vector<std::string>& names) {
  return TrackedAsync<VersionedValues>(
      [&](PsCallback<VersionedValues> done) { ps_.ReadVersionedAsync(names, std::move(done)); });
}

PsFuture<std::vector<Tensor>> StepContext::ReadManyAsync(const std::vector<std::string>& names) {
  return TrackedAsync<std::vector<Tensor>>([&](PsCallback<std::vector<Tensor>> done) {
    ps_.ReadVersionedAsync(names, [pulled = pulled_, done = std::move(done)](absl::StatusOr<VersionedValues> r) {
      if (!r.ok()) return done(r.status());
      pulled->Note(r->versions);
      done(std::move(r->values));
    });
  });
}

PsFuture<void> StepContext::UpdateAsync(const std::vector<VariableUpdate>& updates) {
  // Numbered at issue, like the blocking forms: the order of the calls, not of their answers.
  const ps::UpdateTag tag = NextTag();
  return TrackedAsync<void>([&](PsCallback<void> done) { ps_.UpdateAsync(updates, std::move(done), tag); });
}

PsFuture<Tensor> StepContext::GatherAsync(const std::string& name, const Tensor& ids) {
  return TrackedAsync<Tensor>([&](PsCallback<Tensor> done) {
    ps_.GatherVersionedAsync(name, ids, [pulled = pulled_, done = std::move(done)](absl::StatusOr<VersionedRows> r) {
      if (!r.ok()) return done(r.status());
      pulled->Note(r->versions);
      done(std::move(r->rows));
    });
  });
}

PsFuture<void> StepContext::PushGradientsAsync(const std::vector<GradientUpdate>& gradients) {
  const ps::UpdateTag tag = NextTag();
  const ShardVersions base = versions();
  return TrackedAsync<void>(
      [&](PsCallback<void> done) { ps_.PushGradientsAsync(gradients, std::move(done), tag, base); });
}

StepContext::PushAndRead StepContext::PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                                                const std::vector<std::string>& read_after) {
  const ps::UpdateTag tag = NextTag();
  const ShardVersions base = versions();
  PushAndRead out;
  PsCallback<void> push_done;
  std::tie(out.pushed, push_done) = PsFuture<void>::Make();
  bool sent = false;
  out.values = TrackedAsync<VersionedValues>([&](PsCallback<VersionedValues> done) {
    sent = true;
    ps_.PushGradientsAndReadAsync(
        gradients, read_after,
        [failures = failures_, push_done](absl::Status s) {
          failures->Track(s);
          push_done(std::move(s));
        },
        std::move(done), tag, base);
  });
  if (!sent) push_done(CheckCancelled());  // cancelled: nothing was sent
  return out;
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
  absl::StatusOr<VersionedValues> read = Track(ps_.ReadVersioned(names));
  if (!read.ok()) return read.status();
  pulled_->Note(read->versions);
  return std::move(read->values);
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
  absl::StatusOr<VersionedRows> rows = Track(ps_.GatherVersioned(name, ids));
  if (!rows.ok()) return rows.status();
  pulled_->Note(rows->versions);
  return std::move(rows->rows);
}

absl::Status StepContext::Scatter(UpdateKind kind, const std::string& name, const Tensor& ids,
                                  const Tensor& values) {
  return Update({{name, kind, values, ids}});
}

absl::Status StepContext::PushGradients(const std::vector<GradientUpdate>& gradients) {
  const ps::UpdateTag tag = NextTag();
  if (absl::Status s = CheckCancelled(); !s.ok()) return s;
  return Track(ps_.PushGradients(gradients, tag, versions()));
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
