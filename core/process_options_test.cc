#include "core/process_options.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;

// Owns argv strings for Parse.
class Argv {
 public:
  explicit Argv(std::vector<std::string> args) : args_(std::move(args)) {
    args_.insert(args_.begin(), "prog");
    for (std::string& a : args_) ptrs_.push_back(a.data());
  }
  int argc() { return static_cast<int>(ptrs_.size()); }
  char** argv() { return ptrs_.data(); }

 private:
  std::vector<std::string> args_;
  std::vector<char*> ptrs_;
};

class ProcessOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    unsetenv("ASYNCPS_METRICS_PORT");
    unsetenv("ASYNCPS_LOG_LEVEL");
    unsetenv("ASYNCPS_CLUSTER_TOKEN");
  }
};

TEST_F(ProcessOptionsTest, DefaultsWithoutFlagsOrEnvironment) {
  Argv a({});
  auto o = ProcessOptions::Parse(a.argc(), a.argv());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->metrics_port, 0);
  EXPECT_EQ(o->log_level, "info");
  EXPECT_EQ(o->cluster_token, "");
}

TEST_F(ProcessOptionsTest, FlagsOverrideTheEnvironment) {
  setenv("ASYNCPS_METRICS_PORT", "9100", 1);
  setenv("ASYNCPS_LOG_LEVEL", "debug", 1);
  setenv("ASYNCPS_CLUSTER_TOKEN", "from-env", 1);
  Argv env_only({});
  auto e = ProcessOptions::Parse(env_only.argc(), env_only.argv());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->metrics_port, 9100);
  EXPECT_EQ(e->log_level, "debug");
  EXPECT_EQ(e->cluster_token, "from-env");

  Argv flags({"--metrics_port=-1", "--log_level", "error", "--cluster_token=from-flag"});
  auto f = ProcessOptions::Parse(flags.argc(), flags.argv());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metrics_port, -1);
  EXPECT_EQ(f->log_level, "error");
  EXPECT_EQ(f->cluster_token, "from-flag");
}

TEST_F(ProcessOptionsTest, BadMetricsPortIsAnErrorNamingTheFlag) {
  for (const char* bad : {"http", "", "80x", "65536", "-2", "99999999999"}) {
    Argv a({std::string("--metrics_port=") + bad});
    auto o = ProcessOptions::Parse(a.argc(), a.argv());
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(o.status().message()), HasSubstr("--metrics_port")) << bad;
  }
  setenv("ASYNCPS_METRICS_PORT", "nine", 1);
  Argv none({});
  auto o = ProcessOptions::Parse(none.argc(), none.argv());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("ASYNCPS_METRICS_PORT"));
  // A flag without its value is not silently skipped either.
  Argv dangling({"--metrics_port"});
  auto d = ProcessOptions::Parse(dangling.argc(), dangling.argv());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("--metrics_port needs a value"));
  // A good flag wins over the bad variable: the variable is never consulted.
  Argv flag({"--metrics_port=0"});
  EXPECT_TRUE(ProcessOptions::Parse(flag.argc(), flag.argv()).ok());
}

TEST_F(ProcessOptionsTest, BadLogLevelIsAnErrorNamingTheFlag) {
  Argv a({"--log_level=verbose"});
  auto o = ProcessOptions::Parse(a.argc(), a.argv());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("--log_level"));
}

TEST_F(ProcessOptionsTest, FromEnvAndFlagsExitsOnABadValue) {
  Argv a({"--metrics_port=abc"});
  EXPECT_EXIT(ProcessOptions::FromEnvAndFlags(a.argc(), a.argv()), ::testing::ExitedWithCode(2),
              "--metrics_port='abc' is not a port");
}

}  // namespace
}  // namespace asyncps
