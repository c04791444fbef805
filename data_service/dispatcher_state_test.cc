#include "data_service/dispatcher_state.h"

#include <fstream>
#include <string>

#include "core/durable_file.h"
#include "core/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data_service {
namespace {

using ::testing::HasSubstr;

TEST(DispatcherStateTest, SameDatasetSameIdAndJobsByName) {
  auto state = DispatcherState::Open("");
  ASSERT_TRUE(state.ok()) << state.status();
  auto a = (*state)->RegisterDataset("range", {{"n", "10"}});
  auto b = (*state)->RegisterDataset("range", {{"n", "11"}});
  auto c = (*state)->RegisterDataset("range", {{"n", "10"}});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *c);
  EXPECT_NE(*a, *b);
  EXPECT_EQ((*state)->GetDataset(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT((*state)->GetDataset(99).status().message(), HasSubstr("unknown dataset id 99"));

  auto j1 = (*state)->GetOrCreateJob(*a, "shared", ProcessingMode::kOff);
  auto j2 = (*state)->GetOrCreateJob(*a, "shared", ProcessingMode::kOff);
  auto anon1 = (*state)->GetOrCreateJob(*a, "", ProcessingMode::kOff);
  auto anon2 = (*state)->GetOrCreateJob(*a, "", ProcessingMode::kOff);
  ASSERT_TRUE(j1.ok() && j2.ok() && anon1.ok() && anon2.ok());
  EXPECT_EQ(*j1, *j2);
  EXPECT_NE(*anon1, *anon2);
  auto reused = (*state)->GetOrCreateJob(*a, "shared", ProcessingMode::kData);
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reused.status().message(), HasSubstr("job 'shared'"));
  EXPECT_EQ((*state)->GetOrCreateJob(42, "x", ProcessingMode::kOff).status().code(), absl::StatusCode::kNotFound);
}

TEST(DispatcherStateTest, JournalRecoversAndCorruptJournalRefusesToOpen) {
  testutil::TestDir dir("dispatcher_state");
  int64_t id = 0;
  int64_t job = 0;
  uint64_t generation = 0;
  {
    auto state = DispatcherState::Open(dir.path());
    ASSERT_TRUE(state.ok()) << state.status();
    generation = (*state)->generation();
    EXPECT_NE(generation, 0u);
    ASSERT_TRUE((*state)->RegisterDataset("first", {}).ok());
    id = *(*state)->RegisterDataset("range", {{"n", "20000"}});
    job = *(*state)->GetOrCreateJob(id, "shared", ProcessingMode::kDynamic);
  }
  {
    auto state = DispatcherState::Open(dir.path());
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ((*state)->num_datasets(), 2u);
    EXPECT_EQ(*(*state)->RegisterDataset("range", {{"n", "20000"}}), id);
    EXPECT_EQ(*(*state)->GetOrCreateJob(id, "shared", ProcessingMode::kDynamic), job);
    EXPECT_EQ((*state)->GetDataset(id)->args.at("n"), "20000");
    // Recovered: the same generation (data workers keep what the ids name).
    EXPECT_EQ((*state)->generation(), generation);
    ASSERT_EQ((*state)->RecentJobs(10).size(), 1u);
    EXPECT_EQ((*state)->RecentJobs(10)[0].name, "shared");
  }
  const std::string path = dir.path() + "/dispatcher_journal";
  std::string text = *ReadFileToString(path, 1 << 20);
  text[text.size() - 3] ^= 0x20;  // one flipped bit in the body
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  auto corrupt = DispatcherState::Open(dir.path());
  ASSERT_FALSE(corrupt.ok());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.status().message(), HasSubstr("dispatcher_journal"));
  EXPECT_THAT(corrupt.status().message(), HasSubstr("CRC mismatch"));
}

// Without a journal every start is a new generation, later ones larger.
TEST(DispatcherStateTest, InMemoryStatesAreNewGenerations) {
  auto first = DispatcherState::Open("");
  auto second = DispatcherState::Open("");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_GT((*second)->generation(), (*first)->generation());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE((*first)->GetOrCreateJob(*(*first)->RegisterDataset("d", {}), "", ProcessingMode::kOff).ok());
  const std::vector<JobDef> recent = (*first)->RecentJobs(2);
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].id, 4);
  EXPECT_EQ(recent[1].id, 5);
}

}  // namespace
}  // namespace asyncps::data_service
