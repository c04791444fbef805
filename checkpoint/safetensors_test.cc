#include "checkpoint/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/durable_file.h"
#include "checkpoint/test_temp_dir.h"

namespace asyncps::ps {
namespace {

using ::testing::HasSubstr;

std::string TempDir() { return TestTempDir("safetensors_test"); }

std::string ReadAll(const std::string& path) { return ReadFileToString(path, 1 << 30).value(); }

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file made of a hand-written JSON header and `data` bytes.
std::string Handmade(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

absl::Status OpenStatus(const std::string& path) { return SafetensorsFile::Open(path).status(); }

TEST(SafetensorsTest, RoundTripsEveryDtypeAndMetadata) {
  const std::string dir = TempDir();
  Tensor f32 = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor f64 = Tensor::FromVector<double>({2}, {0.5, -1.25});
  Tensor i32 = Tensor::FromVector<int32_t>({3}, {7, -8, 9});
  Tensor i64 = Tensor::FromVector<int64_t>({1, 1}, {int64_t{1} << 40});
  Tensor u8 = Tensor::FromVector<uint8_t>({3}, {1, 2, 255});  // odd length: later tensors unaligned
  Tensor b = Tensor::FromVector<bool>({2}, {true, false});
  Tensor scalar = Tensor::Scalar<float>(3.5f);
  Tensor empty(DType::kF32, {0, 4});
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", f32}, {"f64", f64}, {"u8", u8},         {"i32", i32},
      {"i64", i64}, {"bool", b},  {"scalar", scalar}, {"empty", empty}};
  auto digest = WriteSafetensorsFile(dir + "/a.safetensors", tensors, {{"step", "12"}});
  ASSERT_TRUE(digest.ok()) << digest.status();
  const std::string bytes = ReadAll(dir + "/a.safetensors");
  EXPECT_EQ(digest->bytes, bytes.size());
  EXPECT_EQ(digest->crc32, Crc32(0, bytes.data(), bytes.size()));
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.safetensors.tmp"));
  // Header length is a multiple of 8, padded with spaces.
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_THAT(bytes.substr(8, n), HasSubstr("\"dtype\":\"F32\""));

  auto file = SafetensorsFile::Open(dir + "/a.safetensors", &*digest);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->header().metadata.at("step"), "12");
  for (const auto& [name, t] : tensors) {
    auto got = file->Get(name);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->Equals(t)) << name << ": " << got->DebugString();
  }
  EXPECT_EQ(file->Get("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, WriterRejectsDuplicateAndReservedNames) {
  const std::string dir = TempDir();
  Tensor t = Tensor::Scalar<float>(1);
  EXPECT_FALSE(WriteSafetensorsFile(dir + "/d.safetensors", {{"a", t}, {"a", t}}, {}).ok());
  EXPECT_FALSE(WriteSafetensorsFile(dir + "/d.safetensors", {{"__metadata__", t}}, {}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.safetensors.tmp"));
}

struct BadHeader {
  const char* what;
  std::string json;
  std::string data;
  const char* message;
};

TEST(SafetensorsTest, EveryHeaderProblemIsDataLossNamingFileAndProblem) {
  const std::string dir = TempDir();
  const std::string eight(8, 'x');
  const std::vector<BadHeader> cases = {
      {"not json", "{\"a\":", eight, "not valid JSON"},
      {"not an object", "[1,2]", "", "not a JSON object"},
      {"duplicate key",
       R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
       eight, "key 'a' twice"},
      {"duplicate field", R"({"a":{"dtype":"U8","dtype":"F32","shape":[8],"data_offsets":[0,8]}})",
       eight, "key 'dtype' twice"},
      {"metadata not object", R"({"__metadata__":3})", "", "__metadata__ is not an object"},
      {"metadata value", R"({"__metadata__":{"k":1}})", "", "value of 'k' is not a string"},
      {"entry not object", R"({"a":3})", "", "entry is not an object"},
      {"unknown field", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8],"x":1}})", eight,
       "unknown field 'x'"},
      {"dtype missing", R"({"a":{"shape":[8],"data_offsets":[0,8]}})", eight, "dtype missing"},
      {"dtype unknown", R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", eight,
       "unsupported dtype 'F16'"},
      {"dtype lowercase", R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", eight,
       "unsupported dtype 'f32'"},
      {"shape missing", R"({"a":{"dtype":"U8","data_offsets":[0,8]}})", eight, "shape missing"},
      {"shape negative", R"({"a":{"dtype":"U8","shape":[-8],"data_offsets":[0,8]}})", eight,
       "not a non-negative integer"},
      {"shape float", R"({"a":{"dtype":"U8","shape":[8.0],"data_offsets":[0,8]}})", eight,
       "not a non-negative integer"},
      {"offsets missing", R"({"a":{"dtype":"U8","shape":[8]}})", eight, "data_offsets missing"},
      {"offsets short", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0]}})", eight,
       "data_offsets missing"},
      {"offsets backwards", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", eight,
       "run backwards"},
      {"offsets past end", R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", eight,
       "run past the end"},
      {"size mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight,
       "needs 12 bytes"},
      {"overflowing shape",
       R"({"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", eight,
       "needs too many bytes"},
      {"overlap",
       R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
       eight, "overlaps"},
      {"hole",
       R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
       eight, "hole in the data"},
      {"trailing bytes", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", eight,
       "data section holds 8"},
  };
  for (const BadHeader& c : cases) {
    const std::string path = dir + "/bad.safetensors";
    WriteAll(path, Handmade(c.json, c.data));
    const absl::Status s = OpenStatus(path);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.what << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(path)) << c.what;
  }
}

TEST(SafetensorsTest, TruncationAnywhereIsDetected) {
  const std::string dir = TempDir();
  Tensor t = Tensor::FromVector<float>({4}, {1, 2, 3, 4});
  auto digest = WriteSafetensorsFile(dir + "/t.safetensors", {{"t", t}, {"u", t}}, {});
  ASSERT_TRUE(digest.ok());
  const std::string bytes = ReadAll(dir + "/t.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    WriteAll(dir + "/cut.safetensors", bytes.substr(0, len));
    const absl::Status s = OpenStatus(dir + "/cut.safetensors");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "length " << len << ": " << s;
    // With the manifest's digest, the size check names the problem first.
    auto with_digest = SafetensorsFile::Open(dir + "/cut.safetensors", &*digest);
    EXPECT_THAT(std::string(with_digest.status().message()), HasSubstr("size is")) << len;
  }
  // A huge announced header length is refused before anything is allocated for it.
  WriteAll(dir + "/huge.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  EXPECT_THAT(std::string(OpenStatus(dir + "/huge.safetensors").message()),
              HasSubstr("over the limit"));
}

TEST(SafetensorsTest, EveryFlippedByteIsACheckumMismatch) {
  const std::string dir = TempDir();
  Tensor t = Tensor::FromVector<float>({3}, {1, 2, 3});
  auto digest = WriteSafetensorsFile(dir + "/f.safetensors", {{"t", t}}, {{"k", "v"}});
  ASSERT_TRUE(digest.ok());
  const std::string bytes = ReadAll(dir + "/f.safetensors");
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    WriteAll(dir + "/flip.safetensors", flipped);
    auto file = SafetensorsFile::Open(dir + "/flip.safetensors", &*digest);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
    EXPECT_THAT(std::string(file.status().message()), HasSubstr("checksum mismatch"))
        << "byte " << i;
  }
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(OpenStatus("/nonexistent/x.safetensors").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace asyncps::ps
