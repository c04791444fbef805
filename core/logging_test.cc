#include "core/logging.h"

#include <stdlib.h>

#include <spdlog/spdlog.h>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

// The level handed to InitLogging is the resolved one (flag over environment): the
// environment must not override it again.
TEST(LoggingTest, GivenLevelWinsOverTheEnvironment) {
  setenv("ASYNCPS_LOG_LEVEL", "debug", 1);
  InitLogging("test", 0, "error");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  unsetenv("ASYNCPS_LOG_LEVEL");
}

TEST(LoggingTest, WithoutALevelTheEnvironmentIsUsed) {
  setenv("ASYNCPS_LOG_LEVEL", "warn", 1);
  InitLogging("test", 0);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::warn);
  unsetenv("ASYNCPS_LOG_LEVEL");
  InitLogging("test", 0);
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
}

TEST(LoggingTest, UnknownLevelLogsAtInfoNotOff) {
  InitLogging("test", 0, "verbose");
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::info);
}

}  // namespace
}  // namespace asyncps
