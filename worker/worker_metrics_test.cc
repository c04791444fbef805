#include "worker/worker_metrics.h"

#include <string>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace asyncps
