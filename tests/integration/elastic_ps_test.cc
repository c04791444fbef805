// Elastic parameter servers (issue 37's acceptance), as a user runs them: `asyncps_launch
// --elastic --max_ps 3 --ps 2` runs the counter program (sharded i64 counts, a scalar total, an
// SGD scalar and a hash-keyed embedding table, every update deduplicated); while it trains,
// `asyncps_launch scale --ps 3` adds a PS (it registers, the chief moves shard-group copies to
// it by state transfer and one map change each) and `scale --ps 2` removes it again (it asks to
// leave, its copies move back, it exits 0), with workers SIGKILLed meanwhile and restarted by
// the launcher. Every id is counted exactly once per epoch, every PS process runs once, and the
// moves are on the chief's log. Also with one copy per group (--ps_replicas 1: the chief's
// shard map then moves a group's only copy). Scale requests to 0 PS, past --max_ps or below
// --ps_replicas are refused and change nothing. The checkpoints taken meanwhile restore into a
// fixed cluster of another shape.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/subprocess.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"
#include "tests/testutil/replicated_cluster.h"

namespace asyncps {
namespace {

constexpr char kToken[] = "elastic-ps-test-token";
constexpr absl::Duration kStep = absl::Minutes(2);

std::string Bin(const std::string& name) { return testutil::LocalCluster::BinaryPath(name); }

// `asyncps_launch scale --control ADDRESS --ps N --token T`: its exit code and output.
std::pair<int, std::string> ScalePs(const std::string& control, const std::string& ps) {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"), "scale", "--control", control, "--ps", ps, "--token", kToken};
  auto p = Subprocess::Start(o);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {-1, ""};
  auto code = (*p)->Wait(absl::Minutes(3));
  EXPECT_TRUE(code.ok()) << code.status();
  return {code.ok() ? *code : -1, (*p)->output()};
}

// Waits until `launcher` printed at least `n` lines containing `needle`.
bool WaitForLines(Subprocess& launcher, const std::string& needle, size_t n) {
  return testutil::WaitFor([&] { return testutil::LinesWith(launcher.output(), needle).size() >= n; }, kStep);
}

// SIGKILLs the task's current process (its pid from the launcher's latest "started"/"restarted"
// line for it), then waits for the launcher to start it again.
void KillAndAwaitRestart(Subprocess& launcher, const std::string& task) {
  const std::string out = launcher.output();
  std::vector<std::string> lines = testutil::LinesWith(out, absl::StrCat("[launcher] started ", task, " pid "));
  for (const std::string& l : testutil::LinesWith(out, absl::StrCat("[launcher] restarted ", task, " "))) {
    lines.push_back(l);
  }
  ASSERT_FALSE(lines.empty()) << task << "\n" << out;
  const int64_t pid = testutil::NumberAfter(lines.back(), "pid ");
  ASSERT_GT(pid, 0) << lines.back();
  const size_t restarts = testutil::LinesWith(out, absl::StrCat("[launcher] restarted ", task, " ")).size();
  ASSERT_EQ(kill(static_cast<pid_t>(pid), SIGKILL), 0) << task << " pid " << pid;
  ASSERT_TRUE(WaitForLines(launcher, absl::StrCat("[launcher] restarted ", task, " "), restarts + 1))
      << launcher.output();
}

// The counter program under `asyncps_launch --elastic --max_ps 3 --ps 2` with `replicas`
// copies, training until `<dir>/stop` exists; `*control` is the launcher's control port once
// the first epoch is done.
void StartCounterJob(const std::string& dir, int replicas, int ballast_mb, std::unique_ptr<Subprocess>* launcher,
                     std::string* control) {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"), "--elastic", "--max_ps", "3", "--ps", "2", "--workers", "2", "--ps_replicas",
            std::to_string(replicas), "--max_restarts", "5", "--token", kToken, "--log_level", "info", "--",
            Bin("nemesis_counter"), "--checkpoint_dir", absl::StrCat(dir, "/ckpt"), "--ids", "3000", "--batch", "50",
            "--epochs", "2", "--work_ms", "2", "--ballast_mb", std::to_string(ballast_mb), "--data_service", "off",
            "--until_file", absl::StrCat(dir, "/stop")};
  o.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto started = Subprocess::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  *launcher = *std::move(started);
  auto line = (*launcher)->WaitForLine("[launcher] control port ", kStep);
  ASSERT_TRUE(line.ok()) << line.status() << (*launcher)->output();
  *control = absl::StrCat("127.0.0.1:", testutil::NumberAfter(*line, "control port "));
  ASSERT_TRUE((*launcher)->WaitForLine("[chief] epoch 1/", kStep).ok()) << (*launcher)->output();
}

// Ends the training (creates `until`), waits for the launcher, and checks the job ended 0 with
// the counter program's "exactly once"; `*out` is the launcher's whole output.
void StopAndCheckExact(Subprocess& launcher, const std::string& until, std::string* out) {
  { std::ofstream(until) << "done\n"; }
  auto code = launcher.Wait(absl::Minutes(5));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << launcher.output();
  *out = launcher.output();
  EXPECT_EQ(*code, 0) << *out;
  EXPECT_NE(out->find("[chief] exactly once: 3000 keys x "), std::string::npos) << *out;
  EXPECT_EQ(out->find("MISMATCH"), std::string::npos) << *out;
}

class ElasticPsTest : public ::testing::TestWithParam<int> {};

TEST_P(ElasticPsTest, PsScaled2To3To2UnderWorkerKillsExactlyOnce) {
  const int replicas = GetParam();
  testutil::TestDir dir("elastic_ps");
  const std::string until = absl::StrCat(dir.path(), "/stop");
  std::unique_ptr<Subprocess> job;
  std::string control;
  ASSERT_NO_FATAL_FAILURE(StartCounterJob(dir.path(), replicas, /*ballast_mb=*/2, &job, &control));
  Subprocess& launcher = *job;

  // Refused, nothing changed: 0 PS (the scale command), more than the slots, fewer than the
  // copies of a group.
  auto [zero_code, zero_out] = ScalePs(control, "0");
  EXPECT_EQ(zero_code, 2) << zero_out;
  auto [over_code, over_out] = ScalePs(control, "4");
  EXPECT_NE(over_code, 0) << over_out;
  EXPECT_NE(over_out.find("--max_ps 3"), std::string::npos) << over_out;
  if (replicas == 2) {
    auto [under_code, under_out] = ScalePs(control, "1");
    EXPECT_NE(under_code, 0) << under_out;
    EXPECT_NE(under_out.find("--ps_replicas"), std::string::npos) << under_out;
  }

  auto [up_code, up_out] = ScalePs(control, "3");
  ASSERT_EQ(up_code, 0) << up_out << launcher.output();
  EXPECT_NE(up_out.find("started ps:2 pid "), std::string::npos) << up_out;
  // The new PS registers; the chief says how many group copies move to it.
  auto joined = launcher.WaitForLine("ps_joined: ps 2 ", kStep);
  ASSERT_TRUE(joined.ok()) << joined.status() << launcher.output();
  const int64_t moving = testutil::NumberAfter(*joined, " PS; ");
  ASSERT_GT(moving, 0) << *joined;
  KillAndAwaitRestart(launcher, "worker:0");  // while the copies are moving
  ASSERT_TRUE(WaitForLines(launcher, "ps_move_done: ", static_cast<size_t>(moving))) << launcher.output();
  ASSERT_TRUE(launcher.WaitForLine("[ps:2] ", kStep).ok());

  KillAndAwaitRestart(launcher, "worker:1");
  auto [down_code, down_out] = ScalePs(control, "2");
  ASSERT_EQ(down_code, 0) << down_out << launcher.output();
  EXPECT_NE(down_out.find("ps:2 left"), std::string::npos) << down_out;
  EXPECT_NE(launcher.output().find("[launcher] ps:2 left the job (exited with code 0)"), std::string::npos)
      << launcher.output();
  EXPECT_NE(launcher.output().find("ps_left: ps 2 "), std::string::npos) << launcher.output();

  std::string out;
  ASSERT_NO_FATAL_FAILURE(StopAndCheckExact(launcher, until, &out));
  // No PS restarted or lost: the moves were planned, not failovers after a loss.
  for (const char* task : {"ps:0", "ps:1", "ps:2"}) {
    EXPECT_EQ(testutil::LinesWith(out, absl::StrCat("[launcher] restarted ", task, " ")).size(), 0u) << task;
    EXPECT_EQ(testutil::LinesWith(out, absl::StrCat("[launcher] started ", task, " pid ")).size(),
              std::string(task) == "ps:2" ? 0u : 1u)
        << task;
  }
  EXPECT_EQ(out.find("ps_down: "), std::string::npos) << out;

  // The checkpoints taken while PS came and went restore into another shape: a fixed cluster of
  // 2 PS without replicas (the counter program resumes from the newest and checks again).
  const int64_t epochs = testutil::NumberAfter(out, "[chief] exactly once: 3000 keys x ");
  ASSERT_GT(epochs, 0) << out;
  Subprocess::Options r;
  r.argv = {Bin("asyncps_launch"), "--ps", "2", "--workers", "1", "--token", kToken, "--", Bin("nemesis_counter"),
            "--checkpoint_dir", absl::StrCat(dir.path(), "/ckpt"), "--ids", "3000", "--batch", "50", "--epochs",
            std::to_string(epochs), "--ballast_mb", "2", "--data_service", "off"};
  r.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto resumed = Subprocess::Start(r);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto resumed_code = (*resumed)->Wait(absl::Minutes(3));
  ASSERT_TRUE(resumed_code.ok()) << resumed_code.status();
  const std::string resumed_out = (*resumed)->output();
  EXPECT_EQ(*resumed_code, 0) << resumed_out;
  EXPECT_NE(resumed_out.find("[chief] resumed from checkpoint"), std::string::npos) << resumed_out;
  EXPECT_NE(resumed_out.find(absl::StrCat("[chief] exactly once: 3000 keys x ", epochs, " epochs")), std::string::npos)
      << resumed_out;
}

// With two copies a PS SIGKILLed while copies move to the new one (the launcher restarts it
// empty): its groups fail over to their other copies, it rebuilds what its target names, the
// moves finish, and every update is still applied exactly once.
TEST(ElasticPsKillTest, PsKilledMidMoveStaysExact) {
  testutil::TestDir dir("elastic_ps_kill");
  const std::string until = absl::StrCat(dir.path(), "/stop");
  std::unique_ptr<Subprocess> job;
  std::string control;
  ASSERT_NO_FATAL_FAILURE(StartCounterJob(dir.path(), /*replicas=*/2, /*ballast_mb=*/8, &job, &control));
  Subprocess& launcher = *job;

  auto [up_code, up_out] = ScalePs(control, "3");
  ASSERT_EQ(up_code, 0) << up_out << launcher.output();
  auto joined = launcher.WaitForLine("ps_joined: ps 2 ", kStep);
  ASSERT_TRUE(joined.ok()) << joined.status() << launcher.output();
  const int64_t moving = testutil::NumberAfter(*joined, " PS; ");
  ASSERT_GT(moving, 0) << *joined;
  KillAndAwaitRestart(launcher, "ps:0");  // a source of the moves, while they run
  ASSERT_TRUE(WaitForLines(launcher, "ps_move_done: ", static_cast<size_t>(moving))) << launcher.output();

  auto [down_code, down_out] = ScalePs(control, "2");
  ASSERT_EQ(down_code, 0) << down_out << launcher.output();
  EXPECT_NE(down_out.find("ps:2 left"), std::string::npos) << down_out;

  std::string out;
  ASSERT_NO_FATAL_FAILURE(StopAndCheckExact(launcher, until, &out));
  EXPECT_NE(out.find("ps_down: ps 0 "), std::string::npos) << "the kill was seen as a loss\n" << out;
}

INSTANTIATE_TEST_SUITE_P(Replicas, ElasticPsTest, ::testing::Values(2, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return absl::StrCat(info.param, "Copies"); });

}  // namespace
}  // namespace asyncps
