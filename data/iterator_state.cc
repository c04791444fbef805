#include "data/iterator_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace asyncps::data::internal {

void StateWriter::Int(int64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian hosts only, like the rest of the wire formats
  out_.append(b, 8);
}

void StateWriter::Bytes(absl::string_view bytes) {
  Int(static_cast<int64_t>(bytes.size()));
  out_.append(bytes.data(), bytes.size());
}

absl::StatusOr<StateReader> StateReader::Open(absl::string_view state, absl::string_view kind) {
  StateReader r(state);
  absl::StatusOr<std::string> got = r.Bytes();
  if (!got.ok() || *got != kind) {
    return absl::InvalidArgumentError(absl::StrCat(
        "iterator state is not a ", kind, " iterator's (", got.ok() ? *got : "unreadable",
        "): restore into an iterator of the pipeline it was saved from"));
  }
  return r;
}

absl::StatusOr<int64_t> StateReader::Int() {
  if (in_.size() < 8) return absl::InvalidArgumentError("iterator state is truncated");
  int64_t v;
  std::memcpy(&v, in_.data(), 8);
  in_.remove_prefix(8);
  return v;
}

absl::StatusOr<std::string> StateReader::Bytes() {
  ASSIGN_OR_RETURN(int64_t n, Int());
  if (n < 0 || static_cast<uint64_t>(n) > in_.size()) {
    return absl::InvalidArgumentError("iterator state is truncated");
  }
  std::string out(in_.substr(0, static_cast<size_t>(n)));
  in_.remove_prefix(static_cast<size_t>(n));
  return out;
}

std::string EncodeReplay(absl::string_view kind, const ReplayState& state) {
  StateWriter w(kind);
  w.Bytes(state.base);
  w.Int(state.calls);
  return std::move(w).Finish();
}

absl::StatusOr<ReplayState> DecodeReplay(absl::string_view kind, absl::string_view state) {
  ASSIGN_OR_RETURN(StateReader r, StateReader::Open(state, kind));
  ReplayState out;
  ASSIGN_OR_RETURN(out.base, r.Bytes());
  ASSIGN_OR_RETURN(out.calls, r.Int());
  if (out.calls < 0) return absl::InvalidArgumentError("iterator state: negative count");
  return out;
}

void SkipCalls(Iterator& it, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<Element> e = it.Next();
    if (IsEndOfData(e.status())) return;
  }
}

absl::StatusOr<std::string> SelfReplay::Save() const {
  if (!base_.ok()) return base_.status();
  return EncodeReplay(kind_, {*base_, calls_});
}

absl::Status SelfReplay::Restore(absl::string_view state, Iterator& input, Iterator& self) {
  ASSIGN_OR_RETURN(ReplayState replay, DecodeReplay(kind_, state));
  RETURN_IF_ERROR(input.RestoreState(replay.base));
  base_ = replay.base;
  calls_ = 0;
  SkipCalls(self, replay.calls);  // counts its calls again
  calls_ = replay.calls;
  return absl::OkStatus();
}

}  // namespace asyncps::data::internal
