#include "worker/coordinator_fence.h"

#include "gtest/gtest.h"

namespace asyncps {
namespace {

using Verdict = CoordinatorFence::Verdict;

TEST(CoordinatorFenceTest, FirstChiefIsAdoptedWithoutADrop) {
  CoordinatorFence fence;
  EXPECT_EQ(fence.current(), 0u);
  EXPECT_EQ(fence.Admit(11), Verdict::kCurrent);
  EXPECT_EQ(fence.current(), 11u);
  EXPECT_EQ(fence.Admit(11), Verdict::kCurrent);
}

TEST(CoordinatorFenceTest, RestartedChiefTakesOverAndThePredecessorIsRefused) {
  CoordinatorFence fence;
  ASSERT_EQ(fence.Admit(11), Verdict::kCurrent);
  EXPECT_EQ(fence.Admit(22), Verdict::kNewCoordinator);
  EXPECT_EQ(fence.current(), 22u);
  // Only the first call of the new chief drops state.
  EXPECT_EQ(fence.Admit(22), Verdict::kCurrent);
  // The replaced chief (e.g. partitioned, not dead) cannot take the worker back.
  EXPECT_EQ(fence.Admit(11), Verdict::kSuperseded);
  EXPECT_EQ(fence.current(), 22u);
  // A third chief supersedes the second; both earlier ones stay refused.
  EXPECT_EQ(fence.Admit(33), Verdict::kNewCoordinator);
  EXPECT_EQ(fence.Admit(22), Verdict::kSuperseded);
  EXPECT_EQ(fence.Admit(11), Verdict::kSuperseded);
}

TEST(CoordinatorFenceTest, NoClaimChangesNothing) {
  CoordinatorFence fence;
  EXPECT_EQ(fence.Admit(0), Verdict::kCurrent);
  EXPECT_EQ(fence.current(), 0u);
  ASSERT_EQ(fence.Admit(5), Verdict::kCurrent);
  EXPECT_EQ(fence.Admit(0), Verdict::kCurrent);
  EXPECT_EQ(fence.current(), 5u);
}

TEST(CoordinatorFenceTest, ServesOnlyTheCurrentChiefOrNoClaim) {
  CoordinatorFence fence;
  ASSERT_EQ(fence.Admit(11), Verdict::kCurrent);
  EXPECT_TRUE(fence.Serves(11));
  EXPECT_TRUE(fence.Serves(0));
  // A call of 11 admitted before 22 took over may no longer take effect; asking changes nothing.
  ASSERT_EQ(fence.Admit(22), Verdict::kNewCoordinator);
  EXPECT_FALSE(fence.Serves(11));
  EXPECT_FALSE(fence.Serves(33));  // never admitted
  EXPECT_TRUE(fence.Serves(22));
  EXPECT_TRUE(fence.Serves(0));
  EXPECT_EQ(fence.current(), 22u);
  EXPECT_EQ(fence.Admit(33), Verdict::kNewCoordinator);
}

TEST(CoordinatorFenceTest, RemembersABoundedNumberOfSupersededChiefs) {
  CoordinatorFence fence;
  const uint64_t n = CoordinatorFence::kMaxRemembered + 2;
  for (uint64_t i = 1; i <= n; ++i) fence.Admit(i);
  EXPECT_EQ(fence.current(), n);
  // The oldest was forgotten (bounded memory); the recent ones are still refused.
  EXPECT_EQ(fence.Admit(n - 1), Verdict::kSuperseded);
  EXPECT_EQ(fence.Admit(2), Verdict::kSuperseded);
  EXPECT_EQ(fence.Admit(1), Verdict::kNewCoordinator);
}

}  // namespace
}  // namespace asyncps
