// train_bench: the main job's speed. The Fashion-MNIST MLP (784-256-128-10, batch 128, Adam
// 1e-3) trained asynchronously on 2 PS + 2 workers (real processes, one LibTorch thread each,
// all on this machine's cores) beside the same LibTorch model, data pipeline and step trained in
// this process with no network and torch::optim::Adam, measured in the same run:
//   * examples/s (training time; the final evaluation excluded) and their ratio, against the
//     one-process reference with 1 LibTorch thread (one core, as each worker gets) and with
//     as many threads as the machine has cores (what the distributed run occupies);
//   * the test accuracy after the same number of epochs (options that add staleness must not
//     cost accuracy);
//   * where a distributed step's time goes, from the processes' own instrumentation scraped
//     over /metrics before and after a window of steps: the workers' step phases
//     (asyncps_worker_step_phase_seconds_total: model wait, pull, compute, push), their input
//     wait and step time, the chief's worker.Run round trip against the workers' step time
//     (dispatch), the PS handler time per request (asyncps_rpc_server_seconds, queueing on the
//     PS included) and every process's CPU time (/proc/PID/stat) per step, against the
//     reference's: how many cores keeping up with the reference would take; every process's
//     context switches per step (/proc/PID/task/*/status: the hand-offs between threads), and
//     the staleness of the applied gradients (mean, and the share staler than 1, 2 and 4).
// Configurations: the main command's default (fashion_mnist with no step flags: overlap_pull
// fused into the push, 3 closures per worker), TensorFlow's defaults, overlap_pull alone, the
// plain pipelined step (2 closures per worker) with the big matrix split over both PS, 3 closures per worker with the plain pull, the pull fused into the
// push (--fused_push_pull) with 2 closures per worker, and the earlier default (plain: overlap_pull,
// its own pull, 2 closures per worker), and the default with one thing changed (default_*: without the
// staleness options, with the staleness-aware learning rate, with max_staleness 4 or 2, with
// fc1.weight split over both PS), and the default with the workers' pulls and pushes in bf16 (bf16:
// --transport=bf16), the default with the learning rate's cosine decay (decay: --lr_decay cosine)
// and with a constant rate (default_constant_lr: --lr_decay none). The one-thread reference runs before
// and after them (with a constant learning rate); ratios are against the faster of its two runs. The
// configurations with the cosine decay (the default among them) have their accuracy compared with
// one more one-thread reference run, after the others, trained with the same schedule
// ("reference, cosine decay").
// On a machine shared with other jobs the figures mean little unless the bench gets the cores;
// see the README (Measured) for how they were taken.
// Flags: --quick (one epoch, the default configuration: a smoke run for ctest), --epochs N (default 10,
// the main job's), --only NAME[,NAME...] (those configurations), --repeat N (each of them N times, in
// turn), --seed N (the model's initialisation and the data's shuffles, both sides), --json=PATH (the figures as JSON too,
// bench/report.h), --staleness_table (instead: accuracy and examples/s against closures in
// flight per worker, 1, 2, 4, 8, with overlap_pull, without and with each staleness option —
// the table of docs/staleness.md; --epochs applies, e.g. 3).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "deploy/blas_kernel.h"
#include "bench/aims.h"
#include "bench/prometheus_scrape.h"
#include "bench/report.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "examples/fmnist_training.h"
#include "metrics/process_metrics.h"
#include "partitioners/partitioner.h"
#include "tests/testutil/http_get.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"

namespace asyncps {
namespace {

constexpr int kNumPs = 2;
constexpr int kNumWorkers = 2;

// One way of running the distributed step.
struct Config {
  const char* name;
  const char* what;
  bool overlap_pull;
  int closures_per_worker;
  bool split;  // fc1.weight (803 KB of the model's 940 KB) split over both PS
  bool fused_push_pull = fmnist::kDefaultFusedPushPull;  // fmnist::Options::fused_push_pull
  // fmnist::Options' staleness options (docs/staleness.md).
  int64_t max_staleness = fmnist::kDefaultMaxStaleness;
  bool staleness_aware_lr = fmnist::kDefaultStalenessAwareLr;
  // The workers' pulls and gradient pushes in bf16 (--transport=bf16; core/bf16.h).
  bool bf16_transport = false;
  // fmnist::Options::cosine_lr_decay (fashion_mnist --lr_decay).
  bool cosine_lr_decay = fmnist::kDefaultCosineLrDecay;
};

const Config kConfigs[] = {
    {"default", "the main command's default step (fashion_mnist without step flags): overlap_pull fused into the push, 3 closures per worker",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false},
    {"baseline", "TensorFlow's defaults: 1 closure per worker; pull, compute, push and wait", false, 1, false},
    {"overlap_pull", "next step's pull sent behind this push, answer awaited with the model free (1 step staler)",
     true, 1, false, false},
    {"pipelined_split", "overlap_pull, 2 closures per worker, and fc1.weight split over both PS (MinSizePartitioner, 2 shards)",
     true, 2, true, false},
    {"pipelined_3", "overlap_pull (its own pull) and 3 closures per worker (deeper pipelining: more staleness)", true, 3,
     false, false},
    {"fused", "the next step's pull fused into this push (values read after the apply), 2 closures per worker",
     true, 2, false, true},
    {"plain", "the step that was the default before the fused push-and-read: overlap_pull, its own pull, 2 closures per worker",
     true, 2, false, false},
    {"default_no_bound", "the default step without a staleness option (no max_staleness, plain learning rate)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull, -1, false},
    {"default_aware", "the default step with the staleness-aware learning rate (lr / max(1, staleness))",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull,
     fmnist::kDefaultMaxStaleness, true},
    {"default_max4", "the default step with max_staleness 4 (staler pushes refused and recomputed)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull, 4,
     fmnist::kDefaultStalenessAwareLr},
    {"default_split", "the default step with fc1.weight (803 KB of the model's 940 KB) split over both PS",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, true, fmnist::kDefaultFusedPushPull},
    {"default_max2", "the default step with max_staleness 2 (staler pushes refused and recomputed)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull, 2,
     fmnist::kDefaultStalenessAwareLr},
    {"bf16", "the default step with the workers' pulls and gradient pushes in bf16 (--transport=bf16: half the bytes)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull,
     fmnist::kDefaultMaxStaleness, fmnist::kDefaultStalenessAwareLr, true},
    {"decay", "the default step with the learning rate's cosine decay to 0 over the run's updates (--lr_decay cosine)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull,
     fmnist::kDefaultMaxStaleness, fmnist::kDefaultStalenessAwareLr, false, true},
    {"default_constant_lr", "the default step with a constant learning rate (--lr_decay none)",
     fmnist::kDefaultOverlapPull, fmnist::kDefaultClosuresPerWorker, false, fmnist::kDefaultFusedPushPull,
     fmnist::kDefaultMaxStaleness, fmnist::kDefaultStalenessAwareLr, false, false},
};

// Context switches (voluntary + involuntary) of each live thread of process `pid`, by thread
// id (/proc/PID/task/TID/status): where a step's hand-offs happen. Threads that ended in a
// window are not counted (none do in steady training).
std::map<int, double> ThreadSwitches(int pid) {
  std::map<int, double> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(absl::StrCat(dir, "/", e->d_name, "/status"));
    double n = 0;
    for (std::string line; std::getline(in, line);) {
      if (absl::StartsWith(line, "voluntary_ctxt_switches:") || absl::StartsWith(line, "nonvoluntary_ctxt_switches:")) {
        n += std::strtod(line.c_str() + line.find(':') + 1, nullptr);
      }
    }
    out[std::atoi(e->d_name)] = n;
  }
  closedir(d);
  return out;
}

// Every metrics text, CPU time and context switch count of the cluster at one moment.
struct Snapshot {
  absl::Time at;
  std::vector<std::string> workers, ps;
  std::string chief;
  std::vector<double> worker_cpu, ps_cpu;
  double chief_cpu = 0;
  std::vector<std::map<int, double>> worker_switches, ps_switches;
  std::map<int, double> chief_switches;
};

// Metrics port of a process, from its "ready ... (metrics on port N)" line.
int MetricsPort(const std::string& output) {
  return static_cast<int>(testutil::NumberAfter(output, "(metrics on port "));
}

class ClusterProbe {
 public:
  ClusterProbe(testutil::LocalCluster& cluster, ParameterServerStrategy& strategy) : cluster_(cluster), strategy_(strategy) {
    for (int i = 0; i < kNumWorkers; ++i) worker_ports_.push_back(MetricsPort(cluster.worker_output(i)));
    for (int i = 0; i < kNumPs; ++i) ps_ports_.push_back(MetricsPort(cluster.ps_process(i).output()));
  }

  bool ok() const {
    for (int p : worker_ports_) if (p <= 0) return false;
    for (int p : ps_ports_) if (p <= 0) return false;
    return true;
  }

  Snapshot Take() {
    Snapshot s;
    s.at = absl::Now();
    for (int i = 0; i < kNumWorkers; ++i) {
      s.workers.push_back(testutil::HttpGetBody(worker_ports_[i], "/metrics"));
      s.worker_cpu.push_back(bench::ProcessCpuSeconds(cluster_.worker_pid(i)));
      s.worker_switches.push_back(ThreadSwitches(cluster_.worker_pid(i)));
    }
    for (int i = 0; i < kNumPs; ++i) {
      s.ps.push_back(testutil::HttpGetBody(ps_ports_[i], "/metrics"));
      s.ps_cpu.push_back(bench::ProcessCpuSeconds(cluster_.ps_pid(i)));
      s.ps_switches.push_back(ThreadSwitches(cluster_.ps_pid(i)));
    }
    s.chief = strategy_.process().process_metrics().Serialize();
    s.chief_cpu = bench::ProcessCpuSeconds(getpid());
    s.chief_switches = ThreadSwitches(getpid());
    return s;
  }

 private:
  testutil::LocalCluster& cluster_;
  ParameterServerStrategy& strategy_;
  std::vector<int> worker_ports_, ps_ports_;
};

// Sum over `texts` of series `series` (with `labels`), after minus before.
double Delta(const std::vector<std::string>& after, const std::vector<std::string>& before, const std::string& series,
             std::initializer_list<std::string> labels = {}) {
  double d = 0;
  for (const std::string& t : after) d += bench::SumSamples(t, series, labels);
  for (const std::string& t : before) d -= bench::SumSamples(t, series, labels);
  return d;
}

// Context switches per step of processes `after` (against `before`): the total over every
// process, then the busiest threads' (summed over processes by rank), e.g. "20.1 (9.0 6.1 3.2)".
std::string SwitchesPerStep(const std::vector<std::map<int, double>>& after,
                            const std::vector<std::map<int, double>>& before, double steps) {
  std::vector<double> by_rank;
  double total = 0;
  for (size_t p = 0; p < after.size(); ++p) {
    std::vector<double> threads;
    for (const auto& [tid, n] : after[p]) {
      double d = n;
      if (p < before.size()) {
        auto it = before[p].find(tid);
        if (it != before[p].end()) d -= it->second;
      }
      threads.push_back(d);
      total += d;
    }
    absl::c_sort(threads, std::greater<double>());
    if (by_rank.size() < threads.size()) by_rank.resize(threads.size());
    for (size_t i = 0; i < threads.size(); ++i) by_rank[i] += threads[i];
  }
  std::string out = absl::StrFormat("%.1f (busiest threads:", total / steps);
  for (size_t i = 0; i < by_rank.size() && i < 4; ++i) absl::StrAppend(&out, absl::StrFormat(" %.1f", by_rank[i] / steps));
  return out + ")";
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

struct Run {
  fmnist::Result result;
  double load_before = 0, load_after = 0;
  double cpu_seconds = 0;  // the reference's own CPU time (one process)
  std::string breakdown;   // distributed runs: the lines printed under the figure
  double cpu_per_step = 0;  // distributed runs: ms of CPU of every process per step
  double retried = 0;         // distributed runs: closures the coordinator ran again
  double mean_staleness = 0;  // distributed runs: mean staleness of the applied gradients
  // distributed runs: fractions of the applied gradients with staleness above 1, 2 and 4
  double staler_than_1 = 0, staler_than_2 = 0, staler_than_4 = 0;
};

// The breakdown of the window between `a` and `b`, per step (128 examples), in ms.
std::string Breakdown(const Snapshot& a, const Snapshot& b, double* cpu_per_step) {
  const double wall = absl::ToDoubleSeconds(b.at - a.at);
  const double steps = Delta(b.workers, a.workers, "asyncps_worker_steps_total", {"result=\"ok\""});
  if (steps <= 0 || wall <= 0) return "    (no steps in the measured window)\n";
  auto per_step = [&](double seconds) { return 1e3 * seconds / steps; };
  auto phase = [&](const char* p) {
    return per_step(Delta(b.workers, a.workers, "asyncps_worker_step_phase_seconds_total",
                          {absl::StrCat("phase=\"", p, "\"")}));
  };
  const double model_wait = phase("model_wait"), pull = phase("pull"), compute = phase("compute"),
               push = phase("push"), push_send = phase("push_send"), push_wait = phase("push_wait");
  const double input = per_step(Delta(b.workers, a.workers, "asyncps_worker_input_wait_seconds_total"));
  const double step = per_step(Delta(b.workers, a.workers, "asyncps_worker_step_seconds_sum"));
  const double step_other = step - input - model_wait - pull - compute - push - push_send - push_wait;
  // Worker time per step: each worker's wall time, over the steps both made.
  const double worker_wall = per_step(kNumWorkers * wall);
  // The model is what a worker's steps queue for: the time it sat unused is the worker's loss.
  const double model_idle = worker_wall - pull - compute - push;
  // The chief's round trip of worker.Run beside the worker's own step time: dispatch.
  const double run_rtt = Delta({b.chief}, {a.chief}, "asyncps_rpc_client_seconds_sum", {"method=\"worker.Run\""});
  const double run_count = Delta({b.chief}, {a.chief}, "asyncps_rpc_client_seconds_count", {"method=\"worker.Run\""});
  const double dispatch = run_count > 0 ? 1e3 * run_rtt / run_count - step : 0;
  auto ps_ms = [&](const char* method, const char* which) {
    const std::string m = absl::StrCat("method=\"", method, "\"");
    const bool server = std::strcmp(which, "server") == 0;
    const std::vector<std::string>& after = server ? b.ps : b.workers;
    const std::vector<std::string>& before = server ? a.ps : a.workers;
    const std::string family = server ? "asyncps_rpc_server_seconds" : "asyncps_rpc_client_seconds";
    const double n = Delta(after, before, family + "_count", {m});
    return n > 0 ? 1e3 * Delta(after, before, family + "_sum", {m}) / n : 0.0;
  };
  const double worker_cpu = per_step(Sum(b.worker_cpu) - Sum(a.worker_cpu));
  const double ps_cpu = per_step(Sum(b.ps_cpu) - Sum(a.ps_cpu));
  const double chief_cpu = per_step(b.chief_cpu - a.chief_cpu);
  *cpu_per_step = worker_cpu + ps_cpu + chief_cpu;
  const double cores = static_cast<double>(std::thread::hardware_concurrency());
  // Bytes every process sent (tensors and framing; loopback TCP costs CPU on both ends).
  const double sent = Delta(b.workers, a.workers, "asyncps_net_sent_bytes_total") +
                      Delta(b.ps, a.ps, "asyncps_net_sent_bytes_total") +
                      Delta({b.chief}, {a.chief}, "asyncps_net_sent_bytes_total");
  std::string out;
  absl::StrAppend(&out, absl::StrFormat(
      "    worker time per step (ms, %.0f steps measured): %.2f = model in use %.2f (pull %.2f + compute %.2f + push"
      " %.2f) + model idle %.2f\n"
      "      a step's own time %.2f: input %.2f, waiting for the model %.2f, pull/compute/push, after freeing the"
      " model: sending the push %.2f, waiting for its answer %.2f; rest %.2f\n",
      steps, worker_wall, pull + compute + push, pull, compute, push, model_idle, step, input, model_wait, push_send,
      push_wait, step_other));
  absl::StrAppend(&out, absl::StrFormat(
      "    dispatch: chief's worker.Run round trip minus the step: %.2f ms; PS handler time (queueing included): "
      "read %.2f ms, push %.2f ms; worker round trip: read %.2f ms, push %.2f ms\n",
      dispatch, ps_ms("ps.Read", "server"), ps_ms("ps.PushGradients", "server"), ps_ms("ps.Read", "client"),
      ps_ms("ps.PushGradients", "client")));
  absl::StrAppend(&out, absl::StrFormat(
      "    CPU per step (ms): workers %.2f + PS %.2f + chief %.2f = %.2f; %.2f MB sent per step; %.2f of %.0f cores"
      " busy\n",
      worker_cpu, ps_cpu, chief_cpu, worker_cpu + ps_cpu + chief_cpu, sent / steps / 1e6,
      (Sum(b.worker_cpu) - Sum(a.worker_cpu) + Sum(b.ps_cpu) - Sum(a.ps_cpu) + b.chief_cpu - a.chief_cpu) / wall,
      cores));
  // With static shards a worker that gets fewer steps leaves its half of the data seen less.
  std::string shares;
  for (int i = 0; i < kNumWorkers; ++i) {
    const double mine = bench::SumSamples(b.workers[i], "asyncps_worker_steps_total", {"result=\"ok\""}) -
                        bench::SumSamples(a.workers[i], "asyncps_worker_steps_total", {"result=\"ok\""});
    absl::StrAppend(&shares, i == 0 ? "" : " / ", absl::StrFormat("%.1f%%", 100 * mine / steps));
  }
  absl::StrAppend(&out, "    steps by worker: ", shares, "\n");
  // Per step of the cluster (both workers' steps): the hand-offs between threads.
  absl::StrAppend(&out, absl::StrFormat("    context switches per step: workers %s, PS %s, chief %s\n",
                                        SwitchesPerStep(b.worker_switches, a.worker_switches, steps),
                                        SwitchesPerStep(b.ps_switches, a.ps_switches, steps),
                                        SwitchesPerStep({b.chief_switches}, {a.chief_switches}, steps)));
  return out;
}

absl::StatusOr<Run> TrainDistributed(const Config& config, const fmnist::Options& options) {
  testutil::LocalCluster::Options o;
  o.num_ps = kNumPs;
  o.num_workers = kNumWorkers;
  o.worker_binary = "fashion_mnist";
  o.extra_env = {{"ASYNCPS_METRICS_PORT", "0"}};  // a free port each, read from the ready line
  // Read by the workers (ProcessOptions::transport); the chief here reads f32 (its evaluation too).
  if (config.bf16_transport) o.extra_env.emplace_back("ASYNCPS_TRANSPORT", "bf16");
  ASSIGN_OR_RETURN(auto cluster, testutil::LocalCluster::Start(o));
  std::shared_ptr<const Partitioner> partitioner;
  if (config.split) {
    ASSIGN_OR_RETURN(auto p, MinSizePartitioner::Create(MinSizePartitioner::kDefaultMinShardBytes, kNumPs));
    partitioner = std::move(p);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<testutil::TestChief> chief, cluster->MakeChief(partitioner));
  ParameterServerStrategy& strategy = chief->strategy();
  const Program program = fmnist::MakeProgram();
  ClusterCoordinator::Options co;
  co.closures_per_worker = config.closures_per_worker;
  ClusterCoordinator coordinator(strategy, program, co);
  ClusterProbe probe(*cluster, strategy);
  if (!probe.ok()) return absl::InternalError("no metrics port in a ps or worker's output");

  fmnist::Options run = options;
  run.overlap_pull = config.overlap_pull;
  run.fused_push_pull = config.fused_push_pull;
  run.max_staleness = config.max_staleness;
  run.staleness_aware_lr = config.staleness_aware_lr;
  run.cosine_lr_decay = config.cosine_lr_decay;
  // The window: from a tenth of the first epoch (after start-up) to the last step.
  const int64_t total_steps = static_cast<int64_t>(options.epochs) * (60'000 / options.batch_size);
  const int64_t first = std::max<int64_t>(1, 60'000 / options.batch_size / 10);
  Snapshot before, after;
  run.on_step = [&](int64_t step) {
    if (step == first) before = probe.Take();
    if (step == total_steps) after = probe.Take();
  };
  Run r;
  r.load_before = bench::LoadAverage();
  ASSIGN_OR_RETURN(r.result, fmnist::Train(strategy, coordinator, run));
  r.load_after = bench::LoadAverage();
  r.breakdown = Breakdown(before, after, &r.cpu_per_step);
  r.retried = bench::SumSamples(strategy.process().process_metrics().Serialize(),
                                "asyncps_coordinator_closures_retried_total");
  double staleness_sum = 0, staleness_count = 0;
  for (const std::string& ps : after.ps) {
    staleness_sum += bench::SumSamples(ps, "asyncps_ps_gradient_staleness_sum");
    staleness_count += bench::SumSamples(ps, "asyncps_ps_gradient_staleness_count");
  }
  r.mean_staleness = staleness_count > 0 ? staleness_sum / staleness_count : 0;
  auto staler_than = [&](const char* le) {
    double at_most = 0;
    for (const std::string& ps : after.ps) {
      at_most += bench::SumSamples(ps, "asyncps_ps_gradient_staleness_bucket", {absl::StrCat("le=\"", le, "\"")});
    }
    return staleness_count > 0 ? 1 - at_most / staleness_count : 0;
  };
  r.staler_than_1 = staler_than("1");
  r.staler_than_2 = staler_than("2");
  r.staler_than_4 = staler_than("4");
  return r;
}

absl::StatusOr<Run> TrainReference(const fmnist::Options& options, int threads) {
  fmnist::SetTorchThreads(threads);
  Run r;
  r.load_before = bench::LoadAverage();
  const double cpu = bench::ProcessCpuSeconds(getpid());
  ASSIGN_OR_RETURN(r.result, fmnist::TrainLocal(options));
  r.cpu_seconds = bench::ProcessCpuSeconds(getpid()) - cpu;
  r.load_after = bench::LoadAverage();
  fmnist::SetTorchThreads(1);
  return r;
}

void PrintLine(const std::string& label, const Run& r) {
  std::printf("  %-58s %7.0f examples/s  test accuracy %.4f  (load avg %.1f -> %.1f)\n", label.c_str(),
              r.result.examples_per_second, r.result.test_accuracy, r.load_before, r.load_after);
}

// The reference's CPU time per step, and how many cores that kept busy (its input pipeline
// prefetches on a thread of its own, beside the LibTorch thread(s)).
double RefCpuPerStepMs(const Run& r) {
  return 1e3 * r.cpu_seconds / static_cast<double>(std::max<int64_t>(1, r.result.steps));
}
void PrintReferenceCpu(const Run& r) {
  std::printf("    CPU per step %.2f ms; %.2f cores busy\n", RefCpuPerStepMs(r),
              r.cpu_seconds / std::max(1e-9, r.result.seconds));
}

// Distributed examples/s over the one-process reference's with 1 LibTorch thread.
constexpr char kSpeedAim[] = "distributed / one process (1 thread) examples/s";
constexpr double kSpeedAimRatio = 1.0;

void AddReference(bench::Report& report, const std::string& label, const Run& r) {
  report.Add(
      {.name = label + " examples/s", .value = r.result.examples_per_second, .unit = "examples/s"});
  report.Add({.name = label + " test accuracy", .value = r.result.test_accuracy, .unit = ""});
  report.Add({.name = label + " CPU per step", .value = RefCpuPerStepMs(r), .unit = "ms"});
}

// docs/staleness.md's table: for each number of closures in flight per worker (overlap_pull on,
// so that the closures' pulls and pushes overlap), the MLP trained without a staleness option,
// with the staleness-aware learning rate, and with max_staleness 1 and 4.
int StalenessTable(int epochs, bench::Report& report) {
  fmnist::Options options;
  options.progress = false;
  options.epochs = epochs;
  fmnist::SetTorchThreads(1);
  struct Variant {
    const char* name;
    int64_t max_staleness;
    bool aware;
  };
  const Variant variants[] = {{"none", -1, false}, {"staleness-aware lr", -1, true}, {"max_staleness 1", 1, false},
                              {"max_staleness 4", 4, false}};
  std::printf("staleness table: Fashion-MNIST MLP, batch %d, Adam 1e-3, %d epoch(s), %d PS + %d workers, overlap_pull\n",
              options.batch_size, options.epochs, kNumPs, kNumWorkers);
  std::printf("| closures in flight per worker | option | test accuracy | examples/s | mean staleness | recomputed steps | load avg |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int in_flight : {1, 2, 4, 8}) {
    for (const Variant& v : variants) {
      const Config config{"staleness", "", true, in_flight, false};
      fmnist::Options run = options;
      run.max_staleness = v.max_staleness;
      run.staleness_aware_lr = v.aware;
      absl::StatusOr<Run> d = TrainDistributed(config, run);
      if (!d.ok()) {
        std::fprintf(stderr, "train_bench: %d in flight, %s: %s\n", in_flight, v.name, d.status().ToString().c_str());
        return 1;
      }
      std::printf("| %d | %s | %.4f | %.0f | %.2f | %.0f | %.1f -> %.1f |\n", in_flight, v.name,
                  d->result.test_accuracy, d->result.examples_per_second, d->mean_staleness, d->retried,
                  d->load_before, d->load_after);
      std::fflush(stdout);
      const std::string label = absl::StrCat("staleness ", in_flight, " in flight, ", v.name);
      report.Add({.name = label + " examples/s", .value = d->result.examples_per_second, .unit = "examples/s"});
      report.Add({.name = label + " test accuracy", .value = d->result.test_accuracy, .unit = ""});
    }
  }
  return 0;
}

int Main(bool quick, int epochs, const std::string& only, int repeat, uint64_t seed, bench::Report& report) {
  fmnist::Options options;
  options.progress = false;
  options.seed = seed;
  options.epochs = quick ? 1 : epochs;
  // The references train with a constant learning rate (torch::optim::Adam as it comes);
  // configurations with the cosine decay (the main command's default) have their accuracy
  // compared with one more reference trained with it (below).
  options.cosine_lr_decay = false;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("train_bench: Fashion-MNIST MLP 784-256-128-10, batch %d, Adam 1e-3, %d epoch(s), %d cores%s\n",
              options.batch_size, options.epochs, cores, quick ? " (--quick)" : "");
  std::printf("  distributed: %d PS + %d workers + the chief (this process), 1 LibTorch thread per worker, all on the "
              "same %d cores; the references have them to themselves\n", kNumPs, kNumWorkers, cores);
  const char* blas_core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("  OpenBLAS kernels (the reference's and every worker's): %s\n",
              blas_core != nullptr && *blas_core != '\0' ? blas_core : "as OpenBLAS picks them for this CPU");
  std::fflush(stdout);

  auto fail = [](const char* what, const absl::Status& s) {
    std::fprintf(stderr, "train_bench: %s: %s\n", what, s.ToString().c_str());
    return 1;
  };
  // The one-thread reference runs before and after the distributed runs, and each ratio is
  // taken against the faster of the two: load that comes or goes during the run then cannot
  // flatter the distributed figure (on a shared machine the reference moves by 2x).
  absl::StatusOr<Run> ref_before = TrainReference(options, 1);
  if (!ref_before.ok()) return fail("reference", ref_before.status());
  PrintLine("reference: one process, 1 LibTorch thread", *ref_before);
  PrintReferenceCpu(*ref_before);
  std::optional<Run> refn;
  if (!quick && cores > 1) {
    absl::StatusOr<Run> r = TrainReference(options, cores);
    if (!r.ok()) return fail("reference", r.status());
    refn = *std::move(r);
    PrintLine(absl::StrCat("reference: one process, ", cores, " LibTorch threads"), *refn);
    PrintReferenceCpu(*refn);
    AddReference(report, absl::StrCat("reference (", cores, " threads)"), *refn);
  }
  std::fflush(stdout);
  fmnist::SetTorchThreads(1);
  std::vector<std::pair<const Config*, Run>> runs;
  // --repeat: the configurations in turn, so that load that comes or goes meets each alike.
  for (int round = 0; round < repeat; ++round) {
    for (const Config& config : kConfigs) {
      if (!only.empty() && !absl::c_linear_search(absl::StrSplit(only, ','), config.name)) continue;
      if (quick && only.empty() && std::strcmp(config.name, "default") != 0) continue;
      absl::StatusOr<Run> d = TrainDistributed(config, options);
      if (!d.ok()) return fail(config.name, d.status());
      PrintLine(absl::StrCat("distributed, ", config.name), *d);
      std::fflush(stdout);
      runs.emplace_back(&config, *std::move(d));
    }
  }
  absl::StatusOr<Run> ref_after = TrainReference(options, 1);
  if (!ref_after.ok()) return fail("reference", ref_after.status());
  PrintLine("reference again, after the distributed runs", *ref_after);
  PrintReferenceCpu(*ref_after);
  const Run& ref1 = ref_after->result.examples_per_second > ref_before->result.examples_per_second ? *ref_after
                                                                                                   : *ref_before;
  std::printf("  the faster reference run (%.0f examples/s) is each ratio's reference\n",
              ref1.result.examples_per_second);
  AddReference(report, "reference (1 thread)", ref1);
  // Configurations with the cosine decay: their accuracy against a reference trained with it
  // too (torch::optim::Adam's rate set each step by the same formula over the same number of
  // steps). Its speed is the other references'; speed ratios stay against ref1.
  std::optional<Run> ref_cosine;
  constexpr char kCosineLabel[] = "reference, cosine decay (1 thread)";
  if (absl::c_any_of(runs, [](const auto& run) { return run.first->cosine_lr_decay; })) {
    fmnist::Options cosine = options;
    cosine.cosine_lr_decay = true;
    absl::StatusOr<Run> r = TrainReference(cosine, 1);
    if (!r.ok()) return fail("reference", r.status());
    ref_cosine = *std::move(r);
    PrintLine(kCosineLabel, *ref_cosine);
    PrintReferenceCpu(*ref_cosine);
    AddReference(report, kCosineLabel, *ref_cosine);
  }

  report.aims().Declare(kSpeedAim, bench::AimBound::kAtLeast, kSpeedAimRatio);
  std::map<std::string, int> runs_of;
  for (const auto& [config, d] : runs) {
    std::printf("\n  distributed, %s: %.0f examples/s, test accuracy %.4f\n    (%s)\n", config->name,
                d.result.examples_per_second, d.result.test_accuracy, config->what);
    const double e = d.result.examples_per_second;
    // --repeat: each run of a configuration under its own name (" #2", " #3", ...).
    const int nth = ++runs_of[config->name];
    const std::string label = absl::StrCat("distributed ", config->name, nth > 1 ? absl::StrCat(" #", nth) : "");
    const bool met = report.Add({.name = label + " examples/s",
                                 .value = e,
                                 .unit = "examples/s",
                                 .reference = "reference (1 thread)",
                                 .reference_value = ref1.result.examples_per_second,
                                 .aim = kSpeedAim});
    if (refn.has_value()) {
      report.Add({.name = label + " examples/s vs all cores",
                  .value = e,
                  .unit = "examples/s",
                  .reference = absl::StrCat("reference (", cores, " threads)"),
                  .reference_value = refn->result.examples_per_second});
    }
    const bool cosine = config->cosine_lr_decay;
    report.Add({.name = label + " test accuracy",
                .value = d.result.test_accuracy,
                .unit = "",
                .reference = cosine ? kCosineLabel : "reference (1 thread)",
                .reference_value = cosine ? ref_cosine->result.test_accuracy : ref1.result.test_accuracy});
    report.Add({.name = label + " CPU per step",
                .value = d.cpu_per_step,
                .unit = "ms",
                .reference = "reference (1 thread)",
                .reference_value = RefCpuPerStepMs(ref1),
                .note = "every process of the cluster"});
    std::printf("    ratio to the reference with 1 thread: %.2f", e / ref1.result.examples_per_second);
    if (refn.has_value()) std::printf(", with %d threads: %.2f", cores, e / refn->result.examples_per_second);
    std::printf("  %s (>= %.1f)\n%s", bench::Verdict(met), kSpeedAimRatio, d.breakdown.c_str());
    // What keeping up costs: the reference's rate at this configuration's CPU per step.
    const double needed = ref1.result.examples_per_second / options.batch_size * d.cpu_per_step / 1e3;
    std::printf("    CPU per example %.2f x the reference's; keeping up with its rate needs %.2f cores busy (of %d)\n",
                d.cpu_per_step / std::max(1e-9, RefCpuPerStepMs(ref1)), needed, cores);
    std::printf("    mean staleness of the applied gradients %.2f (updates the PS applied in between); staler than"
                " 1: %.1f%%, 2: %.2f%%, 4: %.3f%%; closures recomputed %.0f\n",
                d.mean_staleness, 100 * d.staler_than_1, 100 * d.staler_than_2, 100 * d.staler_than_4, d.retried);
  }
  std::printf("%s\n", report.aims().Summary().c_str());
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads spin while they wait for work. Where the cores are shared (the
  // distributed run's processes, other jobs on this machine) a spinning reference with 2
  // threads spends most of its time spinning (measured: 74 ms of CPU per step instead of 3).
  // Passive waiting must be set before the OpenMP runtime starts: hence the re-exec.
  // The OpenBLAS kernels, likewise read once when OpenBLAS loads: the ones asyncps_launch gives
  // the main job's tasks (deploy/blas_kernel.h), unless the environment names them. The
  // reference (this process) and the cluster (its children, which inherit the environment) run
  // the same kernels, so the comparison is fair; the header line says which.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
      const std::string core = asyncps::deploy::OpenBlasCoreTypeFor(asyncps::deploy::ThisCpuVectorFeatures());
      if (!core.empty()) setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    }
    execv("/proc/self/exe", argv);
  }
  bool quick = false;
  int epochs = 10;
  std::string only;
  int repeat = 1;
  uint64_t seed = asyncps::fmnist::Options().seed;
  std::string json;
  bool staleness_table = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--staleness_table") {
      staleness_table = true;
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--epochs" && i + 1 < argc) {
      epochs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (asyncps::bench::ParseJsonFlag(argv[i], &json)) {
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--epochs N] [--only CONFIG[,CONFIG...]] [--repeat N] [--seed N] [--json=PATH] [--staleness_table]\n", argv[0]);
      return 2;
    }
  }
  asyncps::bench::Report report(argc, argv);
  if (staleness_table) return report.Finish(json, asyncps::StalenessTable(epochs, report));
  return report.Finish(json, asyncps::Main(quick, epochs, only, repeat, seed, report));
}
