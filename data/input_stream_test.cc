#include "data/input_stream.h"

#include <string>

#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::Gzip;
using ::testing::HasSubstr;
using testutil::TempDir;
using testutil::WriteFile;
using testutil::WriteGzipFile;

std::string Pattern(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>((i * 131 + i / 7) & 0xff));
  return s;
}

// Reads the whole stream through small and large reads alike.
std::string ReadAll(InputStream& in, size_t chunk) {
  std::string out;
  std::string buf(chunk, '\0');
  while (true) {
    absl::StatusOr<size_t> got = in.Read(buf.data(), chunk);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || *got == 0) break;
    out.append(buf.data(), *got);
    if (*got < chunk) {
      EXPECT_EQ(*in.Read(buf.data(), chunk), 0u);  // short only at the end
      break;
    }
  }
  return out;
}

TEST(InputStreamTest, ReadsPlainAndGzipIdentically) {
  TempDir dir;
  const std::string data = Pattern(300'000);  // spans several 4 KiB buffers
  WriteFile(dir.Path("plain"), data);
  WriteGzipFile(dir.Path("packed.gz"), data);
  for (size_t chunk : {1ul, 1000ul, 4096ul, 70'000ul, 1ul << 20}) {
    for (const char* name : {"plain", "packed.gz"}) {
      auto in = InputStream::Open(dir.Path(name), /*buffer_bytes=*/4096);
      ASSERT_TRUE(in.ok()) << in.status();
      EXPECT_EQ((*in)->compressed(), std::string(name) == "packed.gz");
      EXPECT_EQ(ReadAll(**in, chunk), data) << name << " chunk " << chunk;
      EXPECT_EQ((*in)->offset(), static_cast<int64_t>(data.size()));
    }
  }
}

TEST(InputStreamTest, GzipIsDetectedByContentNotName) {
  TempDir dir;
  WriteGzipFile(dir.Path("no_suffix"), "hello");
  WriteFile(dir.Path("not_really.gz"), "plain");
  auto a = InputStream::Open(dir.Path("no_suffix"));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(ReadAll(**a, 64), "hello");
  auto b = InputStream::Open(dir.Path("not_really.gz"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(ReadAll(**b, 64), "plain");
}

TEST(InputStreamTest, ReadLineSplitsOnNewlinesAcrossBuffers) {
  TempDir dir;
  std::string long_line(10'000, 'x');
  WriteFile(dir.Path("t"), "a\r\nbc\n\n" + long_line + "\nlast");
  WriteGzipFile(dir.Path("t.gz"), "a\r\nbc\n\n" + long_line + "\nlast");
  for (const char* name : {"t", "t.gz"}) {
    auto in = InputStream::Open(dir.Path(name), 4096);
    ASSERT_TRUE(in.ok());
    std::string line;
    std::vector<std::string> lines;
    while (true) {
      absl::StatusOr<bool> more = (*in)->ReadLine(&line);
      ASSERT_TRUE(more.ok()) << more.status();
      if (!*more) break;
      lines.push_back(line);
    }
    EXPECT_THAT(lines, ::testing::ElementsAre("a", "bc", "", long_line, "last")) << name;
  }
}

TEST(InputStreamTest, SkipAdvancesTheOffset) {
  TempDir dir;
  WriteFile(dir.Path("f"), "0123456789");
  auto in = InputStream::Open(dir.Path("f"));
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(*(*in)->Skip(4), 4u);
  EXPECT_EQ((*in)->offset(), 4);
  char c;
  EXPECT_EQ(*(*in)->Read(&c, 1), 1u);
  EXPECT_EQ(c, '4');
  EXPECT_EQ(*(*in)->Skip(100), 5u);
}

TEST(InputStreamTest, MissingFileIsNotFoundNamingIt) {
  TempDir dir;
  auto in = InputStream::Open(dir.Path("absent.gz"));
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(in.status().message(), HasSubstr("absent.gz"));
}

TEST(InputStreamTest, TruncatedGzipIsDataLossNotEndOfFile) {
  TempDir dir;
  const std::string data = Pattern(100'000);
  std::string packed = Gzip(data);
  WriteFile(dir.Path("cut.gz"), packed.substr(0, packed.size() / 2));
  auto in = InputStream::Open(dir.Path("cut.gz"), 4096);
  ASSERT_TRUE(in.ok());
  std::string buf(4096, '\0');
  absl::Status status;
  int64_t total = 0;
  while (true) {
    absl::StatusOr<size_t> got = (*in)->Read(buf.data(), buf.size());
    if (!got.ok()) {
      status = got.status();
      break;
    }
    ASSERT_NE(*got, 0u) << "a cut gzip stream read as a clean end after " << total << " bytes";
    total += static_cast<int64_t>(*got);
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("cut.gz"));
  EXPECT_LT(total, static_cast<int64_t>(data.size()));
}

TEST(InputStreamTest, CorruptGzipIsDataLoss) {
  TempDir dir;
  std::string packed = Gzip(Pattern(50'000));
  for (size_t i = 20; i < packed.size() - 8; i += 3) packed[i] ^= 0x5a;
  WriteFile(dir.Path("bad.gz"), packed);
  auto in = InputStream::Open(dir.Path("bad.gz"));
  ASSERT_TRUE(in.ok());
  std::string buf(1 << 16, '\0');
  absl::Status status;
  for (int i = 0; i < 10 && status.ok(); ++i) {
    absl::StatusOr<size_t> got = (*in)->Read(buf.data(), buf.size());
    if (!got.ok()) status = got.status();
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("bad.gz"));
}

}  // namespace
}  // namespace asyncps::data
