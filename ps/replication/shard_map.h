#ifndef ASYNCPS_PS_REPLICATION_SHARD_MAP_H_
#define ASYNCPS_PS_REPLICATION_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/ps.capnp.h"

namespace asyncps::ps {

// Which PS holds which copy of each shard group (issue 19; OSDI'14 ring at PS granularity).
// Group g is the set of variable shards whose placement names PS index g. With k replicas,
// group g has a primary and k-1 backups; the chief owns the map and raises a group's
// generation whenever its membership changes.
struct GroupEntry {
  uint32_t group = 0;
  uint64_t generation = 0;
  int32_t primary = -1;              // PS index; -1: no live copy
  std::vector<int32_t> backups;      // in sync, counted for acks
  std::vector<int32_t> rebuilding;   // receiving a state transfer, not counted for acks
  // Every copy of the group was lost: its primary (when one is named) holds nothing and serves
  // only the chief's restore (CopyRole::kRestoring) until the chief clears this in a new map.
  bool restore_pending = false;

  // True when `ps` holds a copy of this group in any role.
  bool Holds(int32_t ps) const;
  friend bool operator==(const GroupEntry& a, const GroupEntry& b);
};

struct ShardMap {
  uint64_t generation = 0;  // map-wide: the highest of its groups' generations (0: no map)
  uint32_t replicas = 1;
  std::vector<GroupEntry> groups;  // ordered by group

  // The ring map at generation 1: group g has primary g and backups (g+1)%n .. (g+k-1)%n.
  // InvalidArgument when num_ps < 1, replicas outside [1, 3], or replicas > num_ps.
  static absl::StatusOr<ShardMap> Initial(int num_ps, int replicas);

  // The entry of `group`, or null.
  const GroupEntry* Find(uint32_t group) const;

  // Checks the map is well formed for a cluster of `num_ps` parameter servers (num_ps < 0:
  // unknown, indices only checked >= 0): groups distinct and in range, every generation >= 1,
  // the map generation the highest group generation, the members of a group distinct PS
  // indices. InvalidArgument naming the first problem.
  absl::Status Validate(int num_ps) const;

  // One line for logs: "gen 4 k=2 [g0 gen 1: 0 | 1 ; g1 gen 4: 2 | - rebuilding 1]".
  std::string DebugString() const;

  friend bool operator==(const ShardMap& a, const ShardMap& b);
};

void ShardMapToWire(const ShardMap& map, wire::ShardMap::Builder out);
// The map as sent (validated with num_ps, see ShardMap::Validate). A wire map with
// generation 0 and no groups reads as the empty map.
absl::StatusOr<ShardMap> ShardMapFromWire(wire::ShardMap::Reader in, int num_ps);

// The refusal of a request routed with a generation this PS does not hold for `group`, or to
// a PS that is not the group's primary: FailedPrecondition whose message contains
// "stale shard map", e.g.
//   "stale shard map: group 1 generation 3 sent, generation 4 held; primary is ps 2".
// `primary` < 0 leaves the primary out (unknown).
absl::Status StaleShardMapError(uint32_t group, uint64_t sent, uint64_t held, int32_t primary);
// True for a status made by StaleShardMapError (or relayed from one): the client should fetch
// the shard map again (ps.GetShardMap) and retry at the group's current primary.
bool IsStaleShardMap(const absl::Status& status);

// True for a StaleShardMapError whose PS holds an older generation than the request was sent
// with: the client's map is ahead (the chief gave it the map before that PS installed it, as a
// planned move does), so the PS is about to take it and a retry soon will do; no newer map is
// coming to wait for.
bool IsStaleShardMapOfALaggingPs(const absl::Status& status);

// The refusal of a request to the primary of a group that lost every copy and awaits the
// chief's restore from a checkpoint: Unavailable whose message contains "awaits a restore", e.g.
//   "shard group 1 lost every copy and awaits a restore from the checkpoint (ps 2, ps.Update)".
// A routed call does not ride it out (ShardMapCache waits would last until the restore, which
// waits for the closures to end): the closure fails as a PS failure and automatic PS recovery,
// which the chief starts for exactly this, runs it again after the restore.
absl::Status RestorePendingError(uint32_t group, int32_t ps, const char* method);
// True for a status made by RestorePendingError (or relayed from one).
bool IsRestorePending(const absl::Status& status);

// The name of a copy's role as the PS reports it (ps.ReplicaStatus) and as events, metrics
// and errors print it, on the chief and on the PS alike: "primary", "needs_rebuild", ...
const char* WireCopyRoleName(wire::CopyRole role);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_SHARD_MAP_H_
