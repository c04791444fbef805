#ifndef ASYNCPS_CHECKPOINT_TEST_TEMP_DIR_H_
#define ASYNCPS_CHECKPOINT_TEST_TEMP_DIR_H_

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace asyncps::ps {

// Removes the directories TestTempDir() made once their test ends.
class TempDirCleaner : public ::testing::EmptyTestEventListener {
 public:
  static inline std::vector<std::string> dirs;

 private:
  void OnTestEnd(const ::testing::TestInfo&) override {
    for (const auto& d : dirs) std::filesystem::remove_all(d);
    dirs.clear();
  }
};

// A fresh, empty directory for the running test (named after the binary's `prefix`, the pid
// and the test), removed when the test ends. For the checkpoint tests here and in ps/; call
// from the test's thread.
inline std::string TestTempDir(const std::string& prefix) {
  static const bool registered = [] {
    ::testing::UnitTest::GetInstance()->listeners().Append(new TempDirCleaner);
    return true;
  }();
  (void)registered;
  const std::string dir = absl::StrCat(::testing::TempDir(), "/", prefix, "_", getpid(), "_",
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TempDirCleaner::dirs.push_back(dir);
  return dir;
}

}  // namespace asyncps::ps

#endif  // ASYNCPS_CHECKPOINT_TEST_TEMP_DIR_H_
