#include "ps/replication/shard_map.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace asyncps::ps {

namespace {
constexpr char kStaleShardMap[] = "stale shard map";
constexpr char kAwaitsRestore[] = "awaits a restore";
}  // namespace

bool GroupEntry::Holds(int32_t ps) const {
  return primary == ps || std::find(backups.begin(), backups.end(), ps) != backups.end() ||
         std::find(rebuilding.begin(), rebuilding.end(), ps) != rebuilding.end();
}

bool operator==(const GroupEntry& a, const GroupEntry& b) {
  return a.group == b.group && a.generation == b.generation && a.primary == b.primary && a.backups == b.backups &&
         a.rebuilding == b.rebuilding && a.restore_pending == b.restore_pending;
}

bool operator==(const ShardMap& a, const ShardMap& b) {
  return a.generation == b.generation && a.replicas == b.replicas && a.groups == b.groups;
}

absl::StatusOr<ShardMap> ShardMap::Initial(int num_ps, int replicas) {
  if (num_ps < 1) return absl::InvalidArgumentError(absl::StrCat("a shard map needs at least one PS, not ", num_ps));
  if (replicas < 1 || replicas > 3) {
    return absl::InvalidArgumentError(absl::StrCat("ps_replicas is ", replicas, "; it must be 1, 2 or 3"));
  }
  if (replicas > num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps_replicas is ", replicas, " but the cluster has only ", num_ps,
                     " parameter servers: every copy of a shard needs its own PS"));
  }
  ShardMap map;
  map.generation = 1;
  map.replicas = static_cast<uint32_t>(replicas);
  for (int g = 0; g < num_ps; ++g) {
    GroupEntry e;
    e.group = static_cast<uint32_t>(g);
    e.generation = 1;
    e.primary = g;
    for (int i = 1; i < replicas; ++i) e.backups.push_back((g + i) % num_ps);
    map.groups.push_back(std::move(e));
  }
  return map;
}

const GroupEntry* ShardMap::Find(uint32_t group) const {
  for (const GroupEntry& e : groups) {
    if (e.group == group) return &e;
  }
  return nullptr;
}

absl::Status ShardMap::Validate(int num_ps) const {
  if (generation == 0) {
    if (!groups.empty()) return absl::InvalidArgumentError("shard map of generation 0 lists groups");
    return absl::OkStatus();
  }
  if (replicas < 1 || replicas > 3) {
    return absl::InvalidArgumentError(absl::StrCat("shard map replicas is ", replicas, "; it must be 1, 2 or 3"));
  }
  absl::flat_hash_set<uint32_t> seen;
  uint64_t highest = 0;
  auto bad_ps = [num_ps](int32_t ps) { return ps < 0 || (num_ps >= 0 && ps >= num_ps); };
  for (const GroupEntry& e : groups) {
    if (num_ps >= 0 && e.group >= static_cast<uint32_t>(num_ps)) {
      return absl::InvalidArgumentError(absl::StrCat("shard map names group ", e.group, " of ", num_ps, " PS"));
    }
    if (!seen.insert(e.group).second) {
      return absl::InvalidArgumentError(absl::StrCat("shard map lists group ", e.group, " twice"));
    }
    if (e.generation == 0) {
      return absl::InvalidArgumentError(absl::StrCat("shard map group ", e.group, " has generation 0"));
    }
    highest = std::max(highest, e.generation);
    absl::flat_hash_set<int32_t> members;
    if (e.primary != -1) {
      if (bad_ps(e.primary)) {
        return absl::InvalidArgumentError(absl::StrCat("shard map group ", e.group, " primary ps ", e.primary,
                                                       " is not a PS index"));
      }
      members.insert(e.primary);
    }
    for (const auto* list : {&e.backups, &e.rebuilding}) {
      for (int32_t ps : *list) {
        if (bad_ps(ps)) {
          return absl::InvalidArgumentError(
              absl::StrCat("shard map group ", e.group, " names ps ", ps, ", not a PS index"));
        }
        if (!members.insert(ps).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("shard map group ", e.group, " names ps ", ps, " twice"));
        }
      }
    }
  }
  if (highest != generation) {
    return absl::InvalidArgumentError(absl::StrCat("shard map generation ", generation,
                                                   " is not the highest of its groups (", highest, ")"));
  }
  return absl::OkStatus();
}

std::string ShardMap::DebugString() const {
  std::vector<std::string> parts;
  for (const GroupEntry& e : groups) {
    std::string s = absl::StrCat("g", e.group, " gen ", e.generation, ": ", e.primary, " | ",
                                 e.backups.empty() ? "-" : absl::StrJoin(e.backups, ","));
    if (!e.rebuilding.empty()) absl::StrAppend(&s, " rebuilding ", absl::StrJoin(e.rebuilding, ","));
    if (e.restore_pending) absl::StrAppend(&s, " restore pending");
    parts.push_back(std::move(s));
  }
  return absl::StrCat("gen ", generation, " k=", replicas, " [", absl::StrJoin(parts, " ; "), "]");
}

void ShardMapToWire(const ShardMap& map, wire::ShardMap::Builder out) {
  out.setGeneration(map.generation);
  out.setReplicas(map.replicas);
  auto groups = out.initGroups(static_cast<unsigned>(map.groups.size()));
  for (unsigned i = 0; i < map.groups.size(); ++i) {
    const GroupEntry& e = map.groups[i];
    groups[i].setGroup(e.group);
    groups[i].setGeneration(e.generation);
    groups[i].setPrimary(e.primary);
    auto b = groups[i].initBackups(static_cast<unsigned>(e.backups.size()));
    for (unsigned j = 0; j < e.backups.size(); ++j) b.set(j, e.backups[j]);
    auto r = groups[i].initRebuilding(static_cast<unsigned>(e.rebuilding.size()));
    for (unsigned j = 0; j < e.rebuilding.size(); ++j) r.set(j, e.rebuilding[j]);
    groups[i].setRestorePending(e.restore_pending);
  }
}

absl::StatusOr<ShardMap> ShardMapFromWire(wire::ShardMap::Reader in, int num_ps) {
  ShardMap map;
  map.generation = in.getGeneration();
  map.replicas = in.getReplicas();
  if (map.generation == 0 && map.replicas == 0) map.replicas = 1;
  for (auto g : in.getGroups()) {
    GroupEntry e;
    e.group = g.getGroup();
    e.generation = g.getGeneration();
    e.primary = g.getPrimary();
    for (int32_t ps : g.getBackups()) e.backups.push_back(ps);
    for (int32_t ps : g.getRebuilding()) e.rebuilding.push_back(ps);
    e.restore_pending = g.getRestorePending();
    map.groups.push_back(std::move(e));
  }
  std::sort(map.groups.begin(), map.groups.end(),
            [](const GroupEntry& a, const GroupEntry& b) { return a.group < b.group; });
  if (absl::Status s = map.Validate(num_ps); !s.ok()) return s;
  return map;
}

absl::Status StaleShardMapError(uint32_t group, uint64_t sent, uint64_t held, int32_t primary) {
  std::string message =
      absl::StrCat(kStaleShardMap, ": group ", group, " generation ", sent, " sent, generation ", held, " held");
  if (primary >= 0) absl::StrAppend(&message, "; primary is ps ", primary);
  return absl::FailedPreconditionError(message);
}

bool IsStaleShardMap(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition && absl::StrContains(status.message(), kStaleShardMap);
}

bool IsStaleShardMapOfALaggingPs(const absl::Status& status) {
  if (!IsStaleShardMap(status)) return false;
  // "...: group G generation S sent, generation H held..."
  const absl::string_view m = status.message();
  const size_t sent_at = m.find(" sent, generation ");
  if (sent_at == absl::string_view::npos) return false;
  const size_t sent_begin = m.rfind(' ', sent_at - 1);
  if (sent_begin == absl::string_view::npos) return false;
  const size_t held_begin = sent_at + std::strlen(" sent, generation ");
  const size_t held_end = m.find(' ', held_begin);
  uint64_t sent = 0;
  uint64_t held = 0;
  if (!absl::SimpleAtoi(m.substr(sent_begin + 1, sent_at - sent_begin - 1), &sent) ||
      held_end == absl::string_view::npos || !absl::SimpleAtoi(m.substr(held_begin, held_end - held_begin), &held)) {
    return false;
  }
  return held < sent;
}

absl::Status RestorePendingError(uint32_t group, int32_t ps, const char* method) {
  return absl::UnavailableError(absl::StrCat("shard group ", group, " lost every copy and ", kAwaitsRestore,
                                             " from the checkpoint (ps ", ps, ", ", method, ")"));
}

bool IsRestorePending(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable && absl::StrContains(status.message(), kAwaitsRestore);
}

const char* WireCopyRoleName(wire::CopyRole role) {
  switch (role) {
    case wire::CopyRole::PRIMARY:
      return "primary";
    case wire::CopyRole::BACKUP:
      return "backup";
    case wire::CopyRole::REBUILDING:
      return "rebuilding";
    case wire::CopyRole::NEEDS_REBUILD:
      return "needs_rebuild";
    case wire::CopyRole::FENCED:
      return "fenced";
    case wire::CopyRole::RESTORING:
      return "restoring";
  }
  return "unknown";
}

}  // namespace asyncps::ps
