#include "coordinator/shard_map_owner.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

ShardMapOwner ThreePsTwoCopies() {
  absl::StatusOr<ShardMapOwner> owner = ShardMapOwner::Create(3, 2);
  EXPECT_TRUE(owner.ok()) << owner.status();
  return *std::move(owner);
}

TEST(ShardMapOwnerTest, InitialMapIsTheRing) {
  ShardMapOwner owner = ThreePsTwoCopies();
  ASSERT_EQ(owner.map().groups.size(), 3u);
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(owner.map().groups[g].primary, g);
    EXPECT_EQ(owner.map().groups[g].backups, std::vector<int32_t>{(g + 1) % 3});
  }
  EXPECT_FALSE(ShardMapOwner::Create(2, 3).ok()) << "more copies than PS";
}

TEST(ShardMapOwnerTest, LostPrimaryPromotesItsBackupAndRaisesGenerations) {
  ShardMapOwner owner = ThreePsTwoCopies();
  const uint64_t before = owner.map().generation;
  // PS 1 is primary of group 1 and backup of group 0.
  EXPECT_EQ(owner.Lost(1), (std::vector<int>{0, 1}));
  const ps::GroupEntry& g0 = owner.map().groups[0];
  const ps::GroupEntry& g1 = owner.map().groups[1];
  EXPECT_EQ(g0.primary, 0);
  EXPECT_TRUE(g0.backups.empty());
  EXPECT_EQ(g1.primary, 2);
  EXPECT_TRUE(g1.backups.empty());
  EXPECT_GT(g0.generation, before);
  EXPECT_GT(g1.generation, g0.generation);
  EXPECT_EQ(owner.map().generation, g1.generation);
  EXPECT_EQ(owner.map().groups[2].generation, before) << "group 2 did not change";
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
}

// A silent PS whose groups have a backup that answers fails over as a lost one does.
TEST(ShardMapOwnerTest, SilentPrimaryWithAReachableBackupFailsOver) {
  ShardMapOwner owner = ThreePsTwoCopies();
  EXPECT_EQ(owner.Unreachable({1}, {true, false, true}), (std::vector<int>{0, 1}));
  EXPECT_EQ(owner.map().groups[0].primary, 0);
  EXPECT_TRUE(owner.map().groups[0].backups.empty()) << "writes no longer wait for the silent backup";
  EXPECT_EQ(owner.map().groups[1].primary, 2);
  EXPECT_TRUE(owner.map().groups[1].backups.empty());
  EXPECT_FALSE(owner.map().groups[1].restore_pending);
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
  EXPECT_TRUE(owner.Unreachable({1}, {true, false, true}).empty()) << "nothing more to change";
}

// A gray failure: the chief reaches PS 0, the workers do not. Group 0 moves to its backup
// (which they reach) at a higher generation, and PS 0, fenced, rebuilds it; the groups PS 0
// only backs, and the groups whose primary the workers reach, stay as they are.
TEST(ShardMapOwnerTest, PrimaryTheWorkersCannotReachFailsOverToABackupTheyReach) {
  ShardMapOwner owner = ThreePsTwoCopies();
  const uint64_t before = owner.map().generation;
  EXPECT_EQ(owner.WorkersCannotReach({3, 0, 0}, {true, true, true}), std::vector<int>{0});
  const ps::GroupEntry& g0 = owner.map().groups[0];
  EXPECT_EQ(g0.primary, 1);
  EXPECT_TRUE(g0.backups.empty());
  EXPECT_EQ(g0.rebuilding, std::vector<int32_t>{0}) << "the old primary is fenced and rebuilds";
  EXPECT_GT(g0.generation, before);
  EXPECT_EQ(owner.map().groups[2].primary, 2);
  EXPECT_EQ(owner.map().groups[2].backups, std::vector<int32_t>{0}) << "streams to PS 0 still arrive";
  EXPECT_EQ(owner.map().groups[1].generation, before);
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
  EXPECT_TRUE(owner.WorkersCannotReach({3, 0, 0}, {true, true, true}).empty()) << "nothing more to change";
}

// No move without a better place: a backup the chief does not reach, or one as many workers
// cannot reach as the primary, is not a failover target; a primary the chief does not reach
// is Unreachable's to decide, not this rule's.
TEST(ShardMapOwnerTest, WorkersCutFromAPrimaryMoveItOnlyToABackupBetterPlaced) {
  ShardMapOwner owner = ThreePsTwoCopies();
  const ps::ShardMap before = owner.map();
  EXPECT_TRUE(owner.WorkersCannotReach({2, 0, 0}, {true, false, true}).empty()) << "backup unreachable";
  EXPECT_TRUE(owner.WorkersCannotReach({2, 2, 2}, {true, true, true}).empty()) << "every backup cut as much";
  EXPECT_TRUE(owner.WorkersCannotReach({2, 0, 0}, {false, true, true}).empty()) << "the chief's own view";
  EXPECT_TRUE(owner.map() == before);
  // One worker cut from PS 0, none from PS 1: worth a move (every worker reaches PS 1).
  EXPECT_EQ(owner.WorkersCannotReach({1, 0, 0}, {true, true, true}), std::vector<int>{0});
  // Then two workers lose PS 1: group 1 moves to PS 2, but group 0 does not go back to PS 0,
  // which is rebuilding it and is no backup.
  EXPECT_EQ(owner.WorkersCannotReach({1, 2, 0}, {true, true, true}), std::vector<int>{1});
  EXPECT_EQ(owner.map().groups[0].primary, 1);
  EXPECT_EQ(owner.map().groups[1].primary, 2);
}

// With three copies the backup fewest workers are cut from is chosen.
TEST(ShardMapOwnerTest, WorkersCutFromAPrimaryPickTheBackupFewestAreCutFrom) {
  absl::StatusOr<ShardMapOwner> owner = ShardMapOwner::Create(3, 3);
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_EQ(owner->map().groups[0].backups, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(owner->WorkersCannotReach({3, 1, 0}, {true, true, true}), (std::vector<int>{0, 1}));
  EXPECT_EQ(owner->map().groups[0].primary, 2);
  EXPECT_EQ(owner->map().groups[0].backups, std::vector<int32_t>{1});
  EXPECT_EQ(owner->map().groups[1].primary, 2) << "group 1's primary, PS 1, is cut from one worker, PS 2 from none";
  EXPECT_EQ(owner->map().groups[2].primary, 2);
  EXPECT_TRUE(owner->map().Validate(3).ok()) << owner->map().Validate(3);
}

// Silence proves nothing: a group none of whose copies answers keeps its primary and its
// backups (no restore, nothing thrown away), and fails over to a backup once that one answers.
TEST(ShardMapOwnerTest, GroupWithNoCopyAnsweringIsLeftAsItIs) {
  ShardMapOwner owner = ThreePsTwoCopies();
  const ps::ShardMap before = owner.map();
  // Every PS silent (the chief is the one cut off): nothing changes.
  EXPECT_TRUE(owner.Unreachable({0, 1, 2}, {false, false, false}).empty());
  EXPECT_TRUE(owner.map() == before);
  // PS 0 and 1 silent, 2 answers: group 0 (copies on 0 and 1) is left as it is; group 1 fails
  // over to 2; group 2 drops its silent backup 0.
  EXPECT_EQ(owner.Unreachable({0, 1}, {false, false, true}), (std::vector<int>{1, 2}));
  EXPECT_EQ(owner.map().groups[0].primary, 0);
  EXPECT_EQ(owner.map().groups[0].backups, std::vector<int32_t>{1});
  EXPECT_EQ(owner.map().groups[0].generation, before.groups[0].generation);
  EXPECT_FALSE(owner.map().groups[0].restore_pending);
  EXPECT_EQ(owner.map().groups[1].primary, 2);
  EXPECT_TRUE(owner.map().groups[2].backups.empty());
  EXPECT_TRUE(owner.TakeNoLiveCopy().empty());
  // PS 1 answers again (0 still silent): group 0 fails over to it.
  EXPECT_EQ(owner.Unreachable({0}, {false, true, true}), std::vector<int>{0});
  EXPECT_EQ(owner.map().groups[0].primary, 1);
  EXPECT_TRUE(owner.map().groups[0].backups.empty());
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
}

TEST(ShardMapOwnerTest, ReturnedPsRebuildsItsRingGroupsThenCountsWhenInSync) {
  ShardMapOwner owner = ThreePsTwoCopies();
  owner.Lost(1);
  EXPECT_EQ(owner.Returned(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(owner.map().groups[0].rebuilding, std::vector<int32_t>{1});
  EXPECT_EQ(owner.map().groups[1].rebuilding, std::vector<int32_t>{1});
  EXPECT_EQ(owner.map().groups[1].primary, 2) << "the promoted copy stays primary";
  EXPECT_TRUE(owner.Returned(1).empty()) << "already rebuilding";
  const uint64_t before = owner.map().generation;
  EXPECT_EQ(owner.InSync(1, 1), std::vector<int>{1});
  EXPECT_EQ(owner.map().groups[1].backups, std::vector<int32_t>{1});
  EXPECT_TRUE(owner.map().groups[1].rebuilding.empty());
  EXPECT_GT(owner.map().generation, before);
  EXPECT_TRUE(owner.InSync(1, 1).empty()) << "already a backup";
  EXPECT_TRUE(owner.map().Validate(3).ok());
}

TEST(ShardMapOwnerTest, BackupThatNeedsRebuildGoesBackToRebuilding) {
  ShardMapOwner owner = ThreePsTwoCopies();
  EXPECT_EQ(owner.NeedsRebuild(1, 0), std::vector<int>{0});
  EXPECT_TRUE(owner.map().groups[0].backups.empty());
  EXPECT_EQ(owner.map().groups[0].rebuilding, std::vector<int32_t>{1});
  EXPECT_TRUE(owner.NeedsRebuild(2, 0).empty()) << "ps 2 holds no copy of group 0";
  // Rebuilding already, its transfer stream stopped: a new generation restarts it.
  const uint64_t before = owner.map().generation;
  EXPECT_EQ(owner.NeedsRebuild(1, 0), std::vector<int>{0});
  EXPECT_EQ(owner.map().groups[0].rebuilding, std::vector<int32_t>{1});
  EXPECT_GT(owner.map().groups[0].generation, before);
}

TEST(ShardMapOwnerTest, GroupWithNoLiveCopyGetsAnEmptyPrimaryForRecovery) {
  ShardMapOwner owner = ThreePsTwoCopies();
  owner.Lost(0);  // group 0 -> primary 1
  owner.Lost(1);  // group 0 has no copy left
  EXPECT_EQ(owner.map().groups[0].primary, -1);
  EXPECT_TRUE(owner.TakeNoLiveCopy().empty());
  owner.Returned(0);
  EXPECT_EQ(owner.map().groups[0].primary, 0);
  EXPECT_EQ(owner.TakeNoLiveCopy(), std::vector<int>{0});
  EXPECT_TRUE(owner.TakeNoLiveCopy().empty());
  EXPECT_TRUE(owner.map().Validate(3).ok());
}

// A group that lost every copy stays restore_pending through its return (its primary serves
// only the restore) until the chief restored it; a group with no primary cannot be restored.
TEST(ShardMapOwnerTest, GroupThatLostEveryCopyAwaitsItsRestore) {
  ShardMapOwner owner = ThreePsTwoCopies();
  owner.Lost(0);
  EXPECT_FALSE(owner.map().groups[0].restore_pending) << "a backup took over";
  owner.Lost(1);
  EXPECT_TRUE(owner.map().groups[0].restore_pending);
  EXPECT_FALSE(owner.map().groups[1].restore_pending) << "group 1 failed over to ps 2";
  EXPECT_TRUE(owner.Restored(0).empty()) << "no copy to restore yet";
  owner.Returned(1);
  EXPECT_EQ(owner.map().groups[0].primary, 1);
  EXPECT_TRUE(owner.map().groups[0].restore_pending);
  owner.Returned(0);  // rebuilds from the restoring primary
  EXPECT_EQ(owner.map().groups[0].rebuilding, std::vector<int32_t>{0});
  const uint64_t before = owner.map().generation;
  EXPECT_EQ(owner.Restored(0), std::vector<int>{0});
  EXPECT_FALSE(owner.map().groups[0].restore_pending);
  EXPECT_GT(owner.map().groups[0].generation, before);
  EXPECT_TRUE(owner.Restored(0).empty()) << "restored once";
  EXPECT_TRUE(owner.map().Validate(3).ok());
}

// A primary whose copy cannot serve (it reports needs-rebuild, say) is a lost copy of its
// group: its in-sync backup is promoted and it rebuilds; with no backup left the group has no
// live copy and awaits one restore, its primary the (now empty) PS.
TEST(ShardMapOwnerTest, PrimaryThatCannotServeIsALostCopyOfItsGroup) {
  ShardMapOwner owner = ThreePsTwoCopies();
  EXPECT_TRUE(owner.CannotServe(1, 0).empty()) << "ps 1 is not group 0's primary";
  const uint64_t before = owner.map().generation;
  EXPECT_EQ(owner.CannotServe(0, 0), std::vector<int>{0});
  const ps::GroupEntry& g0 = owner.map().groups[0];
  EXPECT_EQ(g0.primary, 1);
  EXPECT_TRUE(g0.backups.empty());
  EXPECT_EQ(g0.rebuilding, std::vector<int32_t>{0});
  EXPECT_FALSE(g0.restore_pending);
  EXPECT_GT(g0.generation, before);
  EXPECT_EQ(owner.map().generation, g0.generation);
  EXPECT_TRUE(owner.TakeNoLiveCopy().empty());
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);

  // The promoted copy cannot serve either: no copy holds the group's writes any more.
  const uint64_t promoted = owner.map().generation;
  EXPECT_EQ(owner.CannotServe(1, 0), std::vector<int>{0});
  EXPECT_EQ(owner.map().groups[0].primary, 1);
  EXPECT_TRUE(owner.map().groups[0].restore_pending);
  EXPECT_EQ(owner.map().groups[0].rebuilding, std::vector<int32_t>{0}) << "rebuilds from the restored primary";
  EXPECT_GT(owner.map().generation, promoted);
  EXPECT_EQ(owner.TakeNoLiveCopy(), std::vector<int>{0});
  EXPECT_TRUE(owner.CannotServe(1, 0).empty()) << "already awaiting its restore";
  EXPECT_TRUE(owner.TakeNoLiveCopy().empty()) << "one restore";
  EXPECT_EQ(owner.Restored(0), std::vector<int>{0});
  EXPECT_FALSE(owner.map().groups[0].restore_pending);
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
}

// ---- Elastic parameter servers (issue 37) ----------------------------------------------------

// Reports every rebuilding copy in sync, as primaries do once their transfers finish, until
// no group has one (a join's or leave's moves run to the end).
void SyncEverything(ShardMapOwner& owner) {
  for (int round = 0; round < 10; ++round) {
    bool any = false;
    for (const ps::GroupEntry& g : ps::ShardMap(owner.map()).groups) {
      for (int32_t r : g.rebuilding) {
        owner.InSync(r, static_cast<int>(g.group));
        any = true;
      }
    }
    if (!any) return;
  }
  ADD_FAILURE() << "moves did not settle: " << owner.map().DebugString();
}

int CopiesOn(const ps::ShardMap& map, int ps) {
  int n = 0;
  for (const ps::GroupEntry& g : map.groups) n += g.Holds(ps) ? 1 : 0;
  return n;
}

TEST(ShardMapOwnerTest, JobStartedOnFewerPsThanSlotsPlacesEveryGroupOnItsMembers) {
  absl::StatusOr<ShardMapOwner> owner = ShardMapOwner::Create(3, 2, 2);
  ASSERT_TRUE(owner.ok()) << owner.status();
  ASSERT_EQ(owner->map().groups.size(), 3u) << "one group per slot: more groups than PS";
  EXPECT_EQ(owner->members(), 2);
  EXPECT_FALSE(owner->IsMember(2));
  EXPECT_FALSE(owner->HoldsAny(2));
  for (const ps::GroupEntry& g : owner->map().groups) {
    EXPECT_EQ(g.backups.size(), 1u);
    EXPECT_NE(g.primary, g.backups[0]);
  }
  EXPECT_TRUE(owner->map().Validate(3).ok()) << owner->map().Validate(3);
  EXPECT_FALSE(ShardMapOwner::Create(3, 2, 1).ok()) << "two copies need two members";
  EXPECT_FALSE(ShardMapOwner::Create(3, 1, 0).ok());
  EXPECT_FALSE(ShardMapOwner::Create(3, 1, 4).ok());
}

TEST(ShardMapOwnerTest, JoinRebuildsCopiesOnTheNewPsAndDropsTheOldOnesOnlyOnceInSync) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2, 2);
  const uint64_t before = owner.map().generation;
  absl::StatusOr<std::vector<int>> changed = owner.Join(2);
  ASSERT_TRUE(changed.ok()) << changed.status();
  // Six copies of equal weight over three PS: two each, so two copies move to ps 2.
  ASSERT_EQ(changed->size(), 2u);
  EXPECT_TRUE(owner.Moving());
  for (int g : *changed) {
    const ps::GroupEntry& e = *owner.map().Find(static_cast<uint32_t>(g));
    EXPECT_EQ(e.rebuilding, std::vector<int32_t>{2}) << "a state transfer first";
    EXPECT_EQ(e.backups.size(), 1u) << "the old copies serve and count until the new one is in sync";
    EXPECT_GT(e.generation, before);
  }
  EXPECT_EQ(owner.TargetBytes(), (std::vector<uint64_t>{2, 2, 2}));
  SyncEverything(owner);
  EXPECT_FALSE(owner.Moving());
  for (int ps = 0; ps < 3; ++ps) EXPECT_EQ(CopiesOn(owner.map(), ps), 2) << "ps " << ps;
  for (const ps::GroupEntry& g : owner.map().groups) {
    EXPECT_EQ(g.backups.size(), 1u) << g.group;
    EXPECT_TRUE(g.rebuilding.empty()) << g.group;
    EXPECT_GE(g.primary, 0);
  }
  EXPECT_TRUE(owner.map().Validate(3).ok()) << owner.map().Validate(3);
}

TEST(ShardMapOwnerTest, LeaveMovesEveryCopyOffThePsBeforeItHoldsNothing) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2);
  absl::StatusOr<std::vector<int>> changed = owner.Leave(1);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(owner.IsMember(1));
  EXPECT_TRUE(owner.HoldsAny(1)) << "its copies serve until the new ones are in sync";
  // Group 1 (primary 1, backup 2) can only go to ps 0; group 0 (0, 1) to ps 2.
  EXPECT_EQ(owner.Target(1), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(owner.Target(0), (std::vector<int32_t>{0, 2}));
  SyncEverything(owner);
  EXPECT_FALSE(owner.HoldsAny(1));
  EXPECT_FALSE(owner.Moving());
  const ps::GroupEntry& g1 = owner.map().groups[1];
  EXPECT_TRUE(g1.primary == 0 || g1.primary == 2) << "the primary handed over to a target copy";
  for (const ps::GroupEntry& g : owner.map().groups) EXPECT_EQ(g.backups.size(), 1u) << g.group;
  // It comes back: a join again.
  ASSERT_TRUE(owner.Join(1).ok());
  SyncEverything(owner);
  for (int ps = 0; ps < 3; ++ps) EXPECT_EQ(CopiesOn(owner.map(), ps), 2) << "ps " << ps;
}

TEST(ShardMapOwnerTest, RefusedJoinsAndLeavesChangeNothing) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2, 2);
  const ps::ShardMap before = owner.map();
  EXPECT_EQ(owner.Leave(0).status().code(), absl::StatusCode::kFailedPrecondition)
      << "two copies of each group need two PS";
  EXPECT_EQ(owner.Leave(2).status().code(), absl::StatusCode::kNotFound) << "not a member";
  EXPECT_EQ(owner.Join(1).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(owner.Join(3).status().code(), absl::StatusCode::kInvalidArgument) << "no such slot";
  EXPECT_EQ(owner.Join(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(owner.map(), before);
  EXPECT_EQ(owner.members(), 2);

  ShardMapOwner single = *ShardMapOwner::Create(2, 1, 1);
  EXPECT_EQ(single.Leave(0).status().code(), absl::StatusCode::kFailedPrecondition) << "a job needs a PS";
  EXPECT_EQ(single.members(), 1);
}

TEST(ShardMapOwnerTest, JoinBalancesByBytesAndMovesTheBigGroupWhenThatIsWhatEvensThemOut) {
  // One copy each; ps 0 holds groups 0 and 2, ps 1 holds group 1.
  ShardMapOwner owner = *ShardMapOwner::Create(3, 1, 2);
  owner.SetGroupBytes(0, 100);
  owner.SetGroupBytes(1, 100);
  owner.SetGroupBytes(2, 10);
  ASSERT_EQ(owner.map().groups[2].primary, 0);
  ASSERT_TRUE(owner.Join(2).ok());
  // Moving group 2 (10 bytes) would leave ps 0 at 100 and ps 2 at 10; moving group 0 leaves
  // 10 / 100 / 100: the same peak, so the greedy move takes the biggest group first, and
  // stops when no move lowers the larger of the two loads.
  const std::vector<uint64_t> load = owner.TargetBytes();
  EXPECT_EQ(*std::max_element(load.begin(), load.end()), 100u);
  EXPECT_GT(load[2], 0u);
  SyncEverything(owner);
  EXPECT_EQ(CopiesOn(owner.map(), 2), 1);
  // With one copy the new PS takes over as primary and the old one is dropped.
  for (const ps::GroupEntry& g : owner.map().groups) {
    EXPECT_TRUE(g.backups.empty());
    EXPECT_TRUE(g.rebuilding.empty());
  }
}

TEST(ShardMapOwnerTest, ANewPsKilledMidMoveRebuildsWhenItReturnsAndTheMoveFinishes) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2, 2);
  ASSERT_TRUE(owner.Join(2).ok());
  // Killed while receiving: its copies are lost, the old ones still serve.
  owner.Lost(2);
  EXPECT_FALSE(owner.HoldsAny(2));
  for (const ps::GroupEntry& g : owner.map().groups) EXPECT_EQ(g.backups.size(), 1u) << "nothing dropped";
  SyncEverything(owner);
  EXPECT_TRUE(owner.Moving()) << "the target still names ps 2";
  // Restarted, it rebuilds what its target names; then the moves finish.
  EXPECT_EQ(owner.Returned(2).size(), 2u);
  SyncEverything(owner);
  EXPECT_FALSE(owner.Moving());
  for (int ps = 0; ps < 3; ++ps) EXPECT_EQ(CopiesOn(owner.map(), ps), 2) << "ps " << ps;
}

TEST(ShardMapOwnerTest, AJoinDuringAFailoverMovesWhatServesAndTheLostPsRebuildsItsTargetsLater) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2, 2);
  owner.Lost(1);  // every group fails over to ps 0
  for (const ps::GroupEntry& g : owner.map().groups) ASSERT_EQ(g.primary, 0);
  ASSERT_TRUE(owner.Join(2).ok());
  SyncEverything(owner);
  for (const ps::GroupEntry& g : owner.map().groups) {
    EXPECT_GE(g.primary, 0);
    EXPECT_FALSE(g.Holds(1)) << "lost: nothing of it is counted";
  }
  // Back (restarted empty): it rebuilds the groups its target names, and every group ends with
  // its two copies where the targets say.
  owner.Returned(1);
  SyncEverything(owner);
  EXPECT_FALSE(owner.Moving());
  for (const ps::GroupEntry& g : owner.map().groups) {
    std::vector<int32_t> where = g.backups;
    where.push_back(g.primary);
    std::sort(where.begin(), where.end());
    std::vector<int32_t> target = owner.Target(static_cast<int>(g.group));
    std::sort(target.begin(), target.end());
    EXPECT_EQ(where, target) << owner.map().DebugString();
  }
}

TEST(ShardMapOwnerTest, AChiefTakingOverAMapKeepsWhereCopiesAreAsTheTarget) {
  ShardMapOwner owner = *ShardMapOwner::Create(4, 2, 2);
  ASSERT_TRUE(owner.Join(3).ok());
  SyncEverything(owner);
  ShardMapOwner restarted(owner.map(), 4, 2);
  EXPECT_TRUE(restarted.IsMember(3)) << "it holds copies";
  EXPECT_FALSE(restarted.IsMember(2));
  EXPECT_FALSE(restarted.Moving());
  for (const ps::GroupEntry& g : owner.map().groups) {
    std::vector<int32_t> where = {g.primary};
    where.insert(where.end(), g.backups.begin(), g.backups.end());
    EXPECT_EQ(restarted.Target(static_cast<int>(g.group)), where);
  }
  EXPECT_TRUE(restarted.Returned(3).empty()) << "nothing to rebuild: it holds its targets";
}

TEST(ShardMapOwnerTest, AChiefRestartedMidMoveDropsTheHalfMovedCopiesAndTheJoinerIsRetargeted) {
  ShardMapOwner owner = *ShardMapOwner::Create(3, 2, 2);
  ASSERT_TRUE(owner.Join(2).ok());  // copies rebuilding on ps 2 ...
  ShardMapOwner restarted(owner.map(), 3, 2);  // ... when the chief restarts
  EXPECT_FALSE(restarted.IsMember(2)) << "it holds nothing in sync: a member again when it registers";
  EXPECT_TRUE(restarted.Moving());
  SyncEverything(restarted);
  EXPECT_FALSE(restarted.Moving());
  for (const ps::GroupEntry& g : restarted.map().groups) {
    EXPECT_EQ(g.backups.size(), 1u) << "no copy past k: " << restarted.map().DebugString();
    EXPECT_FALSE(g.Holds(2));
  }
  // PS 2 registers again (it does every 5 s): the move is made anew.
  ASSERT_TRUE(restarted.Join(2).ok());
  SyncEverything(restarted);
  for (int ps = 0; ps < 3; ++ps) EXPECT_EQ(CopiesOn(restarted.map(), ps), 2) << "ps " << ps;
}

}  // namespace
}  // namespace asyncps
