#include "worker/dataset_resources.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

// Split `split` of records [10 * split, 10 * split + 10) of Range(0, 35) in batches of 4.
SplitBinding Binding(int64_t split, int64_t batch, int64_t epoch = 0) {
  return SplitBinding{epoch, split, split * 10, split * 10 + 10, batch};
}

std::vector<int64_t> Ids(const data::Element& e) {
  return std::vector<int64_t>(e[0].data<int64_t>(), e[0].data<int64_t>() + e[0].dim(0));
}

class DynamicIteratorResourceTest : public ::testing::Test {
 protected:
  DynamicIteratorResource resource_{data::Dataset::Range(0, 35).Shuffle(10, 3).Batch(4)};
};

TEST_F(DynamicIteratorResourceTest, ReadsASplitsBatchesInOrderFromOnePipeline) {
  std::vector<int64_t> all;
  SplitOutcome outcome;
  for (int64_t batch = 0; batch < 3; ++batch) {
    auto e = resource_.Read(Binding(1, batch), &outcome);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(outcome, batch < 2 ? SplitOutcome::kMore : SplitOutcome::kLast);
    for (int64_t id : Ids(*e)) all.push_back(id);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_EQ(resource_.pipelines_built(), 1);
  EXPECT_TRUE(absl::IsOutOfRange(resource_.Read(Binding(1, 3), &outcome).status()));
  EXPECT_EQ(outcome, SplitOutcome::kPastEnd);
  // Past the end seen: answered without building the split's pipeline again.
  EXPECT_TRUE(absl::IsOutOfRange(resource_.Read(Binding(1, 4), &outcome).status()));
  EXPECT_EQ(outcome, SplitOutcome::kPastEnd);
  EXPECT_EQ(resource_.pipelines_built(), 1);
}

TEST_F(DynamicIteratorResourceTest, AnyBatchReadsTheSameRecordsAsInOrder) {
  SplitOutcome outcome;
  std::vector<std::vector<int64_t>> in_order;
  for (int64_t batch = 0; batch < 3; ++batch) in_order.push_back(Ids(*resource_.Read(Binding(2, batch), &outcome)));
  // Another worker (a fresh resource) re-running batch 1 alone reads the same ids.
  DynamicIteratorResource other(data::Dataset::Range(0, 35).Shuffle(10, 3).Batch(4));
  auto rerun = other.Read(Binding(2, 1), &outcome);
  ASSERT_TRUE(rerun.ok());
  EXPECT_EQ(Ids(*rerun), in_order[1]);
  EXPECT_EQ(outcome, SplitOutcome::kMore);
  // A different epoch shuffles the split differently (same records).
  auto next_epoch = other.Read(Binding(2, 0, /*epoch=*/1), &outcome);
  ASSERT_TRUE(next_epoch.ok());
  EXPECT_NE(Ids(*next_epoch), in_order[0]);
}

TEST_F(DynamicIteratorResourceTest, SkipsToABatchAheadWithoutRebuilding) {
  SplitOutcome outcome;
  DynamicIteratorResource fresh(data::Dataset::Range(0, 35).Shuffle(10, 3).Batch(4));
  const std::vector<int64_t> third = Ids(*fresh.Read(Binding(1, 2), &outcome));
  ASSERT_TRUE(resource_.Read(Binding(1, 0), &outcome).ok());
  // Batch 1 went to another worker; this one reads batch 2 from its kept pipeline.
  auto skipped_to = resource_.Read(Binding(1, 2), &outcome);
  ASSERT_TRUE(skipped_to.ok());
  EXPECT_EQ(Ids(*skipped_to), third);
  EXPECT_EQ(outcome, SplitOutcome::kLast);
  EXPECT_EQ(resource_.pipelines_built(), 1);
}

// Closures running at once on a worker ask for their batches in any order: a batch skipped
// over for a later one is kept for its closure (same records, no rebuild, no replay).
TEST_F(DynamicIteratorResourceTest, BatchesAskedOutOfOrderComeFromOnePipeline) {
  SplitOutcome outcome;
  DynamicIteratorResource fresh(data::Dataset::Range(0, 35).Shuffle(10, 3).Batch(4));
  std::vector<std::vector<int64_t>> in_order;
  for (int64_t batch = 0; batch < 3; ++batch) in_order.push_back(Ids(*fresh.Read(Binding(1, batch), &outcome)));
  const std::vector<std::pair<int64_t, SplitOutcome>> asked = {
      {2, SplitOutcome::kLast}, {0, SplitOutcome::kMore}, {1, SplitOutcome::kMore}};
  for (const auto& [batch, expected] : asked) {
    auto e = resource_.Read(Binding(1, batch), &outcome);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(Ids(*e), in_order[static_cast<size_t>(batch)]) << "batch " << batch;
    EXPECT_EQ(outcome, expected) << "batch " << batch;
  }
  // Split 2: batch 1 before batch 0, then 2 (the last).
  for (int64_t batch : {1, 0, 2}) {
    auto e = resource_.Read(Binding(2, batch), &outcome);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(outcome, batch == 2 ? SplitOutcome::kLast : SplitOutcome::kMore) << "batch " << batch;
  }
  EXPECT_EQ(resource_.pipelines_built(), 2);
}

TEST_F(DynamicIteratorResourceTest, ReportsSplitsPastTheData) {
  SplitOutcome outcome;
  auto last = resource_.Read(Binding(3, 1), &outcome);  // records 30..34: batches of 4 and 1
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(Ids(*last).size(), 1u);
  EXPECT_EQ(outcome, SplitOutcome::kLast);
  EXPECT_TRUE(absl::IsOutOfRange(resource_.Read(Binding(4, 0), &outcome).status()));
  EXPECT_EQ(outcome, SplitOutcome::kBeyondSource);
}

TEST_F(DynamicIteratorResourceTest, ABoundIteratorGivesOneBatch) {
  auto shared = std::make_shared<DynamicIteratorResource>(data::Dataset::Range(0, 35).Batch(4));
  BoundSplitIterator bound(shared, Binding(0, 0));
  EXPECT_EQ(bound.outcome(), SplitOutcome::kUnread);
  auto first = bound.Next();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Ids(*first), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(bound.outcome(), SplitOutcome::kMore);
  EXPECT_EQ(bound.Next().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DatasetResourceFactoryTest, DynamicRefusesRepeatAndHidesWorkerIndex) {
  Program program;
  int seen_index = -1;
  program.AddDataset("d", [&](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    seen_index = ctx.worker_index();
    EXPECT_FALSE(ctx.Arg(kShardingArg).ok());  // the policy is not the factory's argument
    auto repeat = ctx.IntArg("repeat");
    data::Dataset d = data::Dataset::Range(0, 10);
    return repeat.ok() && *repeat != 0 ? d.Repeat() : d;
  });
  const ResourceFactory* factory = program.FindResource(DatasetResourceName("d"));
  ASSERT_NE(factory, nullptr);
  std::map<std::string, std::string> args = {{kShardingArg, "dynamic"}, {"repeat", "1"}};
  EXPECT_EQ((*factory)(ResourceContext(2, 3, args)).status().code(), absl::StatusCode::kInvalidArgument);
  args["repeat"] = "0";
  EXPECT_TRUE((*factory)(ResourceContext(2, 3, args)).ok());
  EXPECT_EQ(seen_index, 0);  // every worker builds the same pipeline
  args[kShardingArg] = "data";
  EXPECT_TRUE((*factory)(ResourceContext(2, 3, args)).ok());
  EXPECT_EQ(seen_index, 2);
  args[kShardingArg] = "bogus";
  EXPECT_EQ((*factory)(ResourceContext(2, 3, args)).status().code(), absl::StatusCode::kInvalidArgument);
}

// FILE and AUTO (tf.distribute's auto-shard policies) on a worker: lines "f<i>" of files
// f0..f3, one line each.
TEST(DatasetResourceFactoryTest, FileAndAutoShardPolicies) {
  testutil::TestDir dir("autoshard");
  std::vector<std::string> paths;
  for (int i = 0; i < 4; ++i) {
    paths.push_back(absl::StrCat(dir.path(), "/f", i));
    std::ofstream(paths.back()) << "f" << i << "\n";
  }
  Program program;
  program.AddDataset("lines", [&](const DatasetContext&) -> absl::StatusOr<data::Dataset> {
    return data::Dataset::TextLines(paths);
  });
  const ResourceFactory* iterators = program.FindResource(IteratorResourceName("lines"));
  const ResourceFactory* datasets = program.FindResource(DatasetResourceName("lines"));
  ASSERT_NE(iterators, nullptr);
  ASSERT_NE(datasets, nullptr);
  auto read_all = [&](const std::string& policy, int index, int workers) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::unique_ptr<Resource>> r = (*iterators)(ResourceContext(index, workers, {{kShardingArg, policy}}));
    if (!r.ok()) return r.status();
    auto* it = dynamic_cast<IteratorResource*>(r->get());
    if (it == nullptr) return absl::InternalError("not an IteratorResource");
    std::string lines;
    for (absl::StatusOr<data::Element> e = it->Next(); e.ok(); e = it->Next()) {
      lines.append(static_cast<const char*>((*e)[0].raw_data()), (*e)[0].num_bytes());
    }
    return lines;
  };
  EXPECT_EQ(read_all("file", 1, 2).value_or("error"), "f1f3");
  EXPECT_EQ(read_all("auto", 1, 2).value_or("error"), "f1f3");  // 4 files >= 2 workers: FILE
  EXPECT_EQ(read_all("auto", 1, 3).value_or("error"), "f1");    // FILE: files 1 of 4, 3 workers
  // Five workers, four files: FILE refuses when the dataset is created; AUTO shards by data.
  absl::Status too_few = (*datasets)(ResourceContext(0, 5, {{kShardingArg, "file"}})).status();
  EXPECT_EQ(too_few.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_few.message().find("fewer files than workers"), std::string::npos) << too_few;
  EXPECT_NE(too_few.message().find("lines"), std::string::npos) << too_few;  // names the dataset
  EXPECT_EQ(read_all("auto", 4, 5).value_or("error"), "");      // record 4 of 4: none
  EXPECT_EQ(read_all("auto", 3, 5).value_or("error"), "f3");
  EXPECT_EQ(ShardingArgValue(ShardingPolicy::kFile), "file");
  EXPECT_EQ(ShardingArgValue(ShardingPolicy::kAuto), "auto");
}

}  // namespace
}  // namespace asyncps
