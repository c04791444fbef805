#include <string>

#include "data/dataset.h"
#include "data/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data {
namespace {

using testutil::DrainDataset;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testutil::TempDir;
using testutil::WriteFile;
using testutil::WriteGzipFile;

std::vector<std::string> Lines(const Dataset& d) {
  auto elements = DrainDataset(d);
  EXPECT_TRUE(elements.ok()) << elements.status();
  std::vector<std::string> out;
  if (!elements.ok()) return out;
  for (const Element& e : *elements) {
    EXPECT_EQ(e[0].dtype(), DType::kU8);
    EXPECT_EQ(e[0].rank(), 1);
    out.emplace_back(static_cast<const char*>(e[0].raw_data()), e[0].num_bytes());
  }
  return out;
}

TEST(TextLinesTest, LinesOfSeveralFilesInOrder) {
  TempDir dir;
  WriteFile(dir.Path("a.txt"), "one\r\ntwo\n\nthree");
  WriteFile(dir.Path("empty.txt"), "");
  WriteGzipFile(dir.Path("b.txt.gz"), "four\nfive\n");
  EXPECT_THAT(
      Lines(Dataset::TextLines({dir.Path("a.txt"), dir.Path("empty.txt"), dir.Path("b.txt.gz")})),
      ElementsAre("one", "two", "", "three", "four", "five"));
  EXPECT_THAT(Lines(Dataset::TextLines({})), ElementsAre());
}

TEST(TextLinesTest, MissingFileIsNotFoundNamingIt) {
  TempDir dir;
  auto it = Dataset::TextLines({dir.Path("gone.txt")}).MakeIterator();
  ASSERT_FALSE(it.ok());
  EXPECT_EQ(it.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(it.status().message(), HasSubstr("gone.txt"));
}

TEST(LibSvmTest, ParsesIntoDenseFeaturesAndLabel) {
  TempDir dir;
  const std::string text =
      "# a comment line\n"
      "1 1:0.5 3:-2\n"
      "\n"
      "-1 qid:7 2:1e-3 4:4 # trailing comment\n"
      "0\n";
  WriteFile(dir.Path("d.svm"), text);
  WriteGzipFile(dir.Path("d.svm.gz"), text);
  for (const char* name : {"d.svm", "d.svm.gz"}) {
    auto elements = DrainDataset(Dataset::LibSvm(dir.Path(name), 4).Batch(8));
    ASSERT_TRUE(elements.ok()) << elements.status();
    ASSERT_EQ(elements->size(), 1u);
    const Element& b = (*elements)[0];
    EXPECT_TRUE(b[0].Equals(
        Tensor::FromVector<float>({3, 4}, {0.5f, 0, -2, 0, 0, 1e-3f, 0, 4, 0, 0, 0, 0})))
        << b[0].DebugString(12);
    EXPECT_TRUE(b[1].Equals(Tensor::FromVector<float>({1, -1, 0})));
  }
}

TEST(LibSvmTest, BadLinesAreInvalidArgumentNamingFileAndLine) {
  TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"1 1:1\n1 5:1\n", ":2: bad libsvm line: feature index 5 outside 1..4"},
      {"1 0:1\n", ":1: bad libsvm line: feature index 0"},
      {"x 1:1\n", ":1: bad libsvm line: label 'x'"},
      {"1 1:1\n\n1 2\n", ":3: bad libsvm line: '2' is not index:value"},
      {"1 a:1\n", ":1: bad libsvm line: 'a:1'"},
      {"1 1:b\n", ":1: bad libsvm line: '1:b'"},
  };
  int i = 0;
  for (const auto& [text, expect] : cases) {
    const std::string path = dir.Path("bad" + std::to_string(i++) + ".svm");
    WriteFile(path, text);
    auto elements = DrainDataset(Dataset::LibSvm(path, 4));
    EXPECT_EQ(elements.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(elements.status().message(), HasSubstr(path + expect)) << elements.status();
  }
  EXPECT_EQ(Dataset::LibSvm(dir.Path("bad0.svm"), 0).MakeIterator().status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Dataset::LibSvm(dir.Path("none.svm"), 3).MakeIterator().status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace asyncps::data
