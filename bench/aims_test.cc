#include "bench/aims.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Aims PsBenchAims() {
  Aims aims;
  aims.Declare("dense push+Adam", AimBound::kAtLeast, 0.8);
  aims.Declare("dense pull", AimBound::kAtLeast, 0.9);
  aims.Declare("sparse", AimBound::kAtLeast, 0.5);
  aims.Declare("dedup on/off", AimBound::kAtMost, 1.05);
  return aims;
}

TEST(Aims, NothingRunReportsNoAim) {
  const Aims aims = PsBenchAims();
  for (const Aims::Aim& aim : aims.all()) EXPECT_EQ(aim.state(), AimState::kNotRun) << aim.name;
  const std::string summary = aims.Summary();
  EXPECT_THAT(summary, Not(HasSubstr("AIM MET")));
  EXPECT_THAT(summary, Not(HasSubstr("AIM MISSED")));
  EXPECT_THAT(summary, HasSubstr("0 of 0 run met, 4 not run"));
}

// What --only does: a subset of the cases runs, and the summary speaks only of those.
TEST(Aims, SubsetSummaryNamesOnlyRunAims) {
  Aims aims = PsBenchAims();
  EXPECT_TRUE(aims.Judge("dense pull", 0.95));
  EXPECT_TRUE(aims.Judge("dense pull", 0.91));
  EXPECT_EQ(aims.State("dense pull"), AimState::kMet);
  EXPECT_EQ(aims.State("dense push+Adam"), AimState::kNotRun);
  EXPECT_EQ(aims.State("sparse"), AimState::kNotRun);
  EXPECT_EQ(aims.State("dedup on/off"), AimState::kNotRun);
  const std::string summary = aims.Summary();
  EXPECT_THAT(summary, HasSubstr("dense pull >= 0.90 AIM MET (2 cases)"));
  EXPECT_THAT(summary, HasSubstr("dense push+Adam >= 0.80 not run"));
  EXPECT_THAT(summary, HasSubstr("sparse >= 0.50 not run"));
  EXPECT_THAT(summary, HasSubstr("dedup on/off <= 1.05 not run"));
  EXPECT_THAT(summary, HasSubstr("1 of 1 run met, 3 not run"));
}

TEST(Aims, OneMissedCaseMissesTheAim) {
  Aims aims = PsBenchAims();
  EXPECT_TRUE(aims.Judge("sparse", 0.6));
  EXPECT_FALSE(aims.Judge("sparse", 0.3));
  EXPECT_TRUE(aims.Judge("sparse", 0.7));
  EXPECT_EQ(aims.State("sparse"), AimState::kMissed);
  EXPECT_THAT(aims.Summary(), HasSubstr("sparse >= 0.50 AIM MISSED (3 cases, 1 missed)"));
  EXPECT_THAT(aims.Summary(), HasSubstr("0 of 1 run met, 3 not run"));
}

TEST(Aims, AtMostBound) {
  Aims aims = PsBenchAims();
  EXPECT_TRUE(aims.Meets("dedup on/off", 1.05));
  EXPECT_FALSE(aims.Meets("dedup on/off", 1.06));
  EXPECT_FALSE(aims.Judge("dedup on/off", 1.2));
  EXPECT_EQ(aims.State("dedup on/off"), AimState::kMissed);
}

TEST(Aims, UndeclaredAimCountsAsMissed) {
  Aims aims;
  EXPECT_FALSE(aims.Judge("typo", 100));
  EXPECT_EQ(aims.State("typo"), AimState::kMissed);
  EXPECT_EQ(aims.State("never heard of"), AimState::kNotRun);
}

TEST(Aims, RedeclaringKeepsCases) {
  Aims aims;
  aims.Declare("a", AimBound::kAtLeast, 1.0);
  EXPECT_TRUE(aims.Judge("a", 1.5));
  aims.Declare("a", AimBound::kAtLeast, 2.0);
  ASSERT_EQ(aims.all().size(), 1u);
  EXPECT_EQ(aims.all()[0].cases, 1);
  EXPECT_EQ(aims.all()[0].limit, 2.0);
}

}  // namespace
}  // namespace asyncps::bench
