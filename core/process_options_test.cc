#include "core/process_options.h"

#include <stdlib.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

ProcessOptions Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ProcessOptions::FromEnvAndFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(ProcessOptionsTest, PsLimitDefaults) {
  const ProcessOptions o = Parse({});
  EXPECT_EQ(o.ps_max_variable_bytes, uint64_t{8} << 30);
  EXPECT_EQ(o.ps_max_response_bytes, uint64_t{512} << 20);
  EXPECT_FALSE(o.allow_nonfinite_gradients);
  EXPECT_TRUE(o.errors.empty());
}

TEST(ProcessOptionsTest, ByteSizesTakeBinarySuffixes) {
  ProcessOptions o = Parse({"--ps_max_variable_bytes=2GiB", "--ps_max_response_bytes", "64M"});
  EXPECT_EQ(o.ps_max_variable_bytes, uint64_t{2} << 30);
  EXPECT_EQ(o.ps_max_response_bytes, uint64_t{64} << 20);
  EXPECT_TRUE(o.errors.empty());
  o = Parse({"--ps_max_variable_bytes=1048576", "--ps_max_response_bytes=3KiB"});
  EXPECT_EQ(o.ps_max_variable_bytes, 1048576u);
  EXPECT_EQ(o.ps_max_response_bytes, 3072u);
}

TEST(ProcessOptionsTest, BadByteSizesAreReportedAndKeepTheDefault) {
  for (const char* bad : {"0", "-5", "lots", "8XB", "99999999999999999999", "20000000T", ""}) {
    SCOPED_TRACE(bad);
    const ProcessOptions o = Parse({std::string("--ps_max_variable_bytes=") + bad});
    EXPECT_EQ(o.ps_max_variable_bytes, kDefaultPsMaxVariableBytes);
    ASSERT_THAT(o.errors, SizeIs(1));
    EXPECT_THAT(o.errors[0], HasSubstr("ps_max_variable_bytes"));
  }
}

TEST(ProcessOptionsTest, AllowNonfiniteGradients) {
  EXPECT_TRUE(Parse({"--allow_nonfinite_gradients"}).allow_nonfinite_gradients);
  // The bare flag does not swallow the next argument.
  const ProcessOptions o = Parse({"--allow_nonfinite_gradients", "--ps_max_response_bytes=1K"});
  EXPECT_TRUE(o.allow_nonfinite_gradients);
  EXPECT_EQ(o.ps_max_response_bytes, 1024u);
  EXPECT_TRUE(Parse({"--allow_nonfinite_gradients=true"}).allow_nonfinite_gradients);
  EXPECT_FALSE(Parse({"--allow_nonfinite_gradients=0"}).allow_nonfinite_gradients);
  const ProcessOptions bad = Parse({"--allow_nonfinite_gradients=maybe"});
  EXPECT_FALSE(bad.allow_nonfinite_gradients);
  EXPECT_THAT(bad.errors, SizeIs(1));
}

TEST(ProcessOptionsTest, EnvironmentWhenNoFlag) {
  setenv("ASYNCPS_PS_MAX_VARIABLE_BYTES", "1G", 1);
  setenv("ASYNCPS_ALLOW_NONFINITE_GRADIENTS", "1", 1);
  EXPECT_EQ(Parse({}).ps_max_variable_bytes, uint64_t{1} << 30);
  EXPECT_TRUE(Parse({}).allow_nonfinite_gradients);
  // The flag wins over the environment.
  EXPECT_EQ(Parse({"--ps_max_variable_bytes=2G"}).ps_max_variable_bytes, uint64_t{2} << 30);
  unsetenv("ASYNCPS_PS_MAX_VARIABLE_BYTES");
  unsetenv("ASYNCPS_ALLOW_NONFINITE_GRADIENTS");
}

}  // namespace
}  // namespace asyncps
