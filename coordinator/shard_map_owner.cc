#include "coordinator/shard_map_owner.h"

#include <algorithm>

namespace asyncps {
namespace {

bool Remove(std::vector<int32_t>& list, int ps) {
  auto it = std::find(list.begin(), list.end(), ps);
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

}  // namespace

absl::StatusOr<ShardMapOwner> ShardMapOwner::Create(int num_ps, int replicas) {
  absl::StatusOr<ps::ShardMap> map = ps::ShardMap::Initial(num_ps, replicas);
  if (!map.ok()) return map.status();
  return ShardMapOwner(*std::move(map), num_ps);
}

ShardMapOwner::ShardMapOwner(ps::ShardMap map, int num_ps) : map_(std::move(map)), num_ps_(num_ps) {}

void ShardMapOwner::Bump(ps::GroupEntry& g) {
  g.generation = map_.generation + 1;
  map_.generation = g.generation;
}

std::vector<int> ShardMapOwner::Lost(int ps) {
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
  std::vector<int> changed;
  const int k = static_cast<int>(map_.replicas);
  for (ps::GroupEntry& g : map_.groups) {
    if (g.Holds(ps)) continue;
    const int offset = (ps - static_cast<int>(g.group) + num_ps_) % num_ps_;
    const int copies = (g.primary >= 0 ? 1 : 0) + static_cast<int>(g.backups.size() + g.rebuilding.size());
    if (g.primary < 0) {
      // Every copy was lost: an empty primary, filled by checkpoint recovery.
      if (offset >= k) continue;
      g.primary = ps;
      no_live_copy_.push_back(static_cast<int>(g.group));
    } else if (offset < k || copies < k) {
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
    Bump(g);
    return {group};
  }
  return {};
}

std::vector<int> ShardMapOwner::TakeNoLiveCopy() { return std::exchange(no_live_copy_, {}); }

}  // namespace asyncps
