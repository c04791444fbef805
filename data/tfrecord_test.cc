#include <filesystem>
#include <string>

#include "data/crc32c.h"
#include "data/dataset.h"
#include "data/test_files.h"
#include "data/tfrecord_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::DrainDataset;
using ::testing::HasSubstr;
using testutil::TempDir;
using testutil::WriteFile;

std::string AsString(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.num_bytes());
}

std::string Le32(uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

void WriteRecords(const std::string& path, const std::vector<std::string>& records) {
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const std::string& r : records) ASSERT_TRUE((*w)->Write(r).ok());
  ASSERT_TRUE((*w)->Close().ok());
}

TEST(TFRecordTest, FramingMatchesTheCrcVectors) {
  const std::string framed = TFRecordWriter::Frame("123456789");
  ASSERT_EQ(framed.size(), 8u + 4u + 9u + 4u);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x09\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(framed.substr(8, 4), Le32(MaskCrc32c(Crc32c(framed.data(), 8))));
  EXPECT_EQ(framed.substr(12, 9), "123456789");
  // CRC32C("123456789") = 0xE3069283, masked: 0xC78AB0E5, stored little-endian.
  EXPECT_EQ(framed.substr(21, 4), std::string("\xe5\xb0\x8a\xc7", 4));
  // 32 zero bytes: CRC 0x8A9136AA (RFC 3720 B.4).
  const std::string zeros = TFRecordWriter::Frame(std::string(32, '\0'));
  EXPECT_EQ(zeros.substr(44, 4), Le32(MaskCrc32c(0x8A9136AAu)));
}

TEST(TFRecordTest, ReadsWhatTheWriterWroteAcrossFilesPlainAndGzipped) {
  TempDir dir;
  std::string big(100'000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31);
  const std::vector<std::string> first = {"alpha", "", big};
  const std::vector<std::string> second = {"omega"};
  WriteRecords(dir.Path("a.tfrecord"), first);
  WriteRecords(dir.Path("b.tfrecord"), second);
  // A gzipped TFRecord file (TensorFlow's compression_type="GZIP").
  std::string b_bytes;
  {
    std::FILE* f = std::fopen(dir.Path("b.tfrecord").c_str(), "rb");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) b_bytes.append(buf, n);
    std::fclose(f);
  }
  testutil::WriteGzipFile(dir.Path("b.tfrecord.gz"), b_bytes);
  WriteFile(dir.Path("empty.tfrecord"), "");

  auto elements = DrainDataset(Dataset::TFRecord(
      {dir.Path("a.tfrecord"), dir.Path("empty.tfrecord"), dir.Path("b.tfrecord.gz")}));
  ASSERT_TRUE(elements.ok()) << elements.status();
  ASSERT_EQ(elements->size(), 4u);
  EXPECT_EQ(AsString((*elements)[0][0]), "alpha");
  EXPECT_EQ((*elements)[1][0].shape(), Shape({0}));
  EXPECT_EQ((*elements)[2][0].dtype(), DType::kU8);
  EXPECT_EQ(AsString((*elements)[2][0]), big);
  EXPECT_EQ(AsString((*elements)[3][0]), "omega");
  EXPECT_TRUE(DrainDataset(Dataset::TFRecord({}))->empty());
}

TEST(TFRecordTest, MissingFileIsNamedAtMakeIterator) {
  TempDir dir;
  WriteRecords(dir.Path("a"), {"x"});
  auto it = Dataset::TFRecord({dir.Path("a"), dir.Path("missing.tfrecord")}).MakeIterator();
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(it.status().message(), HasSubstr("missing.tfrecord"));
}

struct Corruption {
  const char* name;
  // Edits the file image of records {"first", "second!"}; the second record starts at 21.
  std::function<void(std::string*)> edit;
  const char* expect;
};

TEST(TFRecordTest, CorruptOrTruncatedRecordsAreDataLossNamingFileAndOffset) {
  TempDir dir;
  const std::string good = TFRecordWriter::Frame("first") + TFRecordWriter::Frame("second!");
  ASSERT_EQ(good.size(), 21u + 23u);
  const Corruption cases[] = {
      {"length_bit", [](std::string* f) { (*f)[21] ^= 0x01; }, "length CRC mismatch"},
      {"length_crc", [](std::string* f) { (*f)[30] ^= 0x40; }, "length CRC mismatch"},
      {"data_bit", [](std::string* f) { (*f)[35] ^= 0x10; }, "data CRC mismatch"},
      {"data_crc", [](std::string* f) { (*f)[42] ^= 0x01; }, "data CRC mismatch"},
      {"cut_header", [](std::string* f) { f->resize(21 + 7); }, "truncated header"},
      {"cut_data", [](std::string* f) { f->resize(21 + 12 + 3); }, "truncated data"},
      {"cut_crc", [](std::string* f) { f->resize(f->size() - 2); }, "truncated data CRC"},
      {"huge_length",
       [](std::string* f) {
         std::string header("\0\0\0\0\0\0\0\x40", 8);  // 2^62 with a valid length CRC
         header += Le32(MaskCrc32c(Crc32c(header.data(), 8)));
         f->replace(21, 12, header);
       },
       "exceeds"},
  };
  for (const Corruption& c : cases) {
    std::string bytes = good;
    c.edit(&bytes);
    const std::string path = dir.Path(c.name);
    WriteFile(path, bytes);
    auto it = Dataset::TFRecord({path}).MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    absl::StatusOr<Element> first = (*it)->Next();
    ASSERT_TRUE(first.ok()) << c.name << ": " << first.status();
    EXPECT_EQ(AsString((*first)[0]), "first");
    absl::Status s = (*it)->Next().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(path));
    EXPECT_THAT(s.message(), HasSubstr("byte offset 21"));
    EXPECT_THAT(s.message(), HasSubstr(c.expect)) << s;
    EXPECT_EQ((*it)->Next().status(), s);  // sticky, no crash on further calls
  }
}

TEST(TFRecordTest, WriterPublishesOnlyOnClose) {
  TempDir dir;
  const std::string path = dir.Path("out.tfrecord");
  {
    auto w = TFRecordWriter::Open(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("abandoned").ok());
    EXPECT_FALSE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(std::filesystem::path(path).parent_path()));
  auto w = TFRecordWriter::Open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write("kept").ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Write("late").code(), absl::StatusCode::kFailedPrecondition);
  auto elements = DrainDataset(Dataset::TFRecord({path}));
  ASSERT_TRUE(elements.ok());
  ASSERT_EQ(elements->size(), 1u);
  EXPECT_EQ(AsString((*elements)[0][0]), "kept");
  EXPECT_EQ(TFRecordWriter::Open(dir.Path("no/such/dir/x")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace asyncps::data
