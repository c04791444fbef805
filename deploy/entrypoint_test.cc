// deploy/entrypoint.sh run as a pod would run it: the pod's hostname and the StatefulSet's
// environment in, the TF_CONFIG the program sees out, parsed by the real ClusterSpec parser.
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/cluster_spec.h"
#include "core/subprocess.h"
#include "deploy/blas_kernel.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kEntrypoint = absl::StrCat(ASYNCPS_SOURCE_DIR, "/deploy/entrypoint.sh");

struct Outcome {
  int code = -1;
  std::string output;
};

// Runs the entrypoint with `env` (on top of a pod's: no TF_CONFIG) and a program that prints
// the TF_CONFIG it was given and its arguments.
Outcome RunEntrypoint(std::map<std::string, std::string> env) {
  Subprocess::Options o;
  o.argv = {kEntrypoint, "/bin/sh", "-c", "printf '%s\\n' \"$TF_CONFIG\"; echo \"args: $*\"", "sh", "--epochs=1",
            "two words"};
  o.env = std::move(env);
  o.env.emplace("TF_CONFIG", "");
  Outcome out;
  auto proc = Subprocess::Start(std::move(o));
  EXPECT_TRUE(proc.ok()) << proc.status();
  if (!proc.ok()) return out;
  auto code = (*proc)->Wait(absl::Seconds(30));
  EXPECT_TRUE(code.ok()) << code.status();
  out.code = code.ok() ? *code : -1;
  out.output = (*proc)->output();
  return out;
}

// The TF_CONFIG line the program printed, parsed.
absl::StatusOr<ClusterSpec> Parsed(const Outcome& out) {
  EXPECT_EQ(out.code, 0) << out.output;
  return ClusterSpec::FromTfConfig(out.output.substr(0, out.output.find('\n')));
}

std::map<std::string, std::string> Pod(const std::string& hostname) {
  return {{"HOSTNAME", hostname}, {"ASYNCPS_NUM_PS", "2"}, {"ASYNCPS_NUM_WORKERS", "3"}};
}

TEST(EntrypointTest, WorkerPodGetsTheWholeClusterAndItsOwnIndex) {
  Outcome out = RunEntrypoint(Pod("fmnist-worker-2"));
  auto spec = Parsed(out);
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << out.output;
  EXPECT_EQ(spec->task_type(), TaskType::kWorker);
  EXPECT_EQ(spec->task_index(), 2);
  EXPECT_EQ(spec->chief(), "fmnist-chief-0.fmnist-chief:2222");
  EXPECT_THAT(spec->ps(), ElementsAre("fmnist-ps-0.fmnist-ps:2222", "fmnist-ps-1.fmnist-ps:2222"));
  EXPECT_THAT(spec->workers(), ElementsAre("fmnist-worker-0.fmnist-worker:2222", "fmnist-worker-1.fmnist-worker:2222",
                                           "fmnist-worker-2.fmnist-worker:2222"));
  EXPECT_EQ(spec->self_address(), "fmnist-worker-2.fmnist-worker:2222");
  EXPECT_TRUE(spec->evaluator().empty());
  // The program is exec'ed with its arguments intact.
  EXPECT_THAT(out.output, HasSubstr("args: --epochs=1 two words"));
}

TEST(EntrypointTest, ChiefPsAndEvaluatorPods) {
  auto chief = Parsed(RunEntrypoint(Pod("fmnist-chief-0")));
  ASSERT_TRUE(chief.ok()) << chief.status();
  EXPECT_TRUE(chief->is_chief());
  EXPECT_EQ(chief->self_address(), "fmnist-chief-0.fmnist-chief:2222");

  auto ps = Parsed(RunEntrypoint(Pod("fmnist-ps-1")));
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_EQ(ps->task_type(), TaskType::kPs);
  EXPECT_EQ(ps->self_address(), "fmnist-ps-1.fmnist-ps:2222");

  // Like the operator: the evaluator gets the training cluster, without itself in it.
  auto evaluator = Parsed(RunEntrypoint(Pod("fmnist-evaluator-0")));
  ASSERT_TRUE(evaluator.ok()) << evaluator.status();
  EXPECT_EQ(evaluator->task_type(), TaskType::kEvaluator);
  EXPECT_EQ(evaluator->num_workers(), 3);
  EXPECT_EQ(evaluator->num_ps(), 2);
}

TEST(EntrypointTest, DashedJobNamePortSuffixAndNoChief) {
  std::map<std::string, std::string> env = Pod("big-run-2-worker-0");
  env["ASYNCPS_CHIEF"] = "0";
  env["ASYNCPS_PORT"] = "5000";
  env["ASYNCPS_DNS_SUFFIX"] = ".team.svc.cluster.local";
  auto spec = Parsed(RunEntrypoint(env));
  ASSERT_TRUE(spec.ok()) << spec.status();
  // Without a chief, worker 0 is the chief (TF_CONFIG's rule, applied by the parser).
  EXPECT_TRUE(spec->is_chief());
  EXPECT_TRUE(spec->chief().empty());
  EXPECT_EQ(spec->self_address(), "big-run-2-worker-0.big-run-2-worker.team.svc.cluster.local:5000");
  EXPECT_EQ(spec->ps()[1], "big-run-2-ps-1.big-run-2-ps.team.svc.cluster.local:5000");
}

TEST(EntrypointTest, OperatorsTfConfigPassesThroughUntouched) {
  const std::string injected =
      R"({"cluster":{"ps":["x-ps-0.ns.svc:2222"],"worker":["x-worker-0.ns.svc:2222"]},"task":{"type":"ps","index":0}})";
  std::map<std::string, std::string> env = {{"HOSTNAME", "not-a-statefulset-pod"}, {"TF_CONFIG", injected}};
  Outcome out = RunEntrypoint(env);
  EXPECT_EQ(out.code, 0) << out.output;
  EXPECT_EQ(out.output.substr(0, out.output.find('\n')), injected);
}

// Each pod's program starts with the OpenBLAS kernels its CPU runs (deploy/blas_kernel.h), as
// under asyncps_launch, unless the pod's environment names some: then they reach it unchanged.
TEST(EntrypointTest, ProgramGetsTheOpenBlasKernelsOfItsCpuUnlessThePodNamesThem) {
  const auto kernels_seen = [](std::map<std::string, std::string> env) {
    Subprocess::Options o;
    // env -u: the test's own environment may name kernels already (run_tests.sh exports them).
    o.argv = {"/usr/bin/env", "-u", "OPENBLAS_CORETYPE", kEntrypoint, "/bin/sh", "-c",
              "echo \"blas=[${OPENBLAS_CORETYPE-unset}]\""};
    if (env.count("OPENBLAS_CORETYPE") > 0) o.argv.erase(o.argv.begin(), o.argv.begin() + 3);
    o.env = std::move(env);
    o.env.emplace("TF_CONFIG", R"({"cluster":{"ps":["a:1"],"worker":["b:1"]},"task":{"type":"ps","index":0}})");
    auto proc = Subprocess::Start(std::move(o));
    EXPECT_TRUE(proc.ok()) << proc.status();
    if (!proc.ok()) return std::string();
    auto code = (*proc)->Wait(absl::Seconds(30));
    EXPECT_TRUE(code.ok() && *code == 0) << (*proc)->output();
    return (*proc)->output();
  };
  const std::string chosen = deploy::OpenBlasCoreTypeFor(deploy::ThisCpuVectorFeatures());
  EXPECT_THAT(kernels_seen({}), HasSubstr(absl::StrCat("blas=[", chosen.empty() ? "unset" : chosen, "]")));
  EXPECT_THAT(kernels_seen({{"OPENBLAS_CORETYPE", "Prescott"}}), HasSubstr("blas=[Prescott]"));
}

// kubectl scale on an --elastic job's worker StatefulSet: pod 4 of a job that started with 3
// workers gets a TF_CONFIG naming the workers up to itself (it then registers with the chief);
// a PS pod past the count is still a mistake.
TEST(EntrypointTest, ElasticWorkerPodPastTheStartingCountJoins) {
  std::map<std::string, std::string> env = Pod("fmnist-worker-4");
  env["ASYNCPS_ELASTIC"] = "1";
  Outcome out = RunEntrypoint(env);
  auto spec = Parsed(out);
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << out.output;
  EXPECT_EQ(spec->task_index(), 4);
  EXPECT_EQ(spec->num_workers(), 5);
  EXPECT_EQ(spec->self_address(), "fmnist-worker-4.fmnist-worker:2222");
  EXPECT_EQ(spec->chief(), "fmnist-chief-0.fmnist-chief:2222");
  std::map<std::string, std::string> ps = Pod("fmnist-ps-2");
  ps["ASYNCPS_ELASTIC"] = "true";
  Outcome refused = RunEntrypoint(ps);
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("ps 2 but the job has 2"));
}

TEST(EntrypointTest, ElasticPsPodPastTheStartingCountTakesASlot) {
  std::map<std::string, std::string> env = Pod("fmnist-ps-2");
  env["ASYNCPS_ELASTIC"] = "1";
  env["ASYNCPS_MAX_PS"] = "4";
  Subprocess::Options o;
  o.argv = {kEntrypoint, "/bin/sh", "-c", "printf '%s\\n' \"$TF_CONFIG\"; echo \"initial: $ASYNCPS_INITIAL_PS\""};
  o.env = env;
  o.env.emplace("TF_CONFIG", "");
  auto proc = Subprocess::Start(std::move(o));
  ASSERT_TRUE(proc.ok()) << proc.status();
  auto code = (*proc)->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.ok()) << code.status();
  Outcome out{*code, (*proc)->output()};
  auto spec = Parsed(out);
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << out.output;
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->task_index(), 2);
  EXPECT_EQ(spec->num_ps(), 4) << "every slot is listed";
  EXPECT_THAT(out.output, HasSubstr("initial: 2"));
  // A worker of the same job sees the same slots.
  std::map<std::string, std::string> worker = Pod("fmnist-worker-0");
  worker["ASYNCPS_ELASTIC"] = "1";
  worker["ASYNCPS_MAX_PS"] = "4";
  auto worker_spec = Parsed(RunEntrypoint(worker));
  ASSERT_TRUE(worker_spec.ok()) << worker_spec.status();
  EXPECT_EQ(worker_spec->num_ps(), 4);
  // Past the slots, fewer slots than the starting PS, or without ASYNCPS_ELASTIC: refused.
  std::map<std::string, std::string> past = env;
  past["HOSTNAME"] = "fmnist-ps-4";
  EXPECT_EQ(RunEntrypoint(past).code, 2);
  std::map<std::string, std::string> fewer = env;
  fewer["ASYNCPS_MAX_PS"] = "1";
  Outcome fewer_out = RunEntrypoint(fewer);
  EXPECT_EQ(fewer_out.code, 2);
  EXPECT_THAT(fewer_out.output, HasSubstr("ASYNCPS_MAX_PS must be a number >= ASYNCPS_NUM_PS"));
  std::map<std::string, std::string> fixed = env;
  fixed.erase("ASYNCPS_ELASTIC");
  Outcome fixed_out = RunEntrypoint(fixed);
  EXPECT_EQ(fixed_out.code, 2);
  EXPECT_THAT(fixed_out.output, HasSubstr("ASYNCPS_MAX_PS needs ASYNCPS_ELASTIC=1"));
}

TEST(EntrypointTest, BadSettingsArePermanentFailuresNamingTheProblem) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string message;
  };
  auto with = [](const std::string& host, const std::string& key, const std::string& value) {
    std::map<std::string, std::string> env = Pod(host);
    if (value.empty()) {
      env.erase(key);
    } else {
      env[key] = value;
    }
    return env;
  };
  const Case cases[] = {
      {Pod("fmnist-trainer-0"), "is not JOB-ROLE-N"},
      {Pod("fmnist-worker-3"), "worker 3 but the job has 3"},
      {Pod("fmnist-evaluator-1"), "evaluator 1"},
      {with("fmnist-ps-0", "ASYNCPS_NUM_PS", ""), "ASYNCPS_NUM_PS"},
      {with("fmnist-ps-0", "ASYNCPS_NUM_WORKERS", "two"), "ASYNCPS_NUM_WORKERS"},
      {with("fmnist-ps-0", "ASYNCPS_PORT", "70000"), "ASYNCPS_PORT"},
      {with("fmnist-chief-0", "ASYNCPS_CHIEF", "0"), "chief 0 but the job has 0"},
      {with("fmnist-ps-0", "ASYNCPS_DNS_SUFFIX", "svc"), "ASYNCPS_DNS_SUFFIX"},
  };
  for (const Case& c : cases) {
    Outcome out = RunEntrypoint(c.env);
    EXPECT_EQ(out.code, 2) << c.message << "\n" << out.output;
    EXPECT_THAT(out.output, HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace asyncps
