#include "examples/fmnist_idx_shard.h"

#include <cstdint>
#include <string>
#include <vector>

#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::fmnist {
namespace fmnist_idx_shard_test_internal {

// Five 2x2 u8 records, record r holding 10r, 10r + 1, 10r + 2, 10r + 3.
std::string FiveRecords() {
  std::string payload;
  for (int r = 0; r < 5; ++r) {
    for (int i = 0; i < 4; ++i) payload.push_back(static_cast<char>(10 * r + i));
  }
  return data::testutil::IdxBytes(0x08, {5, 2, 2}, payload);
}

TEST(ReadIdxShardTest, StacksTheShardsRecordsInOrder) {
  data::testutil::TempDir dir;
  const std::string path = dir.Path("images.gz");
  data::testutil::WriteGzipFile(path, FiveRecords());
  // Worker 1 of 2: records 1 and 3.
  absl::StatusOr<Tensor> shard = ReadIdxShard(path, 2, 1);
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->dtype(), DType::kU8);
  EXPECT_EQ(shard->shape(), (Shape{2, 2, 2}));
  const std::vector<uint8_t> want = {10, 11, 12, 13, 30, 31, 32, 33};
  EXPECT_EQ(std::vector<uint8_t>(shard->data<uint8_t>(), shard->data<uint8_t>() + 8), want);
  // Worker 0 of 2: records 0, 2 and 4.
  absl::StatusOr<Tensor> other = ReadIdxShard(path, 2, 0);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(other->data<uint8_t>()[8], 40);
}

TEST(ReadIdxShardTest, ReadsAShardOnceForTheProcess) {
  data::testutil::TempDir dir;
  const std::string path = dir.Path("labels");
  data::testutil::WriteFile(path, data::testutil::IdxBytes(0x08, {3}, std::string("\x01\x02\x03", 3)));
  absl::StatusOr<Tensor> first = ReadIdxShard(path, 1, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->shape(), (Shape{3}));
  // Kept: the same bytes come back, even once the file is gone.
  data::testutil::WriteFile(path, "not an IDX file");
  absl::StatusOr<Tensor> again = ReadIdxShard(path, 1, 0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->SharesStorageWith(*first));
}

TEST(ReadIdxShardTest, ReportsAMissingFileAndAnEmptyShard) {
  data::testutil::TempDir dir;
  EXPECT_FALSE(ReadIdxShard(dir.Path("missing"), 1, 0).ok());
  const std::string path = dir.Path("one");
  data::testutil::WriteFile(path, data::testutil::IdxBytes(0x08, {1}, std::string("\x07", 1)));
  absl::StatusOr<Tensor> empty = ReadIdxShard(path, 2, 1);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument) << empty.status();
}

}  // namespace fmnist_idx_shard_test_internal
}  // namespace asyncps::fmnist
