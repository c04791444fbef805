#ifndef ASYNCPS_COORDINATOR_SHARD_MAP_OWNER_H_
#define ASYNCPS_COORDINATOR_SHARD_MAP_OWNER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/replication/shard_map.h"

namespace asyncps {

// The chief's decisions about the shard map (issue 19), kept apart from the heartbeats and RPCs
// that feed them (coordinator/ps_monitor.h) so each rule can be tested alone. Every change
// gives each group it touches a generation above every generation the map held, so the map
// generation grows with every change and a PS never sees two different maps at one generation.
//
// Rules:
//   * Lost(ps): `ps` lost its copies (a new incarnation answered, it refused connections, or it
//     stayed silent past the patience the user set). Every group whose primary was `ps` gets
//     its first backup as primary (or no primary, -1, when it had none: a group with no live
//     copy, which is then marked restore_pending); `ps` leaves every group's backups and
//     rebuilding lists.
//   * Unreachable(silent, reachable): the PS in `silent` stopped answering, with no evidence
//     that they lost anything (a partition, a paused process and a dead host look alike).
//     Each group whose primary is silent fails over to its first backup that is `reachable`
//     (the old primary is fenced by the new generation); silent PS leave the backups and
//     rebuilding lists of every group whose primary is then reachable (its writes stop
//     waiting for them; they rebuild when they answer again). A group none of whose copies is
//     reachable is left exactly as it is: unreachable, nothing thrown away, until a copy
//     answers again (a backup that does is promoted then) or is declared Lost.
//   * Returned(ps): `ps` is added as rebuilding to each group whose ring places a copy on it
//     (group g's ring is g, g+1, ..., g+k-1 mod n) and that lacks it, and to any group with
//     fewer than k copies; a group with no primary at all takes `ps` as its (empty) primary
//     instead, still restore_pending: it serves nothing but the chief's restore (see
//     TakeNoLiveCopy).
//   * Restored(group): the chief restored the group from a checkpoint: restore_pending is
//     cleared and its primary serves again (nothing changes while it has no primary).
//   * InSync(ps, group): a rebuilding copy the primary reports caught up becomes a backup.
//   * NeedsRebuild(ps, group): a backup that refused the stream (gap, out of order) goes back to
//     rebuilding, so the primary sends it a fresh state transfer; a rebuilding copy whose
//     stream stopped gets a new generation (the primary starts a new transfer at each map).
//   * CannotServe(ps, group): the group's primary `ps` holds a copy that cannot serve (it
//     reports needs-rebuild, rebuilding or fenced at the map's generation: e.g. a backup that
//     refused its stream and was promoted before the chief heard of it). It is a lost copy of
//     the group, though the PS is alive: the first backup (in sync) is promoted and `ps` goes
//     to rebuilding; with no backup left the group has no live copy, so `ps` stays its (empty)
//     primary, the group is marked restore_pending and is listed by TakeNoLiveCopy (the
//     checkpoint restore, once). Nothing changes for a group awaiting its restore already.
//   * WorkersCannotReach(cut_from, reachable): a gray failure. `cut_from[p]` workers cannot
//     reach PS p (they have waited past the heartbeat timeout for its answers) though the
//     chief may. Each group whose primary the chief reaches (the chief's own view comes first:
//     a primary it does not reach is Unreachable's) and that some worker cannot reach fails
//     over to the backup the fewest workers cannot reach, if the chief reaches it and fewer
//     workers are cut from it than from the primary (so two partial cuts cannot make a group
//     move back and forth); the old primary goes to rebuilding: fenced by the generation, it
//     may hold writes it applied and never streamed, so it takes a state transfer before it
//     counts again. No backup better placed: nothing changes.
// Each returns the groups it changed (empty: the map is unchanged).
//
// Not thread-safe: the PS monitor owns it and calls it from its one thread.
class ShardMapOwner {
 public:
  // InvalidArgument as ps::ShardMap::Initial.
  static absl::StatusOr<ShardMapOwner> Create(int num_ps, int replicas);
  // Takes over `map` (e.g. the newest map the PS hold, when a chief restarts).
  ShardMapOwner(ps::ShardMap map, int num_ps);

  const ps::ShardMap& map() const { return map_; }
  int num_ps() const { return num_ps_; }

  std::vector<int> Lost(int ps);
  // `reachable[i]`: PS i answers. PS in `silent` must not be reachable.
  std::vector<int> Unreachable(const std::vector<int>& silent, const std::vector<bool>& reachable);
  // `cut_from[p]`: workers that cannot reach PS p; `reachable[p]`: the chief reaches PS p.
  std::vector<int> WorkersCannotReach(const std::vector<int>& cut_from, const std::vector<bool>& reachable);
  std::vector<int> Returned(int ps);
  std::vector<int> InSync(int ps, int group);
  std::vector<int> NeedsRebuild(int ps, int group);
  std::vector<int> CannotServe(int ps, int group);
  std::vector<int> Restored(int group);

  // Groups that were left without any live copy and were given an empty primary since the
  // last call (the caller restores them from a checkpoint), then forgets them.
  std::vector<int> TakeNoLiveCopy();

 private:
  void Bump(ps::GroupEntry& g);

  ps::ShardMap map_;
  int num_ps_;
  std::vector<int> no_live_copy_;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_SHARD_MAP_OWNER_H_
