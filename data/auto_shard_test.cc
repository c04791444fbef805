// tf.distribute's auto-shard policies (Dataset::MakeShardedIterator): OFF, FILE, DATA, AUTO.

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "data/test_files.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace auto_shard_test_internal {
namespace {

using testutil::Drain;
using testutil::TempDir;
using testutil::WriteFile;

std::vector<std::string> Lines(const std::vector<Element>& elements) {
  std::vector<std::string> out;
  for (const Element& e : elements) {
    out.emplace_back(static_cast<const char*>(e[0].raw_data()), e[0].num_bytes());
  }
  return out;
}

// Files f0..f{n-1}, each with lines "f<i>-0", "f<i>-1", "f<i>-2".
std::vector<std::string> WriteFiles(const TempDir& dir, int n) {
  std::vector<std::string> paths;
  for (int i = 0; i < n; ++i) {
    paths.push_back(dir.Path(absl::StrCat("f", i)));
    WriteFile(paths.back(), absl::StrCat("f", i, "-0\nf", i, "-1\nf", i, "-2\n"));
  }
  return paths;
}

absl::StatusOr<std::vector<std::string>> Read(const Dataset& d, AutoShardPolicy policy, int index,
                                              int workers, AutoShardPolicy* applied = nullptr) {
  auto it = d.MakeShardedIterator(policy, index, workers, applied);
  if (!it.ok()) return it.status();
  auto elements = Drain(**it);
  if (!elements.ok()) return elements.status();
  return Lines(*elements);
}

TEST(AutoShardTest, FileGivesEachWorkerItsFiles) {
  TempDir dir;
  const Dataset d = Dataset::TextLines(WriteFiles(dir, 4));
  auto w0 = Read(d, AutoShardPolicy::kFile, 0, 2);
  auto w1 = Read(d, AutoShardPolicy::kFile, 1, 2);
  ASSERT_TRUE(w0.ok() && w1.ok()) << w0.status() << w1.status();
  EXPECT_EQ(*w0, (std::vector<std::string>{"f0-0", "f0-1", "f0-2", "f2-0", "f2-1", "f2-2"}));
  EXPECT_EQ(*w1, (std::vector<std::string>{"f1-0", "f1-1", "f1-2", "f3-0", "f3-1", "f3-2"}));
}

TEST(AutoShardTest, FileWithFewerFilesThanWorkersFails) {
  TempDir dir;
  const Dataset d = Dataset::TextLines(WriteFiles(dir, 2));
  auto r = Read(d, AutoShardPolicy::kFile, 0, 3);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fewer files than workers"), absl::string_view::npos)
      << r.status();
  // A pipeline without a file reader cannot be sharded by file.
  auto range =
      Read(Dataset::Range(0, 10).Map([](Element e) -> absl::StatusOr<Element> { return e; }),
           AutoShardPolicy::kFile, 0, 2);
  EXPECT_EQ(range.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AutoShardTest, FileDoesNotOpenOtherWorkersFiles) {
  TempDir dir;
  std::vector<std::string> paths = WriteFiles(dir, 2);
  paths.push_back(dir.Path("missing"));  // worker 0 of 2 reads f0 and this one
  auto w1 = Read(Dataset::TextLines(paths), AutoShardPolicy::kFile, 1, 2);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(w1->size(), 3u);
  EXPECT_EQ(Read(Dataset::TextLines(paths), AutoShardPolicy::kFile, 0, 2).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(AutoShardTest, AutoPicksFileOrData) {
  TempDir dir;
  const Dataset d = Dataset::TextLines(WriteFiles(dir, 3));
  AutoShardPolicy applied = AutoShardPolicy::kOff;
  auto by_file = Read(d, AutoShardPolicy::kAuto, 2, 3, &applied);
  ASSERT_TRUE(by_file.ok());
  EXPECT_EQ(applied, AutoShardPolicy::kFile);
  EXPECT_EQ(*by_file, (std::vector<std::string>{"f2-0", "f2-1", "f2-2"}));
  // Four workers, three files: every worker reads every fourth line, and together all of them.
  std::vector<std::string> all;
  for (int w = 0; w < 4; ++w) {
    auto r = Read(d, AutoShardPolicy::kAuto, w, 4, &applied);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(applied, AutoShardPolicy::kData);
    EXPECT_LE(r->size(), 3u);
    all.insert(all.end(), r->begin(), r->end());
  }
  std::sort(all.begin(), all.end());
  auto off = Read(d, AutoShardPolicy::kOff, 3, 4);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->size(), 9u);
  std::sort(off->begin(), off->end());
  EXPECT_EQ(all, *off);
  // No file reader at all: AUTO shards the records.
  auto range = Dataset::Range(0, 10).MakeShardedIterator(AutoShardPolicy::kAuto, 1, 3, &applied);
  ASSERT_TRUE(range.ok());
  EXPECT_EQ(applied, AutoShardPolicy::kData);
  EXPECT_EQ(testutil::Int64s(*Drain(**range)), (std::vector<int64_t>{1, 4, 7}));
}

// Readers inside FlatMap are not file-sharded; AUTO shards the list of names instead.
TEST(AutoShardTest, FileNamesThroughFlatMapShardedAsData) {
  TempDir dir;
  const std::vector<std::string> paths = WriteFiles(dir, 2);
  std::vector<Element> names;
  for (const std::string& p : paths) {
    names.push_back({Tensor::FromVector<uint8_t>({static_cast<int64_t>(p.size())},
                                                 std::vector<uint8_t>(p.begin(), p.end()))});
  }
  const Dataset d = Dataset::FromElements(names).FlatMap([](Element e) -> absl::StatusOr<Dataset> {
    return Dataset::TextLines(
        {std::string(static_cast<const char*>(e[0].raw_data()), e[0].num_bytes())});
  });
  AutoShardPolicy applied;
  auto w1 = Read(d, AutoShardPolicy::kAuto, 1, 2, &applied);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ(applied, AutoShardPolicy::kData);
  EXPECT_EQ(*w1, (std::vector<std::string>{"f1-0", "f1-1", "f1-2"}));
}

TEST(AutoShardTest, BadWorkerIndexIsInvalidArgument) {
  const Dataset d = Dataset::Range(0, 4);
  for (auto [index, workers] : {std::pair{0, 0}, std::pair{-1, 2}, std::pair{2, 2}}) {
    EXPECT_EQ(d.MakeShardedIterator(AutoShardPolicy::kData, index, workers).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace auto_shard_test_internal
}  // namespace asyncps::data
