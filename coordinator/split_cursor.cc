#include "coordinator/split_cursor.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace asyncps {

SplitCursor::SplitCursor(int64_t epoch, int64_t records_per_split)
    : epoch_(epoch), records_per_split_(records_per_split < 1 ? 1 : records_per_split) {}

SplitBinding SplitCursor::MakeBinding(int64_t split, int64_t batch) const {
  SplitBinding b;
  b.epoch = epoch_;
  b.split = split;
  b.begin = split * records_per_split_;
  b.end = b.begin + records_per_split_;
  b.batch = batch;
  return b;
}

SplitBinding SplitCursor::Take(int64_t split, OpenSplit& s, int worker) {
  s.owner = worker;
  return MakeBinding(split, s.next_batch++);
}

absl::StatusOr<SplitBinding> SplitCursor::Bind(uint64_t closure_id, int worker) {
  MutexLock lock(&mu_);
  if (auto it = in_flight_.find(closure_id); it != in_flight_.end()) return it->second;
  std::optional<SplitBinding> bound;
  while (!bound.has_value() && !pending_.empty()) {
    SplitBinding b = pending_.front();
    pending_.pop_front();
    if (b.split < num_splits_) bound = b;
  }
  // The split this worker is reading (its pipeline is positioned there) ...
  for (auto it = open_.begin(); !bound.has_value() && it != open_.end(); ++it) {
    if (it->second.owner == worker && HasMore(it->second)) bound = Take(it->first, it->second, worker);
  }
  // ... else one a worker that left was reading ...
  for (auto it = open_.begin(); !bound.has_value() && it != open_.end(); ++it) {
    if (it->second.owner == kDisowned && HasMore(it->second)) bound = Take(it->first, it->second, worker);
  }
  // ... else a split nobody read yet ...
  if (!bound.has_value() && next_split_ < num_splits_) {
    const int64_t split = next_split_++;
    bound = Take(split, open_[split], worker);
  }
  // ... else share one that still has batches (the end of the epoch).
  for (auto it = open_.begin(); !bound.has_value() && it != open_.end(); ++it) {
    if (HasMore(it->second)) bound = Take(it->first, it->second, worker);
  }
  if (!bound.has_value()) {
    return absl::OutOfRangeError(absl::StrCat("end of data: every batch of epoch ", epoch_, " was handed out"));
  }
  in_flight_[closure_id] = *bound;
  return *bound;
}

void SplitCursor::Complete(uint64_t closure_id, bool last_in_split) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(closure_id);
  if (it == in_flight_.end()) return;
  const SplitBinding b = it->second;
  in_flight_.erase(it);
  ++completed_;
  if (last_in_split) {
    if (auto s = open_.find(b.split); s != open_.end()) {
      const int64_t n = b.batch + 1;
      s->second.num_batches = s->second.num_batches < 0 ? n : std::min(s->second.num_batches, n);
    }
  }
  Prune();
}

void SplitCursor::PastEnd(uint64_t closure_id, bool beyond_source) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(closure_id);
  if (it == in_flight_.end()) return;
  const SplitBinding b = it->second;
  in_flight_.erase(it);
  if (beyond_source) num_splits_ = std::min(num_splits_, b.split);
  if (auto s = open_.find(b.split); s != open_.end()) {
    s->second.num_batches =
        s->second.num_batches < 0 ? b.batch : std::min(s->second.num_batches, b.batch);
  }
  Prune();
}

void SplitCursor::Release(uint64_t closure_id) {
  MutexLock lock(&mu_);
  auto it = in_flight_.find(closure_id);
  if (it == in_flight_.end()) return;
  pending_.push_back(it->second);
  in_flight_.erase(it);
}

void SplitCursor::Disown(int worker) {
  MutexLock lock(&mu_);
  for (auto& [split, s] : open_) {
    if (s.owner == worker) s.owner = kDisowned;
  }
}

void SplitCursor::Prune() {
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->first >= num_splits_ || !HasMore(it->second)) {
      it = open_.erase(it);
    } else {
      ++it;
    }
  }
}

bool SplitCursor::Finished() const {
  MutexLock lock(&mu_);
  return next_split_ >= num_splits_ && open_.empty() && pending_.empty() && in_flight_.empty();
}

int64_t SplitCursor::batches_completed() const {
  MutexLock lock(&mu_);
  return completed_;
}

size_t SplitCursor::in_flight() const {
  MutexLock lock(&mu_);
  return in_flight_.size();
}

std::string SplitCursor::SaveState() const {
  using nlohmann::json;
  MutexLock lock(&mu_);
  json open = json::array();
  for (const auto& [split, s] : open_) open.push_back({split, s.next_batch, s.num_batches});
  // Batches handed out but not completed are saved as not done: a restored cursor binds them
  // again (their closures' results are lost with the coordinator anyway).
  json pending = json::array();
  for (const SplitBinding& b : pending_) pending.push_back({b.split, b.batch});
  for (const auto& [closure, b] : in_flight_) pending.push_back({b.split, b.batch});
  json state = {{"epoch", epoch_},
                {"records_per_split", records_per_split_},
                {"next_split", next_split_},
                {"num_splits", num_splits_ == std::numeric_limits<int64_t>::max() ? -1 : num_splits_},
                {"open", std::move(open)},
                {"pending", std::move(pending)},
                {"batches_completed", completed_}};
  return state.dump();
}

absl::StatusOr<std::unique_ptr<SplitCursor>> SplitCursor::FromState(const std::string& text) {
  using nlohmann::json;
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("split cursor state: ", what));
  };
  json state;
  try {
    state = json::parse(text);
  } catch (const json::exception& e) {
    return bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  auto integer = [&](const json& object, const char* key, int64_t min, int64_t* out) -> absl::Status {
    if (!object.is_object() || !object.contains(key) || !object[key].is_number_integer() ||
        object[key].get<int64_t>() < min) {
      return bad(absl::StrCat("field '", key, "' is missing or not an integer >= ", min));
    }
    *out = object[key].get<int64_t>();
    return absl::OkStatus();
  };
  auto row = [&](const json& r, size_t n, std::vector<int64_t>* out) -> absl::Status {
    if (!r.is_array() || r.size() != n) return bad(absl::StrCat("entry ", r.dump(), " is not ", n, " integers"));
    for (const json& v : r) {
      if (!v.is_number_integer()) return bad(absl::StrCat("entry ", r.dump(), " is not ", n, " integers"));
      out->push_back(v.get<int64_t>());
    }
    return absl::OkStatus();
  };
  int64_t epoch, records, next_split, num_splits, completed;
  for (auto [key, min, out] : {std::tuple{"epoch", int64_t{0}, &epoch},
                               {"records_per_split", int64_t{1}, &records},
                               {"next_split", int64_t{0}, &next_split},
                               {"num_splits", int64_t{-1}, &num_splits},
                               {"batches_completed", int64_t{0}, &completed}}) {
    if (absl::Status s = integer(state, key, min, out); !s.ok()) return s;
  }
  if (!state.contains("open") || !state["open"].is_array() || !state.contains("pending") ||
      !state["pending"].is_array()) {
    return bad("fields 'open' and 'pending' must be arrays");
  }
  auto cursor = std::make_unique<SplitCursor>(epoch, records);
  MutexLock lock(&cursor->mu_);
  cursor->next_split_ = next_split;
  cursor->num_splits_ = num_splits < 0 ? std::numeric_limits<int64_t>::max() : num_splits;
  cursor->completed_ = completed;
  for (const json& r : state["open"]) {
    std::vector<int64_t> v;
    if (absl::Status s = row(r, 3, &v); !s.ok()) return s;
    if (v[0] < 0 || v[0] >= next_split || v[1] < 0 || v[2] < -1) return bad(absl::StrCat("open split ", r.dump()));
    cursor->open_[v[0]] = OpenSplit{v[1], v[2], -1};
  }
  for (const json& r : state["pending"]) {
    std::vector<int64_t> v;
    if (absl::Status s = row(r, 2, &v); !s.ok()) return s;
    if (v[0] < 0 || v[0] >= next_split || v[1] < 0) return bad(absl::StrCat("pending batch ", r.dump()));
    cursor->pending_.push_back(cursor->MakeBinding(v[0], v[1]));
  }
  return cursor;
}

}  // namespace asyncps
