#include "coordinator/closure_outcome.h"

#include "core/stale_gradient.h"

#include "absl/strings/str_cat.h"
#include "worker/ps_client.h"

#include "gtest/gtest.h"

namespace asyncps {
namespace {

TEST(ClassifyClosureTest, SuccessfulCallAndFunction) {
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::OkStatus(), ErrorSource::kFunction), ClosureOutcome::kSucceeded);
}

TEST(ClassifyClosureTest, FunctionErrorsGoToTheUserWhateverTheirCode) {
  // Even an Unavailable raised by the function itself is the function's error, not a dead worker.
  for (const absl::Status& e : {absl::InvalidArgumentError("x"), absl::UnavailableError("x"),
                                absl::DeadlineExceededError("x"), absl::InternalError("x")}) {
    EXPECT_EQ(ClassifyClosure(absl::OkStatus(), e, ErrorSource::kFunction), ClosureOutcome::kFunctionError) << e;
  }
}

TEST(ClassifyClosureTest, EveryFailedCallIsAWorkerFailure) {
  for (const absl::Status& rpc :
       {absl::UnavailableError("connection reset"), absl::DeadlineExceededError("closure timed out"),
        absl::CancelledError("client destroyed"), absl::FailedPreconditionError("worker restarted"),
        absl::InvalidArgumentError("malformed response")}) {
    EXPECT_EQ(ClassifyClosure(rpc, absl::OkStatus(), ErrorSource::kFunction), ClosureOutcome::kWorkerFailure) << rpc;
    // What the function said is irrelevant when the call itself failed.
    EXPECT_EQ(ClassifyClosure(rpc, absl::InternalError("x"), ErrorSource::kPs), ClosureOutcome::kWorkerFailure);
  }
}

TEST(ClassifyClosureTest, UnreachablePsIsUnavailableForTheUser) {
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::UnavailableError("ps 0"), ErrorSource::kPs),
            ClosureOutcome::kPsUnavailable);
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::DeadlineExceededError("ps 1"), ErrorSource::kPs),
            ClosureOutcome::kPsUnavailable);
}

TEST(ClassifyClosureTest, PsStateLostIsNeitherUnreachableNorFunctionError) {
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::UnavailableError("ps 0 lost"), ErrorSource::kPsStateLost),
            ClosureOutcome::kPsStateLost);
  // A NotFound the function produced itself (an unknown name) stays the user's error.
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::NotFoundError("unknown variable 'x'"), ErrorSource::kFunction),
            ClosureOutcome::kFunctionError);
  EXPECT_EQ(ClosureOutcomeName(ClosureOutcome::kPsStateLost), "ps_state_lost");
}

TEST(PsStateLostTest, MarkSurvivesTheWireAsText) {
  absl::Status original = PsStateLostError(3, "127.0.0.1:9", "NOT_FOUND: unknown variable 'w'");
  EXPECT_EQ(original.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsPsStateLost(original));
  EXPECT_TRUE(IsPsUnreachable(original));
  EXPECT_EQ(LostPs(original), 3);
  // The worker sends code and message only; the coordinator rebuilds the mark from the text,
  // even when the function wrapped it.
  absl::Status rebuilt = PsStateLostFromMessage(absl::StrCat("step failed: ", original.message()));
  EXPECT_EQ(rebuilt.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(IsPsStateLost(rebuilt));
  EXPECT_EQ(LostPs(rebuilt), 3);
  EXPECT_EQ(LostPs(PsStateLostFromMessage("no index here")), -1);
  EXPECT_FALSE(IsPsStateLost(absl::UnavailableError("ps 0 (x): connection refused")));
  EXPECT_EQ(LostPs(absl::OkStatus()), -1);
}

TEST(ClassifyClosureTest, CancelledByCoordinator) {
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::CancelledError("x"), ErrorSource::kCancelled),
            ClosureOutcome::kCancelled);
}

TEST(ClassifyClosureTest, NamesAreStable) {
  EXPECT_EQ(ClosureOutcomeName(ClosureOutcome::kWorkerFailure), "worker_failure");
  EXPECT_EQ(ClosureOutcomeName(ClosureOutcome::kPsUnavailable), "ps_unavailable");
}

TEST(ClassifyClosureTest, StaleGradientRefusalIsRecomputedNotReported) {
  // As it arrives from a worker: code and message only, whatever the source said.
  const absl::Status stale(absl::StatusCode::kAborted,
                           StaleGradientError("w", 3, 0).message());
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), stale, ErrorSource::kFunction), ClosureOutcome::kStaleGradient);
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), stale, ErrorSource::kPs), ClosureOutcome::kStaleGradient);
  // The function's own Aborted is still its error; a cancelled closure stays cancelled.
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), absl::AbortedError("mine"), ErrorSource::kFunction),
            ClosureOutcome::kFunctionError);
  EXPECT_EQ(ClassifyClosure(absl::OkStatus(), stale, ErrorSource::kCancelled), ClosureOutcome::kCancelled);
  EXPECT_EQ(ClosureOutcomeName(ClosureOutcome::kStaleGradient), "stale_gradient");
}

}  // namespace
}  // namespace asyncps
