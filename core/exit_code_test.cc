#include "core/exit_code.h"

#include <signal.h>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

TEST(ExitCodeTest, SignalsAndLostPeersAreRetryableBadConfigIsNot) {
  EXPECT_EQ(ExitCodeForSignal(SIGTERM), 143);
  EXPECT_EQ(ExitCodeForSignal(SIGINT), 130);
  EXPECT_TRUE(IsRetryableExitCode(ExitCodeForSignal(SIGTERM)));
  EXPECT_TRUE(IsRetryableExitCode(ExitCodeForSignal(SIGKILL)));
  EXPECT_EQ(ExitCodeForStatus(absl::OkStatus()), 0);
  for (const absl::Status& s : {absl::UnavailableError("ps down"), absl::AbortedError("x"),
                                absl::DeadlineExceededError("x"), absl::CancelledError("x")}) {
    EXPECT_TRUE(IsRetryableExitCode(ExitCodeForStatus(s))) << s;
  }
  for (const absl::Status& s : {absl::InvalidArgumentError("bad flag"), absl::NotFoundError("no data"),
                                absl::FailedPreconditionError("x"), absl::InternalError("bug"),
                                absl::DataLossError("x")}) {
    const int code = ExitCodeForStatus(s);
    EXPECT_GE(code, 1) << s;
    EXPECT_LE(code, 127) << s;
  }
  EXPECT_FALSE(IsRetryableExitCode(kExitUsage));
  EXPECT_FALSE(IsRetryableExitCode(kExitOk));
  EXPECT_TRUE(IsRetryableExitCode(kExitRetryable));
}

}  // namespace
}  // namespace asyncps
