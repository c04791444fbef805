#include "coordinator/shard_map_owner.h"

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

}  // namespace
}  // namespace asyncps
