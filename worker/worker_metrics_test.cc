#include "worker/worker_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace {

TEST(WorkerMetricsTest, StepsInputWaitAndExamples) {
  auto metrics = metrics::ProcessMetrics::Create("worker", 1, "");
  ASSERT_TRUE(metrics.ok());
  WorkerMetrics worker(**metrics);
  worker.RecordStep("train_step", /*ok=*/true, 0.25, 0.125, 128);
  worker.RecordStep("train_step", /*ok=*/false, 0.5, 0, 0);
  const std::string text = (*metrics)->Serialize();
  const std::string labels = "role=\"worker\",task=\"1\"";
  EXPECT_NE(text.find("asyncps_worker_step_seconds_count{" + labels + ",function=\"train_step\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("asyncps_worker_step_seconds_sum{" + labels + ",function=\"train_step\"} 0.75"),
            std::string::npos);
  EXPECT_NE(text.find("asyncps_worker_steps_total{" + labels + ",function=\"train_step\",result=\"error\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("asyncps_worker_input_wait_seconds_total{" + labels + "} 0.125"), std::string::npos);
  EXPECT_NE(text.find("asyncps_worker_examples_total{" + labels + "} 128"), std::string::npos);
}

TEST(WorkerMetricsTest, PhaseTimesAddUpPerFunctionAndPhase) {
  auto metrics = metrics::ProcessMetrics::Create("worker", 0, "");
  ASSERT_TRUE(metrics.ok());
  WorkerMetrics worker(**metrics);
  worker.RecordPhases("train_step", {{"pull", absl::Milliseconds(250)}, {"compute", absl::Milliseconds(500)}});
  worker.RecordPhases("train_step", {{"pull", absl::Milliseconds(125)}});
  worker.RecordPhases("eval_step", {{"pull", absl::Milliseconds(1000)}});
  const std::string text = (*metrics)->Serialize();
  const std::string family = "asyncps_worker_step_phase_seconds_total{role=\"worker\",task=\"0\",";
  EXPECT_NE(text.find(family + "function=\"train_step\",phase=\"pull\"} 0.375"), std::string::npos) << text;
  EXPECT_NE(text.find(family + "function=\"train_step\",phase=\"compute\"} 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find(family + "function=\"eval_step\",phase=\"pull\"} 1"), std::string::npos) << text;
}

TEST(WorkerMetricsTest, StepContextPhaseTimesSumPerPhaseInFirstSeenOrder) {
  VariableDirectory directory;
  PsClient client({}, directory);
  StepContext ctx(0, {}, client, std::make_shared<std::atomic<bool>>(false));
  ctx.AddPhaseTime("pull", absl::Milliseconds(2));
  ctx.AddPhaseTime("compute", absl::Milliseconds(5));
  ctx.AddPhaseTime("pull", absl::Milliseconds(3));
  ASSERT_EQ(ctx.phase_times().size(), 2u);
  EXPECT_EQ(ctx.phase_times()[0].first, "pull");
  EXPECT_EQ(ctx.phase_times()[0].second, absl::Milliseconds(5));
  EXPECT_EQ(ctx.phase_times()[1].first, "compute");
  EXPECT_EQ(ctx.phase_times()[1].second, absl::Milliseconds(5));

  auto metrics = metrics::ProcessMetrics::Create("worker", 0, "");
  ASSERT_TRUE(metrics.ok());
  WorkerMetrics worker(**metrics);
  worker.RecordPhases("step", ctx.phase_times());
  EXPECT_NE((*metrics)->Serialize().find("function=\"step\",phase=\"compute\"} 0.005"), std::string::npos)
      << (*metrics)->Serialize();
}

}  // namespace
}  // namespace asyncps
