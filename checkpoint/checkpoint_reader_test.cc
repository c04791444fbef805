#include "checkpoint/checkpoint_reader.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "ps/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/durable_file.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using testutil::AdamConfig;
using testutil::FakeCluster;
using testutil::TestDir;
using ::testing::HasSubstr;
using testutil::Iota;

std::string Slurp(const std::string& path) { return ReadFileToString(path, 1 << 30).value(); }

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class CheckpointReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    adam_ = AdamConfig();
    cluster_.Add("emb", Iota({10, 4}, 0), {5, 5}, {0, 1}, &adam_);
    cluster_.Add("w", Iota({3, 2}, 7), {3}, {1}, nullptr);
    cluster_.Add("count", Tensor::Scalar<int64_t>(99), {1}, {0}, nullptr);
    ASSERT_TRUE(cluster_.Shard("emb/part_1")->ApplyGradient(Iota({5, 4}, 1)).ok());
    auto first = cluster_.Save(dir_, 10);
    ASSERT_TRUE(first.ok()) << first.status();
    first_ = *first;
    ASSERT_TRUE(cluster_.Shard("emb/part_0")->ApplyGradient(Iota({5, 4}, 2)).ok());
    auto second = cluster_.Save(dir_, 20);
    ASSERT_TRUE(second.ok()) << second.status();
    second_ = *second;
  }


  std::string Latest(CheckpointCheck check = CheckpointCheck::kChecksums) {
    auto latest = LatestCheckpoint(dir_, check);
    return latest.ok() ? *latest : latest.status().ToString();
  }

  TestDir temp_{"ckpt_reader"};
  const std::string dir_ = temp_.path();
  OptimizerConfig adam_;
  FakeCluster cluster_{2};
  std::string first_, second_;
};

TEST_F(CheckpointReaderTest, ReadsLogicalVariablesAndSlotsWithoutACluster) {
  EXPECT_EQ(Latest(), second_);
  auto reader = CheckpointReader::Open(second_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->manifest().step, 20);
  for (const char* slot : {"", "m", "v"}) {
    auto t = (*reader)->Read("emb", slot);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->Equals(cluster_.Logical("emb", slot))) << slot;
  }
  EXPECT_TRUE(ReadCheckpointVariable(second_, "count")->Equals(Tensor::Scalar<int64_t>(99)));
  EXPECT_TRUE(ReadCheckpointVariable(second_, "w")->Equals(Iota({3, 2}, 7)));
  EXPECT_EQ(ReadCheckpointVariable(second_, "nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ReadCheckpointVariable(second_, "w", "m").status().message()),
              HasSubstr("no optimizer slot 'm'"));
}

TEST_F(CheckpointReaderTest, ShardsWithoutManifestAreNotACheckpoint) {
  // A save that wrote every shard file (and even a temporary file) but died before the
  // manifest rename.
  const std::string torn = dir_ + "/ckpt-30";
  fs::create_directories(torn);
  for (const auto& entry : fs::directory_iterator(second_)) {
    if (entry.path().filename() != kManifestFileName)
      fs::copy(entry.path(), torn + "/" + entry.path().filename().string());
  }
  Spit(torn + "/ps-0-of-2.safetensors.tmp", "partial");
  EXPECT_EQ(Latest(), second_);
  // Now a partially written manifest temporary file beside them.
  const std::string manifest = Slurp(second_ + "/manifest.json");
  Spit(torn + "/manifest.json.tmp", manifest.substr(0, manifest.size() / 2));
  EXPECT_EQ(Latest(), second_);
  EXPECT_EQ(ScanCheckpoints(dir_).size(), 3u);
  EXPECT_FALSE(ScanCheckpoints(dir_).back().committed);
}

TEST_F(CheckpointReaderTest, CorruptNewestFallsBackToThePreviousOne) {
  const std::string file = second_ + "/ps-1-of-2.safetensors";
  const std::string good = Slurp(file);
  {  // A flipped data byte: only the checksum can tell.
    std::string bad = good;
    bad[bad.size() - 5] ^= 0x40;
    Spit(file, bad);
    EXPECT_EQ(Latest(CheckpointCheck::kChecksums), first_);
    EXPECT_EQ(Latest(CheckpointCheck::kStructure), second_);
    auto v = VerifyCheckpoint(second_, CheckpointCheck::kChecksums);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(v.status().message()), HasSubstr(file));
    EXPECT_THAT(std::string(v.status().message()), HasSubstr("checksum mismatch"));
    // Reading through the reader checks the file it opens, too.
    auto reader = CheckpointReader::Open(second_);
    ASSERT_TRUE(reader.ok());
    EXPECT_THAT(std::string((*reader)->Read("w").status().message()),
                HasSubstr("checksum mismatch"));
  }
  {  // Truncated.
    Spit(file, good.substr(0, good.size() - 1));
    EXPECT_EQ(Latest(CheckpointCheck::kStructure), first_);
    EXPECT_THAT(
        std::string(VerifyCheckpoint(second_, CheckpointCheck::kStructure).status().message()),
        HasSubstr("size is"));
  }
  {  // Missing.
    fs::remove(file);
    EXPECT_EQ(Latest(CheckpointCheck::kStructure), first_);
  }
  Spit(file, good);
  EXPECT_EQ(Latest(), second_);
  {  // A manifest that no longer parses.
    const std::string manifest = Slurp(second_ + "/manifest.json");
    Spit(second_ + "/manifest.json", manifest.substr(0, manifest.size() - 3));
    EXPECT_EQ(Latest(), first_);
    EXPECT_THAT(
        std::string(VerifyCheckpoint(second_, CheckpointCheck::kStructure).status().message()),
        HasSubstr("not valid JSON"));
    Spit(second_ + "/manifest.json", manifest);
  }
  {  // A manifest whose shard names a tensor the file lacks.
    std::string manifest = Slurp(second_ + "/manifest.json");
    const std::string needle = "\"tensor\": \"w\"";
    ASSERT_NE(manifest.find(needle), std::string::npos) << manifest;
    std::string bad = manifest;
    bad.replace(bad.find(needle), needle.size(), "\"tensor\": \"x\"");
    Spit(second_ + "/manifest.json", bad);
    EXPECT_EQ(Latest(CheckpointCheck::kStructure), first_);
    EXPECT_THAT(
        std::string(VerifyCheckpoint(second_, CheckpointCheck::kStructure).status().message()),
        HasSubstr("lacks tensor 'x'"));
    Spit(second_ + "/manifest.json", manifest);
  }
  fs::remove_all(first_);
  fs::remove(second_ + "/manifest.json");
  EXPECT_EQ(LatestCheckpoint(dir_, CheckpointCheck::kStructure).status().code(),
            absl::StatusCode::kNotFound);
}

// The independent reader: tools/ckpt_inspect.py (Python standard library only) must read our
// files and agree with the C++ reader on every variable's and slot's checksum.
TEST_F(CheckpointReaderTest, PythonInspectorAgreesWithTheCppReader) {
  const std::string command = absl::StrCat("/usr/bin/python3 ", ASYNCPS_SOURCE_DIR,
                                           "/tools/ckpt_inspect.py ", dir_, " --slots 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int rc = pclose(pipe);
  ASSERT_EQ(rc, 0) << output;

  auto reader = CheckpointReader::Open(second_);  // the directory resolves to its newest checkpoint
  ASSERT_TRUE(reader.ok());
  std::string expected = "step 20\n";
  for (const ManifestVariable& v : (*reader)->manifest().variables) {
    std::vector<std::string> slots = {""};
    if (!v.shards.empty()) {
      for (const auto& [slot, tensor] : v.shards[0].slots) slots.push_back(slot);
    }
    for (const std::string& slot : slots) {
      auto t = (*reader)->Read(v.name, slot);
      ASSERT_TRUE(t.ok()) << t.status();
      std::string shape = "[";
      for (size_t i = 0; i < v.shape.size(); ++i)
        absl::StrAppend(&shape, i ? ", " : "", v.shape[i]);
      shape += "]";
      absl::StrAppendFormat(&expected, "%s\t%s\t%s\tcrc32=%08x\n",
                            slot.empty() ? v.name : v.name + ":" + slot,
                            slot.empty() ? std::string(DTypeSafetensorsName(v.dtype)) : "F32",
                            shape, Crc32(0, t->raw_data(), t->num_bytes()));
    }
  }
  EXPECT_EQ(output, expected);

  // And it refuses a corrupt file, naming it.
  const std::string file = second_ + "/ps-0-of-2.safetensors";
  std::string bytes = Slurp(file);
  bytes[bytes.size() / 2] ^= 1;
  Spit(file, bytes);
  pipe = popen(absl::StrCat("/usr/bin/python3 ", ASYNCPS_SOURCE_DIR, "/tools/ckpt_inspect.py ",
                            second_, " 2>&1")
                   .c_str(),
               "r");
  ASSERT_NE(pipe, nullptr);
  output.clear();
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  EXPECT_NE(pclose(pipe), 0);
  EXPECT_THAT(output, HasSubstr("ps-0-of-2.safetensors: checksum mismatch"));
}

}  // namespace
}  // namespace asyncps
