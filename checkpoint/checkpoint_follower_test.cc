#include "checkpoint/checkpoint_follower.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "ps/checkpoint_test_util.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using testutil::FakeCluster;
using testutil::TestDir;

CheckpointFollower::Options Fast() {
  CheckpointFollower::Options o;
  o.poll_interval = absl::Milliseconds(5);
  o.idle_timeout = absl::Seconds(30);  // a bound for a broken test, never reached when it passes
  return o;
}

class CheckpointFollowerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.Add("w", testutil::Iota({4, 2}, 1), {2, 2}, {0, 1}, nullptr);
  }
  std::string Save(int64_t step) {
    auto path = cluster_.Save(dir_, step);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.ok() ? *path : "";
  }

  TestDir temp_{"follower"};
  const std::string dir_ = temp_.path();
  FakeCluster cluster_{2};
};

TEST_F(CheckpointFollowerTest, YieldsEachCheckpointOnceInOrderThenEnds) {
  Save(10);
  Save(20);
  CheckpointFollower follower(dir_, Fast());
  auto a = follower.Next();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->step, 10);
  auto b = follower.Next();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->step, 20);
  EXPECT_EQ(b->path, dir_ + "/ckpt-20");

  // A checkpoint written while the follower waits is picked up; then the final marker ends it.
  std::thread chief([&] {
    Save(30);
    ASSERT_TRUE(MarkFinalCheckpoint(dir_, 30).ok());
  });
  auto c = follower.Next();
  chief.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->step, 30);
  auto end = follower.Next();
  EXPECT_TRUE(absl::IsOutOfRange(end.status())) << end.status();
}

TEST_F(CheckpointFollowerTest, UncommittedAndCorruptCheckpointsAreSkipped) {
  Save(1);
  const std::string bad = Save(2);
  Save(3);
  // A checkpoint without its manifest is not committed yet; one with a truncated file is bad.
  std::filesystem::create_directories(dir_ + "/ckpt-5");
  for (const auto& entry : std::filesystem::directory_iterator(bad)) {
    if (entry.path().extension() == ".safetensors") std::filesystem::resize_file(entry.path(), 10);
  }
  CheckpointFollower follower(dir_, Fast());
  EXPECT_EQ(follower.Next()->step, 1);
  EXPECT_EQ(follower.Next()->step, 3);
  ASSERT_TRUE(MarkFinalCheckpoint(dir_, 3).ok());
  EXPECT_TRUE(absl::IsOutOfRange(follower.Next().status()));
}

TEST_F(CheckpointFollowerTest, LateFollowerSeesRetainedCheckpointsAndEnds) {
  Save(4);
  Save(8);
  ASSERT_TRUE(MarkFinalCheckpoint(dir_, 8).ok());
  CheckpointFollower follower(dir_, Fast());
  EXPECT_EQ(follower.Next()->step, 4);
  EXPECT_EQ(follower.Next()->step, 8);
  EXPECT_TRUE(absl::IsOutOfRange(follower.Next().status()));
}

TEST_F(CheckpointFollowerTest, MissingFinalCheckpointIsNotFoundNotAHang) {
  Save(4);
  ASSERT_TRUE(MarkFinalCheckpoint(dir_, 9).ok());
  CheckpointFollower follower(dir_, Fast());
  EXPECT_EQ(follower.Next()->step, 4);
  EXPECT_TRUE(absl::IsNotFound(follower.Next().status()));
}

TEST_F(CheckpointFollowerTest, ClearedMarkerDoesNotEndANewRun) {
  Save(1);
  ASSERT_TRUE(MarkFinalCheckpoint(dir_, 1).ok());
  ASSERT_TRUE(ClearFinalCheckpointMarker(dir_).ok());
  EXPECT_TRUE(ClearFinalCheckpointMarker(dir_).ok()) << "clearing twice is fine";
  CheckpointFollower::Options o = Fast();
  o.idle_timeout = absl::Milliseconds(50);
  CheckpointFollower follower(dir_, o);
  EXPECT_EQ(follower.Next()->step, 1);
  EXPECT_TRUE(absl::IsDeadlineExceeded(follower.Next().status()));
}

TEST_F(CheckpointFollowerTest, CancelEndsABlockedNext) {
  CheckpointFollower::Options o = Fast();
  o.poll_interval = absl::Hours(1);  // only Cancel can end the wait in time
  o.idle_timeout = absl::InfiniteDuration();
  CheckpointFollower follower(dir_, o);
  std::thread canceller([&] { follower.Cancel(); });
  auto next = follower.Next();
  canceller.join();
  EXPECT_TRUE(absl::IsCancelled(next.status())) << next.status();
}

TEST(FinalCheckpointMarkerTest, RoundTripsAndRejectsGarbage) {
  TestDir temp("marker");
  const std::string& dir = temp.path();
  EXPECT_TRUE(absl::IsNotFound(ReadFinalCheckpointMarker(dir).status()));
  ASSERT_TRUE(MarkFinalCheckpoint(dir, 1234).ok());
  EXPECT_EQ(*ReadFinalCheckpointMarker(dir), 1234);
  std::ofstream(dir + "/" + kFinalCheckpointMarker) << "ckpt-12";
  EXPECT_TRUE(absl::IsDataLoss(ReadFinalCheckpointMarker(dir).status()));
  EXPECT_FALSE(MarkFinalCheckpoint(dir, -1).ok());
  EXPECT_FALSE(MarkFinalCheckpoint(dir + "/missing", 1).ok());
}

}  // namespace
}  // namespace asyncps
