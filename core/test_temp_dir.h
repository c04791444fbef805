#ifndef ASYNCPS_CORE_TEST_TEMP_DIR_H_
#define ASYNCPS_CORE_TEST_TEMP_DIR_H_

// Test-only: a temporary directory that cannot outlive its test. Header-only so any module's
// tests can use it without a link dependency; never include it from library code.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace asyncps::testutil {

// A fresh, empty directory <gtest TempDir>/<tag>_<pid>_<test> (gtest's TempDir honours
// TEST_TMPDIR, then TMPDIR), removed with everything in it when this object is destroyed, so
// also when the test fails: an ASSERT_* returns early and the destructor still runs. Hold it
// in the test body or as a fixture member. Outside a running test (SetUpTestSuite) the name
// has no test part. Not thread-safe; construct and destroy it on one thread.
class TestDir {
 public:
  explicit TestDir(const std::string& tag) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = test == nullptr ? "" : absl::StrCat("_", test->name());
    // Parameterised tests are called "Name/0": keep the directory one level deep.
    std::replace(name.begin(), name.end(), '/', '_');
    path_ = absl::StrCat(::testing::TempDir(), tag, "_", getpid(), name);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TestDir() {
    std::error_code ignored;  // nothing useful to do about a failed removal in a destructor
    std::filesystem::remove_all(path_, ignored);
  }
  TestDir(const TestDir&) = delete;
  TestDir& operator=(const TestDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace asyncps::testutil

#endif  // ASYNCPS_CORE_TEST_TEMP_DIR_H_
