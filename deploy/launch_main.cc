// asyncps_launch: runs a whole cluster of one program on this machine.
//
//   asyncps_launch --ps 2 --workers 3 [--evaluator] [--max_restarts 3] [--log_level info]
//       [--token T] -- ./my_trainer --steps=100
//   asyncps_launch scale --control HOST:PORT --workers N [--token T]   (a job run with --elastic)
//
// Every task is the same program (TensorFlow's "same binary for all tasks"); each learns its
// role from the TF_CONFIG the launcher puts in its environment, so a program that runs here
// runs unchanged under a Kubeflow TFJob.

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/cluster_spec.h"
#include "core/exit_code.h"
#include "core/incarnation.h"
#include "core/process_options.h"
#include "core/status_macros.h"
#include "core/subprocess.h"
#include "core/sync.h"
#include "deploy/blas_kernel.h"
#include "net/event_loop.h"
#include "net/message.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "worker/worker.capnp.h"
#include "deploy/file_sd.h"
#include "deploy/netns_hosts.h"

namespace asyncps {
namespace {

constexpr char kUsage[] =
    "usage: asyncps_launch --ps N --workers M [--evaluator] [--max_restarts R] [--log_level L]\n"
    "                      [--token T] [--file_sd PATH] [--ps_replicas K] [--data_workers D]\n"
    "                      [--ps_heartbeat_timeout D] [--ps_lost_after D] [--hosts local|netns]\n"
    "                      [--netns_subnet 10.A.B.0/24] [--netns_prefix P] [--netns_rate R]\n"
    "                      [--elastic [--max_ps P]] -- PROGRAM [ARGS...]\n"
    "       asyncps_launch scale --control HOST:PORT [--workers M] [--ps N] [--token T]\n"
    "\n"
    "Starts a local cluster on 127.0.0.1: N parameter servers, M workers, one chief (and one\n"
    "evaluator with --evaluator; a tf.data service dispatcher and D data workers with\n"
    "--data_workers D), each running PROGRAM with TF_CONFIG set for its task and\n"
    "ASYNCPS_CLUSTER_TOKEN set to a shared token (--token, else $ASYNCPS_CLUSTER_TOKEN, else a\n"
    "random one). It prints one line per task it starts (\"started ps:0 pid 123 at ...\"); the\n"
    "tasks' output lines follow, prefixed with their task: [ps:0], [worker:1], [chief].\n"
    "When the chief exits, the other tasks are stopped and the launcher exits with the chief's\n"
    "exit code; if it succeeded, an evaluator is first left to finish its last evaluation (its\n"
    "failure is then the launcher's exit code). SIGINT or SIGTERM stops every task and exits with\n"
    "128 + the signal (130, 143).\n"
    "\n"
    "--max_restarts R (default 0): a parameter server, worker, tf.data service dispatcher or\n"
    "data worker that exits abnormally (a code other than 0, or killed by a signal) is started\n"
    "again with the same address and TF_CONFIG\n"
    "(a new process: a new incarnation), up to R times per task (not per job as torchrun counts:\n"
    "one crash-looping task cannot use up the others' restarts), after 0.5 s doubling to at most\n"
    "8 s. When a task fails with its restarts used up, every task is stopped and the launcher\n"
    "exits with that task's exit code (128 + the signal when one killed it: 137 for SIGKILL).\n"
    "With 0, a task that dies is not restarted and the job goes on: the chief decides.\n"
    "\n"
    "--log_level L (trace, debug, info, warn, error, critical, off) sets ASYNCPS_LOG_LEVEL for\n"
    "every task. Without it the tasks log at warn, unless ASYNCPS_LOG_LEVEL is set already (or\n"
    "PROGRAM is given --log_level). Every task also gets ASYNCPS_LAUNCH_COMMAND, this command\n"
    "line shell-quoted (a chief prints it as the way to resume from its checkpoints).\n"
    "\n"
    "Every task serves /metrics on a port of its own (ASYNCPS_METRICS_PORT; the chief's also\n"
    "serves the status page /status); --file_sd PATH writes them as a Prometheus file_sd\n"
    "targets file before any task starts. ASYNCPS_METRICS_PORT=-1 in the launcher's\n"
    "environment turns the endpoints off.\n"
    "\n"
    "--ps_replicas K (1..3, at most N) and --ps_heartbeat_timeout D (\"2s\", \"500ms\") set\n"
    "ASYNCPS_PS_REPLICAS and ASYNCPS_PS_HEARTBEAT_TIMEOUT for every task: K copies of every\n"
    "shard, a PS unreachable (its groups fail over to copies that answer) when it leaves the\n"
    "chief's heartbeats unanswered for D. --ps_lost_after D (\"30s\") sets ASYNCPS_PS_LOST_AFTER:\n"
    "how long a silent PS stays unreachable before it is lost (a group with no other copy then\n"
    "awaits a restore from a checkpoint).\n"
    "\n"
    "Unless OPENBLAS_CORETYPE is set, every task gets the OpenBLAS kernels its CPU can run\n"
    "(SkylakeX with AVX-512, Haswell with AVX2): Debian 12's OpenBLAS falls back to its slowest\n"
    "kernels on CPUs newer than itself. Set it (e.g. to Prescott) to choose otherwise.\n"
    "\n"
    "--hosts netns (root only; default --hosts local, every task on 127.0.0.1): every task on a\n"
    "host of its own, a network namespace with its own address from --netns_subnet (default\n"
    "10.213.47.0/24: the chief .2, then ps, workers, evaluator, dispatcher, data workers), all\n"
    "on one Linux bridge in a namespace of its own; TF_CONFIG names those addresses, and /metrics\n"
    "listens on the task's address (unless ASYNCPS_METRICS_BIND_ADDRESS is set), reachable from\n"
    "the other hosts, not from the machine's own network. The namespaces are named\n"
    "--netns_prefix (default apsl-<launcher pid>-) + the task (chief, ps0, worker1, ...) and the\n"
    "bridge's + \"sw\"; the launcher deletes them when it exits (also on SIGINT/SIGTERM), and\n"
    "those of an earlier launcher that was SIGKILLed when it starts. scripts/netns_hosts.py can\n"
    "partition, isolate, flap or cap these hosts while the job runs (--prefix P).\n"
    "--netns_rate R (with --hosts netns; e.g. 1gbit, 10gbit, 100mbit) caps every host's link at R\n"
    "in each direction (tc tbf, burst 256 kB) before any task starts, as a job on a real network\n"
    "of that speed would see it (loopback and veths are limited by CPU only).\n"
    "\n"
    "--elastic (with --hosts local): workers join and leave the running job (docs/operations.md,\n"
    "\"Scaling a running job\"). Every task gets ASYNCPS_ELASTIC=1, and the launcher serves a\n"
    "control port on 127.0.0.1, printed as \"control port N\" (authenticated by the cluster\n"
    "token, like every connection of the job). `asyncps_launch scale --control 127.0.0.1:N\n"
    "--workers M` (the token from --token or ASYNCPS_CLUSTER_TOKEN) asks it for M workers:\n"
    "it starts new ones (new indices; each registers with the chief, which builds its datasets\n"
    "and admits it) or sends SIGTERM to those with the highest indices (each asks the chief to\n"
    "drain it, then exits 0: a departure, never restarted) and answers once they have exited.\n"
    "No other process is restarted.\n"
    "--max_ps P (with --elastic; P >= N): parameter servers join and leave too. The cluster\n"
    "lists P PS slots and the job starts on the first N (every task gets ASYNCPS_INITIAL_PS=N;\n"
    "the shard groups, one per slot, are then placed and moved by the chief's shard map, also\n"
    "with --ps_replicas 1). `asyncps_launch scale ... --ps M` starts the PS of free slots (each\n"
    "registers; the chief moves shard-group copies to it) or sends SIGTERM to the highest ones\n"
    "(each asks the chief to move its copies to the others, then exits 0).\n";

// Upper bound on tasks per job: a local cluster larger than this is a typo, not a plan.
constexpr int kMaxTasksPerJob = 256;
// Workers one --elastic launcher may start beyond its first ones (over all scale requests).
constexpr int kMaxElasticWorkers = 256;
// How long a scale-down waits for a worker to be drained (worker/serve.cc gives the chief 25 s)
// and exit.
constexpr absl::Duration kWorkerLeaveWait = absl::Seconds(40);
// How long a scale-down waits for a PS to hand its copies off and exit (ps/ps_server.cc gives
// the chief 60 s), then a margin.
constexpr absl::Duration kPsLeaveWait = absl::Seconds(75);
// Upper bound on --max_restarts: beyond it a crash loop is a bug to fix, not to retry.
constexpr int kMaxRestartsLimit = 1000;
// How long stopped tasks get to exit after SIGTERM before SIGKILL.
constexpr absl::Duration kGracePeriod = absl::Seconds(2);
// Wait before restart k of a task: kFirstRestartDelay * 2^(k-1), at most kMaxRestartDelay. A
// task that dies at once (a port still taken, a peer not back yet) does not spin.
constexpr absl::Duration kFirstRestartDelay = absl::Milliseconds(500);
constexpr absl::Duration kMaxRestartDelay = absl::Seconds(8);
// The children's log level when neither --log_level nor ASYNCPS_LOG_LEVEL gives one: the
// launcher's own lines and the chief's progress, not every process's start-up chatter.
constexpr char kDefaultChildLogLevel[] = "warn";

struct LaunchArgs {
  int num_ps = 0;
  int num_workers = 0;
  bool evaluator = false;
  int num_data_workers = 0;  // > 0: also a dispatcher
  int max_restarts = 0;
  std::string log_level;  // empty: ASYNCPS_LOG_LEVEL as inherited, else kDefaultChildLogLevel
  std::string token;
  std::string file_sd;  // Prometheus targets file to write; empty: none
  std::string ps_replicas;           // empty: as inherited (ASYNCPS_PS_REPLICAS)
  std::string ps_heartbeat_timeout;  // empty: as inherited (ASYNCPS_PS_HEARTBEAT_TIMEOUT)
  std::string ps_lost_after;         // empty: as inherited (ASYNCPS_PS_LOST_AFTER)
  bool netns_hosts = false;          // --hosts netns: each task in a network namespace of its own
  std::string netns_subnet = deploy::kDefaultNetnsSubnet;
  std::string netns_prefix;  // empty: kLauncherNetnsFamily + this process's pid + "-"
  std::string netns_rate;    // --netns_rate: every host's link capped at this rate; empty: not
  bool elastic = false;
  int max_ps = 0;  // --max_ps: PS slots (elastic PS); 0: num_ps, fixed
  std::vector<std::string> program;
  std::string command;  // the whole command line, shell-quoted
};

// `asyncps_launch scale ...`
struct ScaleArgs {
  std::string control;  // host:port of a launcher's control port
  int workers = 0;  // 0: unchanged
  int ps = 0;       // 0: unchanged
  std::string token;
};

absl::Status ParseCount(absl::string_view flag, const std::string& value, int* out) {
  if (!absl::SimpleAtoi(value, out) || *out < 1 || *out > kMaxTasksPerJob) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " wants a number in 1..", kMaxTasksPerJob, ", got '", value, "'"));
  }
  return absl::OkStatus();
}

// `arg` as one shell word: as it is when it holds nothing a shell would interpret, else in
// single quotes.
std::string ShellQuote(absl::string_view arg) {
  const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           absl::string_view("_-./:=,+@%").find(c) != absl::string_view::npos;
  });
  if (plain) return std::string(arg);
  return absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

// Returns the parsed arguments; "help" as a NotFound status when usage was asked for.
absl::StatusOr<LaunchArgs> ParseArgs(int argc, char** argv) {
  LaunchArgs args;
  std::vector<std::string> words;
  for (int i = 0; i < argc; ++i) words.push_back(ShellQuote(argv[i]));
  args.command = absl::StrJoin(words, " ");
  bool have_ps = false;
  bool have_workers = false;
  bool have_netns_flag = false;
  int i = 1;
  for (; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") return absl::NotFoundError("help");
    std::string name(arg);
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
      has_value = true;
    }
    auto take_value = [&]() -> absl::Status {
      if (has_value) return absl::OkStatus();
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = argv[++i];
      return absl::OkStatus();
    };
    absl::Status status;
    if (name == "--ps") {
      status = take_value();
      if (status.ok()) status = ParseCount("ps", value, &args.num_ps);
      have_ps = true;
    } else if (name == "--workers") {
      status = take_value();
      if (status.ok()) status = ParseCount("workers", value, &args.num_workers);
      have_workers = true;
    } else if (name == "--data_workers") {
      status = take_value();
      if (status.ok()) status = ParseCount("data_workers", value, &args.num_data_workers);
    } else if (name == "--max_restarts") {
      status = take_value();
      if (status.ok() && (!absl::SimpleAtoi(value, &args.max_restarts) || args.max_restarts < 0 ||
                          args.max_restarts > kMaxRestartsLimit)) {
        status = absl::InvalidArgumentError(absl::StrCat("--max_restarts wants a number in 0..",
                                                         kMaxRestartsLimit, ", got '", value, "'"));
      }
    } else if (name == "--log_level") {
      status = take_value();
      if (status.ok() && !IsLogLevelName(value)) {
        status = absl::InvalidArgumentError(absl::StrCat(
            "--log_level wants trace, debug, info, warn, error, critical or off, got '", value,
            "'"));
      }
      args.log_level = value;
    } else if (name == "--token") {
      status = take_value();
      if (status.ok() && value.empty()) status = absl::InvalidArgumentError("--token must not be empty");
      args.token = value;
    } else if (name == "--file_sd") {
      status = take_value();
      if (status.ok() && value.empty()) status = absl::InvalidArgumentError("--file_sd must not be empty");
      args.file_sd = value;
    } else if (name == "--ps_replicas") {
      status = take_value();
      int k = 0;
      if (status.ok() && (!absl::SimpleAtoi(value, &k) || k < 1 || k > 3)) {
        status = absl::InvalidArgumentError(absl::StrCat("--ps_replicas wants 1, 2 or 3, got '", value, "'"));
      }
      args.ps_replicas = value;
    } else if (name == "--ps_heartbeat_timeout") {
      status = take_value();
      absl::Duration d;
      if (status.ok() && (!absl::ParseDuration(value, &d) || d <= absl::ZeroDuration())) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--ps_heartbeat_timeout wants a duration such as 2s or 500ms, got '", value, "'"));
      }
      args.ps_heartbeat_timeout = value;
    } else if (name == "--ps_lost_after") {
      status = take_value();
      absl::Duration d;
      if (status.ok() && (!absl::ParseDuration(value, &d) || d <= absl::ZeroDuration())) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--ps_lost_after wants a duration such as 30s or 2m, got '", value, "'"));
      }
      args.ps_lost_after = value;
    } else if (name == "--hosts") {
      status = take_value();
      if (status.ok() && value != "local" && value != "netns") {
        status = absl::InvalidArgumentError(
            absl::StrCat("--hosts wants local or netns, got '", value, "'"));
      }
      args.netns_hosts = value == "netns";
    } else if (name == "--netns_subnet") {
      status = take_value();
      if (status.ok()) status = deploy::SubnetHostAddresses(value, 0, nullptr).status();
      args.netns_subnet = value;
      have_netns_flag = true;
    } else if (name == "--netns_prefix") {
      status = take_value();
      if (status.ok()) status = deploy::CheckNetnsName(value);
      if (!status.ok()) {
        status = absl::InvalidArgumentError(absl::StrCat("--netns_prefix: ", status.message()));
      }
      args.netns_prefix = value;
      have_netns_flag = true;
    } else if (name == "--netns_rate") {
      status = take_value();
      if (status.ok()) status = deploy::CheckLinkRate(value);
      if (!status.ok()) {
        status = absl::InvalidArgumentError(absl::StrCat("--netns_rate: ", status.message()));
      }
      args.netns_rate = value;
      have_netns_flag = true;
    } else if (name == "--evaluator" && !has_value) {
      args.evaluator = true;
    } else if (name == "--elastic" && !has_value) {
      args.elastic = true;
    } else if (name == "--max_ps") {
      status = take_value();
      if (status.ok()) status = ParseCount("max_ps", value, &args.max_ps);
    } else {
      status = absl::InvalidArgumentError(
          absl::StrCat("unknown argument '", arg, "' (the program and its arguments go after '--')"));
    }
    if (!status.ok()) return status;
  }
  if (!have_ps) return absl::InvalidArgumentError("--ps N is required");
  if (!have_workers) return absl::InvalidArgumentError("--workers M is required");
  if (int k = 0; absl::SimpleAtoi(args.ps_replicas, &k) && k > args.num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ps_replicas ", k, " needs at least ", k, " parameter servers (--ps ", args.num_ps, ")"));
  }
  if (args.max_ps > 0 && !args.elastic) return absl::InvalidArgumentError("--max_ps needs --elastic");
  if (args.max_ps > 0 && args.max_ps < args.num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_ps ", args.max_ps, " is fewer than the parameter servers it starts with (--ps ", args.num_ps, ")"));
  }
  if (args.elastic && args.netns_hosts) {
    return absl::InvalidArgumentError("--elastic needs --hosts local (new workers get no host of their own yet)");
  }
  if (have_netns_flag && !args.netns_hosts) {
    return absl::InvalidArgumentError(
        "--netns_subnet, --netns_prefix and --netns_rate need --hosts netns");
  }
  if (args.netns_hosts) {
    const int total = 1 + args.num_ps + args.num_workers + (args.evaluator ? 1 : 0) +
                      (args.num_data_workers > 0 ? 1 + args.num_data_workers : 0);
    if (absl::Status s = deploy::SubnetHostAddresses(args.netns_subnet, total, nullptr).status();
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--netns_subnet: ", s.message()));
    }
  }
  for (; i < argc; ++i) args.program.emplace_back(argv[i]);
  if (args.program.empty()) return absl::InvalidArgumentError("no program given after '--'");
  return args;
}

// "SIGKILL" for the signals a task commonly dies of, "signal N" for the rest.
std::string SignalName(int sig) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {SIGKILL, "SIGKILL"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}, {SIGSEGV, "SIGSEGV"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"}, {SIGILL, "SIGILL"},
      {SIGHUP, "SIGHUP"},   {SIGPIPE, "SIGPIPE"}};
  for (const auto& [number, name] : kNames) {
    if (number == sig) return name;
  }
  return absl::StrCat("signal ", sig);
}

// "0.5", "8.0": a duration in seconds with one decimal.
std::string TenthsOfSeconds(absl::Duration d) {
  const int64_t tenths = absl::ToInt64Milliseconds(d) / 100;
  return absl::StrCat(tenths / 10, ".", tenths % 10);
}

// The wait before restart `attempt` (1-based).
absl::Duration RestartDelay(int attempt) {
  absl::Duration delay = kFirstRestartDelay;
  for (int k = 1; k < attempt && delay < kMaxRestartDelay; ++k) delay *= 2;
  return std::min(delay, kMaxRestartDelay);
}

// A task's host name: its label without the colon ("ps:0" -> "ps0", "chief").
std::string HostName(absl::string_view label) { return absl::StrReplaceAll(label, {{":", ""}}); }

// OK when `program` names an executable file, directly or through PATH (as execvp finds it).
absl::Status ProgramExists(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat("'", program, "' is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "", ':')) {
    if (executable(absl::StrCat(dir.empty() ? "." : dir, "/", program))) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("executable '", program, "' not found in PATH"));
}

std::string RandomToken() {
  return absl::StrCat(absl::Hex(RandomId(), absl::kZeroPad16), absl::Hex(RandomId(), absl::kZeroPad16));
}

// The signals the launcher handles on its signal thread. SIGUSR1 only wakes that thread for
// shutdown.
sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

class Launcher {
 public:
  explicit Launcher(LaunchArgs args) : args_(std::move(args)) {}

  // Runs the cluster to the end; returns the launcher's exit code.
  int Run() {
    StartSignalThread();
    const int code = RunCluster();
    StopSignalThread();
    // After StopAll: every task has been reaped, so nothing keeps a namespace alive.
    if (hosts_ != nullptr) {
      const std::string prefix = hosts_->prefix();
      if (absl::Status s = hosts_->Destroy(); !s.ok()) {
        Print("launcher", absl::StrCat("error: deleting the hosts: ", s.ToString()));
      } else {
        Print("launcher", absl::StrCat("deleted the hosts (network namespaces ", prefix, "*)"));
      }
      hosts_.reset();
    }
    return code;
  }

 private:
  struct Task {
    TaskType type;
    int index;
    std::string label;            // "ps:0", "worker:1", "chief", "evaluator"
    std::string address;          // host:port of its RPC server
    Subprocess::Options options;  // how it was started, to start it again the same way
    std::thread waiter;
  };

  int RunCluster() {
    const int data_service_tasks = args_.num_data_workers > 0 ? 1 + args_.num_data_workers : 0;
    const int ps_slots = std::max(args_.num_ps, args_.max_ps);
    const int total = 1 + ps_slots + args_.num_workers + (args_.evaluator ? 1 : 0) + data_service_tasks;
    const char* metrics_env = std::getenv("ASYNCPS_METRICS_PORT");
    const bool serve_metrics = metrics_env == nullptr || std::string(metrics_env) != "-1";
    if (!serve_metrics && !args_.file_sd.empty()) {
      Print("launcher", "error: --file_sd needs metrics endpoints, but ASYNCPS_METRICS_PORT=-1");
      return 1;
    }
    // One RPC port per task, then (when served) one metrics port per task.
    absl::StatusOr<std::vector<int>> ports = PickUnusedPorts(serve_metrics ? 2 * total : total);
    if (!ports.ok()) {
      Print("launcher", absl::StrCat("error: ", ports.status().ToString()));
      return ExitCodeForStatus(ports.status());
    }
    // With --hosts netns each task has a host of its own, whose address comes from the subnet
    // in the order the tasks are named here (the chief first); else every task is on 127.0.0.1.
    std::vector<std::string> host_ips;
    if (args_.netns_hosts) {
      absl::StatusOr<std::vector<std::string>> ips =
          deploy::SubnetHostAddresses(args_.netns_subnet, total, nullptr);
      if (!ips.ok()) {  // checked when parsing: not expected
        Print("launcher", absl::StrCat("error: ", ips.status().ToString()));
        return kExitUsage;
      }
      host_ips = *std::move(ips);
    }
    std::vector<std::string> host_names;  // by host, in address order
    std::map<TaskType, std::vector<std::string>> jobs;
    size_t next_port = 0;
    auto address = [&](TaskType type, std::string host) {
      host_names.push_back(std::move(host));
      const std::string ip = args_.netns_hosts ? host_ips[host_names.size() - 1] : "127.0.0.1";
      jobs[type].push_back(absl::StrCat(ip, ":", (*ports)[next_port++]));
    };
    address(TaskType::kChief, "chief");
    for (int i = 0; i < ps_slots; ++i) address(TaskType::kPs, absl::StrCat("ps", i));
    for (int i = 0; i < args_.num_workers; ++i) {
      address(TaskType::kWorker, absl::StrCat("worker", i));
    }
    if (args_.evaluator) address(TaskType::kEvaluator, "evaluator");
    if (args_.num_data_workers > 0) {
      address(TaskType::kDispatcher, "dispatcher");
      for (int i = 0; i < args_.num_data_workers; ++i) {
        address(TaskType::kDataWorker, absl::StrCat("data_worker", i));
      }
    }
    absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(jobs, TaskType::kChief, 0);
    if (!spec.ok()) {
      Print("launcher", absl::StrCat("error: ", spec.status().ToString()));
      return 1;
    }
    {
      MutexLock lock(&mu_);
      jobs_ = jobs;
    }
    serve_metrics_ = serve_metrics;
    // Tasks are never moved once their waiter runs (it holds a reference): room for the
    // workers --elastic may add, so that adding one never reallocates.
    tasks_.reserve(static_cast<size_t>(total + (args_.elastic ? kMaxElasticWorkers : 0)));

    std::string token = args_.token;
    if (token.empty()) {
      const char* env = std::getenv("ASYNCPS_CLUSTER_TOKEN");
      token = (env != nullptr && *env != '\0') ? env : RandomToken();
    }
    token_ = token;
    // OpenBLAS's kernels for every task, unless the environment names them (blas_kernel.h).
    std::string blas_core;
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      blas_core = deploy::OpenBlasCoreTypeFor(deploy::ThisCpuVectorFeatures());
    }
    // The children's log level: the flag, else what the environment already says, else quiet.
    std::string log_level = args_.log_level;
    if (log_level.empty()) {
      const char* env = std::getenv("ASYNCPS_LOG_LEVEL");
      log_level = (env != nullptr && *env != '\0') ? env : kDefaultChildLogLevel;
    }

    // Servers first, so the chief finds them listening (it still has to retry: a server may
    // take a moment to bind).
    auto add = [&](TaskType type, int index, std::string label, std::string addr) {
      tasks_.push_back({type, index, std::move(label), std::move(addr), {}, {}});
    };
    for (int i = 0; i < ps_slots; ++i)
      add(TaskType::kPs, i, absl::StrCat("ps:", i), spec->ps()[static_cast<size_t>(i)]);
    for (int i = 0; i < args_.num_workers; ++i) {
      add(TaskType::kWorker, i, absl::StrCat("worker:", i),
          spec->workers()[static_cast<size_t>(i)]);
    }
    if (args_.num_data_workers > 0) {
      add(TaskType::kDispatcher, 0, "dispatcher", spec->dispatcher());
      for (int i = 0; i < args_.num_data_workers; ++i) {
        add(TaskType::kDataWorker, i, absl::StrCat("data_worker:", i), spec->data_workers()[static_cast<size_t>(i)]);
      }
    }
    if (args_.evaluator) {
      add(TaskType::kEvaluator, 0, "evaluator", spec->evaluator());
      evaluator_ = static_cast<int>(tasks_.size()) - 1;
    }
    add(TaskType::kChief, 0, "chief", spec->chief());
    chief_ = static_cast<int>(tasks_.size()) - 1;
    {
      MutexLock lock(&mu_);
      procs_.resize(tasks_.size());
      restarts_.assign(tasks_.size(), 0);
      removed_.assign(tasks_.size(), false);
      gone_.assign(tasks_.size(), false);
    }

    // Each task's host (by task label): its index among the hosts, and its IP.
    std::map<std::string, size_t> host_of;
    for (const Task& task : tasks_) {
      const std::string host = HostName(task.label);
      for (size_t h = 0; h < host_names.size(); ++h) {
        if (host_names[h] == host) host_of[task.label] = h;
      }
    }
    auto ip_of = [&](const Task& task) -> std::string {
      return args_.netns_hosts ? host_ips[host_of.at(task.label)] : "127.0.0.1";
    };
    if (args_.netns_hosts) {
      if (int code = MakeHosts(host_names); code != 0) return code;
    }

    std::map<std::string, int> metrics_ports;  // by task label
    // On a host, /metrics listens on the host's address, so that the other hosts (a Prometheus
    // on one of them) reach it; the host's loopback would be its alone.
    const bool bind_metrics_to_host =
        args_.netns_hosts && std::getenv("ASYNCPS_METRICS_BIND_ADDRESS") == nullptr;
    if (serve_metrics) {
      std::vector<deploy::ScrapeTarget> targets;
      for (const Task& task : tasks_) {
        const int port = (*ports)[next_port++];
        metrics_ports[task.label] = port;
        const std::string ip = bind_metrics_to_host ? ip_of(task) : "127.0.0.1";
        targets.push_back(
            {absl::StrCat(ip, ":", port), std::string(TaskTypeName(task.type)), task.index});
      }
      if (!args_.file_sd.empty()) {
        if (absl::Status s = deploy::WriteFileSd(args_.file_sd, targets); !s.ok()) {
          Print("launcher", absl::StrCat("error: cannot write --file_sd: ", s.ToString()));
          return 1;
        }
        Print("launcher", absl::StrCat("prometheus targets in ", args_.file_sd));
      }
      Print("launcher", absl::StrCat("status page http://",
                                     bind_metrics_to_host ? ip_of(tasks_[chief_]) : "127.0.0.1",
                                     ":", metrics_ports["chief"], "/status"));
      if (args_.netns_hosts) {
        Print("launcher", absl::StrCat("(on the hosts' network: e.g. ip netns exec ",
                                       hosts_->prefix(), "chief curl URL)"));
      }
    }

    bool started_all = true;
    for (size_t t = 0; t < tasks_.size(); ++t) {
      Task& task = tasks_[t];
      Subprocess::Options& options = task.options;
      options.argv =
          args_.netns_hosts ? hosts_->Exec(host_of.at(task.label), args_.program) : args_.program;
      options.env = {{"TF_CONFIG", spec->ToTfConfig(task.type, task.index)},
                     {"ASYNCPS_CLUSTER_TOKEN", token},
                     {"ASYNCPS_LOG_LEVEL", log_level},
                     {"ASYNCPS_LAUNCH_COMMAND", args_.command}};
      if (!blas_core.empty()) options.env["OPENBLAS_CORETYPE"] = blas_core;
      if (!args_.ps_replicas.empty()) options.env["ASYNCPS_PS_REPLICAS"] = args_.ps_replicas;
      if (!args_.ps_lost_after.empty()) options.env["ASYNCPS_PS_LOST_AFTER"] = args_.ps_lost_after;
      if (!args_.ps_heartbeat_timeout.empty()) {
        options.env["ASYNCPS_PS_HEARTBEAT_TIMEOUT"] = args_.ps_heartbeat_timeout;
      }
      if (args_.elastic) options.env["ASYNCPS_ELASTIC"] = "1";
      if (args_.max_ps > 0) options.env["ASYNCPS_INITIAL_PS"] = std::to_string(args_.num_ps);
      if (bind_metrics_to_host) options.env["ASYNCPS_METRICS_BIND_ADDRESS"] = ip_of(task);
      std::string metrics_note;
      if (serve_metrics) {
        options.env["ASYNCPS_METRICS_PORT"] = std::to_string(metrics_ports[task.label]);
        metrics_note = absl::StrCat(", metrics port ", metrics_ports[task.label]);
      }
      options.keep_lines = false;  // printed as they come; keeping them would grow without bound
      options.on_line = [this, label = task.label](const std::string& line) { Print(label, line); };
      if (task.type == TaskType::kPs && task.index >= args_.num_ps) {
        // A PS slot for `scale --ps` to fill: not running, so nothing to watch or restart.
        MutexLock lock(&mu_);
        removed_[t] = true;
        gone_[t] = true;
        Print("launcher", absl::StrCat(task.label, " at ", task.address, " stands by (asyncps_launch scale --ps)"));
        continue;
      }
      pid_t pid = 0;
      {
        MutexLock lock(&mu_);
        if (signals_ > 0) {
          started_all = false;
          break;
        }
        absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(options);
        if (!proc.ok()) {
          Print("launcher",
                absl::StrCat("error: cannot start ", task.label, ": ", proc.status().ToString()));
          started_all = false;
          break;
        }
        pid = (*proc)->pid();
        procs_[t] = std::move(*proc);
        ++started_;
      }
      Print("launcher",
            absl::StrCat("started ", task.label, " pid ", pid, " at ", task.address, metrics_note));
      task.waiter = std::thread([this, t]() { WatchTask(t); });
    }

    if (started_all && args_.elastic) {
      if (absl::Status s = StartControl(); !s.ok()) {
        Print("launcher", absl::StrCat("error: --elastic: ", s.ToString()));
        started_all = false;
      }
    }
    int code = 1;
    {
      MutexLock lock(&mu_);
      if (started_all) {
        auto chief_done_or_failed = [this]() {
          mu_.AssertReaderHeld();
          return chief_done_ || failed_task_ >= 0 || signals_ > 0;
        };
        mu_.Await(absl::Condition(&chief_done_or_failed));
      }
      // The evaluator ends by itself after the final checkpoint (which a chief that succeeded
      // has marked): give it that time, as TFJob does; the other tasks are stopped after it.
      if (chief_done_ && chief_code_ == 0 && evaluator_ >= 0 && !evaluator_done_ && signals_ == 0) {
        Print("launcher", "chief succeeded; waiting for the evaluator to finish");
        auto evaluator_done_or_signalled = [this]() {
          mu_.AssertReaderHeld();
          return evaluator_done_ || signals_ > 0;
        };
        mu_.Await(absl::Condition(&evaluator_done_or_signalled));
      }
      if (chief_done_ && chief_code_ == 0 && evaluator_done_ && evaluator_code_ != 0) {
        code = evaluator_code_;
      } else if (chief_done_) {
        code = chief_code_;
      } else if (failed_task_ >= 0) {
        code = failed_code_;  // its waiter said why
      } else if (signals_ > 0) {
        code = ExitCodeForSignal(first_signal_);  // retryable: the launcher was stopped
      }
    }
    StopAll();
    if (control_ != nullptr) control_->Shutdown();  // a Scale in progress has returned (stopping_)
    control_.reset();
    control_loop_.reset();
    return code;
  }

  // --elastic: the control port `asyncps_launch scale` talks to.
  absl::Status StartControl() {
    control_loop_ = std::make_unique<net::EventLoop>();
    net::RpcServer::Options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.role = "launcher";
    o.token = token_;
    o.handler_threads = 2;
    control_ = std::make_unique<net::RpcServer>(*control_loop_, o);
    control_->Register<wire::ScaleRequest>(
        "launcher.Scale", {"operator"},
        [this](const net::RequestContext&, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
          auto request = in.RequestBody<wire::ScaleRequest>();
          const int want_ps = request.getPs();
          const int want = request.getWorkers();
          std::vector<std::string> done;
          if (want_ps != 0) {
            std::string message;
            absl::Status s = ScalePs(want_ps, &message);
            Print("launcher", s.ok() ? absl::StrCat("scale to ", want_ps, " PS: ", message)
                                     : absl::StrCat("scale to ", want_ps, " PS refused: ", s.ToString()));
            if (!s.ok()) return s;
            done.push_back(message);
          }
          if (want != 0 || want_ps == 0) {
            std::string message;
            absl::Status s = Scale(want, &message);
            Print("launcher", s.ok() ? absl::StrCat("scale to ", want, " workers: ", message)
                                     : absl::StrCat("scale to ", want, " workers refused: ", s.ToString()));
            if (!s.ok()) return s;
            done.push_back(message);
          }
          out->InitResponseBody<wire::ScaleResponse>().setMessage(absl::StrJoin(done, "; "));
          return absl::OkStatus();
        });
    RETURN_IF_ERROR(control_->Start());
    Print("launcher", absl::StrCat("control port ", control_->port(), " (asyncps_launch scale --control 127.0.0.1:",
                                   control_->port(), " --workers N)"));
    return absl::OkStatus();
  }

  // Brings the job to `want` PS (--max_ps; see the usage): starts the PS of the lowest free
  // slots, or sends SIGTERM to the highest live ones and waits for them to exit. Nothing
  // changes on an error.
  absl::Status ScalePs(int want, std::string* message) {
    if (args_.max_ps == 0) {
      return absl::FailedPreconditionError("this job's PS are fixed: start it with --elastic --max_ps P to scale them");
    }
    if (want < 1 || want > args_.max_ps) {
      return absl::InvalidArgumentError(absl::StrCat("--ps wants a number in 1..", args_.max_ps,
                                                     " (a job needs a PS; --max_ps ", args_.max_ps, " slots), got ", want));
    }
    if (int k = 1; absl::SimpleAtoi(args_.ps_replicas, &k) && want < k) {
      return absl::FailedPreconditionError(absl::StrCat("--ps_replicas ", k, " keeps ", k, " copies of every shard group on ", k,
                                                        " different PS: the job cannot have fewer than ", k));
    }
    std::vector<std::string> notes;
    std::vector<size_t> leaving;
    {
      MutexLock lock(&mu_);
      if (stopping_ || chief_done_ || signals_ > 0 || failed_task_ >= 0) {
        return absl::UnavailableError("the job is ending");
      }
      if (scaling_) return absl::FailedPreconditionError("another scale request is in progress");
      std::vector<size_t> live, free;  // by index, ascending (tasks_ lists PS slots in order)
      for (size_t t = 0; t < tasks_.size(); ++t) {
        if (tasks_[t].type != TaskType::kPs) continue;
        (removed_[t] ? free : live).push_back(t);
      }
      const int have = static_cast<int>(live.size());
      if (want == have) {
        *message = absl::StrCat("already ", have, " PS");
        return absl::OkStatus();
      }
      for (size_t t : free) {
        if (want > have && !gone_[t]) {
          return absl::FailedPreconditionError(absl::StrCat(tasks_[t].label, " is still leaving"));
        }
      }
      scaling_ = true;
      if (want > have) {
        for (int k = 0; k < want - have; ++k) {
          const size_t t = free[static_cast<size_t>(k)];
          Task& task = tasks_[t];
          // Its last process (if any) left for good: its waiter has returned.
          if (task.waiter.joinable()) task.waiter.join();
          absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(task.options);
          if (!proc.ok()) {
            notes.push_back(absl::StrCat("cannot start ", task.label, ": ", proc.status().ToString()));
            break;
          }
          notes.push_back(absl::StrCat("started ", task.label, " pid ", (*proc)->pid(), " at ", task.address));
          if (procs_[t] != nullptr) retired_.push_back(std::move(procs_[t]));
          procs_[t] = std::move(*proc);
          removed_[t] = false;
          gone_[t] = false;
          restarts_[t] = 0;
          ++started_;
          task.waiter = std::thread([this, t]() { WatchTask(t); });
        }
      } else {
        leaving = Retire(live, want);
      }
    }
    // Each asks the chief to move its copies off it (ASYNCPS_ELASTIC), then exits 0.
    return FinishScale(leaving, kPsLeaveWait, &notes, message);
  }

  // Marks the tasks live[want..] (by descending index) as scaled away: never restarted,
  // whatever their exit. Returns them.
  std::vector<size_t> Retire(const std::vector<size_t>& live, int want) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<size_t> leaving;
    for (int k = static_cast<int>(live.size()) - 1; k >= want; --k) {
      const size_t t = live[static_cast<size_t>(k)];
      removed_[t] = true;
      leaving.push_back(t);
    }
    return leaving;
  }

  // Sends SIGTERM to the `leaving` tasks (each then leaves the job as its role does: asks the
  // chief, exits 0), waits up to `wait` for them to exit, SIGKILLs those still there, and adds
  // a note on each to `notes`.
  void AwaitLeavers(const std::vector<size_t>& leaving, absl::Duration wait, std::vector<std::string>* notes) {
    if (leaving.empty()) return;
    MutexLock lock(&mu_);
    for (size_t t : leaving) {
      if (!gone_[t] && procs_[t] != nullptr) procs_[t]->Signal(SIGTERM);
    }
    auto all_gone = [&]() {
      mu_.AssertReaderHeld();
      if (stopping_) return true;
      for (size_t t : leaving) {
        if (!gone_[t]) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all_gone), wait)) {
      for (size_t t : leaving) {
        if (!gone_[t] && procs_[t] != nullptr) {
          notes->push_back(absl::StrCat(tasks_[t].label, " did not leave in time: SIGKILL"));
          procs_[t]->Signal(SIGKILL);
        }
      }
    }
    for (size_t t : leaving) notes->push_back(absl::StrCat(tasks_[t].label, gone_[t] ? " left" : " is leaving"));
  }

  // Brings the job to `want` workers (see the usage): starts new ones, or drains those with the
  // highest indices and waits for them to exit. Nothing changes on an error.
  absl::Status Scale(int want, std::string* message) {
    if (want < 1 || want > kMaxTasksPerJob) {
      return absl::InvalidArgumentError(absl::StrCat("--workers wants a number in 1..", kMaxTasksPerJob, ", got ", want,
                                                     " (a job needs a worker)"));
    }
    std::vector<std::string> notes;
    std::vector<size_t> leaving;
    {
      MutexLock lock(&mu_);
      if (stopping_ || chief_done_ || signals_ > 0 || failed_task_ >= 0) {
        return absl::UnavailableError("the job is ending");
      }
      if (scaling_) return absl::FailedPreconditionError("another scale request is in progress");
      std::vector<size_t> live;  // by index, ascending
      for (size_t t = 0; t < tasks_.size(); ++t) {
        if (tasks_[t].type == TaskType::kWorker && !removed_[t]) live.push_back(t);
      }
      std::sort(live.begin(), live.end(), [&](size_t a, size_t b) { return tasks_[a].index < tasks_[b].index; });
      const int have = static_cast<int>(live.size());
      if (want > have && tasks_.size() + static_cast<size_t>(want - have) > tasks_.capacity()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("this launcher can start at most ", kMaxElasticWorkers, " workers beyond its first ones"));
      }
      if (want == have) {
        *message = absl::StrCat("already ", have, " workers");
        return absl::OkStatus();
      }
      scaling_ = true;
      if (want > have) {
        absl::StatusOr<std::vector<int>> ports = PickUnusedPorts((want - have) * (serve_metrics_ ? 2 : 1));
        if (!ports.ok()) {
          scaling_ = false;
          return ports.status();
        }
        // A new worker starts as the first ones did (program, environment), at its own address.
        size_t model_task = 0;
        while (tasks_[model_task].type != TaskType::kWorker) ++model_task;  // --workers >= 1
        const Task& model = tasks_[model_task];
        for (int k = 0; k < want - have; ++k) {
          std::vector<std::string>& workers = jobs_[TaskType::kWorker];
          const int index = static_cast<int>(workers.size());
          const std::string address = absl::StrCat("127.0.0.1:", (*ports)[static_cast<size_t>(k)]);
          std::map<TaskType, std::vector<std::string>> jobs = jobs_;
          jobs[TaskType::kWorker].push_back(address);
          absl::StatusOr<ClusterSpec> spec = ClusterSpec::Create(jobs, TaskType::kWorker, index);
          if (!spec.ok()) {
            notes.push_back(absl::StrCat("error: ", spec.status().ToString()));
            break;
          }
          Task task{TaskType::kWorker, index, absl::StrCat("worker:", index), address, model.options, {}};
          task.options.env["TF_CONFIG"] = spec->ToTfConfig(TaskType::kWorker, index);
          if (serve_metrics_) {
            task.options.env["ASYNCPS_METRICS_PORT"] =
                std::to_string((*ports)[static_cast<size_t>(want - have + k)]);
          }
          task.options.on_line = [this, label = task.label](const std::string& line) { Print(label, line); };
          absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(task.options);
          if (!proc.ok()) {
            notes.push_back(absl::StrCat("cannot start ", task.label, ": ", proc.status().ToString()));
            break;
          }
          workers.push_back(address);
          notes.push_back(absl::StrCat("started ", task.label, " pid ", (*proc)->pid(), " at ", address));
          tasks_.push_back(std::move(task));
          procs_.push_back(std::move(*proc));
          restarts_.push_back(0);
          removed_.push_back(false);
          gone_.push_back(false);
          ++started_;
          const size_t t = tasks_.size() - 1;
          tasks_[t].waiter = std::thread([this, t]() { WatchTask(t); });
        }
      } else {
        leaving = Retire(live, want);
      }
    }
    // Each asks the chief to drain it (ASYNCPS_ELASTIC), then exits 0: its drain (worker/serve.cc:
    // 25 s at most), then a margin.
    return FinishScale(leaving, kWorkerLeaveWait, &notes, message);
  }

  // The end of a scale request: waits for the `leaving` tasks (AwaitLeavers), lets the next
  // request in, and answers with the notes.
  absl::Status FinishScale(const std::vector<size_t>& leaving, absl::Duration wait, std::vector<std::string>* notes,
                           std::string* message) {
    AwaitLeavers(leaving, wait, notes);
    {
      MutexLock lock(&mu_);
      scaling_ = false;
    }
    *message = absl::StrJoin(*notes, "; ");
    return absl::OkStatus();
  }

  // --hosts netns: deletes what SIGKILLed launchers left, then makes one host per name. Returns
  // 0, or the exit code when the hosts cannot be made (it says why).
  int MakeHosts(const std::vector<std::string>& names) {
    if (absl::Status s = deploy::CheckNetnsSupport(); !s.ok()) {
      Print("launcher", absl::StrCat("error: --hosts netns: ", s.message()));
      return ExitCodeForStatus(s);
    }
    if (absl::Status s = ProgramExists(args_.program[0]); !s.ok()) {
      // `ip netns exec` would say so only from inside each task, once per restart.
      Print("launcher", absl::StrCat("error: ", s.message()));
      return ExitCodeForStatus(s);
    }
    for (const std::string& stale : deploy::SweepStaleLauncherNamespaces()) {
      Print("launcher",
            absl::StrCat("deleted network namespace ", stale, " (its launcher is gone)"));
    }
    const std::string prefix = args_.netns_prefix.empty()
                                   ? absl::StrCat(deploy::kLauncherNetnsFamily, getpid(), "-")
                                   : args_.netns_prefix;
    absl::StatusOr<std::unique_ptr<deploy::NetnsHosts>> hosts =
        deploy::NetnsHosts::Create(prefix, args_.netns_subnet, names);
    if (!hosts.ok()) {
      Print("launcher", absl::StrCat("error: --hosts netns: ", hosts.status().ToString()));
      return ExitCodeForStatus(hosts.status());
    }
    hosts_ = *std::move(hosts);
    Print("launcher", absl::StrCat("hosts: ", hosts_->hosts().size(), " network namespaces ",
                                   prefix, "* on a bridge in ", hosts_->switch_netns(), ", subnet ",
                                   args_.netns_subnet));
    if (!args_.netns_rate.empty()) {
      if (absl::Status s = hosts_->CapLinks(args_.netns_rate); !s.ok()) {
        Print("launcher", absl::StrCat("error: --netns_rate: ", s.ToString()));
        return ExitCodeForStatus(s);
      }
      Print("launcher", absl::StrCat("links: every host capped at ", args_.netns_rate,
                                     " each way (tc tbf)"));
    }
    return 0;
  }

  // "killed by SIGKILL" or "exited with code 3".
  static std::string HowItEnded(int exit_code, int term_signal) {
    return term_signal != 0 ? absl::StrCat("killed by ", SignalName(term_signal))
                            : absl::StrCat("exited with code ", exit_code);
  }

  // Runs on a per-task thread: notices the task's exit and, for a parameter server, worker,
  // dispatcher or data worker that failed while the job runs, starts it again
  // (--max_restarts). Returns once the task has exited for good.
  void WatchTask(size_t t) {
    const Task& task = tasks_[t];
    // The chief and the evaluator decide the job's end; every other task is a server the job
    // needs back (a restarted dispatcher recovers from its journal, or starts a new generation
    // that the data workers follow).
    const bool restartable_role = task.type == TaskType::kPs || task.type == TaskType::kWorker ||
                                  task.type == TaskType::kDispatcher || task.type == TaskType::kDataWorker;
    while (true) {
      Subprocess* proc = nullptr;
      {
        MutexLock lock(&mu_);
        proc = procs_[t].get();  // replaced only by this thread; kept until StopAll
      }
      absl::StatusOr<int> code = proc->Wait(absl::InfiniteDuration());
      const int exit_code = code.ok() ? *code : -1;
      const std::string ended = HowItEnded(exit_code, proc->term_signal());
      int attempt = 0;  // > 0: this is restart `attempt` of the task
      bool evaluator_finished = false;
      {
        MutexLock lock(&mu_);
        const bool job_running = !stopping_ && !chief_done_ && signals_ == 0 && failed_task_ < 0;
        if (static_cast<int>(t) == chief_) {
          chief_done_ = true;
          chief_code_ = exit_code;
        } else if (static_cast<int>(t) == evaluator_ && !stopping_) {
          evaluator_done_ = true;
          evaluator_code_ = exit_code;
          evaluator_finished = true;
        } else if (removed_[t]) {
          // Scaled away: its exit is a departure (0 after a drain), never restarted.
          Print("launcher", absl::StrCat(task.label, " left the job (", ended, ")"));
        } else if (restartable_role && job_running && exit_code != 0 && args_.max_restarts > 0) {
          if (restarts_[t] < args_.max_restarts) {
            attempt = ++restarts_[t];
          } else {
            failed_task_ = static_cast<int>(t);
            failed_code_ = exit_code < 0 ? kExitFailure : exit_code;
            // Under mu_: said before the main thread wakes to stop the job.
            Print(
                "launcher",
                absl::StrCat(task.label, " ", ended, " with no restarts left (", args_.max_restarts,
                             " used); stopping the job with exit code ", failed_code_));
          }
        }
        if (attempt == 0) {
          ++exited_;
          gone_[t] = true;
          if (static_cast<int>(t) != chief_ && static_cast<int>(t) != evaluator_ && job_running &&
              failed_task_ != static_cast<int>(t) && !removed_[t]) {
            Print("launcher", absl::StrCat(task.label, " ", ended,
                                           "; leaving it to the chief whether to go on"));
          }
        }
      }
      if (static_cast<int>(t) == chief_) {
        Print("launcher", absl::StrCat("chief exited with code ", exit_code));
        return;
      }
      if (evaluator_finished)
        Print("launcher", absl::StrCat("evaluator exited with code ", exit_code));
      if (attempt == 0) return;
      const absl::Duration delay = RestartDelay(attempt);
      Print("launcher", absl::StrCat(task.label, " ", ended, "; restart ", attempt, "/",
                                     args_.max_restarts, " in ", TenthsOfSeconds(delay), " s"));
      pid_t pid = 0;
      {
        MutexLock lock(&mu_);
        auto job_ending = [this]() {
          mu_.AssertReaderHeld();
          return stopping_ || chief_done_ || signals_ > 0 || failed_task_ >= 0;
        };
        // Started under mu_, so StopAll (which sets stopping_ under mu_ first) sees every
        // process there is.
        if (mu_.AwaitWithTimeout(absl::Condition(&job_ending), delay) || removed_[t]) {
          ++exited_;
          gone_[t] = true;
          return;
        }
        absl::StatusOr<std::unique_ptr<Subprocess>> next = Subprocess::Start(task.options);
        if (!next.ok()) {
          Print("launcher",
                absl::StrCat("error: cannot restart ", task.label, ": ", next.status().ToString()));
          failed_task_ = static_cast<int>(t);
          failed_code_ = ExitCodeForStatus(next.status());
          ++exited_;
          gone_[t] = true;
          return;
        }
        pid = (*next)->pid();
        retired_.push_back(std::move(procs_[t]));
        procs_[t] = std::move(*next);
      }
      Print("launcher", absl::StrCat("restarted ", task.label, " (restart ", attempt, "/",
                                     args_.max_restarts, "): pid ", pid, " at ", task.address));
    }
  }

  // SIGTERM to every task still running, SIGKILL to those still there after the grace period
  // (or at once on a second SIGINT/SIGTERM), then reap and join everything.
  void StopAll() {
    int signals_at_start = 0;
    std::vector<Subprocess*> procs;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      signals_at_start = signals_;
      for (const std::unique_ptr<Subprocess>& proc : procs_) {
        if (proc != nullptr) procs.push_back(proc.get());
      }
    }
    // No task is restarted from here on, so `procs` stay the current processes.
    for (Subprocess* proc : procs) proc->Signal(SIGTERM);
    {
      MutexLock lock(&mu_);
      auto settled = [&]() {
        mu_.AssertReaderHeld();
        return exited_ == started_ || signals_ > signals_at_start;
      };
      mu_.AwaitWithTimeout(absl::Condition(&settled), kGracePeriod);
    }
    for (size_t t = 0; t < procs.size(); ++t) {
      if (procs[t]->running()) {
        Print("launcher", absl::StrCat("pid ", procs[t]->pid(), " did not stop; sending SIGKILL"));
        procs[t]->Signal(SIGKILL);
      }
    }
    for (Task& task : tasks_) {
      if (task.waiter.joinable()) task.waiter.join();
    }
    // Destroying a Subprocess joins its reader after it prints what is left in the pipe.
    MutexLock lock(&mu_);
    procs_.clear();
    retired_.clear();
  }

  void StartSignalThread() {
    signal_thread_ = std::thread([this]() {
      sigset_t set = HandledSignals();
      while (true) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0) continue;
        MutexLock lock(&mu_);
        if (sig == SIGUSR1) {
          if (signal_thread_done_) return;
          continue;
        }
        if (++signals_ == 1) first_signal_ = sig;
        Print("launcher", absl::StrCat("got ", sig == SIGINT ? "SIGINT" : "SIGTERM",
                                       signals_ == 1 ? "; stopping all tasks" : "; killing all tasks"));
      }
    });
  }

  void StopSignalThread() {
    {
      MutexLock lock(&mu_);
      signal_thread_done_ = true;
    }
    // SIGUSR1 is blocked everywhere, so only the sigwait in that thread receives it.
    pthread_kill(signal_thread_.native_handle(), SIGUSR1);
    signal_thread_.join();
  }

  // Writes one whole line; lines from different tasks never interleave.
  void Print(absl::string_view label, absl::string_view line) {
    std::string out = absl::StrCat("[", label, "] ", line, "\n");
    MutexLock lock(&print_mu_);
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
  }

 private:
  const LaunchArgs args_;
  std::unique_ptr<deploy::NetnsHosts> hosts_;  // --hosts netns; made before any task starts
  // Filled before any waiter thread starts; afterwards only --elastic's Scale appends, under
  // mu_, within the capacity reserved first (so no task moves under its waiter).
  std::vector<Task> tasks_;
  int chief_ = -1;
  int evaluator_ = -1;  // -1: no evaluator
  std::thread signal_thread_;

  Mutex mu_;
  // Each task's current process (null until started), by index into tasks_; a restart moves
  // the one it replaces to retired_, where it stays until StopAll.
  std::vector<std::unique_ptr<Subprocess>> procs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Subprocess>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<int> restarts_ ABSL_GUARDED_BY(mu_);  // restarts so far, by task
  // --elastic: tasks scaled away (drained, never restarted), and tasks that exited for good.
  std::vector<bool> removed_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> gone_ ABSL_GUARDED_BY(mu_);
  bool scaling_ ABSL_GUARDED_BY(mu_) = false;
  // The cluster's addresses by job, workers added by Scale included.
  std::map<TaskType, std::vector<std::string>> jobs_ ABSL_GUARDED_BY(mu_);
  std::string token_;
  bool serve_metrics_ = true;
  std::unique_ptr<net::EventLoop> control_loop_;
  std::unique_ptr<net::RpcServer> control_;  // --elastic; after the waiters' data it uses
  int started_ ABSL_GUARDED_BY(mu_) = 0;            // tasks started (each has a waiter)
  int exited_ ABSL_GUARDED_BY(mu_) = 0;             // tasks whose waiter saw them exit for good
  bool chief_done_ ABSL_GUARDED_BY(mu_) = false;
  int chief_code_ ABSL_GUARDED_BY(mu_) = -1;
  bool evaluator_done_ ABSL_GUARDED_BY(mu_) = false;
  int evaluator_code_ ABSL_GUARDED_BY(mu_) = -1;
  // The task that failed with no restarts left (-1: none), and its exit code: the job's.
  int failed_task_ ABSL_GUARDED_BY(mu_) = -1;
  int failed_code_ ABSL_GUARDED_BY(mu_) = 0;
  int signals_ ABSL_GUARDED_BY(mu_) = 0;
  int first_signal_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool signal_thread_done_ ABSL_GUARDED_BY(mu_) = false;

  Mutex print_mu_;
};

// `asyncps_launch scale --control HOST:PORT --workers N [--token T]`: asks a running
// --elastic launcher for N workers. Returns the exit code.
int ScaleMain(int argc, char** argv) {
  ScaleArgs args;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    absl::Status s;
    if (arg == "--control") {
      args.control = value;
    } else if (arg == "--workers") {
      s = ParseCount("workers", value, &args.workers);
    } else if (arg == "--ps") {
      s = ParseCount("ps", value, &args.ps);
    } else if (arg == "--token") {
      args.token = value;
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("scale: unknown argument '", arg, "'"));
    }
    if (!s.ok()) {
      std::fprintf(stderr, "asyncps_launch scale: %s\n", std::string(s.message()).c_str());
      return kExitUsage;
    }
  }
  std::string host;
  int port = 0;
  if (args.control.empty() || !ParseHostPort(args.control, &host, &port).ok() || (args.workers == 0 && args.ps == 0)) {
    std::fprintf(stderr, "usage: asyncps_launch scale --control HOST:PORT [--workers N] [--ps N] [--token T]\n");
    return kExitUsage;
  }
  if (args.token.empty()) {
    const char* env = std::getenv("ASYNCPS_CLUSTER_TOKEN");
    args.token = env != nullptr ? env : "";
  }
  net::EventLoop loop;
  net::RpcClient::Options o;
  o.address = args.control;
  o.role = "operator";
  o.token = args.token;
  absl::StatusOr<net::InMessage> answer;
  std::string message;
  {
    net::RpcClient client(loop, o);
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::ScaleRequest>();
    body.setWorkers(args.workers);
    body.setPs(args.ps);
    // Scaling down waits for the drained workers (at most ~40 s) and PS (~75 s) to exit.
    answer = client.Call("launcher.Scale", std::move(request), absl::Seconds(150));
    if (answer.ok()) {
      absl::Status s = net::CatchDecodeErrors([&]() -> absl::Status {
        message = answer->ResponseBody<wire::ScaleResponse>().getMessage().cStr();
        return absl::OkStatus();
      });
      if (!s.ok()) answer = s;
    }
  }
  if (!answer.ok()) {
    std::fprintf(stderr, "asyncps_launch scale: %s\n", answer.status().ToString().c_str());
    return ExitCodeForStatus(answer.status());
  }
  std::printf("%s\n", message.c_str());
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "scale") return asyncps::ScaleMain(argc, argv);
  absl::StatusOr<asyncps::LaunchArgs> args = asyncps::ParseArgs(argc, argv);
  if (!args.ok()) {
    if (absl::IsNotFound(args.status())) {
      std::fputs(asyncps::kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "asyncps_launch: %s\n\n%s", std::string(args.status().message()).c_str(),
                 asyncps::kUsage);
    return asyncps::kExitUsage;
  }

  // Signals are taken by one thread with sigwait, so they must be blocked before any thread
  // starts (threads inherit the mask). Children get a clean mask from Subprocess.
  sigset_t set = asyncps::HandledSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A closed stdout (launcher piped into `head`) must not kill the launcher and orphan tasks.
  signal(SIGPIPE, SIG_IGN);

  asyncps::Launcher launcher(*std::move(args));
  return launcher.Run();
}
