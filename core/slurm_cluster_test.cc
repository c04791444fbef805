#include "core/slurm_cluster.h"

#include <string>
#include <vector>

#include "core/cluster_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kNodes[] = "SLURM_STEP_NODELIST";
constexpr char kTasks[] = "SLURM_STEP_TASKS_PER_NODE";

std::vector<std::string> Nodes(const std::string& list) {
  absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodeList(list, kNodes);
  EXPECT_TRUE(hosts.ok()) << hosts.status();
  return hosts.ok() ? *hosts : std::vector<std::string>{};
}

std::vector<int> Tasks(const std::string& list) {
  absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(list, kTasks);
  EXPECT_TRUE(counts.ok()) << counts.status();
  return counts.ok() ? *counts : std::vector<int>{};
}

// Expects `status` to be InvalidArgument with every one of `parts` in its message.
void ExpectInvalid(const absl::Status& status, const std::vector<std::string>& parts,
                   const std::string& input) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << input << ": " << status;
  for (const std::string& part : parts) {
    EXPECT_THAT(status.message(), HasSubstr(part)) << input;
  }
}

TEST(SlurmNodeListTest, PlainNames) {
  EXPECT_THAT(Nodes("n1"), ElementsAre("n1"));
  EXPECT_THAT(Nodes("alpha,beta.cluster,gpu-3_b"), ElementsAre("alpha", "beta.cluster", "gpu-3_b"));
  // Order is Slurm's and nothing is deduplicated (ClusterSpec rejects duplicate addresses).
  EXPECT_THAT(Nodes("b,a,b"), ElementsAre("b", "a", "b"));
}

TEST(SlurmNodeListTest, BracketRangesKeepZeroPadding) {
  EXPECT_THAT(Nodes("node[01-03,07]"), ElementsAre("node01", "node02", "node03", "node07"));
  EXPECT_THAT(Nodes("n[8-10]"), ElementsAre("n8", "n9", "n10"));
  EXPECT_THAT(Nodes("n[08-10]"), ElementsAre("n08", "n09", "n10"));
  EXPECT_THAT(Nodes("n[007]"), ElementsAre("n007"));
  EXPECT_THAT(Nodes("[1-2]"), ElementsAre("1", "2"));
}

TEST(SlurmNodeListTest, SeveralGroupsAndMixedItems) {
  EXPECT_THAT(Nodes("node[01-03,07],gpu-a[1-2]"),
              ElementsAre("node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"));
  EXPECT_THAT(Nodes("login,n[1-2],m5,o[3-4,6]"),
              ElementsAre("login", "n1", "n2", "m5", "o3", "o4", "o6"));
  // Text after a bracket, and two brackets in one name (leftmost varies slowest).
  EXPECT_THAT(Nodes("n[1-2]-ib"), ElementsAre("n1-ib", "n2-ib"));
  EXPECT_THAT(Nodes("r[1-2]n[09-10]"), ElementsAre("r1n09", "r1n10", "r2n09", "r2n10"));
}

TEST(SlurmNodeListTest, LargestListIsAccepted) { EXPECT_EQ(Nodes("n[1-65536]").size(), 65536u); }

TEST(SlurmNodeListTest, MalformedListsNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"n[1-3", "'[' without a matching ']'"},
      {"n1-3]", "']' without a matching '['"},
      {"n[1-[2]]", "'[' inside brackets"},
      {"n[5-3]", "reversed range '5-3'"},
      {"n[]", "empty brackets"},
      {"n[a-b]", "bad range 'a-b'"},
      {"n[1-2-3]", "bad range '1-2-3'"},
      {"n[1,,2]", "bad range ''"},
      {"n[-2]", "bad range '-2'"},
      {"n1,,n2", "empty node name"},
      {"n1,", "empty node name"},
      {",n1", "empty node name"},
      {"n 1", "character ' '"},
      {"n1;rm -rf", "character ';'"},
      {"host:22", "character ':'"},
      {"\x01", "character '\\001'"},
      {"n[1-1234567890]", "at most 9 digits"},
      {"n[0-65536]", "more than 65536 nodes"},
      {"a[1-1000]b[1-1000]", "more than 65536 nodes"},
      {"n[1-65536],extra", "more than 65536 nodes"},
      // 65536 names times a long prefix would be gigabytes: the pattern is refused first.
      {"n[1-65536]" + std::string(130000, 'x'), "longer than 253 characters"},
  };
  for (const auto& [list, why] : cases) {
    ExpectInvalid(ExpandSlurmNodeList(list, kNodes).status(), {kNodes, why}, list);
  }
  // A runaway value is cut short in the message.
  const std::string garbage(10000, '[');
  absl::Status status = ExpandSlurmNodeList(garbage, kNodes).status();
  ExpectInvalid(status, {kNodes, "10000 characters"}, "10000 x '['");
  EXPECT_LT(status.message().size(), 300u);
}

TEST(SlurmTasksPerNodeTest, CountsAndRepeats) {
  EXPECT_THAT(Tasks("4"), ElementsAre(4));
  EXPECT_THAT(Tasks("1,2,3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Tasks("2(x3)"), ElementsAre(2, 2, 2));
  EXPECT_THAT(Tasks("2(x3),1"), ElementsAre(2, 2, 2, 1));
  EXPECT_THAT(Tasks("3,1(x2),2(x1)"), ElementsAre(3, 1, 1, 2));
}

TEST(SlurmTasksPerNodeTest, MalformedListsNameTheVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {"x", "bad entry 'x'"},
      {"2,", "bad entry ''"},
      {"2(x)", "bad entry '2(x)'"},
      {"2(x3", "bad entry '2(x3'"},
      {"2x3", "bad entry '2x3'"},
      {"2(3)", "bad entry '2(3)'"},
      {"-1", "bad entry '-1'"},
      {"2 ", "bad entry '2 '"},
      {"0", "zero tasks"},
      {"2(x0)", "zero tasks"},
      {"2(x40000)", "more than 65536 tasks"},
      {"999999999(x999999999)", "more than 65536 tasks"},
      {"1(x1234567890)", "bad entry"},
  };
  for (const auto& [list, why] : cases) {
    ExpectInvalid(ExpandSlurmTasksPerNode(list, kTasks).status(), {kTasks, why}, list);
  }
}

// What srun puts in the environment of rank `rank` of a step on `nodes`.
EnvMap Step(const std::string& nodes, const std::string& tasks_per_node, int rank) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_STEP_NODELIST", nodes},
          {"SLURM_STEP_TASKS_PER_NODE", tasks_per_node}};
}

TEST(SlurmResolveTest, DefaultLayoutIsChiefThenPsThenWorkers) {
  SlurmLayout layout;
  layout.ps = 2;
  // Two nodes with three tasks each, as `srun --nodes=2 --ntasks-per-node=3` starts them.
  const std::vector<std::pair<TaskType, int>> want = {
      {TaskType::kChief, 0},  {TaskType::kPs, 0},     {TaskType::kPs, 1},
      {TaskType::kWorker, 0}, {TaskType::kWorker, 1}, {TaskType::kWorker, 2}};
  for (int rank = 0; rank < 6; ++rank) {
    absl::StatusOr<SlurmCluster> c =
        ResolveSlurmCluster(Step("node[01-02]", "3(x2)", rank), layout);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_THAT(c->jobs[TaskType::kChief], ElementsAre("node01:8888"));
    EXPECT_THAT(c->jobs[TaskType::kPs], ElementsAre("node01:8889", "node01:8890"));
    EXPECT_THAT(c->jobs[TaskType::kWorker],
                ElementsAre("node02:8888", "node02:8889", "node02:8890"));
    EXPECT_EQ(c->jobs.count(TaskType::kEvaluator), 0u);
    EXPECT_EQ(c->task_type, want[rank].first) << rank;
    EXPECT_EQ(c->task_index, want[rank].second) << rank;
  }
}

TEST(SlurmResolveTest, UnevenTasksPerNodeAndExplicitLayout) {
  SlurmLayout layout{.chief = 0, .evaluator = 1, .ps = 1, .workers = 2, .port_base = 7000};
  EnvMap env = Step("a[1-2],gpu7", "2,1(x2)", 3);
  env["SLURM_STEP_NUM_TASKS"] = "4";
  env["SLURMD_NODENAME"] = "gpu7";
  env["SLURM_LOCALID"] = "0";
  absl::StatusOr<SlurmCluster> c = ResolveSlurmCluster(env, layout);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->jobs.count(TaskType::kChief), 0u);
  EXPECT_THAT(c->jobs[TaskType::kEvaluator], ElementsAre("a1:7000"));
  EXPECT_THAT(c->jobs[TaskType::kPs], ElementsAre("a1:7001"));
  EXPECT_THAT(c->jobs[TaskType::kWorker], ElementsAre("a2:7000", "gpu7:7000"));
  EXPECT_EQ(c->task_type, TaskType::kWorker);
  EXPECT_EQ(c->task_index, 1);
}

TEST(SlurmResolveTest, StepVariablesWinOverJobVariables) {
  SlurmLayout layout;
  // The allocation has three nodes; this step runs on two of them.
  EnvMap env = {{"SLURM_PROCID", "2"},
                {"SLURM_JOB_NODELIST", "n[1-3]"},
                {"SLURM_TASKS_PER_NODE", "4(x3)"},
                {"SLURM_NTASKS", "12"},
                {"SLURM_STEP_NODELIST", "n[2-3]"},
                {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                {"SLURM_STEP_NUM_TASKS", "4"}};
  absl::StatusOr<SlurmCluster> c = ResolveSlurmCluster(env, layout);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->jobs[TaskType::kWorker], ElementsAre("n3:8888", "n3:8889"));
  EXPECT_EQ(c->task_type, TaskType::kWorker);
  EXPECT_EQ(c->task_index, 0);

  // Without the step variables the job's are used.
  for (const char* name :
       {"SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS"}) {
    env.erase(name);
  }
  c = ResolveSlurmCluster(env, layout);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->jobs[TaskType::kWorker].size(), 10u);
  EXPECT_EQ(c->jobs[TaskType::kWorker].back(), "n3:8891");
}

TEST(SlurmResolveTest, MissingOrInconsistentEnvironment) {
  SlurmLayout layout;
  auto resolve = [&layout](EnvMap env) { return ResolveSlurmCluster(env, layout).status(); };
  EnvMap env = Step("n[1-2]", "2(x2)", 0);

  EnvMap no_rank = env;
  no_rank.erase("SLURM_PROCID");
  ExpectInvalid(resolve(no_rank), {"SLURM_PROCID is not set", "srun"}, "no rank");
  EnvMap no_nodes = env;
  no_nodes.erase("SLURM_STEP_NODELIST");
  ExpectInvalid(resolve(no_nodes), {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, "no nodes");
  EnvMap no_tasks = env;
  no_tasks.erase("SLURM_STEP_TASKS_PER_NODE");
  ExpectInvalid(resolve(no_tasks), {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"},
                "no tasks");

  ExpectInvalid(resolve(Step("n[1-2]", "2(x2)", 4)), {"SLURM_PROCID='4'", "only 4 tasks"}, "rank");
  EnvMap bad_rank = env;
  bad_rank["SLURM_PROCID"] = "-1";
  ExpectInvalid(resolve(bad_rank), {"SLURM_PROCID='-1'"}, "negative rank");
  ExpectInvalid(resolve(Step("n[1-3]", "2(x2)", 0)),
                {"SLURM_STEP_TASKS_PER_NODE", "covers 2 nodes", "SLURM_STEP_NODELIST", "lists 3"},
                "node count");
  ExpectInvalid(resolve(Step("n[3-1]", "2(x2)", 0)), {"SLURM_STEP_NODELIST", "reversed"},
                "bad node list");
  ExpectInvalid(resolve(Step("n[1-2]", "2(x2", 0)), {"SLURM_STEP_TASKS_PER_NODE", "bad entry"},
                "bad tasks");
  EnvMap bad_count = env;
  bad_count["SLURM_STEP_NUM_TASKS"] = "5";
  ExpectInvalid(resolve(bad_count), {"SLURM_STEP_NUM_TASKS='5'", "adds up to 4"}, "count");

  // Tasks not where block distribution puts them (srun --distribution=cyclic).
  EnvMap cyclic = Step("n[1-2]", "2(x2)", 1);
  cyclic["SLURMD_NODENAME"] = "n2";
  ExpectInvalid(resolve(cyclic), {"SLURMD_NODENAME='n2'", "n1", "--distribution=block"}, "node");
  cyclic = Step("n[1-2]", "2(x2)", 1);
  cyclic["SLURM_LOCALID"] = "0";
  ExpectInvalid(resolve(cyclic), {"SLURM_LOCALID='0'", "--distribution=block"}, "local id");
}

TEST(SlurmResolveTest, LayoutMustFitTheStep) {
  const EnvMap env = Step("n[1-2]", "2(x2)", 0);
  auto resolve = [&env](SlurmLayout layout) { return ResolveSlurmCluster(env, layout).status(); };
  ExpectInvalid(resolve({.ps = 3}), {"does not fit the step's 4 tasks", "--slurm_ps"},
                "no workers");
  ExpectInvalid(resolve({.ps = 1, .workers = 1}), {"1 workers", "4 tasks"}, "too few");
  ExpectInvalid(resolve({.ps = 1, .workers = 5}), {"5 workers", "4 tasks"}, "too many");
  ExpectInvalid(resolve({.ps = 0}), {"--slurm_ps must be in 1..65536, got 0"}, "ps 0");
  ExpectInvalid(resolve({.workers = 0}), {"--slurm_workers"}, "workers 0");
  ExpectInvalid(resolve({.chief = 2}), {"--slurm_chief must be 0 or 1"}, "chief 2");
  ExpectInvalid(resolve({.evaluator = 2}), {"--slurm_evaluator must be 0 or 1"}, "evaluator 2");
  ExpectInvalid(resolve({.port_base = 0}), {"--slurm_port_base"}, "port 0");
  ExpectInvalid(resolve({.port_base = 65535}), {"--slurm_port_base 65535", "past port 65535"},
                "port overflow");
  EXPECT_TRUE(resolve({.port_base = 65534}).ok());
}

// The Slurm source as ClusterSpec sees it, combined with TF_CONFIG and the cluster flags.
TEST(ClusterSpecSlurmTest, SlurmFlagsResolveTheStep) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromEnvAndFlags(Step("n[1-2]", "3(x2)", 2), {"--slurm_ps", "2", "--steps=9"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->chief(), "n1:8888");
  EXPECT_THAT(spec->ps(), ElementsAre("n1:8889", "n1:8890"));
  EXPECT_EQ(spec->num_workers(), 3);
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->self_address(), "n1:8890");
}

TEST(ClusterSpecSlurmTest, WithoutSlurmFlagsTheEnvironmentIsIgnored) {
  EnvMap env = Step("n[1-2]", "3(x2)", 2);
  env["TF_CONFIG"] = R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps"}})";
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromEnvAndFlags(env, {});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps(), ElementsAre("p:1"));
}

TEST(ClusterSpecSlurmTest, SourcesUnionWithFlagsOverSlurmOverTfConfig) {
  EnvMap env = Step("n[1-2]", "2(x2)", 3);
  // TF_CONFIG gives an evaluator outside the step and a ps list Slurm replaces.
  env["TF_CONFIG"] = R"({"cluster":{"ps":["old:1"],"evaluator":["eval:1"]},)"
                     R"("task":{"type":"evaluator","index":0}})";
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromEnvAndFlags(env, {"--slurm_ps=1"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->evaluator(), "eval:1");           // only TF_CONFIG names it: kept
  EXPECT_THAT(spec->ps(), ElementsAre("n1:8889"));  // Slurm's job replaces TF_CONFIG's
  EXPECT_EQ(spec->task_type(), TaskType::kWorker);  // Slurm's task beats TF_CONFIG's
  EXPECT_EQ(spec->task_index(), 1);

  // Explicit flags beat both.
  spec = ClusterSpec::FromEnvAndFlags(
      env, {"--slurm_ps=1", "--ps_hosts=x:1", "--job_name=ps", "--task_index=0"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps(), ElementsAre("x:1"));
  EXPECT_EQ(spec->self_address(), "x:1");
  EXPECT_THAT(spec->workers(), ElementsAre("n2:8888", "n2:8889"));
}

TEST(ClusterSpecSlurmTest, WithoutAChiefWorkerZeroLeads) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromEnvAndFlags(Step("n1", "3", 1), {"--slurm_chief=0", "--slurm_ps=1"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->chief(), IsEmpty());
  EXPECT_TRUE(spec->is_chief());
  EXPECT_EQ(spec->self_address(), "n1:8889");
}

TEST(ClusterSpecSlurmTest, Errors) {
  auto status = [](const EnvMap& env, const std::vector<std::string>& args) {
    return ClusterSpec::FromEnvAndFlags(env, args).status();
  };
  const EnvMap env = Step("n[1-2]", "2(x2)", 0);
  ExpectInvalid(status(env, {"--slurm_ps=x"}), {"--slurm_ps must be a non-negative integer"}, "x");
  ExpectInvalid(status(env, {"--slurm_workers=-1"}), {"--slurm_workers"}, "-1");
  ExpectInvalid(status(env, {"--slurm_ps"}), {"--slurm_ps needs a value"}, "no value");
  ExpectInvalid(status({}, {"--slurm_ps=1"}), {"SLURM_PROCID is not set"}, "outside Slurm");
  ExpectInvalid(status(Step("n[1-2", "2(x2)", 0), {"--slurm_ps=1"}),
                {"SLURM_STEP_NODELIST", "without a matching ']'"}, "bad list");
  // Two tasks of a node listed twice would share an address.
  ExpectInvalid(
      status(Step("n1,n1", "1(x2)", 0), {"--slurm_ps=1", "--slurm_chief=0", "--slurm_workers=1"}),
      {"n1:8888", "more than one task"}, "duplicate node");
}

}  // namespace
}  // namespace asyncps
