#include "core/test_temp_dir.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace asyncps::testutil {
namespace {

namespace fs = std::filesystem;

TEST(TestDirTest, FreshUnderTempDirAndRemovedWithItsFiles) {
  std::string path;
  {
    TestDir dir("test_dir");
    path = dir.path();
    EXPECT_EQ(path.rfind(::testing::TempDir(), 0), 0u) << path;
    EXPECT_NE(path.find("FreshUnderTempDirAndRemovedWithItsFiles"), std::string::npos) << path;
    ASSERT_TRUE(fs::is_directory(path));
    EXPECT_TRUE(fs::is_empty(path));
    fs::create_directories(path + "/sub");
    std::ofstream(path + "/sub/file") << "x";
  }
  EXPECT_FALSE(fs::exists(path));
}

// Makes a directory with a file in it, then fails fatally (returns early) as a broken test
// would.
void FailWithADirectory(std::string* path) {
  TestDir dir("test_dir_failing");
  *path = dir.path();
  std::ofstream(*path + "/file") << "x";
  FAIL() << "deliberate";
}

TEST(TestDirTest, RemovedAlsoWhenTheTestFails) {
  static std::string path;  // EXPECT_FATAL_FAILURE's statement may not name locals
  EXPECT_FATAL_FAILURE(FailWithADirectory(&path), "deliberate");
  ASSERT_FALSE(path.empty());
  EXPECT_FALSE(fs::exists(path)) << path;
}

class TestDirParamTest : public ::testing::TestWithParam<int> {};

TEST_P(TestDirParamTest, ParameterisedNamesStayOneLevelDeep) {
  TestDir dir("test_dir_param");
  EXPECT_EQ(fs::path(dir.path()).parent_path(), fs::path(::testing::TempDir()).parent_path());
}

INSTANTIATE_TEST_SUITE_P(Once, TestDirParamTest, ::testing::Values(0));

}  // namespace
}  // namespace asyncps::testutil
