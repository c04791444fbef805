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
// Elastic parameter servers (issue 37). PS indices are the slots the cluster spec lists; the
// members among them hold copies, the others none (a slot a PS may join later, or one that
// left). Each group has a target: the k members meant to hold its copies (at first the ring
// over the members, so with every slot a member, the ring above). Join and Leave change
// targets, balanced by bytes (SetGroupBytes; a group of unknown size weighs 1), and the map
// follows them in the steps replication already takes:
//   * a target PS that holds no copy of its group is added as rebuilding (a state transfer
//     from the primary while the group keeps serving; the copy is not counted for acks);
//   * once every target PS holds the group in sync (primary or backup), the copies off target
//     are dropped in one map change, the primary handing over to a target backup if it was
//     itself off target (a failover by plan, fenced by the generation like any other): the
//     move costs the clients one map change, not a copy.
// Returned (above) rebuilds a PS's target groups rather than its ring groups; the two are one
// thing until a Join or Leave.
//
// Not thread-safe: the PS monitor owns it and calls it from its one thread.
class ShardMapOwner {
 public:
  // InvalidArgument as ps::ShardMap::Initial.
  static absl::StatusOr<ShardMapOwner> Create(int num_ps, int replicas);
  // A map with `num_ps` groups (one per slot) placed on the first `members` slots only, each
  // group's copies on `replicas` of them (the ring over the members). InvalidArgument as above,
  // with `members` in place of num_ps, or when members is outside [1, num_ps].
  static absl::StatusOr<ShardMapOwner> Create(int num_ps, int replicas, int members);
  // Takes over `map` (e.g. the newest map the PS hold, when a chief restarts). With every slot
  // a member, targets are the ring; otherwise the members are the slots below `members` and
  // every PS the map names, and each group's target is where its copies are now.
  ShardMapOwner(ps::ShardMap map, int num_ps, int members = -1);

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

  // Admits slot `ps` as a member and moves copies to it while that lowers the most loaded
  // member's bytes (see the class comment); returns the groups whose map changed (its new
  // rebuilding copies). InvalidArgument for an index outside the slots; AlreadyExists for a
  // member. Nothing changes on an error.
  absl::StatusOr<std::vector<int>> Join(int ps);
  // Retargets every group `ps` is meant to hold onto the least loaded other member and starts
  // the moves; `ps` is no longer a member, and holds nothing once HoldsAny(ps) is false.
  // NotFound for a PS that is not a member; FailedPrecondition when fewer members than copies
  // of a group (k, and at least 1) would be left ("a group with no copy"). Nothing changes on
  // an error.
  absl::StatusOr<std::vector<int>> Leave(int ps);
  bool IsMember(int ps) const;
  int members() const;
  // True when the map names `ps` in any role of any group.
  bool HoldsAny(int ps) const;
  // True while a group has copies off its target (a move not finished).
  bool Moving() const;
  // True while `group` has copies off its target.
  bool Moving(int group) const;
  // The PS meant to hold `group`'s copies (empty for an unknown group).
  std::vector<int32_t> Target(int group) const;
  // The size of a group's state, as its primary reports it: the weight Join and Leave balance.
  void SetGroupBytes(int group, uint64_t bytes);
  // Per slot: the bytes of the groups its target names it for (what balancing evens out).
  std::vector<uint64_t> TargetBytes() const;

 private:
  void Bump(ps::GroupEntry& g);
  // Brings a group that is moving a step closer to its target (see the class comment); true
  // when its entry changed (not bumped: the caller bumps).
  bool Reconcile(ps::GroupEntry& g);
  uint64_t Weight(size_t group) const;

  ps::ShardMap map_;
  int num_ps_;
  std::vector<int> no_live_copy_;
  std::vector<bool> member_;                  // per slot
  std::vector<std::vector<int32_t>> target_;  // per group (groups are 0..num_ps-1)
  std::vector<bool> moving_;                  // per group: retargeted, not settled yet
  std::vector<bool> lost_;                    // per slot: Lost and not Returned since
  std::vector<uint64_t> bytes_;               // per group
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_SHARD_MAP_OWNER_H_
