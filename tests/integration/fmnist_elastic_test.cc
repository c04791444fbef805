// The main job, elastic (issue 37's acceptance): asyncps_launch --elastic --max_ps 3 runs
// fashion_mnist with --count_examples on 2 workers and 2 of 3 PS slots; while it trains,
// `asyncps_launch scale` takes it to 4 workers and 3 PS (shard-group copies move to the new
// PS), then to 1 worker and 2 PS (they move back). No process is restarted, every example is
// applied exactly once per epoch (the chief checks the per-example counters on the PS and says
// so), the target is reached, and the leavers exit 0 as departures. A scale request with a
// wrong token, or to 0 workers, is refused and changes nothing.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"

namespace asyncps {
namespace {

constexpr double kTarget = 0.82;
constexpr int kEpochs = 6;
constexpr char kToken[] = "elastic-test-token";

std::string Bin(const std::string& name) { return testutil::LocalCluster::BinaryPath(name); }

// `asyncps_launch scale --control ADDRESS --workers N --token T` (or --ps N when `what` says
// so): its exit code and output.
std::pair<int, std::string> Scale(const std::string& control, const std::string& workers, const std::string& token,
                                  const std::string& what = "--workers") {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"), "scale", "--control", control, what, workers, "--token", token};
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {-1, ""};
  auto code = (*p)->Wait(absl::Minutes(2));
  EXPECT_TRUE(code.ok()) << code.status();
  return {code.ok() ? *code : -1, (*p)->output()};
}

TEST(FmnistElasticTest, WorkersScaled2To4To1AndPs2To3To2WhileTrainingExactlyOnce) {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"), "--elastic", "--token", kToken, "--max_restarts", "2", "--max_ps", "3", "--ps", "2",
            "--workers", "2", "--", Bin("fashion_mnist"), "--epochs", std::to_string(kEpochs), "--sharding",
            "dynamic", "--count_examples", "--batch_size", "120"};
  o.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto started = Subprocess::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  Subprocess& launcher = **started;
  auto line = launcher.WaitForLine("[launcher] control port ", absl::Minutes(1));
  ASSERT_TRUE(line.ok()) << line.status() << launcher.output();
  const std::string control = absl::StrCat("127.0.0.1:", testutil::NumberAfter(*line, "control port "));
  ASSERT_TRUE(launcher.WaitForLine("[chief] epoch ", absl::Minutes(2)).ok()) << launcher.output();

  // Refused, nothing changed: a wrong token (the handshake), 0 workers (the scale command).
  auto [wrong_code, wrong_out] = Scale(control, "4", "not-the-token");
  EXPECT_NE(wrong_code, 0);
  EXPECT_NE(wrong_out.find("PERMISSION_DENIED"), std::string::npos) << wrong_out;
  auto [zero_code, zero_out] = Scale(control, "0", kToken);
  EXPECT_EQ(zero_code, 2) << zero_out;

  auto [ps_up_code, ps_up_out] = Scale(control, "3", kToken, "--ps");
  ASSERT_EQ(ps_up_code, 0) << ps_up_out << launcher.output();
  EXPECT_NE(ps_up_out.find("started ps:2 pid "), std::string::npos) << ps_up_out;
  auto [up_code, up_out] = Scale(control, "4", kToken);
  ASSERT_EQ(up_code, 0) << up_out << launcher.output();
  EXPECT_NE(up_out.find("started worker:2 pid "), std::string::npos) << up_out;
  EXPECT_NE(up_out.find("started worker:3 pid "), std::string::npos) << up_out;
  // The chief's progress line counts the members it admitted.
  ASSERT_TRUE(launcher.WaitForLine("  workers 4/4", absl::Minutes(2)).ok()) << launcher.output();

  auto [down_code, down_out] = Scale(control, "1", kToken);
  ASSERT_EQ(down_code, 0) << down_out << launcher.output();
  EXPECT_NE(down_out.find("worker:3 left; worker:2 left; worker:1 left"), std::string::npos) << down_out;
  ASSERT_TRUE(launcher.WaitForLine("  workers 1/1", absl::Minutes(2)).ok()) << launcher.output();
  // PS 2 hands its shard-group copies back to PS 0 and 1, then exits 0.
  auto [ps_down_code, ps_down_out] = Scale(control, "2", kToken, "--ps");
  ASSERT_EQ(ps_down_code, 0) << ps_down_out << launcher.output();
  EXPECT_NE(ps_down_out.find("ps:2 left"), std::string::npos) << ps_down_out;

  auto code = launcher.Wait(absl::Minutes(5));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << launcher.output();
  const std::string out = launcher.output();
  EXPECT_EQ(*code, 0) << out;
  EXPECT_NE(out.find(absl::StrCat("[chief] exactly once: 60000 examples x ", kEpochs,
                                  " epochs, every example applied once per epoch")),
            std::string::npos)
      << out;
  EXPECT_GE(testutil::FinalAccuracy(out), kTarget) << out;
  // No process restarted; each leaver drained and exited 0.
  EXPECT_EQ(out.find("restarted "), std::string::npos) << out;
  for (const char* task : {"ps:0", "ps:1", "worker:0", "worker:1", "chief"}) {
    EXPECT_EQ(testutil::LinesWith(out, absl::StrCat("[launcher] started ", task, " pid ")).size(), 1u) << task;
  }
  for (const char* task : {"worker:1", "worker:2", "worker:3", "ps:2"}) {
    EXPECT_NE(out.find(absl::StrCat("[launcher] ", task, " left the job (exited with code 0)")), std::string::npos)
        << task << "\n"
        << out;
  }
}

}  // namespace
}  // namespace asyncps
