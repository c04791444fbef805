#include "ps/update_dedup.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace asyncps::ps {

namespace {

// SplitMix64's finalizer: a bijection of 64 bits in which every input bit flips about half of
// the output bits.
uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9u;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebu;
  x ^= x >> 31;
  return x;
}

}  // namespace

uint64_t UpdateDedup::VariableKey(absl::string_view name, uint64_t generation) {
  // The name's bytes in little-endian words of 8, each folded in through Mix64; its length
  // first, so that names differing only by trailing zero bytes differ.
  uint64_t h = Mix64(0x9e3779b97f4a7c15u ^ name.size());
  for (size_t i = 0; i < name.size(); i += 8) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8 && i + b < name.size(); ++b) {
      word |= uint64_t{static_cast<unsigned char>(name[i + b])} << (8 * b);
    }
    h = Mix64(h ^ word);
  }
  return Mix64(h ^ Mix64(generation ^ 0x632be59bd9b4e019u));
}

UpdateDedup::Admission& UpdateDedup::Admission::operator=(Admission&& other) noexcept {
  if (this == &other) return *this;
  Release();
  owner_ = std::exchange(other.owner_, nullptr);
  coordinator_ = other.coordinator_;
  claimed_ = std::move(other.claimed_);
  other.claimed_.clear();
  apply_ = std::move(other.apply_);
  already_applied_ = other.already_applied_;
  below_watermark_ = other.below_watermark_;
  return *this;
}

UpdateDedup::Admission::~Admission() { Release(); }

void UpdateDedup::Admission::Commit() {
  if (owner_ != nullptr && !claimed_.empty()) owner_->Commit(coordinator_, claimed_);
  owner_ = nullptr;
  claimed_.clear();
}

void UpdateDedup::Admission::Release() {
  if (owner_ != nullptr && !claimed_.empty()) owner_->Release(coordinator_, claimed_);
  owner_ = nullptr;
  claimed_.clear();
}

UpdateDedup::UpdateDedup(Options options) : options_(options) {
  if (options_.metrics != nullptr) options_.metrics->SetDedupEntries(0);
}

UpdateDedup::Space& UpdateDedup::SpaceFor(uint64_t coordinator) {
  auto it = spaces_.find(coordinator);
  if (it == spaces_.end()) {
    if (spaces_.size() >= std::max<size_t>(1, options_.max_coordinators)) {
      // A coordinator not heard from for the longest time: most likely one that restarted.
      // Its zombies, if any are left, are no longer recognised (at least once again).
      auto oldest = spaces_.begin();
      for (auto s = spaces_.begin(); s != spaces_.end(); ++s) {
        if (s->second.last_used < oldest->second.last_used) oldest = s;
      }
      spdlog::info("update window: forgetting coordinator {} ({} keys) for coordinator {}", oldest->first,
                   oldest->second.keys.size(), coordinator);
      entries_ -= oldest->second.keys.size();
      spaces_.erase(oldest);
    }
    it = spaces_.try_emplace(coordinator).first;
  }
  it->second.last_used = ++clock_;
  return it->second;
}

bool UpdateDedup::AnyClaimed(uint64_t coordinator, const std::vector<Key>& keys) const {
  auto space = spaces_.find(coordinator);
  if (space == spaces_.end()) return false;
  for (const Key& key : keys) {
    auto it = space->second.keys.find(key);
    if (it != space->second.keys.end() && it->second == State::kClaimed) return true;
  }
  return false;
}

std::vector<UpdateDedup::ExportedSpace> UpdateDedup::Export() const {
  MutexLock lock(&mu_);
  // Least recently used first: Import numbers them in that order, so the copy that receives
  // the window forgets the same coordinator first (SpaceFor) as this one would. Copies that
  // evicted different coordinators would then take one zombie for a repeat and the other not.
  std::vector<std::pair<uint64_t, const Space*>> order;
  for (const auto& [coordinator, space] : spaces_) order.emplace_back(coordinator, &space);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
  std::vector<ExportedSpace> out;
  for (const auto& [coordinator, space_ptr] : order) {
    const Space& space = *space_ptr;
    ExportedSpace e;
    e.coordinator = coordinator;
    e.watermark = space.watermark;
    for (const auto& [key, state] : space.keys) {
      if (state == State::kApplied) e.keys.push_back(key);
    }
    out.push_back(std::move(e));
  }
  return out;
}

void UpdateDedup::Import(const std::vector<ExportedSpace>& spaces) {
  MutexLock lock(&mu_);
  spaces_.clear();
  entries_ = 0;
  for (const ExportedSpace& e : spaces) {
    Space& space = spaces_[e.coordinator];
    space.watermark = e.watermark;
    space.last_used = ++clock_;
    for (const Key& key : e.keys) space.keys.emplace_hint(space.keys.end(), key, State::kApplied);
    entries_ += space.keys.size();
  }
  PublishEntries();
}

void UpdateDedup::RaiseWatermark(uint64_t coordinator, uint64_t watermark) {
  if (coordinator == 0) return;
  MutexLock lock(&mu_);
  Space& space = SpaceFor(coordinator);
  if (watermark <= space.watermark) return;
  space.watermark = watermark;
  // As Admit drops them (a claim dropped here is committed or released as already gone).
  auto end = space.keys.lower_bound(Key{watermark, 0, 0});
  entries_ -= static_cast<uint64_t>(std::distance(space.keys.begin(), end));
  space.keys.erase(space.keys.begin(), end);
  PublishEntries();
}

void UpdateDedup::PublishEntries() {
  if (options_.metrics != nullptr) options_.metrics->SetDedupEntries(entries_);
}

absl::StatusOr<UpdateDedup::Admission> UpdateDedup::Admit(const UpdateTag& tag,
                                                          absl::Span<const absl::string_view> variables) {
  std::vector<Target> targets;
  targets.reserve(variables.size());
  for (absl::string_view name : variables) targets.push_back({name, 0});
  return Admit(tag, targets);
}

absl::StatusOr<UpdateDedup::Admission> UpdateDedup::Admit(const UpdateTag& tag, absl::Span<const Target> variables) {
  Admission admission;
  if (!tag.tagged()) return admission;
  if (tag.sequence == 0 || tag.closure < tag.coordinator || tag.watermark > tag.closure) {
    return absl::InvalidArgumentError(absl::StrCat("malformed update tag: coordinator ", tag.coordinator, ", closure ",
                                                   tag.closure, ", sequence ", tag.sequence, ", watermark ",
                                                   tag.watermark));
  }
  // One key per distinct variable; `slot[i]` is variables[i]'s key.
  std::vector<Key> keys;
  std::vector<size_t> slot(variables.size());
  for (size_t i = 0; i < variables.size(); ++i) {
    const Key key{tag.closure, tag.sequence, VariableKey(variables[i].name, variables[i].generation)};
    auto found = std::find(keys.begin(), keys.end(), key);
    slot[i] = static_cast<size_t>(found - keys.begin());
    if (found == keys.end()) keys.push_back(key);
  }

  admission.coordinator_ = tag.coordinator;
  admission.apply_.assign(variables.size(), false);
  std::vector<bool> fresh(keys.size(), false);
  {
    MutexLock lock(&mu_);
    struct Wait {
      const UpdateDedup* self;
      uint64_t coordinator;
      const std::vector<Key>* keys;
    } wait{this, tag.coordinator, &keys};
    // Another attempt is applying one of these very updates: its outcome decides ours.
    mu_.Await(absl::Condition(
        +[](Wait* w) {
          w->self->mu_.AssertHeld();
          return !w->self->AnyClaimed(w->coordinator, *w->keys);
        },
        &wait));
    Space& space = SpaceFor(tag.coordinator);
    if (tag.watermark > space.watermark) {
      space.watermark = tag.watermark;
      auto end = space.keys.lower_bound(Key{space.watermark, 0, 0});
      const auto dropped = static_cast<uint64_t>(std::distance(space.keys.begin(), end));
      space.keys.erase(space.keys.begin(), end);
      entries_ -= dropped;
    }
    if (tag.closure < space.watermark) {
      // A zombie: its closure finished (through another attempt) before this one got here.
      admission.below_watermark_ = true;
      admission.already_applied_ = static_cast<uint32_t>(variables.size());
      PublishEntries();
      if (options_.metrics != nullptr) options_.metrics->RecordDedupSkipped(DedupSkip::kBelowWatermark, variables.size());
      return admission;
    }
    size_t new_keys = 0;
    for (size_t k = 0; k < keys.size(); ++k) {
      fresh[k] = !space.keys.contains(keys[k]);
      new_keys += fresh[k] ? 1 : 0;
    }
    if (entries_ + new_keys > options_.max_entries) {
      PublishEntries();
      if (options_.metrics != nullptr) options_.metrics->RecordRejected(RejectReason::kDedupWindowFull);
      const absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
          "the update window of this parameter server holds ", entries_, " keys, its cap is ", options_.max_entries,
          " (--ps_dedup_max_entries): closures of coordinator ", tag.coordinator, " from id ", space.watermark,
          " on are not finished; a closure that runs for very long holds the window back"));
      spdlog::warn("refused: {}", full.ToString());
      return full;
    }
    for (size_t k = 0; k < keys.size(); ++k) {
      if (!fresh[k]) continue;
      space.keys.emplace(keys[k], State::kClaimed);
      admission.claimed_.push_back(keys[k]);
    }
    entries_ += new_keys;
    PublishEntries();
  }
  for (size_t i = 0; i < variables.size(); ++i) {
    admission.apply_[i] = fresh[slot[i]];
    admission.already_applied_ += fresh[slot[i]] ? 0 : 1;
  }
  if (admission.already_applied_ > 0 && options_.metrics != nullptr) {
    options_.metrics->RecordDedupSkipped(DedupSkip::kRepeat, admission.already_applied_);
  }
  if (!admission.claimed_.empty()) admission.owner_ = this;
  return admission;
}

void UpdateDedup::Commit(uint64_t coordinator, const std::vector<Key>& keys) {
  MutexLock lock(&mu_);
  auto space = spaces_.find(coordinator);
  if (space == spaces_.end()) return;  // forgotten meanwhile
  for (const Key& key : keys) {
    // A key dropped meanwhile (the watermark passed it) stays dropped.
    auto it = space->second.keys.find(key);
    if (it != space->second.keys.end()) it->second = State::kApplied;
  }
}

void UpdateDedup::Release(uint64_t coordinator, const std::vector<Key>& keys) {
  MutexLock lock(&mu_);
  auto space = spaces_.find(coordinator);
  if (space == spaces_.end()) return;
  for (const Key& key : keys) {
    auto it = space->second.keys.find(key);
    if (it == space->second.keys.end() || it->second != State::kClaimed) continue;
    space->second.keys.erase(it);
    --entries_;
  }
  PublishEntries();
}

uint64_t UpdateDedup::entries() const {
  MutexLock lock(&mu_);
  return entries_;
}

size_t UpdateDedup::coordinators() const {
  MutexLock lock(&mu_);
  return spaces_.size();
}

uint64_t UpdateDedup::watermark(uint64_t coordinator) const {
  MutexLock lock(&mu_);
  auto it = spaces_.find(coordinator);
  return it == spaces_.end() ? 0 : it->second.watermark;
}

}  // namespace asyncps::ps
