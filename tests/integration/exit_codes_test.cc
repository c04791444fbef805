// Exit codes of the real binaries under Kubeflow's restartPolicy ExitCode (core/exit_code.h):
// a bad configuration is permanent (1..127, the operator fails the job), a stop by SIGTERM —
// preemption, a node drained — is retryable (128 + SIGTERM, the operator restarts the replica).
#include <signal.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cluster_spec.h"
#include "core/exit_code.h"
#include "core/subprocess.h"
#include "core/test_temp_dir.h"
#include "deploy/blas_kernel.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

std::string Bin(const std::string& name) { return testutil::LocalCluster::BinaryPath(name); }

// Runs `argv` with `env` to its end; returns the exit code (-1 on a timeout) and its output.
int RunToEnd(std::vector<std::string> argv, std::map<std::string, std::string> env, std::string* output = nullptr) {
  Subprocess::Options o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  o.env.emplace("ASYNCPS_METRICS_PORT", "-1");
  auto proc = Subprocess::Start(std::move(o));
  EXPECT_TRUE(proc.ok()) << proc.status();
  if (!proc.ok()) return -1;
  auto code = (*proc)->Wait(kTimeout);
  if (output != nullptr) *output = (*proc)->output();
  EXPECT_TRUE(code.ok()) << code.status() << "\n" << (*proc)->output();
  return code.ok() ? *code : -1;
}

// A TF_CONFIG for one ps and one worker on free ports, for task `type` 0.
std::string TfConfig(TaskType type) {
  std::map<TaskType, std::vector<std::string>> jobs;
  for (TaskType t : {TaskType::kChief, TaskType::kPs, TaskType::kWorker}) {
    auto port = PickUnusedPort();
    EXPECT_TRUE(port.ok());
    jobs[t] = {absl::StrCat("127.0.0.1:", port.ok() ? *port : 1)};
  }
  auto spec = ClusterSpec::Create(jobs, type, 0);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec->ToTfConfig(type, 0);
}

void ExpectPermanent(int code, const std::string& what) {
  EXPECT_GE(code, 1) << what;
  EXPECT_LE(code, 127) << what;
}

TEST(ExitCodesTest, BadConfigurationIsPermanent) {
  std::string out;
  ExpectPermanent(RunToEnd({Bin("asyncps_ps")}, {{"TF_CONFIG", "{\"cluster\": {}}"}}, &out), "bad TF_CONFIG");
  EXPECT_NE(out.find("TF_CONFIG"), std::string::npos) << out;
  ExpectPermanent(RunToEnd({Bin("asyncps_ps")}, {{"TF_CONFIG", TfConfig(TaskType::kWorker)}}), "ps binary as a worker");
  ExpectPermanent(RunToEnd({Bin("asyncps_ps"), "--metrics_port=http"}, {{"TF_CONFIG", TfConfig(TaskType::kPs)}}),
                  "bad flag");
  ExpectPermanent(RunToEnd({Bin("asyncps_test_program")}, {{"TF_CONFIG", "not json"}}), "worker, bad TF_CONFIG");
  ExpectPermanent(RunToEnd({Bin("asyncps_test_program")}, {{"TF_CONFIG", TfConfig(TaskType::kWorker)},
                                                      {"ASYNCPS_LOG_LEVEL", "loud"}}),
                  "worker, bad log level");
  ExpectPermanent(RunToEnd({Bin("remote_value")}, {{"TF_CONFIG", "{}"}}), "chief, bad TF_CONFIG");
  ExpectPermanent(RunToEnd({Bin("asyncps_launch"), "--ps", "0", "--workers", "1", "--", "/bin/true"}, {}),
                  "launcher, bad count");
}

TEST(ExitCodesTest, SigtermedServersAreRetryable) {
  for (TaskType type : {TaskType::kPs, TaskType::kWorker}) {
    Subprocess::Options o;
    o.argv = {Bin(type == TaskType::kPs ? "asyncps_ps" : "asyncps_test_program")};
    o.env = {{"TF_CONFIG", TfConfig(type)}, {"ASYNCPS_METRICS_PORT", "-1"}, {"ASYNCPS_CLUSTER_TOKEN", "t"}};
    auto proc = Subprocess::Start(std::move(o));
    ASSERT_TRUE(proc.ok()) << proc.status();
    ASSERT_TRUE((*proc)->WaitForLine(" ready on ", kTimeout).ok()) << (*proc)->output();
    (*proc)->Signal(SIGTERM);
    auto code = (*proc)->Wait(kTimeout);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, ExitCodeForSignal(SIGTERM)) << TaskTypeName(type) << "\n" << (*proc)->output();
    EXPECT_TRUE(IsRetryableExitCode(*code));
    // It shut down by itself (logged), not killed by the signal's default action.
    EXPECT_NE((*proc)->output().find("shutting down"), std::string::npos) << (*proc)->output();
  }
}

// A stand-in program for the launcher: each task reads its role from TF_CONFIG.
std::vector<std::string> LaunchScript(const std::string& chief, const std::string& evaluator = "exit 0") {
  return {"/bin/sh", "-c",
          absl::StrCat("case \"$TF_CONFIG\" in *'\"type\":\"chief\"'*) ", chief, ";; *'\"type\":\"evaluator\"'*) ",
                       evaluator, ";; *) exec sleep 600;; esac")};
}

int Launch(std::vector<std::string> launcher_args, const std::vector<std::string>& program,
           std::string* output) {
  std::vector<std::string> argv = {Bin("asyncps_launch")};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  argv.push_back("--");
  argv.insert(argv.end(), program.begin(), program.end());
  return RunToEnd(argv, {}, output);
}

TEST(ExitCodesTest, LauncherPassesChiefCodeAndWaitsForEvaluator) {
  std::string out;
  // A chief killed by SIGTERM (preempted) stays retryable through the launcher.
  EXPECT_EQ(Launch({"--ps", "1", "--workers", "1"}, LaunchScript("kill -TERM $$"), &out), 143) << out;
  EXPECT_EQ(Launch({"--ps", "1", "--workers", "1"}, LaunchScript("exit 3"), &out), 3) << out;

  // The chief marks the end; the evaluator finishes after the chief has exited, and its
  // failure (after a successful chief) is the launcher's.
  testutil::TestDir temp("exit_codes");
  const std::string& dir = temp.path();
  const std::string chief = absl::StrCat("touch ", dir, "/final; exit 0");
  const std::string evaluator = absl::StrCat("while [ ! -e ", dir, "/final ]; do sleep 0.05; done; echo evaluated; exit ");
  EXPECT_EQ(Launch({"--ps", "1", "--workers", "1", "--evaluator"}, LaunchScript(chief, evaluator + "0"), &out), 0)
      << out;
  EXPECT_NE(out.find("[evaluator] evaluated"), std::string::npos) << out;
  EXPECT_NE(out.find("evaluator exited with code 0"), std::string::npos) << out;
  std::filesystem::remove(dir + "/final");
  EXPECT_EQ(Launch({"--ps", "1", "--workers", "1", "--evaluator"}, LaunchScript(chief, evaluator + "7"), &out), 7)
      << out;
}

TEST(ExitCodesTest, SigtermedLauncherIsRetryable) {
  Subprocess::Options o;
  o.argv = {Bin("asyncps_launch"), "--ps", "1", "--workers", "1", "--"};
  for (const std::string& a : LaunchScript("echo chief-up; exec sleep 600")) o.argv.push_back(a);
  auto proc = Subprocess::Start(std::move(o));
  ASSERT_TRUE(proc.ok()) << proc.status();
  ASSERT_TRUE((*proc)->WaitForLine("[chief] chief-up", kTimeout).ok()) << (*proc)->output();
  (*proc)->Signal(SIGTERM);
  auto code = (*proc)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 143) << (*proc)->output();
}

// Each task starts with the OpenBLAS kernels its CPU runs (deploy/blas_kernel.h), unless the
// launcher's environment names some: then that choice reaches every task unchanged.
TEST(ExitCodesTest, LauncherNamesOpenBlasKernelsUnlessTheEnvironmentDoes) {
  const std::vector<std::string> program =
      LaunchScript("echo \"blas=[$OPENBLAS_CORETYPE]\"; exit 0");
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", Bin("asyncps_launch"),
                                   "--ps", "1", "--workers", "1", "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  std::string out;
  ASSERT_EQ(RunToEnd(argv, {}, &out), 0) << out;
  const std::string chosen = deploy::OpenBlasCoreTypeFor(deploy::ThisCpuVectorFeatures());
  EXPECT_NE(out.find(absl::StrCat("[chief] blas=[", chosen, "]")), std::string::npos) << out;

  argv.erase(argv.begin(), argv.begin() + 3);  // the launcher itself, with the variable set
  ASSERT_EQ(RunToEnd(argv, {{"OPENBLAS_CORETYPE", "Prescott"}}, &out), 0) << out;
  EXPECT_NE(out.find("[chief] blas=[Prescott]"), std::string::npos) << out;
}

}  // namespace
}  // namespace asyncps
