#include <filesystem>
#include <string>

#include "data/dataset.h"
#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::DrainDataset;
using ::testing::HasSubstr;
using testutil::IdxBytes;
using testutil::TempDir;
using testutil::WriteFile;
using testutil::WriteGzipFile;

// 3 images of 2x4 u8 pixels: pixel value = 10 * image + position.
std::string ImagesPayload() {
  std::string p;
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 8; ++k) p.push_back(static_cast<char>(10 * i + k));
  }
  return p;
}

TEST(IdxFileTest, ReadsImagesPlainAndGzipped) {
  TempDir dir;
  const std::string file = IdxBytes(0x08, {3, 2, 4}, ImagesPayload());
  WriteFile(dir.Path("images-idx3-ubyte"), file);
  WriteGzipFile(dir.Path("images-idx3-ubyte.gz"), file);
  for (const char* name : {"images-idx3-ubyte", "images-idx3-ubyte.gz"}) {
    auto elements = DrainDataset(Dataset::IdxFile(dir.Path(name)));
    ASSERT_TRUE(elements.ok()) << elements.status();
    ASSERT_EQ(elements->size(), 3u);
    for (int i = 0; i < 3; ++i) {
      const Tensor& t = (*elements)[i].at(0);
      ASSERT_EQ(t.dtype(), DType::kU8);
      ASSERT_EQ(t.shape(), Shape({2, 4}));
      for (int k = 0; k < 8; ++k) EXPECT_EQ(t.data<uint8_t>()[k], 10 * i + k);
    }
  }
}

TEST(IdxFileTest, LabelsAreScalars) {
  TempDir dir;
  WriteFile(dir.Path("labels"), IdxBytes(0x08, {4}, std::string("\x03\x01\x04\x01", 4)));
  auto elements = DrainDataset(Dataset::IdxFile(dir.Path("labels")).Batch(4));
  ASSERT_TRUE(elements.ok()) << elements.status();
  ASSERT_EQ(elements->size(), 1u);
  EXPECT_TRUE((*elements)[0][0].Equals(Tensor::FromVector<uint8_t>({3, 1, 4, 1})));
}

TEST(IdxFileTest, DecodesBigEndianTypes) {
  TempDir dir;
  // f32 1.5 = 0x3FC00000, -2 = 0xC0000000.
  WriteFile(dir.Path("f32"), IdxBytes(0x0D, {1, 2}, std::string("\x3f\xc0\0\0\xc0\0\0\0", 8)));
  // i16 -2 = 0xFFFE, 300 = 0x012C (widened to i32).
  WriteFile(dir.Path("i16"), IdxBytes(0x0B, {2}, std::string("\xff\xfe\x01\x2c", 4)));
  // i8 -1, i32 0x01020304, f64 1.0 = 0x3FF0000000000000.
  WriteFile(dir.Path("i8"), IdxBytes(0x09, {1}, "\xff"));
  WriteFile(dir.Path("i32"), IdxBytes(0x0C, {1}, "\x01\x02\x03\x04"));
  WriteFile(dir.Path("f64"), IdxBytes(0x0E, {1}, std::string("\x3f\xf0\0\0\0\0\0\0", 8)));

  auto f32 = DrainDataset(Dataset::IdxFile(dir.Path("f32")));
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_TRUE((*f32)[0][0].Equals(Tensor::FromVector<float>({2}, {1.5f, -2.0f})));
  auto i16 = DrainDataset(Dataset::IdxFile(dir.Path("i16")).Batch(2));
  ASSERT_TRUE(i16.ok()) << i16.status();
  EXPECT_TRUE((*i16)[0][0].Equals(Tensor::FromVector<int32_t>({-2, 300})));
  auto i8 = DrainDataset(Dataset::IdxFile(dir.Path("i8")));
  ASSERT_TRUE(i8.ok());
  EXPECT_TRUE((*i8)[0][0].Equals(Tensor::Scalar<int32_t>(-1)));
  auto i32 = DrainDataset(Dataset::IdxFile(dir.Path("i32")));
  ASSERT_TRUE(i32.ok());
  EXPECT_TRUE((*i32)[0][0].Equals(Tensor::Scalar<int32_t>(0x01020304)));
  auto f64 = DrainDataset(Dataset::IdxFile(dir.Path("f64")));
  ASSERT_TRUE(f64.ok());
  EXPECT_TRUE((*f64)[0][0].Equals(Tensor::Scalar<double>(1.0)));
}

TEST(IdxFileTest, ZeroRecordsIsEmpty) {
  TempDir dir;
  WriteFile(dir.Path("empty"), IdxBytes(0x08, {0, 28, 28}, ""));
  auto elements = DrainDataset(Dataset::IdxFile(dir.Path("empty")));
  ASSERT_TRUE(elements.ok()) << elements.status();
  EXPECT_TRUE(elements->empty());
}

TEST(IdxFileTest, MissingFileNamesIt) {
  TempDir dir;
  auto it = Dataset::IdxFile(dir.Path("nope-idx1-ubyte.gz")).MakeIterator();
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(it.status().message(), HasSubstr("nope-idx1-ubyte.gz"));
}

struct BadHeader {
  const char* name;
  std::string bytes;
  const char* expect;  // in the message, besides the file name
};

TEST(IdxFileTest, BadHeadersAreDataLossNamingFileAndOffset) {
  TempDir dir;
  const BadHeader cases[] = {
      {"empty", "", "offset 0"},
      {"short_magic", std::string("\0\0", 2), "offset 2"},
      {"bad_magic", IdxBytes(0x08, {1}, "x").replace(0, 1, "\x12"), "not an IDX file"},
      {"unknown_type", IdxBytes(0x07, {1}, "x"), "type code 0x07"},
      {"rank_zero", IdxBytes(0x08, {}, ""), "rank 0"},
      {"cut_dims", IdxBytes(0x08, {3, 28, 28}, "").substr(0, 10), "offset 10"},
      {"huge_dims", IdxBytes(0x0E, {1, 0xFFFFFFFF, 0xFFFFFFFF}, ""), "exceeds"},
  };
  for (const BadHeader& c : cases) {
    for (bool gz : {false, true}) {
      std::string path = dir.Path(std::string(c.name) + (gz ? ".gz" : ""));
      gz ? WriteGzipFile(path, c.bytes) : WriteFile(path, c.bytes);
      auto it = Dataset::IdxFile(path).MakeIterator();
      ASSERT_FALSE(it.ok()) << c.name;
      EXPECT_EQ(it.status().code(), absl::StatusCode::kDataLoss) << it.status();
      EXPECT_THAT(it.status().message(), HasSubstr(path));
      EXPECT_THAT(it.status().message(), HasSubstr(c.expect)) << it.status();
    }
  }
}

TEST(IdxFileTest, TruncatedRecordIsDataLossAfterTheGoodOnes) {
  TempDir dir;
  std::string file = IdxBytes(0x08, {3, 2, 4}, ImagesPayload());
  file.resize(file.size() - 3);  // the third image loses 3 of its 8 bytes
  for (bool gz : {false, true}) {
    std::string path = dir.Path(gz ? "cut.gz" : "cut");
    gz ? WriteGzipFile(path, file) : WriteFile(path, file);
    auto it = Dataset::IdxFile(path).MakeIterator();
    ASSERT_TRUE(it.ok()) << it.status();
    EXPECT_TRUE((*it)->Next().ok());
    EXPECT_TRUE((*it)->Next().ok());
    absl::Status s = (*it)->Next().status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr(path));
    // Header 4 + 3 dims * 4 = 16 bytes, then two 8-byte records: record 2 starts at 32.
    EXPECT_THAT(s.message(), HasSubstr("record 2 of 3 starts at offset 32"));
    EXPECT_THAT(s.message(), HasSubstr("ends at offset 37"));
    EXPECT_EQ((*it)->Next().status().code(), absl::StatusCode::kDataLoss);  // sticky
  }
}

TEST(IdxFileTest, TrailingBytesAreDataLoss) {
  TempDir dir;
  WriteFile(dir.Path("long"), IdxBytes(0x08, {2}, "abc"));
  auto it = Dataset::IdxFile(dir.Path("long")).MakeIterator();
  ASSERT_TRUE(it.ok());
  EXPECT_TRUE((*it)->Next().ok());
  EXPECT_TRUE((*it)->Next().ok());
  absl::Status s = (*it)->Next().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("trailing bytes at offset 10"));
}

TEST(IdxFileTest, TruncatedGzipStreamIsDataLoss) {
  TempDir dir;
  std::string payload(60'000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7919 % 251);
  std::string packed = testutil::Gzip(IdxBytes(0x08, {60, 1000}, payload));
  WriteFile(dir.Path("cut.gz"), packed.substr(0, packed.size() * 2 / 3));
  auto elements = DrainDataset(Dataset::IdxFile(dir.Path("cut.gz")));
  ASSERT_FALSE(elements.ok());
  EXPECT_EQ(elements.status().code(), absl::StatusCode::kDataLoss) << elements.status();
  EXPECT_THAT(elements.status().message(), HasSubstr("cut.gz"));
}

// The real thing, as Debian's dataset-fashion-mnist installs it.
TEST(IdxFileTest, FashionMnistTestLabels) {
  const std::string path = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing (dataset-fashion-mnist)";
  auto batches = DrainDataset(Dataset::IdxFile(path).Batch(4096));
  ASSERT_TRUE(batches.ok()) << batches.status();
  int64_t count = 0;
  std::vector<int> histogram(10, 0);
  for (const Element& b : *batches) {
    for (uint8_t label : b[0].flat<uint8_t>()) {
      ASSERT_LT(label, 10);
      ++histogram[label];
      ++count;
    }
  }
  EXPECT_EQ(count, 10000);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;  // balanced
}

}  // namespace
}  // namespace asyncps::data
