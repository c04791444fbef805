#include "core/cluster_spec.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The example from TensorFlow's ParameterServerStrategy docs: 1 chief, 2 ps, 3 workers,
// this task is ps 1.
constexpr char kTfDocsConfig[] = R"({
  "cluster": {
    "chief": ["chief.example.com:2222"],
    "ps": ["ps0.example.com:2222", "ps1.example.com:2222"],
    "worker": ["worker0.example.com:2222", "worker1.example.com:2222",
               "worker2.example.com:2222"]
  },
  "task": {"type": "ps", "index": 1}
})";

// What a Kubeflow TFJob operator puts in the environment of worker 1.
constexpr char kKubeflowConfig[] =
    R"({"cluster":{"master":["job-master-0:2222"],"ps":["job-ps-0:2222"],)"
    R"("worker":["job-worker-0:2222","job-worker-1:2222"]},)"
    R"("task":{"type":"worker","index":1},"environment":"cloud"})";

// Expects `config` to be rejected with InvalidArgument whose message contains `field`.
void ExpectInvalid(const std::string& config, const std::string& field) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(config);
  ASSERT_FALSE(spec.ok()) << "accepted: " << config;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_THAT(spec.status().message(), HasSubstr(field)) << config;
}

std::string WithTask(const std::string& cluster, const std::string& type, int index) {
  return R"({"cluster":)" + cluster + R"(,"task":{"type":")" + type + R"(","index":)" +
         std::to_string(index) + "}}";
}

constexpr char kSmallCluster[] = R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1","w:2"]})";

TEST(TaskTypeTest, Names) {
  EXPECT_EQ(TaskTypeName(TaskType::kChief), "chief");
  EXPECT_EQ(TaskTypeName(TaskType::kPs), "ps");
  EXPECT_EQ(TaskTypeName(TaskType::kWorker), "worker");
  EXPECT_EQ(TaskTypeName(TaskType::kEvaluator), "evaluator");
  for (TaskType t : {TaskType::kChief, TaskType::kPs, TaskType::kWorker, TaskType::kEvaluator}) {
    EXPECT_EQ(*TaskTypeFromName(TaskTypeName(t)), t);
  }
  EXPECT_EQ(*TaskTypeFromName("master"), TaskType::kChief);
  EXPECT_EQ(TaskTypeFromName("driver").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TaskTypeFromName("Worker").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseHostPortTest, ValidAndInvalid) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("localhost:2222", &host, &port).ok());
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, 2222);
  ASSERT_TRUE(ParseHostPort("10.0.0.1:1", &host, &port).ok());
  EXPECT_EQ(port, 1);
  ASSERT_TRUE(ParseHostPort("[::1]:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"", "localhost", "localhost:", ":2222", "h:0", "h:65536", "h:-1", "h:22a",
                          "h:99999999999", "::1:2222", "[::1]", "[::1]2222", "bad host:2222"}) {
    absl::Status s = ParseHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
}

TEST(ClusterSpecTest, TfDocsExample) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(kTfDocsConfig);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->task_index(), 1);
  EXPECT_FALSE(spec->is_chief());
  EXPECT_EQ(spec->num_ps(), 2);
  EXPECT_EQ(spec->num_workers(), 3);
  EXPECT_EQ(spec->chief(), "chief.example.com:2222");
  EXPECT_THAT(spec->ps(), ElementsAre("ps0.example.com:2222", "ps1.example.com:2222"));
  EXPECT_THAT(spec->workers(), ElementsAre("worker0.example.com:2222", "worker1.example.com:2222",
                                           "worker2.example.com:2222"));
  EXPECT_THAT(spec->evaluator(), IsEmpty());
  EXPECT_EQ(spec->self_address(), "ps1.example.com:2222");
  EXPECT_EQ(spec->TaskLabel(), "ps:1");
}

TEST(ClusterSpecTest, KubeflowTfJobWithMaster) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(kKubeflowConfig);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kWorker);
  EXPECT_EQ(spec->task_index(), 1);
  EXPECT_FALSE(spec->is_chief());
  EXPECT_EQ(spec->chief(), "job-master-0:2222");  // "master" is the legacy name of chief
  EXPECT_THAT(spec->ps(), ElementsAre("job-ps-0:2222"));
  EXPECT_EQ(spec->num_workers(), 2);
  EXPECT_EQ(spec->self_address(), "job-worker-1:2222");
  EXPECT_EQ(spec->TaskLabel(), "worker:1");
}

TEST(ClusterSpecTest, MasterTaskIsChief) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(
      R"({"cluster":{"master":["m:1"],"ps":["p:1"],"worker":["w:1"]},"task":{"type":"master","index":0}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->is_chief());
  EXPECT_EQ(spec->self_address(), "m:1");
  EXPECT_EQ(spec->TaskLabel(), "chief");
}

TEST(ClusterSpecTest, WithoutChiefWorkerZeroIsChief) {
  const std::string cluster = R"({"ps":["p:1"],"worker":["w0:1","w1:1"]})";
  absl::StatusOr<ClusterSpec> w0 = ClusterSpec::FromTfConfig(WithTask(cluster, "worker", 0));
  ASSERT_TRUE(w0.ok()) << w0.status();
  EXPECT_TRUE(w0->is_chief());
  EXPECT_EQ(w0->task_type(), TaskType::kChief);
  EXPECT_EQ(w0->task_index(), 0);
  EXPECT_THAT(w0->chief(), IsEmpty());
  EXPECT_THAT(w0->workers(), ElementsAre("w0:1", "w1:1"));  // worker 0 stays in the list
  EXPECT_EQ(w0->num_workers(), 2);
  EXPECT_EQ(w0->self_address(), "w0:1");

  absl::StatusOr<ClusterSpec> w1 = ClusterSpec::FromTfConfig(WithTask(cluster, "worker", 1));
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_FALSE(w1->is_chief());
  EXPECT_EQ(w1->task_type(), TaskType::kWorker);

  // With a chief entry, worker 0 is an ordinary worker.
  absl::StatusOr<ClusterSpec> with_chief = ClusterSpec::FromTfConfig(WithTask(kSmallCluster, "worker", 0));
  ASSERT_TRUE(with_chief.ok()) << with_chief.status();
  EXPECT_FALSE(with_chief->is_chief());
}

TEST(ClusterSpecTest, EvaluatorTask) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(WithTask(
      R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"],"evaluator":["e:1"]})", "evaluator", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kEvaluator);
  EXPECT_EQ(spec->evaluator(), "e:1");
  EXPECT_EQ(spec->self_address(), "e:1");
  EXPECT_EQ(spec->TaskLabel(), "evaluator");
}

TEST(ClusterSpecTest, DefaultPort) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(
      WithTask(R"({"chief":["c"],"ps":["p0","p1:3000"],"worker":["[::1]"]})", "ps", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->chief(), "c:2222");
  EXPECT_THAT(spec->ps(), ElementsAre("p0:2222", "p1:3000"));
  EXPECT_THAT(spec->workers(), ElementsAre("[::1]:2222"));
  EXPECT_EQ(spec->self_address(), "p0:2222");
}

TEST(ClusterSpecTest, MissingIndexDefaultsToZeroAndExtraFieldsAreIgnored) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(
      R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps"},"rpc_layer":"grpc"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->task_index(), 0);
}

TEST(ClusterSpecTest, Create) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(
      {{TaskType::kChief, {"127.0.0.1:5000"}},
       {TaskType::kPs, {"127.0.0.1:5001", "127.0.0.1:5002"}},
       {TaskType::kWorker, {"127.0.0.1:5003"}}},
      TaskType::kWorker, 0);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->self_address(), "127.0.0.1:5003");
  EXPECT_EQ(spec->num_ps(), 2);

  EXPECT_EQ(ClusterSpec::Create({{TaskType::kPs, {"p:1"}}, {TaskType::kWorker, {"w:1"}}}, TaskType::kPs, -1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterSpec::Create({{TaskType::kPs, {"p:1"}}, {TaskType::kWorker, {"w:1"}}}, TaskType::kChief, 0)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClusterSpecInvalidTest, MalformedJson) {
  ExpectInvalid("", "JSON");
  ExpectInvalid("{", "JSON");
  ExpectInvalid(R"({"cluster": {"ps": ["p:1"],}})", "JSON");
  ExpectInvalid("[1, 2]", "object");
  ExpectInvalid("42", "object");
}

TEST(ClusterSpecInvalidTest, WrongFieldTypes) {
  ExpectInvalid(R"({"cluster":["p:1"],"task":{"type":"ps","index":0}})", "cluster");
  ExpectInvalid(WithTask(R"({"ps":"p:1","worker":["w:1"]})", "ps", 0), "cluster.ps");
  ExpectInvalid(WithTask(R"({"ps":["p:1",7],"worker":["w:1"]})", "ps", 0), "cluster.ps[1]");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":"ps"})", "task");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":1,"index":0}})", "task.type");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps","index":"0"}})",
                "task.index");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps","index":0.5}})",
                "task.index");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps"},"environment":3})",
                "environment");
}

TEST(ClusterSpecInvalidTest, MissingClusterOrTask) {
  ExpectInvalid(R"({"task":{"type":"ps","index":0}})", "cluster");
  ExpectInvalid(R"({"cluster":{},"task":{"type":"ps","index":0}})", "cluster");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]}})", "task.type");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"index":0}})", "task.type");
}

TEST(ClusterSpecInvalidTest, NoPsOrNoWorker) {
  ExpectInvalid(WithTask(R"({"chief":["c:1"],"worker":["w:1"]})", "worker", 0), "cluster.ps");
  ExpectInvalid(WithTask(R"({"chief":["c:1"],"ps":[],"worker":["w:1"]})", "worker", 0), "cluster.ps");
  ExpectInvalid(WithTask(R"({"chief":["c:1"],"ps":["p:1"]})", "ps", 0), "cluster.worker");
}

TEST(ClusterSpecInvalidTest, TwoChiefs) {
  ExpectInvalid(WithTask(R"({"chief":["c:1","c:2"],"ps":["p:1"],"worker":["w:1"]})", "ps", 0), "chief");
  ExpectInvalid(WithTask(R"({"chief":["c:1"],"master":["m:1"],"ps":["p:1"],"worker":["w:1"]})", "ps", 0),
                "master");
  ExpectInvalid(WithTask(R"({"evaluator":["e:1","e:2"],"ps":["p:1"],"worker":["w:1"]})", "ps", 0),
                "evaluator");
}

TEST(ClusterSpecInvalidTest, UnknownJobAndTaskType) {
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:1"],"driver":["d:1"]})", "ps", 0), "driver");
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:1"]})", "driver", 0), "task.type");
}

TEST(ClusterSpecInvalidTest, TaskIndexOutOfRange) {
  ExpectInvalid(WithTask(kSmallCluster, "worker", 2), "task.index");
  ExpectInvalid(WithTask(kSmallCluster, "ps", 1), "task.index");
  ExpectInvalid(WithTask(kSmallCluster, "chief", 1), "task.index");
  ExpectInvalid(WithTask(kSmallCluster, "worker", -1), "task.index");
  ExpectInvalid(R"({"cluster":{"ps":["p:1"],"worker":["w:1"]},"task":{"type":"ps","index":99999999999}})",
                "task.index");
}

TEST(ClusterSpecTest, EvaluatorOutsideTheTrainingCluster) {
  // Kubeflow's TFJob operator: the training cluster, without the evaluator job.
  absl::StatusOr<ClusterSpec> kubeflow = ClusterSpec::FromTfConfig(WithTask(kSmallCluster, "evaluator", 0));
  ASSERT_TRUE(kubeflow.ok()) << kubeflow.status();
  EXPECT_EQ(kubeflow->task_type(), TaskType::kEvaluator);
  EXPECT_FALSE(kubeflow->is_chief());
  EXPECT_THAT(kubeflow->self_address(), IsEmpty());
  EXPECT_EQ(kubeflow->num_ps(), 1);
  // TensorFlow's side-car form: only the evaluator.
  absl::StatusOr<ClusterSpec> sidecar = ClusterSpec::FromTfConfig(WithTask(R"({"evaluator":["e:1"]})", "evaluator", 0));
  ASSERT_TRUE(sidecar.ok()) << sidecar.status();
  EXPECT_EQ(sidecar->self_address(), "e:1");
  EXPECT_EQ(sidecar->num_ps(), 0);
  EXPECT_EQ(sidecar->num_workers(), 0);
  // The evaluator is never a worker of the training cluster.
  absl::StatusOr<ClusterSpec> full = ClusterSpec::FromTfConfig(
      WithTask(R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"],"evaluator":["e:1"]})", "worker", 0));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_THAT(full->workers(), ::testing::ElementsAre("w:1"));
  ExpectInvalid(WithTask(kSmallCluster, "evaluator", 1), "task.index");
  ExpectInvalid(WithTask(R"({"evaluator":["e:1"]})", "worker", 0), "cluster.ps");
}

TEST(ClusterSpecInvalidTest, TaskTypeWithNoJob) {
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:1"]})", "chief", 0), "chief");
}

TEST(ClusterSpecInvalidTest, BadAddresses) {
  ExpectInvalid(WithTask(R"({"ps":["p:0"],"worker":["w:1"]})", "ps", 0), "cluster.ps[0]");
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:1","w:70000"]})", "ps", 0), "cluster.worker[1]");
  ExpectInvalid(WithTask(R"({"ps":["p:http"],"worker":["w:1"]})", "ps", 0), "p:http");
  ExpectInvalid(WithTask(R"({"ps":[""],"worker":["w:1"]})", "ps", 0), "cluster.ps[0]");
  ExpectInvalid(WithTask(R"({"ps":[":1"],"worker":["w:1"]})", "ps", 0), "cluster.ps[0]");
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:"]})", "ps", 0), "cluster.worker[0]");
}

TEST(ClusterSpecInvalidTest, DuplicateAddress) {
  ExpectInvalid(WithTask(R"({"ps":["h:1"],"worker":["h:1"]})", "ps", 0), "h:1");
  ExpectInvalid(WithTask(R"({"ps":["p:1","p:1"],"worker":["w:1"]})", "ps", 0), "more than one task");
  // The default port makes "h" and "h:2222" the same address.
  ExpectInvalid(WithTask(R"({"ps":["h"],"worker":["h:2222"]})", "ps", 0), "h:2222");
}

TEST(ClusterSpecFlagsTest, FlagsAlone) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags(
      "", {"--ps_hosts=p0:1,p1:1", "--worker_hosts", "w0:1,w1:1,w2:1", "--chief_host=c:1",
           "--job_name", "worker", "--task_index=2"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ps(), ElementsAre("p0:1", "p1:1"));
  EXPECT_THAT(spec->workers(), ElementsAre("w0:1", "w1:1", "w2:1"));
  EXPECT_EQ(spec->chief(), "c:1");
  EXPECT_EQ(spec->task_type(), TaskType::kWorker);
  EXPECT_EQ(spec->task_index(), 2);
}

TEST(ClusterSpecFlagsTest, BothFlagForms) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=ps", "--task_index=0"},
        std::vector<std::string>{"--ps_hosts", "p:1", "--worker_hosts", "w:1", "--job_name", "ps",
                                 "--task_index", "0"}}) {
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags("", args);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->task_type(), TaskType::kPs);
    EXPECT_EQ(spec->self_address(), "p:1");
  }
}

TEST(ClusterSpecFlagsTest, FlagsOverrideEnv) {
  // TF_CONFIG says worker 1; the flags make this process ps 0 of a different ps list.
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags(
      kKubeflowConfig, {"--job_name=ps", "--task_index", "1", "--ps_hosts=a:1,b:1"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->task_index(), 1);
  EXPECT_THAT(spec->ps(), ElementsAre("a:1", "b:1"));
  // Fields the flags do not mention still come from TF_CONFIG.
  EXPECT_EQ(spec->chief(), "job-master-0:2222");
  EXPECT_EQ(spec->num_workers(), 2);
  EXPECT_EQ(spec->self_address(), "b:1");
}

TEST(ClusterSpecFlagsTest, FlagsCompleteAPartialEnv) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags(
      R"({"cluster":{"ps":["p:1"],"worker":["w:1"]}})", {"--job_name=worker", "--task_index=0"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->is_chief());  // no chief: worker 0 acts as chief
}

TEST(ClusterSpecFlagsTest, OtherArgumentsAreIgnored) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags(
      "", {"--steps=100", "positional", "--ps_hosts=p:1", "-v", "--worker_hosts=w:1", "--job_name=ps",
           "--", "--job_name=worker"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kPs);  // nothing after "--" is parsed
}

TEST(ClusterSpecFlagsTest, Errors) {
  auto code = [](const std::string& tf_config, const std::vector<std::string>& args) {
    return ClusterSpec::FromTfConfigAndFlags(tf_config, args).status().code();
  };
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code("", {}), kInvalid);                                      // nothing at all
  EXPECT_EQ(code("", {"--job_name=ps"}), kInvalid);                       // no cluster
  EXPECT_EQ(code("", {"--ps_hosts=p:1", "--worker_hosts=w:1"}), kInvalid);  // no task type
  EXPECT_EQ(code("", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=boss"}), kInvalid);
  EXPECT_EQ(code("", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=ps", "--task_index=x"}), kInvalid);
  EXPECT_EQ(code("", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=ps", "--task_index=-1"}), kInvalid);
  EXPECT_EQ(code("", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=ps", "--task_index"}), kInvalid);
  EXPECT_EQ(code("{bad json", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--job_name=ps"}), kInvalid);
  EXPECT_EQ(code(kKubeflowConfig, {"--task_index=5"}), kInvalid);  // out of range after override

  absl::StatusOr<ClusterSpec> missing_value =
      ClusterSpec::FromTfConfigAndFlags("", {"--ps_hosts=p:1", "--job_name"});
  EXPECT_THAT(missing_value.status().message(), HasSubstr("--job_name"));
}

TEST(ClusterSpecFlagsTest, FromEnvOrFlagsReadsTfConfigAndLeavesArgvAlone) {
  ASSERT_EQ(setenv("TF_CONFIG", kTfDocsConfig, /*overwrite=*/1), 0);
  std::vector<std::string> storage = {"prog", "--task_index=0", "--steps", "10"};
  std::vector<char*> argv;
  for (std::string& s : storage) argv.push_back(s.data());
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromEnvOrFlags(static_cast<int>(argv.size()), argv.data());
  unsetenv("TF_CONFIG");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kPs);
  EXPECT_EQ(spec->task_index(), 0);  // the flag overrides TF_CONFIG's index 1
  EXPECT_EQ(std::string(argv[2]), "--steps");
  EXPECT_EQ(argv.size(), 4u);

  absl::StatusOr<ClusterSpec> none = ClusterSpec::FromEnvOrFlags(1, argv.data());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClusterSpecTest, ToTfConfigRoundTrip) {
  absl::StatusOr<ClusterSpec> base = ClusterSpec::FromTfConfig(WithTask(
      R"({"chief":["c:1"],"ps":["p0:1","p1:1"],"worker":["w0:1","w1:1","w2:1"],"evaluator":["e:1"]})", "ps",
      0));
  ASSERT_TRUE(base.ok()) << base.status();
  const std::vector<std::pair<TaskType, int>> tasks = {
      {TaskType::kChief, 0}, {TaskType::kPs, 0},     {TaskType::kPs, 1},       {TaskType::kWorker, 0},
      {TaskType::kWorker, 1}, {TaskType::kWorker, 2}, {TaskType::kEvaluator, 0}};
  for (const auto& [type, index] : tasks) {
    const std::string json = base->ToTfConfig(type, index);
    absl::StatusOr<ClusterSpec> back = ClusterSpec::FromTfConfig(json);
    ASSERT_TRUE(back.ok()) << back.status() << " for " << json;
    EXPECT_EQ(back->task_type(), type) << json;
    EXPECT_EQ(back->task_index(), index) << json;
    EXPECT_EQ(back->chief(), base->chief());
    EXPECT_EQ(back->ps(), base->ps());
    EXPECT_EQ(back->workers(), base->workers());
    EXPECT_EQ(back->evaluator(), base->evaluator());
    EXPECT_EQ(back->ToTfConfig(type, index), json);
  }
}

TEST(ClusterSpecTest, ToTfConfigWithoutChiefWritesWorkerZero) {
  absl::StatusOr<ClusterSpec> spec =
      ClusterSpec::FromTfConfig(WithTask(R"({"ps":["p:1"],"worker":["w0:1","w1:1"]})", "worker", 0));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string json = spec->ToTfConfig(spec->task_type(), spec->task_index());
  EXPECT_THAT(json, HasSubstr(R"("type":"worker")"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("chief")));
  absl::StatusOr<ClusterSpec> back = ClusterSpec::FromTfConfig(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->is_chief());
  EXPECT_EQ(back->self_address(), "w0:1");
}

TEST(ClusterSpecTest, DataServiceTasksParseAndRoundTrip) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfig(WithTask(
      R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"],"dispatcher":["d:1"],"data_worker":["x0:1","x1:1"]})",
      "data_worker", 1));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kDataWorker);
  EXPECT_EQ(spec->self_address(), "x1:1");
  EXPECT_EQ(spec->TaskLabel(), "data_worker:1");
  EXPECT_EQ(spec->dispatcher(), "d:1");
  EXPECT_THAT(spec->data_workers(), ElementsAre("x0:1", "x1:1"));
  absl::StatusOr<ClusterSpec> back = ClusterSpec::FromTfConfig(spec->ToTfConfig(TaskType::kDispatcher, 0));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->task_type(), TaskType::kDispatcher);
  EXPECT_EQ(back->self_address(), "d:1");
  EXPECT_EQ(back->data_workers(), spec->data_workers());
  ExpectInvalid(WithTask(R"({"ps":["p:1"],"worker":["w:1"],"dispatcher":["d:1","e:1"]})", "worker", 0),
                "at most one dispatcher");
}

// TensorFlow's "the dispatcher may run in the coordinator": data workers and no dispatcher
// task put the dispatcher at the chief's address (worker 0's when it is the chief).
TEST(ClusterSpecTest, DispatcherInTheChiefWhenNoneIsListed) {
  absl::StatusOr<ClusterSpec> listed = ClusterSpec::FromTfConfig(WithTask(
      R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"],"dispatcher":["d:1"],"data_worker":["x0:1"]})", "chief", 0));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_FALSE(listed->dispatcher_in_chief());
  EXPECT_EQ(listed->data_service_dispatcher(), "d:1");
  absl::StatusOr<ClusterSpec> in_chief = ClusterSpec::FromTfConfig(
      WithTask(R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"],"data_worker":["x0:1"]})", "data_worker", 0));
  ASSERT_TRUE(in_chief.ok()) << in_chief.status();
  EXPECT_TRUE(in_chief->dispatcher_in_chief());
  EXPECT_EQ(in_chief->dispatcher(), "");
  EXPECT_EQ(in_chief->data_service_dispatcher(), "c:1");
  absl::StatusOr<ClusterSpec> worker_zero = ClusterSpec::FromTfConfig(
      WithTask(R"({"ps":["p:1"],"worker":["w0:1","w1:1"],"data_worker":["x0:1"]})", "worker", 1));
  ASSERT_TRUE(worker_zero.ok()) << worker_zero.status();
  EXPECT_EQ(worker_zero->data_service_dispatcher(), "w0:1");
  absl::StatusOr<ClusterSpec> none =
      ClusterSpec::FromTfConfig(WithTask(R"({"chief":["c:1"],"ps":["p:1"],"worker":["w:1"]})", "chief", 0));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->dispatcher_in_chief());
  EXPECT_EQ(none->data_service_dispatcher(), "");
}

TEST(ClusterSpecFlagsTest, DataServiceFlags) {
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromTfConfigAndFlags(
      "", {"--ps_hosts=p:1", "--worker_hosts=w:1", "--dispatcher_host=d:1", "--data_worker_hosts=x0:1,x1:1",
           "--job_name=dispatcher"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->task_type(), TaskType::kDispatcher);
  EXPECT_EQ(spec->self_address(), "d:1");
  EXPECT_EQ(spec->num_data_workers(), 2);
}

}  // namespace
}  // namespace asyncps
