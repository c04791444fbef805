#include "data_service/service_dataset.h"

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

}  // namespace
}  // namespace asyncps::data_service
