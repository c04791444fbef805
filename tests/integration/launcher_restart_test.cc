// asyncps_launch --max_restarts: a parameter server or worker that dies is started again (same
// address, new process), up to the limit per task, with backoff; one more failure ends the job
// with that task's exit code. And the main job as a person runs it: a worker SIGKILLed twice by
// hand, the job still reaches its target, says one line per process at the start, and at the
// end where its checkpoint is and the exact command that resumes from it (which does).
#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"

namespace asyncps {
namespace {

using testutil::NumberAfter;

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string Bin(const std::string& name) { return testutil::LocalCluster::BinaryPath(name); }

// Waits for the launcher's line `needle` ("started worker:1 pid", "restarted worker:1 (restart
// 1/2)") and returns the pid it names; -1 when it never came.
pid_t PidFrom(Subprocess& launcher, const std::string& needle, absl::Duration timeout) {
  absl::StatusOr<std::string> line = launcher.WaitForLine(needle, timeout);
  EXPECT_TRUE(line.ok()) << line.status() << "\n" << launcher.output();
  if (!line.ok()) return -1;
  const int64_t pid = NumberAfter(*line, " pid ");
  EXPECT_GT(pid, 1) << *line;
  return static_cast<pid_t>(pid);
}

// Every task a shell: the chief waits, the others sleep until killed.
std::vector<std::string> SleepingCluster() {
  return {"/bin/sh", "-c",
          "case \"$TF_CONFIG\" in *'\"type\":\"chief\"'*) echo chief-up; exec sleep 600;; "
          "*) exec sleep 600;; esac"};
}

// asyncps_launch with `flags` over SleepingCluster (1 PS, 1 worker, no metrics endpoints),
// returned once its chief is up.
absl::StatusOr<std::unique_ptr<Subprocess>> StartSleepingCluster(std::vector<std::string> flags) {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch")};
  for (std::string& f : flags) o.argv.push_back(std::move(f));
  for (const char* a : {"--ps", "1", "--workers", "1", "--"}) o.argv.push_back(a);
  for (const std::string& a : SleepingCluster()) o.argv.push_back(a);
  o.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto started = Subprocess::Start(std::move(o));
  if (!started.ok()) return started.status();
  if (absl::Status up = (*started)->WaitForLine("[chief] chief-up", kTimeout).status(); !up.ok()) {
    return absl::Status(up.code(), absl::StrCat(up.message(), "\n", (*started)->output()));
  }
  return started;
}

TEST(LauncherRestartTest, TaskOutOfRestartsEndsTheJobWithItsExitCode) {
  auto started = StartSleepingCluster({"--max_restarts", "2"});
  ASSERT_TRUE(started.ok()) << started.status();
  Subprocess& launcher = **started;

  // Restarts are counted per task: the PS's restart leaves the worker's two untouched.
  const pid_t ps = PidFrom(launcher, "started ps:0 pid", kTimeout);
  ASSERT_GT(ps, 1);
  ASSERT_EQ(kill(ps, SIGKILL), 0);
  ASSERT_GT(PidFrom(launcher, "restarted ps:0 (restart 1/2)", kTimeout), 1);

  pid_t worker = PidFrom(launcher, "started worker:0 pid", kTimeout);
  for (int restart = 1; restart <= 2; ++restart) {
    ASSERT_GT(worker, 1);
    ASSERT_EQ(kill(worker, SIGKILL), 0);
    const pid_t next =
        PidFrom(launcher, absl::StrCat("restarted worker:0 (restart ", restart, "/2)"), kTimeout);
    EXPECT_NE(next, worker);
    worker = next;
  }
  ASSERT_GT(worker, 1);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  auto code = launcher.Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << launcher.output();
  const std::string out = launcher.output();
  EXPECT_EQ(*code, 128 + SIGKILL) << out;
  EXPECT_NE(out.find("[launcher] worker:0 killed by SIGKILL; restart 1/2 in 0.5 s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[launcher] worker:0 killed by SIGKILL; restart 2/2 in 1.0 s"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("[launcher] ps:0 killed by SIGKILL; restart 1/2 in 0.5 s"), std::string::npos)
      << out;
  EXPECT_NE(
      out.find(
          "[launcher] worker:0 killed by SIGKILL with no restarts left (2 used); stopping the job "
          "with exit code 137"),
      std::string::npos)
      << out;
  EXPECT_EQ(out.find("restart 3/2"), std::string::npos) << out;
  // The chief's own exit, stopped by the launcher.
  EXPECT_NE(out.find("[launcher] chief exited with code 143"), std::string::npos) << out;
}

TEST(LauncherRestartTest, WithoutMaxRestartsADeadWorkerIsLeftToTheChief) {
  auto started = StartSleepingCluster({});
  ASSERT_TRUE(started.ok()) << started.status();
  Subprocess& launcher = **started;
  const pid_t worker = PidFrom(launcher, "started worker:0 pid", kTimeout);
  ASSERT_GT(worker, 1);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  ASSERT_TRUE(
      launcher.WaitForLine("worker:0 killed by SIGKILL; leaving it to the chief", kTimeout).ok())
      << launcher.output();
  EXPECT_TRUE(launcher.running()) << launcher.output();
  launcher.Signal(SIGTERM);
  auto code = launcher.Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGTERM) << launcher.output();
  EXPECT_EQ(launcher.output().find("restarted worker:0"), std::string::npos) << launcher.output();
}

// The tf.data service's tasks (--data_workers 1: a dispatcher and a data worker) are servers
// the job needs back like a PS: SIGKILLed, each is started again at its address.
TEST(LauncherRestartTest, DeadDispatcherAndDataWorkerAreRestarted) {
  auto started = StartSleepingCluster({"--max_restarts", "1", "--data_workers", "1"});
  ASSERT_TRUE(started.ok()) << started.status();
  Subprocess& launcher = **started;
  const pid_t dispatcher = PidFrom(launcher, "started dispatcher pid", kTimeout);
  ASSERT_GT(dispatcher, 1);
  ASSERT_EQ(kill(dispatcher, SIGKILL), 0);
  const pid_t dispatcher2 = PidFrom(launcher, "restarted dispatcher (restart 1/1)", kTimeout);
  EXPECT_NE(dispatcher2, dispatcher);
  const pid_t data_worker = PidFrom(launcher, "started data_worker:0 pid", kTimeout);
  ASSERT_GT(data_worker, 1);
  ASSERT_EQ(kill(data_worker, SIGKILL), 0);
  const pid_t data_worker2 = PidFrom(launcher, "restarted data_worker:0 (restart 1/1)", kTimeout);
  EXPECT_NE(data_worker2, data_worker);
  EXPECT_TRUE(launcher.running()) << launcher.output();
  launcher.Signal(SIGTERM);
  auto code = launcher.Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 128 + SIGTERM) << launcher.output();
  const std::string out = launcher.output();
  EXPECT_NE(out.find("[launcher] dispatcher killed by SIGKILL; restart 1/1 in 0.5 s"), std::string::npos) << out;
  EXPECT_NE(out.find("[launcher] data_worker:0 killed by SIGKILL; restart 1/1 in 0.5 s"), std::string::npos)
      << out;
}
#ifdef ASYNCPS_TEST_FASHION_MNIST
// The main job, smaller (1 PS, 2 workers, 3 epochs) under the launcher, with worker 1 SIGKILLed
// twice while it trains: restarted twice, the job ends 0 at the target. The target says the model
// trained (an untrained one scores ~0.10), not how well 3 epochs do: without kills, on a quiet
// machine, 3 epochs gave 0.848-0.872 (10 runs), and once with the kills under CI's load 0.837, so
// the earlier target of 0.85 failed now and then. Its output is the quiet main command's: the
// launcher's line per process, then only the chief's, and at the end the checkpoint and the command
// that resumes from it.
TEST(LauncherRestartTest, MainJobSurvivesTwoWorkerKillsAndSaysHowToResume) {
  constexpr double kTarget = 0.82;
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / absl::StrCat("launcher_restart_", getpid()))
          .string();
  std::filesystem::remove_all(dir);
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"),
            "--max_restarts",
            "2",
            "--ps",
            "1",
            "--workers",
            "2",
            "--",
            Bin("fashion_mnist"),
            "--epochs",
            "3",
            "--checkpoint_dir",
            dir};
  o.env = {{"ASYNCPS_METRICS_PORT", "0"}};
  auto started = Subprocess::Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  Subprocess& launcher = **started;

  pid_t worker = PidFrom(launcher, "started worker:1 pid", kTimeout);
  // Training runs: the chief's first progress line.
  ASSERT_TRUE(launcher.WaitForLine("[chief] epoch ", absl::Minutes(2)).ok()) << launcher.output();
  for (int restart = 1; restart <= 2; ++restart) {
    ASSERT_GT(worker, 1);
    ASSERT_EQ(kill(worker, SIGKILL), 0);
    // Seen only while the job runs: a launcher that is stopping restarts nothing.
    worker =
        PidFrom(launcher, absl::StrCat("restarted worker:1 (restart ", restart, "/2)"), kTimeout);
  }
  auto code = launcher.Wait(absl::Minutes(5));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << launcher.output();
  const std::string out = launcher.output();
  EXPECT_EQ(*code, 0) << out;
  EXPECT_GE(testutil::FinalAccuracy(out), kTarget) << out;
  EXPECT_NE(out.find("[launcher] worker:1 killed by SIGKILL; restart 2/2 in 1.0 s"),
            std::string::npos)
      << out;

  // The start: one launcher line per process, and nothing from the tasks but the chief's
  // before its first progress line (the tasks log at warn).
  for (const char* task : {"ps:0", "worker:0", "worker:1", "chief"}) {
    EXPECT_EQ(testutil::LinesWith(out, absl::StrCat("[launcher] started ", task, " pid ")).size(), 1u)
        << task << "\n"
        << out;
  }
  const std::string start = out.substr(0, out.find("[chief] epoch "));
  for (const std::string& line : testutil::LinesWith(start, "[")) {
    EXPECT_TRUE(absl::StartsWith(line, "[launcher] ") || absl::StartsWith(line, "[chief] "))
        << line << "\n"
        << out;
  }
  EXPECT_FALSE(testutil::LinesWith(out, "[chief] epoch ").empty());
  for (const std::string& line : testutil::LinesWith(out, "[chief] epoch ")) {
    EXPECT_TRUE(absl::StrContains(line, " examples/s  loss ") && absl::StrContains(line, "  ETA "))
        << line;
  }

  // The end: time and throughput, accuracy, the checkpoint, the command that resumes, the page.
  EXPECT_EQ(testutil::LinesWith(out, "[chief] trained ").size(), 1u) << out;
  const int64_t steps = NumberAfter(out, "[chief] trained ");
  ASSERT_EQ(steps, 3 * (60'000 / 128)) << out;
  EXPECT_NE(out.find(absl::StrCat("[chief] checkpoint ", dir, "/ckpt-", steps, "\n")),
            std::string::npos)
      << out;
  EXPECT_FALSE(testutil::LinesWith(out, "[chief] status page was http://127.0.0.1:").empty()) << out;
  const std::vector<std::string> resume =
      testutil::LinesWith(out, "[chief] resume (or train on with a larger --epochs): ");
  ASSERT_EQ(resume.size(), 1u) << out;
  const std::string command = resume[0].substr(resume[0].find("): ") + 3);
  EXPECT_TRUE(absl::StartsWith(command, Bin("asyncps_launch") + " --max_restarts 2 --ps 1"))
      << command;

  // The command it printed, run as printed, resumes from that checkpoint.
  Subprocess::Options again;
  again.argv = {"/bin/sh", "-c", command};
  again.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto second = Subprocess::Start(again);
  ASSERT_TRUE(second.ok()) << second.status();
  auto second_code = (*second)->Wait(absl::Minutes(2));
  ASSERT_TRUE(second_code.ok()) << second_code.status() << "\n" << (*second)->output();
  EXPECT_EQ(*second_code, 0) << (*second)->output();
  EXPECT_NE((*second)->output().find(absl::StrCat("[chief] resumed from checkpoint step ", steps)),
            std::string::npos)
      << (*second)->output();
  std::filesystem::remove_all(dir);
}
#endif  // ASYNCPS_TEST_FASHION_MNIST

}  // namespace
}  // namespace asyncps
