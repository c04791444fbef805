// deploy/k8s/*.yaml, checked offline. kubectl (Debian's kubernetes-client) cannot dry-run
// `apply` without an API server (it needs discovery), but `kubectl label --local` parses every
// document, decodes the built-in kinds into their typed structs (a wrong type fails) and prints
// them as JSON. On that JSON this test checks what a server would not: the manifests agree with
// each other and with deploy/entrypoint.sh — every pod of the StatefulSets and Jobs, run through
// the entrypoint with its own name and environment, gets a TF_CONFIG that ClusterSpec parses
// into the cluster the replica counts describe; and every pod serves /metrics where
// podmonitor.yaml scrapes it.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using nlohmann::json;

const std::string kSource = ASYNCPS_SOURCE_DIR;

// The binaries deploy/Dockerfile installs in /opt/asyncps/bin.
const std::set<std::string> kImageBinaries = {"/opt/asyncps/bin/asyncps_ps", "/opt/asyncps/bin/fashion_mnist",
                                              "/opt/asyncps/bin/asyncps_launch"};

bool HaveKubectl() { return std::system("command -v kubectl >/dev/null 2>&1") == 0; }

// Every object of `file` as kubectl decoded it.
std::vector<json> Decode(const std::string& file) {
  Subprocess::Options o;
  o.argv = {"kubectl", "label", "--local", "-f", absl::StrCat(kSource, "/deploy/k8s/", file), "asyncps/checked=yes",
            "-o", "json"};
  auto proc = Subprocess::Start(std::move(o));
  EXPECT_TRUE(proc.ok()) << proc.status();
  if (!proc.ok()) return {};
  auto code = (*proc)->Wait(absl::Seconds(60));
  EXPECT_TRUE(code.ok() && *code == 0) << file << ": kubectl failed:\n" << (*proc)->output();
  std::istringstream in((*proc)->output());
  std::vector<json> objects;
  while ((in >> std::ws).peek() != EOF) {
    json j;
    try {
      in >> j;
    } catch (const json::exception& e) {
      ADD_FAILURE() << file << ": " << e.what() << "\n" << (*proc)->output();
      break;
    }
    objects.push_back(std::move(j));
  }
  return objects;
}

std::map<std::string, json> ByKindAndName(const std::vector<json>& objects) {
  std::map<std::string, json> out;
  for (const json& o : objects) out[absl::StrCat(o["kind"].get<std::string>(), "/", o["metadata"]["name"].get<std::string>())] = o;
  return out;
}

// name=value environment of a container (valueFrom entries are the pod's secrets: skipped).
std::map<std::string, std::string> PlainEnv(const json& container) {
  std::map<std::string, std::string> env;
  for (const json& e : container.value("env", json::array())) {
    if (e.contains("value")) env[e["name"].get<std::string>()] = e["value"].get<std::string>();
  }
  return env;
}

absl::StatusOr<ClusterSpec> TfConfigOfPod(const std::string& hostname, std::map<std::string, std::string> env) {
  Subprocess::Options o;
  o.argv = {kSource + "/deploy/entrypoint.sh", "/bin/sh", "-c", "printf '%s' \"$TF_CONFIG\""};
  o.env = std::move(env);
  o.env["HOSTNAME"] = hostname;
  o.env["TF_CONFIG"] = "";
  auto proc = Subprocess::Start(std::move(o));
  if (!proc.ok()) return proc.status();
  auto code = (*proc)->Wait(absl::Seconds(30));
  if (!code.ok()) return code.status();
  if (*code != 0) return absl::InternalError(absl::StrCat("entrypoint exited ", *code, ": ", (*proc)->output()));
  return ClusterSpec::FromTfConfig((*proc)->output());
}

TEST(K8sManifestsTest, TfJobRunsEveryRoleUnderTheOperatorsContract) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  auto objects = ByKindAndName(Decode("tfjob.yaml"));
  ASSERT_EQ(objects.size(), 1u);
  const json& job = objects.at("TFJob/fmnist");
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v1");
  const json& replicas = job["spec"]["tfReplicaSpecs"];
  std::vector<std::string> checkpoint_dirs;
  for (const char* role : {"Chief", "PS", "Worker", "Evaluator"}) {
    SCOPED_TRACE(role);
    ASSERT_TRUE(replicas.contains(role));
    const json& spec = replicas[role];
    EXPECT_EQ(spec["restartPolicy"], "ExitCode");
    const json& container = spec["template"]["spec"]["containers"][0];
    EXPECT_EQ(container["name"], "tensorflow") << "the operator injects TF_CONFIG into this container only";
    EXPECT_EQ(container["ports"][0]["containerPort"], 2222);
    EXPECT_EQ(container["ports"][0]["name"], "tfjob-port");
    EXPECT_TRUE(kImageBinaries.count(container["args"][0].get<std::string>())) << container["args"][0];
    for (const json& a : container["args"]) {
      if (absl::StartsWith(a.get<std::string>(), "--checkpoint_dir=")) checkpoint_dirs.push_back(a);
    }
  }
  EXPECT_EQ(replicas["Chief"]["replicas"], 1);
  EXPECT_EQ(replicas["Evaluator"]["replicas"], 1);
  // The evaluator follows the directory the chief writes.
  ASSERT_EQ(checkpoint_dirs.size(), 2u);
  EXPECT_EQ(checkpoint_dirs[0], checkpoint_dirs[1]);
}

TEST(K8sManifestsTest, StorageIsSharedByChiefPsAndEvaluator) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  auto objects = ByKindAndName(Decode("storage.yaml"));
  ASSERT_TRUE(objects.count("PersistentVolumeClaim/fmnist-checkpoints"));
  EXPECT_EQ(objects["PersistentVolumeClaim/fmnist-checkpoints"]["spec"]["accessModes"][0], "ReadWriteMany");
}

TEST(K8sManifestsTest, EveryStatefulSetAndJobPodGetsAConsistentTfConfig) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  auto objects = ByKindAndName(Decode("statefulsets.yaml"));
  for (const char* name :
       {"Service/fmnist-ps", "Service/fmnist-worker", "Service/fmnist-chief",
        "Service/fmnist-evaluator", "Service/fmnist-dispatcher", "Service/fmnist-data-worker",
        "StatefulSet/fmnist-ps", "StatefulSet/fmnist-worker", "StatefulSet/fmnist-dispatcher",
        "StatefulSet/fmnist-data-worker", "Job/fmnist-chief", "Job/fmnist-evaluator"}) {
    EXPECT_TRUE(objects.count(name)) << name;
  }
  if (::testing::Test::HasFailure()) return;
  const int64_t num_ps = objects["StatefulSet/fmnist-ps"]["spec"]["replicas"];
  const int64_t num_workers = objects["StatefulSet/fmnist-worker"]["spec"]["replicas"];
  const int64_t num_dispatchers = objects["StatefulSet/fmnist-dispatcher"]["spec"]["replicas"];
  const int64_t num_data_workers = objects["StatefulSet/fmnist-data-worker"]["spec"]["replicas"];
  EXPECT_EQ(num_dispatchers, 1) << "a cluster has at most one dispatcher";

  // Headless services whose selectors pick their role's pods.
  auto service_for = [&](const std::string& name, const json& pod_labels) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(objects.count("Service/" + name));
    const json& svc = objects["Service/" + name]["spec"];
    EXPECT_EQ(svc["clusterIP"], "None");
    EXPECT_EQ(svc["ports"][0]["port"], 2222);
    for (auto& [key, value] : svc["selector"].items()) EXPECT_EQ(pod_labels.value(key, json()), value) << key;
  };

  struct Pod {
    std::string hostname;
    std::string service;
    TaskType type;
    int index;
    json container;
  };
  std::vector<Pod> pods;
  for (auto& [name, role, type] : std::vector<std::tuple<std::string, std::string, TaskType>>{
           {"fmnist-ps", "ps", TaskType::kPs},
           {"fmnist-worker", "worker", TaskType::kWorker},
           {"fmnist-dispatcher", "dispatcher", TaskType::kDispatcher},
           {"fmnist-data-worker", "data_worker", TaskType::kDataWorker}}) {
    const json& set = objects["StatefulSet/" + name];
    EXPECT_EQ(set["spec"]["serviceName"], name);
    service_for(name, set["spec"]["template"]["metadata"]["labels"]);
    for (int i = 0; i < set["spec"]["replicas"].get<int>(); ++i) {
      pods.push_back({absl::StrCat(name, "-", i), name, type, i, set["spec"]["template"]["spec"]["containers"][0]});
    }
  }
  for (auto& [name, type] :
       std::vector<std::pair<std::string, TaskType>>{{"fmnist-chief", TaskType::kChief},
                                                     {"fmnist-evaluator", TaskType::kEvaluator}}) {
    const json& job = objects["Job/" + name]["spec"];
    const json& pod = job["template"]["spec"];
    EXPECT_EQ(pod["subdomain"], name);
    EXPECT_EQ(pod["hostname"], name + "-0");
    EXPECT_EQ(pod["restartPolicy"], "Never");
    service_for(name, job["template"]["metadata"]["labels"]);
    pods.push_back({pod["hostname"], name, type, 0, pod["containers"][0]});
  }

  for (const Pod& pod : pods) {
    SCOPED_TRACE(pod.hostname);
    EXPECT_EQ(pod.container["command"][0], "/opt/asyncps/entrypoint.sh");
    EXPECT_TRUE(kImageBinaries.count(pod.container["args"][0].get<std::string>())) << pod.container["args"][0];
    auto spec = TfConfigOfPod(pod.hostname, PlainEnv(pod.container));
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->task_type(), pod.type);
    EXPECT_EQ(spec->task_index(), pod.index);
    EXPECT_EQ(spec->num_ps(), num_ps) << "ASYNCPS_NUM_PS disagrees with the ps StatefulSet";
    EXPECT_EQ(spec->num_workers(), num_workers) << "ASYNCPS_NUM_WORKERS disagrees with the worker StatefulSet";
    // Every process finds the tf.data service where its StatefulSets run it.
    EXPECT_EQ(spec->dispatcher(), "fmnist-dispatcher-0.fmnist-dispatcher:2222")
        << "ASYNCPS_DISPATCHER";
    EXPECT_EQ(spec->num_data_workers(), num_data_workers)
        << "ASYNCPS_NUM_DATA_WORKERS disagrees with the data-worker StatefulSet";
    if (spec->num_data_workers() > 0) {
      EXPECT_EQ(spec->data_workers()[0], "fmnist-data-worker-0.fmnist-data-worker:2222");
    }
    if (pod.type != TaskType::kEvaluator) {
      // The address peers dial is the pod's DNS name under its headless service.
      EXPECT_EQ(spec->self_address(), absl::StrCat(pod.hostname, ".", pod.service, ":2222"));
    }
  }
}

// The dispatcher journals to a volume, so a restarted pod recovers the service's state
// (registrations, jobs, split assignments) instead of starting empty.
TEST(K8sManifestsTest, DispatcherWorkDirIsOnItsVolume) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  auto objects = ByKindAndName(Decode("statefulsets.yaml"));
  ASSERT_TRUE(objects.count("StatefulSet/fmnist-dispatcher"));
  const json& pod = objects["StatefulSet/fmnist-dispatcher"]["spec"]["template"]["spec"];
  const json& container = pod["containers"][0];
  const std::map<std::string, std::string> env = PlainEnv(container);
  ASSERT_TRUE(env.count("ASYNCPS_DISPATCHER_WORK_DIR"));
  const std::string work_dir = env.at("ASYNCPS_DISPATCHER_WORK_DIR");
  std::string volume;
  for (const json& m : container.value("volumeMounts", json::array())) {
    const std::string path = m["mountPath"].get<std::string>();
    if (absl::StartsWith(work_dir, path + "/") && !m.value("readOnly", false)) volume = m["name"];
  }
  ASSERT_FALSE(volume.empty()) << work_dir << " is on no writable volume of the pod";
  bool persistent = false;
  for (const json& v : pod["volumes"]) {
    if (v["name"] == volume && v.contains("persistentVolumeClaim")) persistent = true;
  }
  EXPECT_TRUE(persistent) << "volume " << volume << " does not outlive the pod";
}

TEST(K8sManifestsTest, EveryManifestHereIsDecodedByKubectl) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  const std::set<std::string> kKinds = {"Service", "StatefulSet", "Job", "TFJob", "PersistentVolumeClaim",
                                        "PodMonitor"};
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kSource + "/deploy/k8s")) {
    if (entry.path().extension() != ".yaml") continue;
    ++files;
    const std::string file = entry.path().filename().string();
    const std::vector<json> objects = Decode(file);
    EXPECT_FALSE(objects.empty()) << file;
    for (const json& o : objects) EXPECT_TRUE(kKinds.count(o.value("kind", ""))) << file << ": " << o.value("kind", "");
  }
  EXPECT_GE(files, 4);
}

// A pod template of the manifests: its labels and its one container.
struct PodTemplate {
  std::string name;
  json labels;
  json container;
};

std::vector<PodTemplate> AllPodTemplates() {
  std::vector<PodTemplate> pods;
  for (const json& o : Decode("statefulsets.yaml")) {
    if (o["kind"] == "StatefulSet" || o["kind"] == "Job") {
      const json& t = o["spec"]["template"];
      pods.push_back({o["metadata"]["name"], t["metadata"]["labels"], t["spec"]["containers"][0]});
    }
  }
  for (const json& o : Decode("tfjob.yaml")) {
    for (auto& [role, spec] : o["spec"]["tfReplicaSpecs"].items()) {
      const json& t = spec["template"];
      pods.push_back({"TFJob " + role, t["metadata"].value("labels", json::object()), t["spec"]["containers"][0]});
    }
  }
  return pods;
}

// Every process of a job on Kubernetes serves /metrics to the cluster, on the port the
// PodMonitor scrapes, and its pod is one the PodMonitor selects.
TEST(K8sManifestsTest, EveryPodServesMetricsWherePodMonitorScrapes) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  const auto monitors = ByKindAndName(Decode("podmonitor.yaml"));
  ASSERT_TRUE(monitors.count("PodMonitor/asyncps"));
  const json& monitor = monitors.at("PodMonitor/asyncps");
  EXPECT_EQ(monitor["apiVersion"], "monitoring.coreos.com/v1");
  const json& selector = monitor["spec"]["selector"];
  const json& endpoint = monitor["spec"]["podMetricsEndpoints"][0];
  EXPECT_EQ(endpoint["path"], "/metrics");
  auto selected = [&](const json& labels) {
    for (auto& [key, value] : selector["matchLabels"].items()) {
      if (labels.value(key, json()) != value) return false;
    }
    for (const json& e : selector.value("matchExpressions", json::array())) {
      if (e["operator"] != "In" || !labels.contains(e["key"].get<std::string>())) return false;
      const json& values = e["values"];
      if (std::find(values.begin(), values.end(), labels[e["key"].get<std::string>()]) == values.end()) return false;
    }
    return true;
  };

  const std::vector<PodTemplate> pods = AllPodTemplates();
  EXPECT_EQ(pods.size(), 10u);  // 6 roles without the operator, 4 under it
  for (const PodTemplate& pod : pods) {
    SCOPED_TRACE(pod.name);
    EXPECT_TRUE(selected(pod.labels)) << pod.labels.dump();
    const std::map<std::string, std::string> env = PlainEnv(pod.container);
    ASSERT_TRUE(env.count("ASYNCPS_METRICS_BIND_ADDRESS") && env.count("ASYNCPS_METRICS_PORT"));
    // What the process will make of them.
    std::vector<std::string> args = {"prog", "--metrics_bind_address=" + env.at("ASYNCPS_METRICS_BIND_ADDRESS"),
                                      "--metrics_port=" + env.at("ASYNCPS_METRICS_PORT")};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    auto options = ProcessOptions::Parse(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_TRUE(options->metrics_bind_address == "0.0.0.0" || options->metrics_bind_address == "::")
        << "loopback cannot be scraped from outside the pod: " << options->metrics_bind_address;
    int metrics_port = -1;
    for (const json& p : pod.container["ports"]) {
      if (p.value("name", "") == endpoint["port"]) metrics_port = p["containerPort"];
    }
    EXPECT_EQ(metrics_port, options->metrics_port) << "the container port the PodMonitor names";
  }
}

// The PodMonitor gives the targets the labels asyncps_launch's file_sd gives, which the
// Grafana dashboard's queries use: job="asyncps", asyncps_role, asyncps_task.
TEST(K8sManifestsTest, PodMonitorLabelsTargetsLikeTheLauncher) {
  if (!HaveKubectl()) GTEST_SKIP() << "kubectl not installed (scripts/install_deps.sh installs it)";
  const auto monitors = ByKindAndName(Decode("podmonitor.yaml"));
  ASSERT_TRUE(monitors.count("PodMonitor/asyncps"));
  std::map<std::string, json> by_target;
  for (const json& r : monitors.at("PodMonitor/asyncps")["spec"]["podMetricsEndpoints"][0]["relabelings"]) {
    by_target[r["targetLabel"].get<std::string>()] = r;
  }
  ASSERT_TRUE(by_target.count("job") && by_target.count("asyncps_role") && by_target.count("asyncps_task"));
  EXPECT_EQ(by_target["job"]["replacement"], "asyncps");
  EXPECT_EQ(by_target["asyncps_role"]["sourceLabels"][0], "__meta_kubernetes_pod_label_asyncps_role");
  const json& task = by_target["asyncps_task"];
  EXPECT_EQ(task["sourceLabels"][0], "__meta_kubernetes_pod_name");
  // Prometheus anchors relabel regexes at both ends, as regex_match does.
  const std::regex regex(task["regex"].get<std::string>());
  std::smatch m;
  for (const auto& [pod, index] : std::vector<std::pair<std::string, std::string>>{
           {"fmnist-worker-1", "1"}, {"fmnist-ps-12", "12"}, {"my-job-chief-0", "0"}}) {
    ASSERT_TRUE(std::regex_match(pod, m, regex)) << pod;
    EXPECT_EQ(std::regex_replace(pod, regex, task["replacement"].get<std::string>()), index) << pod;
  }
}

}  // namespace
}  // namespace asyncps
