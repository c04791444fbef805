#include "core/durable_file.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/test_temp_dir.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace durable_file_test_internal {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// Appends `data` in uneven pieces (a few bytes, a few MiB, a piece just over a write-behind
// interval), so write-behind points fall inside appends as well as between them.
absl::Status AppendInPieces(DurableFileWriter& w, const std::string& data) {
  const size_t pattern[] = {5, (size_t{3} << 20) + 1, 4096, DurableFileWriter::kWriteBehindBytes + 17,
                            1, (size_t{1} << 20) - 3};
  size_t at = 0;
  for (size_t i = 0; at < data.size(); ++i) {
    const size_t n = std::min(data.size() - at, pattern[i % std::size(pattern)]);
    if (absl::Status s = w.Append(data.data() + at, n); !s.ok()) return s;
    at += n;
  }
  return absl::OkStatus();
}

TEST(DurableFileTest, FileAcrossSeveralWriteBehindPointsReadsBackIdentical) {
  testutil::TestDir dir("durable_file_test");
  const std::string path = dir.path() + "/data.bin";
  const std::string data = RandomBytes(3 * DurableFileWriter::kWriteBehindBytes + 12345, 1);
  auto writer = DurableFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(AppendInPieces(**writer, data).ok());
  EXPECT_EQ((*writer)->write_behind_requests(), 3);
  // The contract: nothing under the final name until Commit, whatever write-behind started.
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(fs::file_size((*writer)->temp_path()), data.size());
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_FALSE(fs::exists((*writer)->temp_path()));
  EXPECT_EQ((*writer)->bytes(), data.size());
  EXPECT_EQ((*writer)->crc32(), crc32_internal::ZlibCrc32(0, data.data(), data.size()));
  auto back = ReadFileToString(path, data.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == data) << "the file read back differs from what was appended";
  auto digest = DigestFile(path);
  ASSERT_TRUE(digest.ok()) << digest.status();
  EXPECT_EQ(digest->first, data.size());
  EXPECT_EQ(digest->second, (*writer)->crc32());
  // Nothing may be appended after Commit.
  EXPECT_EQ((*writer)->Append("x", 1).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(DurableFileTest, SmallFileMakesNoWriteBehindRequest) {
  testutil::TestDir dir("durable_file_test");
  const std::string path = dir.path() + "/small.bin";
  const std::string data = RandomBytes(DurableFileWriter::kWriteBehindBytes - 1, 2);
  auto writer = DurableFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append(data.data(), data.size()).ok());
  EXPECT_EQ((*writer)->write_behind_requests(), 0);
  ASSERT_TRUE((*writer)->Append("z", 1).ok());  // exactly one interval now
  EXPECT_EQ((*writer)->write_behind_requests(), 1);
  ASSERT_TRUE((*writer)->Commit().ok());
  EXPECT_EQ(fs::file_size(path), data.size() + 1);
}

// A writer abandoned after write-behind started leaves neither the file nor its temporary.
TEST(DurableFileTest, AbandonedWriterLeavesNothingAfterWriteBehind) {
  testutil::TestDir dir("durable_file_test");
  const std::string path = dir.path() + "/abandoned.bin";
  std::string temp;
  {
    auto writer = DurableFileWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    temp = (*writer)->temp_path();
    ASSERT_TRUE(AppendInPieces(**writer, RandomBytes(2 * DurableFileWriter::kWriteBehindBytes, 3)).ok());
    EXPECT_EQ((*writer)->write_behind_requests(), 2);
    EXPECT_TRUE(fs::exists(temp));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(temp));
}

// Commit over an existing file replaces it whole.
TEST(DurableFileTest, CommitReplacesAnOlderFile) {
  testutil::TestDir dir("durable_file_test");
  const std::string path = dir.path() + "/replaced.bin";
  for (uint64_t seed : {4, 5}) {
    const std::string data = RandomBytes(DurableFileWriter::kWriteBehindBytes + 100 * seed, seed);
    auto writer = DurableFileWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Append(data.data(), data.size()).ok());
    ASSERT_TRUE((*writer)->Commit().ok());
    auto back = ReadFileToString(path, data.size());
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(*back == data) << "seed " << seed;
  }
}

}  // namespace
}  // namespace durable_file_test_internal
}  // namespace asyncps
