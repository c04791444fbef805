#include "coordinator/shard_map_owner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace asyncps {
namespace {

bool Contains(const std::vector<int32_t>& list, int ps) {
  return std::find(list.begin(), list.end(), ps) != list.end();
}

bool Remove(std::vector<int32_t>& list, int ps) {
  auto it = std::find(list.begin(), list.end(), ps);
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

}  // namespace

absl::StatusOr<ShardMapOwner> ShardMapOwner::Create(int num_ps, int replicas) {
  return Create(num_ps, replicas, num_ps);
}

absl::StatusOr<ShardMapOwner> ShardMapOwner::Create(int num_ps, int replicas, int members) {
  if (members < 1 || members > num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job of ", num_ps, " PS slots starts with 1 to ", num_ps, " of them, not ", members));
  }
  absl::StatusOr<ps::ShardMap> ring = ps::ShardMap::Initial(members, replicas);
  if (!ring.ok()) return ring.status();
  ps::ShardMap map = *std::move(ring);
  // One group per slot; those past the members wrap around the members' ring (virtual nodes
  // that later members take over).
  for (int g = members; g < num_ps; ++g) {
    ps::GroupEntry e;
    e.group = static_cast<uint32_t>(g);
    e.generation = 1;
    e.primary = g % members;
    for (int i = 1; i < replicas; ++i) e.backups.push_back((g + i) % members);
    map.groups.push_back(std::move(e));
  }
  return ShardMapOwner(std::move(map), num_ps, members);
}

ShardMapOwner::ShardMapOwner(ps::ShardMap map, int num_ps, int members)
    : map_(std::move(map)),
      num_ps_(num_ps),
      member_(static_cast<size_t>(std::max(num_ps, 0)), false),
      target_(static_cast<size_t>(std::max(num_ps, 0))),
      moving_(static_cast<size_t>(std::max(num_ps, 0)), false),
      lost_(static_cast<size_t>(std::max(num_ps, 0)), false),
      bytes_(static_cast<size_t>(std::max(num_ps, 0)), 0) {
  if (members < 0 || members >= num_ps) {
    std::fill(member_.begin(), member_.end(), true);
    for (int g = 0; g < num_ps; ++g) {
      for (int i = 0; i < static_cast<int>(map_.replicas); ++i) target_[g].push_back((g + i) % num_ps);
    }
    return;
  }
  for (int i = 0; i < members; ++i) member_[static_cast<size_t>(i)] = true;
  for (const ps::GroupEntry& e : map_.groups) {
    if (e.group >= target_.size()) continue;
    std::vector<int32_t>& t = target_[e.group];
    if (e.primary >= 0) t.push_back(e.primary);
    for (int32_t b : e.backups) t.push_back(b);
    for (int32_t r : e.rebuilding) {
      if (t.size() < map_.replicas) t.push_back(r);
    }
    for (int32_t ps : t) {
      if (ps >= 0 && ps < num_ps) member_[static_cast<size_t>(ps)] = true;
    }
    // A move the previous chief left half done (copies past k): the extra copies are dropped
    // once the target's are in sync. (A PS that was joining registers again and is retargeted.)
    const size_t copies = (e.primary >= 0 ? 1 : 0) + e.backups.size() + e.rebuilding.size();
    if (copies > map_.replicas) moving_[e.group] = true;
  }
}

void ShardMapOwner::Bump(ps::GroupEntry& g) {
  g.generation = map_.generation + 1;
  map_.generation = g.generation;
}

std::vector<int> ShardMapOwner::Lost(int ps) {
  if (ps >= 0 && static_cast<size_t>(ps) < lost_.size()) lost_[static_cast<size_t>(ps)] = true;
  std::vector<int> changed;
  for (ps::GroupEntry& g : map_.groups) {
    bool touched = Remove(g.backups, ps);
    touched = Remove(g.rebuilding, ps) || touched;
    if (g.primary == ps) {
      touched = true;
      if (!g.backups.empty()) {
        g.primary = g.backups.front();
        g.backups.erase(g.backups.begin());
      } else {
        // Every copy is lost: whichever copy comes back starts empty and is restored from a
        // checkpoint before it serves (a promoted backup of a group still being restored
        // is no better: the flag stays until Restored).
        g.primary = -1;
        g.restore_pending = true;
      }
    }
    if (touched) {
      Bump(g);
      changed.push_back(static_cast<int>(g.group));
    }
  }
  return changed;
}

std::vector<int> ShardMapOwner::Unreachable(const std::vector<int>& silent, const std::vector<bool>& reachable) {
  auto is_silent = [&](int32_t ps) { return std::find(silent.begin(), silent.end(), ps) != silent.end(); };
  auto is_reachable = [&](int32_t ps) {
    return ps >= 0 && static_cast<size_t>(ps) < reachable.size() && reachable[static_cast<size_t>(ps)];
  };
  std::vector<int> changed;
  for (ps::GroupEntry& g : map_.groups) {
    if (g.primary < 0) continue;
    bool touched = false;
    if (is_silent(g.primary)) {
      auto live = std::find_if(g.backups.begin(), g.backups.end(), is_reachable);
      if (live == g.backups.end()) continue;  // no copy answers: unreachable, kept as it is
      g.primary = *live;
      g.backups.erase(live);
      touched = true;
    }
    if (!is_reachable(g.primary)) continue;
    auto silent_end = [&](std::vector<int32_t>& list) {
      const auto end = std::remove_if(list.begin(), list.end(), is_silent);
      const bool removed = end != list.end();
      list.erase(end, list.end());
      return removed;
    };
    touched = silent_end(g.backups) || touched;
    touched = silent_end(g.rebuilding) || touched;
    if (touched) {
      Bump(g);
      changed.push_back(static_cast<int>(g.group));
    }
  }
  return changed;
}

std::vector<int> ShardMapOwner::WorkersCannotReach(const std::vector<int>& cut_from,
                                                   const std::vector<bool>& reachable) {
  auto at = [](const auto& v, int32_t ps, auto none) {
    return ps >= 0 && static_cast<size_t>(ps) < v.size() ? v[static_cast<size_t>(ps)] : none;
  };
  std::vector<int> changed;
  for (ps::GroupEntry& g : map_.groups) {
    if (g.primary < 0 || g.restore_pending || !at(reachable, g.primary, false)) continue;
    const int cut = at(cut_from, g.primary, 0);
    if (cut <= 0) continue;
    auto best = g.backups.end();
    for (auto b = g.backups.begin(); b != g.backups.end(); ++b) {
      if (!at(reachable, *b, false) || at(cut_from, *b, 0) >= cut) continue;
      if (best == g.backups.end() || at(cut_from, *b, 0) < at(cut_from, *best, 0)) best = b;
    }
    if (best == g.backups.end()) continue;
    const int32_t old = g.primary;
    g.primary = *best;
    g.backups.erase(best);
    g.rebuilding.push_back(old);
    Bump(g);
    changed.push_back(static_cast<int>(g.group));
  }
  return changed;
}

std::vector<int> ShardMapOwner::Returned(int ps) {
  if (ps >= 0 && static_cast<size_t>(ps) < lost_.size()) lost_[static_cast<size_t>(ps)] = false;
  std::vector<int> changed;
  const int k = static_cast<int>(map_.replicas);
  for (ps::GroupEntry& g : map_.groups) {
    if (g.Holds(ps) || !IsMember(ps)) continue;
    const bool targeted = g.group < target_.size() && Contains(target_[g.group], ps);
    const int copies = (g.primary >= 0 ? 1 : 0) + static_cast<int>(g.backups.size() + g.rebuilding.size());
    if (g.primary < 0) {
      // Every copy was lost: an empty primary, filled by checkpoint recovery.
      if (!targeted) continue;
      g.primary = ps;
      no_live_copy_.push_back(static_cast<int>(g.group));
    } else if (targeted || copies < k) {
      g.rebuilding.push_back(ps);
    } else {
      continue;
    }
    Bump(g);
    changed.push_back(static_cast<int>(g.group));
  }
  return changed;
}

std::vector<int> ShardMapOwner::InSync(int ps, int group) {
  for (ps::GroupEntry& g : map_.groups) {
    if (static_cast<int>(g.group) != group || !Remove(g.rebuilding, ps)) continue;
    g.backups.push_back(ps);
    Reconcile(g);
    Bump(g);
    return {group};
  }
  return {};
}

std::vector<int> ShardMapOwner::NeedsRebuild(int ps, int group) {
  for (ps::GroupEntry& g : map_.groups) {
    if (static_cast<int>(g.group) != group) continue;
    if (Remove(g.backups, ps)) {
      g.rebuilding.push_back(ps);
    } else if (std::find(g.rebuilding.begin(), g.rebuilding.end(), ps) == g.rebuilding.end()) {
      return {};
    }
    // (Already rebuilding: its stream stopped, and only a new map makes the primary start
    // another transfer.)
    Bump(g);
    return {group};
  }
  return {};
}

std::vector<int> ShardMapOwner::CannotServe(int ps, int group) {
  for (ps::GroupEntry& g : map_.groups) {
    if (static_cast<int>(g.group) != group || g.primary != ps || g.restore_pending) continue;
    if (!g.backups.empty()) {
      g.primary = g.backups.front();
      g.backups.erase(g.backups.begin());
      g.rebuilding.push_back(ps);
    } else {
      // No copy holds every acknowledged write: the PS starts the group over empty (a new
      // restoring copy, as its map says) and takes the chief's restore.
      g.restore_pending = true;
      no_live_copy_.push_back(group);
    }
    Bump(g);
    return {group};
  }
  return {};
}

std::vector<int> ShardMapOwner::Restored(int group) {
  for (ps::GroupEntry& g : map_.groups) {
    if (static_cast<int>(g.group) != group || !g.restore_pending || g.primary < 0) continue;
    g.restore_pending = false;
    Reconcile(g);  // a move the loss interrupted goes on
    Bump(g);
    return {group};
  }
  return {};
}

std::vector<int> ShardMapOwner::TakeNoLiveCopy() { return std::exchange(no_live_copy_, {}); }

bool ShardMapOwner::IsMember(int ps) const {
  return ps >= 0 && static_cast<size_t>(ps) < member_.size() && member_[static_cast<size_t>(ps)];
}

int ShardMapOwner::members() const { return static_cast<int>(std::count(member_.begin(), member_.end(), true)); }

bool ShardMapOwner::HoldsAny(int ps) const {
  return std::any_of(map_.groups.begin(), map_.groups.end(), [ps](const ps::GroupEntry& g) { return g.Holds(ps); });
}

bool ShardMapOwner::Moving() const { return std::find(moving_.begin(), moving_.end(), true) != moving_.end(); }

bool ShardMapOwner::Moving(int group) const {
  return group >= 0 && static_cast<size_t>(group) < moving_.size() && moving_[static_cast<size_t>(group)];
}

std::vector<int32_t> ShardMapOwner::Target(int group) const {
  if (group < 0 || static_cast<size_t>(group) >= target_.size()) return {};
  return target_[static_cast<size_t>(group)];
}

void ShardMapOwner::SetGroupBytes(int group, uint64_t bytes) {
  if (group >= 0 && static_cast<size_t>(group) < bytes_.size()) bytes_[static_cast<size_t>(group)] = bytes;
}

uint64_t ShardMapOwner::Weight(size_t group) const { return std::max<uint64_t>(bytes_[group], 1); }

std::vector<uint64_t> ShardMapOwner::TargetBytes() const {
  std::vector<uint64_t> load(member_.size(), 0);
  for (size_t g = 0; g < target_.size(); ++g) {
    for (int32_t ps : target_[g]) load[static_cast<size_t>(ps)] += Weight(g);
  }
  return load;
}

absl::StatusOr<std::vector<int>> ShardMapOwner::Join(int ps) {
  if (ps < 0 || ps >= num_ps_) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps ", ps, " is not a slot of this job (it lists ", num_ps_, " PS: indices 0..", num_ps_ - 1, ")"));
  }
  if (IsMember(ps)) return absl::AlreadyExistsError(absl::StrCat("ps ", ps, " is a member already"));
  member_[static_cast<size_t>(ps)] = true;
  // Greedy: hand the newcomer a copy from the most loaded member while that lowers the
  // larger of the two loads, the biggest such group first (fewest moves for the balance).
  std::vector<uint64_t> load = TargetBytes();
  std::vector<bool> retargeted(target_.size(), false);
  while (true) {
    size_t best_group = target_.size();
    size_t best_slot = 0;
    int32_t from = -1;
    for (size_t g = 0; g < target_.size(); ++g) {
      if (Contains(target_[g], ps)) continue;
      for (size_t slot = 0; slot < target_[g].size(); ++slot) {
        const int32_t q = target_[g][slot];
        if (load[static_cast<size_t>(ps)] + Weight(g) >= load[static_cast<size_t>(q)]) continue;
        const bool better = from < 0 || load[static_cast<size_t>(q)] > load[static_cast<size_t>(from)] ||
                            (load[static_cast<size_t>(q)] == load[static_cast<size_t>(from)] &&
                             Weight(g) > Weight(best_group));
        if (better) {
          best_group = g;
          best_slot = slot;
          from = q;
        }
      }
    }
    if (from < 0) break;
    target_[best_group][best_slot] = ps;
    load[static_cast<size_t>(from)] -= Weight(best_group);
    load[static_cast<size_t>(ps)] += Weight(best_group);
    retargeted[best_group] = true;
  }
  std::vector<int> changed;
  for (ps::GroupEntry& g : map_.groups) {
    if (g.group >= retargeted.size() || !retargeted[g.group]) continue;
    moving_[g.group] = true;
    if (Reconcile(g)) {
      Bump(g);
      changed.push_back(static_cast<int>(g.group));
    }
  }
  return changed;
}

absl::StatusOr<std::vector<int>> ShardMapOwner::Leave(int ps) {
  if (!IsMember(ps)) return absl::NotFoundError(absl::StrCat("ps ", ps, " is not a member of the job"));
  const int need = std::max<int>(static_cast<int>(map_.replicas), 1);
  if (members() - 1 < need) {
    return absl::FailedPreconditionError(absl::StrCat(
        "removing ps ", ps, " would leave ", members() - 1, " PS for groups of ", need,
        need == 1 ? " copy" : " copies", " (--ps_replicas): a group with no copy, or fewer than it needs"));
  }
  member_[static_cast<size_t>(ps)] = false;
  std::vector<uint64_t> load = TargetBytes();
  std::vector<bool> retargeted(target_.size(), false);
  for (size_t g = 0; g < target_.size(); ++g) {
    for (int32_t& t : target_[g]) {
      if (t != ps) continue;
      int32_t to = -1;
      for (int32_t m = 0; m < num_ps_; ++m) {
        if (!member_[static_cast<size_t>(m)] || Contains(target_[g], m)) continue;
        if (to < 0 || load[static_cast<size_t>(m)] < load[static_cast<size_t>(to)]) to = m;
      }
      // members() >= k, so some member is not in this group's k-1 other targets.
      if (to < 0) continue;
      t = to;
      load[static_cast<size_t>(ps)] -= Weight(g);
      load[static_cast<size_t>(to)] += Weight(g);
      retargeted[g] = true;
    }
  }
  std::vector<int> changed;
  for (ps::GroupEntry& g : map_.groups) {
    // A copy on the leaving PS that its target never named (a rebuild it took on while the
    // group lacked copies) moves off too.
    const bool holds = g.Holds(ps);
    if (g.group >= retargeted.size() || (!retargeted[g.group] && !holds)) continue;
    moving_[g.group] = true;
    if (Reconcile(g)) {
      Bump(g);
      changed.push_back(static_cast<int>(g.group));
    }
  }
  return changed;
}

bool ShardMapOwner::Reconcile(ps::GroupEntry& g) {
  if (g.group >= moving_.size() || !moving_[g.group]) return false;
  // A group awaiting its restore (or with no copy at all) moves once it serves again.
  if (g.primary < 0 || g.restore_pending) return false;
  const std::vector<int32_t>& target = target_[g.group];
  bool touched = false;
  for (int32_t t : target) {
    // A lost PS gets its copy when it returns (Returned): a transfer to it now goes nowhere.
    if (g.Holds(t) || lost_[static_cast<size_t>(t)]) continue;
    g.rebuilding.push_back(t);
    touched = true;
  }
  const bool settled = std::all_of(target.begin(), target.end(),
                                   [&g](int32_t t) { return g.primary == t || Contains(g.backups, t); });
  if (!settled) return touched;
  if (!Contains(target, g.primary)) {
    // Every target copy is in sync: one of them takes over (target ⊆ backups here).
    auto next = std::find_if(g.backups.begin(), g.backups.end(), [&](int32_t b) { return Contains(target, b); });
    g.primary = *next;
    g.backups.erase(next);
    touched = true;
  }
  auto off_target = [&](std::vector<int32_t>& list) {
    const auto end = std::remove_if(list.begin(), list.end(), [&](int32_t p) { return !Contains(target, p); });
    const bool removed = end != list.end();
    list.erase(end, list.end());
    return removed;
  };
  touched = off_target(g.backups) || touched;
  touched = off_target(g.rebuilding) || touched;
  moving_[g.group] = false;
  return touched;
}

}  // namespace asyncps
