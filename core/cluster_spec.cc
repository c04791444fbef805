#include "core/cluster_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/slurm_cluster.h"
#include "core/status_macros.h"

namespace asyncps {
namespace {

// TensorFlow's and Kubeflow's default gRPC port, used when an address names only a host.
constexpr int kDefaultPort = 2222;

// What one source (TF_CONFIG or flags) says about the cluster before validation. Fields that
// the source did not mention stay unset, so the flags can override TF_CONFIG field by field.
struct PartialSpec {
  std::map<TaskType, std::vector<std::string>> jobs;
  std::optional<TaskType> task_type;
  std::optional<int> task_index;
};

absl::Status ParseJobList(const nlohmann::json& value, const std::string& field,
                          std::vector<std::string>* out) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG ", field, " must be a list of \"host:port\" strings"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG ", field, "[", i, "] must be a \"host:port\" string"));
    }
    out->push_back(value[i].get<std::string>());
  }
  return absl::OkStatus();
}

// Parses TF_CONFIG structurally (JSON shape, job names, field types). Semantic checks (counts,
// ranges, addresses) happen once in ClusterSpec::Create, after flags have been applied.
absl::StatusOr<PartialSpec> ParseTfConfig(absl::string_view text) {
  // Parse without exceptions: nlohmann signals a parse error with a discarded value.
  nlohmann::json doc = nlohmann::json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                             /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("TF_CONFIG is not valid JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("TF_CONFIG must be a JSON object");

  PartialSpec spec;
  if (auto it = doc.find("cluster"); it != doc.end()) {
    if (!it->is_object()) return absl::InvalidArgumentError("TF_CONFIG cluster must be an object");
    bool saw_chief = false;
    for (const auto& [name, addresses] : it->items()) {
      absl::StatusOr<TaskType> type = TaskTypeFromName(name);
      if (!type.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "TF_CONFIG cluster has unknown job '", name,
            "' (want chief, master, ps, worker, evaluator, dispatcher or data_worker)"));
      }
      // "chief" and its legacy name "master" together would be two chiefs.
      if (*type == TaskType::kChief) {
        if (saw_chief) {
          return absl::InvalidArgumentError(
              "TF_CONFIG cluster has both 'chief' and 'master'; a cluster has at most one chief");
        }
        saw_chief = true;
      }
      RETURN_IF_ERROR(ParseJobList(addresses, absl::StrCat("cluster.", name), &spec.jobs[*type]));
    }
  }

  if (auto it = doc.find("task"); it != doc.end()) {
    if (!it->is_object()) return absl::InvalidArgumentError("TF_CONFIG task must be an object");
    if (auto type = it->find("type"); type != it->end()) {
      if (!type->is_string()) return absl::InvalidArgumentError("TF_CONFIG task.type must be a string");
      absl::StatusOr<TaskType> parsed = TaskTypeFromName(type->get<std::string>());
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG task.type: ", parsed.status().message()));
      }
      spec.task_type = *parsed;
    }
    if (auto index = it->find("index"); index != it->end()) {
      if (!index->is_number_integer()) {
        return absl::InvalidArgumentError("TF_CONFIG task.index must be an integer");
      }
      const int64_t value = index->get<int64_t>();
      if (value < 0 || value > std::numeric_limits<int>::max()) {
        return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG task.index ", value, " is out of range"));
      }
      spec.task_index = static_cast<int>(value);
    } else if (spec.task_type.has_value()) {
      // TensorFlow's TFConfigClusterResolver defaults a missing index to 0.
      spec.task_index = 0;
    }
  }

  if (auto it = doc.find("environment"); it != doc.end() && !it->is_string()) {
    return absl::InvalidArgumentError("TF_CONFIG environment must be a string");
  }
  return spec;
}

std::vector<std::string> SplitHosts(absl::string_view value) {
  std::vector<std::string> hosts;
  for (absl::string_view part : absl::StrSplit(value, ',', absl::SkipWhitespace())) {
    hosts.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return hosts;
}

// What the command line says: cluster flags, and the Slurm layout when a --slurm_* flag is given.
struct FlagValues {
  PartialSpec spec;
  std::optional<SlurmLayout> slurm;
};

// A --slurm_* count: a non-negative integer.
absl::Status ParseSlurmCount(absl::string_view name, const std::string& value, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be a non-negative integer, got '", value, "'"));
  }
  return absl::OkStatus();
}

// Reads the cluster flags out of `args`. Unknown arguments are skipped.
absl::StatusOr<FlagValues> ParseFlags(const std::vector<std::string>& args) {
  static constexpr absl::string_view kFlags[] = {
      "ps_hosts", "worker_hosts",  "chief_host",  "evaluator_host",  "job_name",       "task_index",
      "slurm_ps", "slurm_workers", "slurm_chief", "slurm_evaluator", "slurm_port_base", "dispatcher_host",
      "data_worker_hosts"};
  FlagValues flags;
  PartialSpec* spec = &flags.spec;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    // Everything after "--" belongs to the program.
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--")) continue;
    absl::string_view name = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = std::string(arg.substr(eq + 1));
    }
    bool known = false;
    for (absl::string_view flag : kFlags) known |= (name == flag);
    if (!known) continue;
    if (!value.has_value()) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }

    if (absl::StartsWith(name, "slurm_")) {
      SlurmLayout& layout = flags.slurm.has_value() ? *flags.slurm : flags.slurm.emplace();
      int* field = name == "slurm_ps"          ? &layout.ps
                   : name == "slurm_workers"   ? &layout.workers
                   : name == "slurm_chief"     ? &layout.chief
                   : name == "slurm_evaluator" ? &layout.evaluator
                                               : &layout.port_base;
      RETURN_IF_ERROR(ParseSlurmCount(name, *value, field));
    } else if (name == "ps_hosts") {
      spec->jobs[TaskType::kPs] = SplitHosts(*value);
    } else if (name == "worker_hosts") {
      spec->jobs[TaskType::kWorker] = SplitHosts(*value);
    } else if (name == "chief_host") {
      spec->jobs[TaskType::kChief] = SplitHosts(*value);
    } else if (name == "evaluator_host") {
      spec->jobs[TaskType::kEvaluator] = SplitHosts(*value);
    } else if (name == "dispatcher_host") {
      spec->jobs[TaskType::kDispatcher] = SplitHosts(*value);
    } else if (name == "data_worker_hosts") {
      spec->jobs[TaskType::kDataWorker] = SplitHosts(*value);
    } else if (name == "job_name") {
      absl::StatusOr<TaskType> type = TaskTypeFromName(*value);
      if (!type.ok()) return absl::InvalidArgumentError(absl::StrCat("--job_name: ", type.status().message()));
      spec->task_type = *type;
    } else {  // task_index
      int index = 0;
      if (!absl::SimpleAtoi(*value, &index) || index < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--task_index must be a non-negative integer, got '", *value, "'"));
      }
      spec->task_index = index;
    }
  }
  return flags;
}

// Lays `top` over `base` field by field: a job `top` names replaces that job in `base`, and the
// jobs only `base` names stay (the union of the two clusters).
void Overlay(PartialSpec top, PartialSpec* base) {
  for (auto& [type, addresses] : top.jobs) base->jobs[type] = std::move(addresses);
  if (top.task_type.has_value()) base->task_type = top.task_type;
  if (top.task_index.has_value()) base->task_index = top.task_index;
}

absl::StatusOr<ClusterSpec> Complete(PartialSpec spec) {
  if (spec.jobs.empty()) {
    return absl::InvalidArgumentError(
        "no cluster given: set TF_CONFIG with a \"cluster\", pass --ps_hosts and "
        "--worker_hosts, or run under srun with --slurm_ps");
  }
  if (!spec.task_type.has_value()) {
    return absl::InvalidArgumentError("no task type given: set TF_CONFIG task.type or pass --job_name");
  }
  return ClusterSpec::Create(std::move(spec.jobs), *spec.task_type, spec.task_index.value_or(0));
}

// Checks an address and adds the default port when there is none.
absl::StatusOr<std::string> NormalizeAddress(const std::string& address, const std::string& field) {
  std::string full = address;
  const bool bracketed = !address.empty() && address[0] == '[';
  const size_t close = address.find(']');
  const bool has_port = bracketed ? (close != std::string::npos && close + 1 < address.size())
                                  : address.find(':') != std::string::npos;
  if (!address.empty() && !has_port) absl::StrAppend(&full, ":", kDefaultPort);
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(full, &host, &port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
  }
  return full;
}

}  // namespace

absl::string_view TaskTypeName(TaskType type) {
  switch (type) {
    case TaskType::kChief:
      return "chief";
    case TaskType::kPs:
      return "ps";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kEvaluator:
      return "evaluator";
    case TaskType::kDispatcher:
      return "dispatcher";
    case TaskType::kDataWorker:
      return "data_worker";
  }
  return "unknown";
}

absl::StatusOr<TaskType> TaskTypeFromName(absl::string_view name) {
  if (name == "chief" || name == "master") return TaskType::kChief;
  if (name == "ps") return TaskType::kPs;
  if (name == "worker") return TaskType::kWorker;
  if (name == "evaluator") return TaskType::kEvaluator;
  if (name == "dispatcher") return TaskType::kDispatcher;
  if (name == "data_worker") return TaskType::kDataWorker;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown task type '", name, "' (want chief, master, ps, worker, evaluator, dispatcher or data_worker)"));
}

absl::Status ParseHostPort(absl::string_view address, std::string* host, int* port) {
  absl::string_view host_part;
  absl::string_view port_part;
  if (absl::StartsWith(address, "[")) {
    // IPv6 literal: "[::1]:2222".
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close + 1 >= address.size() || address[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not \"[host]:port\""));
    }
    host_part = address.substr(1, close - 1);
    port_part = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not \"host:port\""));
    }
    host_part = address.substr(0, colon);
    port_part = address.substr(colon + 1);
    if (host_part.find(':') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("address '", address, "' has more than one ':' (write IPv6 hosts as [host]:port)"));
    }
  }
  if (host_part.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has an empty host"));
  }
  for (char c : host_part) {
    if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat("address '", address, "' has whitespace in its host"));
    }
  }
  int value = 0;
  const bool digits = !port_part.empty() && port_part.size() <= 5 &&
                      std::all_of(port_part.begin(), port_part.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(port_part, &value) || value < 1 || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' has port '", port_part, "'; want a number in 1..65535"));
  }
  *host = std::string(host_part);
  *port = value;
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromTfConfig(absl::string_view json) {
  ASSIGN_OR_RETURN(PartialSpec spec, ParseTfConfig(json));
  if (spec.jobs.empty()) return absl::InvalidArgumentError("TF_CONFIG has no cluster (or it is empty)");
  if (!spec.task_type.has_value()) return absl::InvalidArgumentError("TF_CONFIG has no task.type");
  return Complete(std::move(spec));
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromEnvOrFlags(int argc, char** argv) {
  EnvMap env;
  auto read = [&env](absl::string_view name) {
    if (const char* value = std::getenv(std::string(name).c_str())) env[std::string(name)] = value;
  };
  read("TF_CONFIG");
  for (absl::string_view name : kSlurmEnvironmentVariables) read(name);
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return FromEnvAndFlags(env, args);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromTfConfigAndFlags(absl::string_view tf_config,
                                                              const std::vector<std::string>& args) {
  return FromEnvAndFlags({{"TF_CONFIG", std::string(tf_config)}}, args);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromEnvAndFlags(const EnvMap& env,
                                                         const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(FlagValues flags, ParseFlags(args));
  PartialSpec spec;
  if (auto it = env.find("TF_CONFIG");
      it != env.end() && !absl::StripAsciiWhitespace(it->second).empty()) {
    ASSIGN_OR_RETURN(spec, ParseTfConfig(it->second));
  }
  if (flags.slurm.has_value()) {
    ASSIGN_OR_RETURN(SlurmCluster slurm, ResolveSlurmCluster(env, *flags.slurm));
    Overlay({std::move(slurm.jobs), slurm.task_type, slurm.task_index}, &spec);
  }
  Overlay(std::move(flags.spec), &spec);
  return Complete(std::move(spec));
}

absl::StatusOr<ClusterSpec> ClusterSpec::Create(std::map<TaskType, std::vector<std::string>> jobs,
                                                TaskType task_type, int task_index) {
  // Normalise every address first so "h" and "h:2222" are recognised as duplicates.
  std::set<std::string> seen;
  for (auto& [type, addresses] : jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      const std::string field = absl::StrCat("cluster.", TaskTypeName(type), "[", i, "]");
      ASSIGN_OR_RETURN(addresses[i], NormalizeAddress(addresses[i], field));
      if (!seen.insert(addresses[i]).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ": address '", addresses[i], "' is used by more than one task"));
      }
    }
  }
  auto job = [&jobs](TaskType type) -> const std::vector<std::string>& {
    static const std::vector<std::string> kEmpty;
    auto it = jobs.find(type);
    return it == jobs.end() ? kEmpty : it->second;
  };

  // The evaluator is not part of the training cluster: TensorFlow's side-car form lists only
  // the evaluator, and Kubeflow's TFJob operator leaves it out of the cluster it injects.
  const bool evaluator_task = task_type == TaskType::kEvaluator;
  if (job(TaskType::kPs).empty() && !evaluator_task) {
    return absl::InvalidArgumentError("cluster.ps is missing or empty; a cluster needs at least one ps");
  }
  if (job(TaskType::kWorker).empty() && !evaluator_task) {
    return absl::InvalidArgumentError("cluster.worker is missing or empty; a cluster needs at least one worker");
  }
  if (job(TaskType::kChief).size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.chief has ", job(TaskType::kChief).size(),
                                                   " entries; a cluster has at most one chief"));
  }
  if (job(TaskType::kEvaluator).size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.evaluator has ",
                                                   job(TaskType::kEvaluator).size(),
                                                   " entries; a cluster has at most one evaluator"));
  }
  if (job(TaskType::kDispatcher).size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("cluster.dispatcher has ",
                                                   job(TaskType::kDispatcher).size(),
                                                   " entries; a cluster has at most one dispatcher"));
  }

  const std::vector<std::string>& own_job = job(task_type);
  if (evaluator_task && own_job.empty()) {
    if (task_index != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("task.index ", task_index, " is out of range for job 'evaluator' (at most one)"));
    }
  } else if (own_job.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("task.type '", TaskTypeName(task_type),
                                                   "' has no job in the cluster"));
  }
  if (!(evaluator_task && own_job.empty()) && (task_index < 0 || task_index >= static_cast<int>(own_job.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("task.index ", task_index, " is out of range for job '",
                                                   TaskTypeName(task_type), "' with ", own_job.size(),
                                                   own_job.size() == 1 ? " task" : " tasks"));
  }

  ClusterSpec spec;
  spec.ps_ = job(TaskType::kPs);
  spec.workers_ = job(TaskType::kWorker);
  if (!job(TaskType::kChief).empty()) spec.chief_ = job(TaskType::kChief)[0];
  if (!job(TaskType::kEvaluator).empty()) spec.evaluator_ = job(TaskType::kEvaluator)[0];
  if (!job(TaskType::kDispatcher).empty()) spec.dispatcher_ = job(TaskType::kDispatcher)[0];
  spec.data_workers_ = job(TaskType::kDataWorker);
  spec.task_type_ = task_type;
  spec.task_index_ = task_index;
  if (spec.chief_.empty() && task_type == TaskType::kWorker && task_index == 0) {
    spec.task_type_ = TaskType::kChief;
    spec.worker_zero_is_chief_ = true;
  }
  return spec;
}

const std::string& ClusterSpec::self_address() const {
  switch (task_type_) {
    case TaskType::kChief:
      return worker_zero_is_chief_ ? workers_[0] : chief_;
    case TaskType::kPs:
      return ps_[task_index_];
    case TaskType::kWorker:
      return workers_[task_index_];
    case TaskType::kEvaluator:
      return evaluator_;
    case TaskType::kDispatcher:
      return dispatcher_;
    case TaskType::kDataWorker:
      return data_workers_[task_index_];
  }
  return chief_;
}

const std::string& ClusterSpec::data_service_dispatcher() const {
  if (!dispatcher_in_chief()) return dispatcher_;
  if (!chief_.empty()) return chief_;
  // An evaluator's side-car spec may list no workers: then there is no chief to name.
  return workers_.empty() ? dispatcher_ : workers_[0];
}

std::string ClusterSpec::ToTfConfig(TaskType type, int index) const {
  nlohmann::json cluster = nlohmann::json::object();
  if (!chief_.empty()) cluster["chief"] = nlohmann::json::array({chief_});
  cluster["ps"] = ps_;
  cluster["worker"] = workers_;
  if (!evaluator_.empty()) cluster["evaluator"] = nlohmann::json::array({evaluator_});
  if (!dispatcher_.empty()) cluster["dispatcher"] = nlohmann::json::array({dispatcher_});
  if (!data_workers_.empty()) cluster["data_worker"] = data_workers_;
  // Without a chief entry, the acting chief is worker 0 and must be written as such.
  if (type == TaskType::kChief && chief_.empty()) {
    type = TaskType::kWorker;
    index = 0;
  }
  nlohmann::json doc = {
      {"cluster", std::move(cluster)},
      {"task", {{"type", std::string(TaskTypeName(type))}, {"index", index}}},
      {"environment", "cloud"},
  };
  return doc.dump();
}

std::string ClusterSpec::TaskLabel() const {
  if (worker_zero_is_chief_) return "worker:0";
  if (task_type_ == TaskType::kChief || task_type_ == TaskType::kEvaluator ||
      task_type_ == TaskType::kDispatcher) {
    return std::string(TaskTypeName(task_type_));
  }
  return absl::StrCat(TaskTypeName(task_type_), ":", task_index_);
}

}  // namespace asyncps
