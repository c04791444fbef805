#include "data_service/service_dataset.h"

#include <algorithm>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data_service {
namespace {

using ::testing::HasSubstr;

// The guide's rules for coordinated reads are checked when an iterator starts, before the
// service is contacted (nothing listens at the dispatcher address).
absl::Status StartWith(const ReadOptions& read) {
  ServiceOptions service;
  service.dispatcher = "127.0.0.1:1";
  service.timeout_ms = 1;
  return FromDatasetId(service, 1, read).MakeIterator().status();
}

TEST(ServiceDatasetTest, CoordinatedReadsRefuseInvalidOptions) {
  ReadOptions read;
  read.mode = ProcessingMode::kOff;
  read.job_name = "train";
  read.num_consumers = 2;
  read.consumer_index = 1;
  EXPECT_TRUE(StartWith(read).ok()) << StartWith(read);

  ReadOptions anonymous = read;
  anonymous.job_name = "";
  EXPECT_EQ(StartWith(anonymous).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StartWith(anonymous).message(), HasSubstr("job_name"));

  ReadOptions outside = read;
  outside.consumer_index = 2;
  EXPECT_EQ(StartWith(outside).code(), absl::StatusCode::kInvalidArgument);

  ReadOptions index_only = read;
  index_only.num_consumers = 0;
  EXPECT_EQ(StartWith(index_only).code(), absl::StatusCode::kInvalidArgument);

  ReadOptions negative = read;
  negative.num_consumers = -1;
  EXPECT_EQ(StartWith(negative).code(), absl::StatusCode::kInvalidArgument);

  ReadOptions dynamic = read;
  dynamic.mode = ProcessingMode::kDynamic;
  EXPECT_EQ(StartWith(dynamic).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(StartWith(dynamic).message(), HasSubstr("dynamic"));
}

// The split's data worker is its index among the epoch's splits: fixed numbers (no per-process
// salt), so every trainer picks the same one, and consecutive splits alternate over 2 data
// workers (the main job's 8 splits: 4 each).
TEST(ServiceDatasetTest, PreferredDataWorkerIsTheSplitsIndex) {
  constexpr int64_t kSize = 128 * 59;
  int per_worker[2] = {0, 0};
  for (int64_t s = 0; s < 8; ++s) {
    const data::SourceSplit split{s * kSize, std::min<int64_t>(60'000, (s + 1) * kSize), 1};
    EXPECT_EQ(PreferredDataWorker(split), static_cast<uint64_t>(s)) << "split " << s;
    ++per_worker[PreferredDataWorker(split) % 2];
  }
  EXPECT_EQ(per_worker[0], 4);
  EXPECT_EQ(per_worker[1], 4);
  EXPECT_EQ(ReadOptions{}.max_outstanding_requests, ReadOptions::kDefaultOutstandingRequests);
  EXPECT_GT(ReadOptions{}.max_outstanding_requests, 1);  // fetch-ahead by default
}

}  // namespace
}  // namespace asyncps::data_service
