// The tf.data service (data_service/) against the same pipelines run in-process, in one run:
//  - elements/s of the Fashion-MNIST batch pipeline (IdxFile images + labels, Shuffle(10k),
//    Batch(128), Prefetch) read through one data worker (processing mode OFF, 4 reads in flight;
//    also 1, and 4 with zlib compression, with the bytes per batch on the wire) vs iterated in
//    this process; the ratio (aim >= 0.7) and the overhead per element in us;
//  - a CPU-heavy map (about 1 ms of CPU per element): the consumer's CPU per element with the
//    service vs without, as a share of the map's cost removed from the consumer (aim >= 0.9),
//    and elements/s with 1, 2 and 4 data workers (processing mode DATA: each element once);
//  - for those reads, the CPU per element of each data worker, of the consumer and of the
//    dispatcher (bench/proc_stats.h, over the middle 80% of each read), turned by the project's
//    scaling model (bench/scaling_model.h) into elements/s on 16 cores for 1, 2, 4 and (from the
//    costs of 4) 8 data workers, with the resource that binds, against the in-process rate; the
//    same model on this machine's cores against the measured rate validates it.
// The dispatcher and data workers are this binary again (TF_CONFIG set: it serves its role).
//
// Usage: data_service_bench [--quick] [--json=PATH]    (--json: bench/report.h)
//
// A measurement, not a test: it exits 0 whatever the ratios (a wrong element count fails).
// The machine may be shared: the report records the load average at start and end.

#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench_flags.h"
#include "bench/proc_stats.h"
#include "bench/report.h"
#include "bench/scaling_model.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/subprocess.h"
#include "data/dataset.h"
#include "data/dataset_node.h"
#include "data_service/service_dataset.h"
#include "data_service/wire.h"
#include "examples/fmnist_augment.h"
#include "examples/fmnist_pipeline.h"
#include "net/frame_codec.h"
#include "worker/serve.h"

namespace asyncps {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kImages[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr char kLabels[] = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
constexpr char kToken[] = "data-service-bench";
constexpr char kRatioAim[] = "service / in-process elements/s";
constexpr char kCpuAim[] = "map cost removed from the consumer";
constexpr double kMapMs = 1.0;
// The machine the scaling model simulates (as scaling_bench's default --cores).
constexpr double kSimulatedCores = 16;

double CpuNow(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Spins until this thread has used `ms` of CPU: a stand-in for decoding or augmentation.
void BurnCpu(double ms) {
  const double until = CpuNow(CLOCK_THREAD_CPUTIME_ID) + ms * 1e-3;
  volatile uint64_t x = 1;
  while (CpuNow(CLOCK_THREAD_CPUTIME_ID) < until) {
    for (int i = 0; i < 200; ++i) x = x * 6364136223846793005ULL + 1;
  }
}

// The Fashion-MNIST batch pipeline of the main job (without its Repeat).
absl::StatusOr<data::Dataset> FmnistBatches(const DatasetContext& ctx) {
  const int64_t n = ctx.IntArg("n").value_or(60'000);
  return data::Dataset::Zip({data::Dataset::IdxFile(kImages), data::Dataset::IdxFile(kLabels)})
      .Take(n)
      .Shuffle(10'000, 1)
      .Batch(128)
      .Prefetch(4);
}

// Range(n) through a map that burns kMapMs of CPU per element (and adds an f32 [784]).
absl::StatusOr<data::Dataset> Heavy(const DatasetContext& ctx) {
  const int64_t n = ctx.IntArg("n").value_or(1000);
  return data::Dataset::Range(0, n)
      .Map([](data::Element e) -> absl::StatusOr<data::Element> {
        BurnCpu(kMapMs);
        e.push_back(Tensor(DType::kF32, {784}));
        return e;
      })
      .Prefetch(8);
}

// The main job's training pipeline (examples/fmnist_pipeline.h) as the job registers it with
// the service: dynamic sharding (no Repeat, shard 0 of 1), batches of 128.
fmnist::TrainPipelineOptions MainJobPipelineOptions(bool augment) {
  fmnist::TrainPipelineOptions o;
  o.images = kImages;
  o.labels = kLabels;
  o.batch = 128;
  o.seed = 1;
  o.repeat = false;
  o.augment = augment;
  return o;
}

// A pipeline that is CPU-bound in the trainer: the main job's --augment pipeline decoding its
// examples from the gzipped files as it reads them (IdxFile streams and inflates; a split's
// pipeline inflates the files up to its records, as the main job's did before issue 39), no
// Repeat, batches of 128. What moving such a pipeline to data workers saves the trainers.
absl::StatusOr<data::Dataset> DecodingPipeline() {
  data::Dataset examples =
      data::Dataset::Zip({data::Dataset::IdxFile(kImages), data::Dataset::IdxFile(kLabels)}).Shuffle(10'000, 1);
  return fmnist::Augmented(examples, 60'000, 1, 0, 1).Batch(128, /*drop_remainder=*/true);
}

// Datasets the data workers build.
Program MakeProgram() {
  Program program;
  program.AddDataset("fmnist_train", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    fmnist::TrainPipelineOptions o = MainJobPipelineOptions(ctx.IntArg("augment").value_or(0) != 0);
    o.prefetch = ctx.IntArg("prefetch").value_or(1) != 0;
    return fmnist::TrainPipeline(o);
  });
  program.AddDataset("fmnist_decode", [](const DatasetContext&) { return DecodingPipeline(); });
  program.AddDataset("fmnist_batches", FmnistBatches);
  program.AddDataset("heavy", Heavy);
  return program;
}

// A dispatcher and `n` data workers (this binary), ended by pid when destroyed.
class Service {
 public:
  static absl::StatusOr<std::unique_ptr<Service>> Start(int n) {
    auto service = std::unique_ptr<Service>(new Service());
    auto ports = PickUnusedPorts(4 + n);
    if (!ports.ok()) return ports.status();
    auto at = [&](int i) { return absl::StrCat("127.0.0.1:", (*ports)[static_cast<size_t>(i)]); };
    // The service's tasks need a training cluster around them in the spec; nothing runs there.
    std::map<TaskType, std::vector<std::string>> jobs = {{TaskType::kChief, {at(0)}},
                                                         {TaskType::kPs, {at(1)}},
                                                         {TaskType::kWorker, {at(2)}},
                                                         {TaskType::kDispatcher, {at(3)}}};
    for (int i = 0; i < n; ++i) jobs[TaskType::kDataWorker].push_back(at(4 + i));
    auto spec = ClusterSpec::Create(jobs, TaskType::kChief, 0);
    if (!spec.ok()) return spec.status();
    service->dispatcher_address_ = spec->dispatcher();
    auto launch = [&](TaskType type, int index,
                      const char* ready) -> absl::StatusOr<std::unique_ptr<Subprocess>> {
      Subprocess::Options o;
      o.argv = {std::filesystem::read_symlink("/proc/self/exe").string()};
      o.env = {{"TF_CONFIG", spec->ToTfConfig(type, index)},
               {"ASYNCPS_CLUSTER_TOKEN", kToken},
               {"ASYNCPS_METRICS_PORT", "-1"}};
      auto p = Subprocess::Start(std::move(o));
      if (!p.ok()) return p.status();
      auto line = (*p)->WaitForLine(ready, absl::Seconds(60));
      if (!line.ok()) return absl::Status(line.status().code(), (*p)->output());
      return p;
    };
    auto d = launch(TaskType::kDispatcher, 0, "ready on");
    if (!d.ok()) return d.status();
    service->processes_.push_back(std::move(*d));
    for (int i = 0; i < n; ++i) {
      auto w = launch(TaskType::kDataWorker, i, "registered with dispatcher");
      if (!w.ok()) return w.status();
      service->processes_.push_back(std::move(*w));
    }
    return service;
  }

  data_service::ServiceOptions options() const {
    data_service::ServiceOptions o;
    o.dispatcher = dispatcher_address_;
    o.token = kToken;
    o.role = "chief";
    return o;
  }

  pid_t dispatcher_pid() const { return processes_.front()->pid(); }
  std::vector<pid_t> data_worker_pids() const {
    std::vector<pid_t> pids;
    for (size_t i = 1; i < processes_.size(); ++i) pids.push_back(processes_[i]->pid());
    return pids;
  }

 private:
  Service() = default;
  std::string dispatcher_address_;
  std::vector<std::unique_ptr<Subprocess>> processes_;
};

struct Pass {
  double elements_per_second = -1;
  double cpu_seconds = 0;  // this process's CPU while iterating
  int64_t elements = 0;
};

// Iterates `dataset` to its end; elements/s < 0 on failure. `after_element`, when set, is
// called with the count so far after each element (on this thread, before the iterator and its
// threads end).
Pass Run(const data::Dataset& dataset,
         const std::function<void(int64_t)>& after_element = nullptr) {
  Pass pass;
  const auto start = Clock::now();
  const double cpu0 = CpuNow(CLOCK_PROCESS_CPUTIME_ID);
  auto it = dataset.MakeIterator();
  if (!it.ok()) {
    std::fprintf(stderr, "MakeIterator: %s\n", it.status().ToString().c_str());
    return pass;
  }
  while (true) {
    absl::StatusOr<data::Element> e = (*it)->Next();
    if (!e.ok()) {
      if (data::IsEndOfData(e.status())) break;
      std::fprintf(stderr, "Next: %s\n", e.status().ToString().c_str());
      return pass;
    }
    ++pass.elements;
    if (after_element) after_element(pass.elements);
  }
  it->reset();
  pass.cpu_seconds = CpuNow(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  pass.elements_per_second = static_cast<double>(pass.elements) /
                             std::chrono::duration<double>(Clock::now() - start).count();
  return pass;
}

// CPU counters of the service's processes and of this one (the consumer) at one moment.
struct Snapshot {
  Clock::time_point time;
  double machine_busy = -1;
  bench::ProcSample consumer;
  bench::ProcSample dispatcher;
  std::vector<bench::ProcSample> data_workers;
};

absl::StatusOr<Snapshot> TakeSnapshot(const Service& service) {
  Snapshot s;
  s.time = Clock::now();
  s.machine_busy = bench::MachineBusySeconds();
  auto consumer = bench::ReadProcSample(getpid());
  if (!consumer.ok()) return consumer.status();
  s.consumer = *std::move(consumer);
  auto dispatcher = bench::ReadProcSample(service.dispatcher_pid());
  if (!dispatcher.ok()) return dispatcher.status();
  s.dispatcher = *std::move(dispatcher);
  for (pid_t pid : service.data_worker_pids()) {
    auto w = bench::ReadProcSample(pid);
    if (!w.ok()) return w.status();
    s.data_workers.push_back(*std::move(w));
  }
  return s;
}

// What one window of a heavy-map read cost, per element, cast in the scaling model's roles: the
// data workers are its workers (each serves elements one after another; with D of them, D
// elements circulate), the consumer (this process) its chief, through whose busiest thread
// every element passes, and the dispatcher its one PS (off the element path: it only assigns
// the job). No bytes are given: 3 KB per element is nowhere near a memory-bandwidth cap.
struct Costs {
  double elements = 0;
  double wall_seconds = 0;
  bench::MeasuredCosts model;
  std::vector<double> data_worker_cpu;  // CPU-seconds per element, of each data worker
  double our_cores = 0;                 // CPU-seconds of our processes / wall seconds
  double others_cores = 0;              // the machine's busy core-seconds less ours / wall s
  double load_average = 0;

  double elements_per_second() const { return elements / wall_seconds; }
};

// CPU-seconds of one process between two samples. The kernel's total comes in clock ticks
// (10 ms): too coarse for the consumer's few ms in a window. The sum over its threads
// (nanoseconds) is exact but misses a thread that ended in the window: the total is taken
// when it exceeds the sum by more than two ticks.
double CpuSeconds(const bench::ProcSample& a, const bench::ProcSample& b) {
  double threads = 0;
  for (const auto& [tid, seconds] : b.thread_cpu_seconds) {
    auto it = a.thread_cpu_seconds.find(tid);
    threads += seconds - (it == a.thread_cpu_seconds.end() ? 0 : it->second);
  }
  const double total = b.cpu_seconds - a.cpu_seconds;
  return total > threads + 2.0 / static_cast<double>(sysconf(_SC_CLK_TCK)) ? total : threads;
}

Costs Measure(const Snapshot& a, const Snapshot& b, double elements) {
  Costs m;
  m.elements = elements;
  m.wall_seconds = std::chrono::duration<double>(b.time - a.time).count();
  bench::MeasuredCosts& c = m.model;
  c.workers = static_cast<int>(a.data_workers.size());
  c.ps = 1;
  double ours = 0;
  for (size_t i = 0; i < a.data_workers.size(); ++i) {
    const double cpu = CpuSeconds(a.data_workers[i], b.data_workers[i]);
    c.worker_cpu += cpu / elements;
    c.worker_thread +=
        bench::Difference(a.data_workers[i], b.data_workers[i]).busiest_thread_seconds / elements;
    m.data_worker_cpu.push_back(cpu / elements);
    ours += cpu;
  }
  const double dispatcher = CpuSeconds(a.dispatcher, b.dispatcher);
  c.ps_cpu = c.busiest_ps_cpu = dispatcher / elements;
  c.busiest_ps_thread =
      bench::Difference(a.dispatcher, b.dispatcher).busiest_thread_seconds / elements;
  ours += dispatcher;
  const double consumer = CpuSeconds(a.consumer, b.consumer);
  c.chief_cpu = consumer / elements;
  c.chief_thread = bench::Difference(a.consumer, b.consumer).busiest_thread_seconds / elements;
  ours += consumer;
  m.our_cores = ours / m.wall_seconds;
  if (a.machine_busy >= 0 && b.machine_busy >= 0) {
    m.others_cores = std::max(0.0, (b.machine_busy - a.machine_busy - ours) / m.wall_seconds);
  }
  m.load_average = bench::LoadAverage1();
  return m;
}

// The scaling model's names for its roles, in this bench's.
std::string Role(const std::string& binding) {
  static const auto* const kNames =
      new std::map<std::string, std::string>{{"workers", "data workers"},
                                             {"PS", "dispatcher"},
                                             {"chief", "consumer"},
                                             {"PS queue", "dispatcher queue"},
                                             {"chief queue", "consumer queue"}};
  auto it = kNames->find(binding);
  return it == kNames->end() ? binding : it->second;
}

std::string Us(double seconds) { return absl::StrFormat("%.0f", 1e6 * seconds); }

// Turns the heavy map's costs at D = 1, 2, 4 data workers into the scaling model's predictions
// (bench/scaling_model.h, as scaling_bench does): on this machine's cores, against the rate
// measured in the same window (validation), and on `cores` cores, against `in_process`, the
// in-process pipeline's rate on an idle machine of any size (its map runs on one thread);
// D = 8 from the costs of the largest D measured. The wait no CPU accounts for is fitted at
// D = 1.
void ReportScaling(const std::map<int, Costs>& runs, double in_process, double cores,
                   bench::Report& report) {
  if (runs.empty()) return;
  const auto base = runs.find(1);
  bench::Machine big;
  big.cores = cores;
  big.latency_per_unit =
      base != runs.end() ? bench::FitLatency(base->second.model, base->second.elements_per_second())
                         : 0;
  bench::Machine here = big;
  here.cores = std::max(1u, std::thread::hardware_concurrency());
  std::printf(
      "  scaling model (bench/scaling_model.h): CPU per element measured in a window of each read; "
      "wait not accounted for by CPU (fitted at D=1): %.1f us/element; in-process on any "
      "idle machine: %.0f elements/s (1 / its CPU per element)\n",
      1e6 * big.latency_per_unit, in_process);
  std::printf(
      "   D | measured here  cores: ours others | CPU us/element: data workers (each; busiest "
      "thread)  consumer (thread)  dispatcher | model, %.0f cores  err  binds          | model, "
      "%.0f cores  x in-process  binds\n",
      here.cores, big.cores);
  double error_sum = 0;
  int validated = 0;
  // The fitted wait is CPU that others took from us when the machine is loaded, which an idle
  // 16-core machine would not see: the same model without it bounds the figure from above.
  bench::Machine no_wait = big;
  no_wait.latency_per_unit = 0;
  // Adds the `cores`-core figure; returns it and the no-wait one, printed.
  auto add_big = [&](const std::string& label, const bench::MeasuredCosts& c,
                     const std::string& costs_note) {
    const bench::Prediction p = bench::Predict(c, big);
    const bench::Prediction q = bench::Predict(c, no_wait);
    report.Add(
        {.name = absl::StrFormat("heavy map %s model, %.0f cores (simulated)", label, big.cores),
         .value = p.units_per_second,
         .unit = "elements/s",
         .reference = "in-process, 1 / its CPU per element",
         .reference_value = in_process,
         .note =
             absl::StrFormat("binds: %s; without the fitted wait %.0f (%s); %s", Role(p.binding),
                             q.units_per_second, Role(q.binding), costs_note)});
    return absl::StrFormat("%16.0f  %11.2f  %-14s [no wait: %.0f, %.2fx, %s]", p.units_per_second,
                           p.units_per_second / in_process, Role(p.binding), q.units_per_second,
                           q.units_per_second / in_process, Role(q.binding));
  };
  for (const auto& [workers, m] : runs) {
    const bench::MeasuredCosts& c = m.model;
    const double measured = m.elements_per_second();
    const bench::Prediction on_here = bench::Predict(c, here);
    const double err = on_here.units_per_second / measured - 1;
    std::vector<std::string> each;
    for (double cpu : m.data_worker_cpu) each.push_back(Us(cpu));
    const std::string costs_note = absl::StrFormat(
        "CPU us/element: data workers %s (%s), busiest threads %s; consumer %s (thread %s); "
        "dispatcher %s",
        Us(c.worker_cpu), absl::StrJoin(each, " "), Us(c.worker_thread), Us(c.chief_cpu),
        Us(c.chief_thread), Us(c.ps_cpu));
    const std::string label = absl::StrFormat("D=%d", workers);
    const std::string on_big = add_big(label, c, costs_note);
    std::printf(
        "   %d | %13.0f  %11.2f %6.2f | %28s (%s; %s) %9s (%s) %10s | %16.0f %+4.0f%%  %-14s | "
        "%s\n",
        workers, measured, m.our_cores, m.others_cores, Us(c.worker_cpu).c_str(),
        absl::StrJoin(each, " ").c_str(), Us(c.worker_thread).c_str(), Us(c.chief_cpu).c_str(),
        Us(c.chief_thread).c_str(), Us(c.ps_cpu).c_str(), on_here.units_per_second, 100 * err,
        Role(on_here.binding).c_str(), on_big.c_str());
    report.Add({.name = absl::StrFormat("heavy map %s measured here (window)", label),
                .value = measured,
                .unit = "elements/s",
                .note = absl::StrFormat("cores busy: ours %.2f, others %.2f; load average %.1f",
                                        m.our_cores, m.others_cores, m.load_average)});
    report.Add({.name = absl::StrFormat("heavy map %s model, %.0f cores", label, here.cores),
                .value = on_here.units_per_second,
                .unit = "elements/s",
                .reference = "measured here (window)",
                .reference_value = measured,
                .note = absl::StrCat("binds: ", Role(on_here.binding))});
    if (workers != 1) {
      error_sum += std::abs(err);
      ++validated;
    }
  }
  // More data workers than measured, on the costs of the largest D measured.
  const auto& [largest, m] = *runs.rbegin();
  if (largest > 1) {
    bench::MeasuredCosts c = m.model;
    c.workers = 2 * largest;
    const std::string on_big =
        add_big(absl::StrFormat("D=%d (costs of D=%d)", c.workers, largest), c, "extrapolated");
    std::printf("   %d | from the costs of D=%d%*s| %s\n", c.workers, largest, 129, "",
                on_big.c_str());
  }
  if (validated > 0) {
    std::printf("  validation of the %.0f-core model: mean |error| %.0f%% at D > 1 (%d points)\n",
                here.cores, 100 * error_sum / validated, validated);
  }
}

// The main job's epochs as its trainers read them under dynamic sharding: splits of 59 batches
// of 128 records (fmnist_training.cc's records_per_split), each split's pipeline seeded by
// (epoch, split), `consumers` threads (the trainers) taking the next split in turn. `read`
// makes a split's iterator. Returns the batches read; -1 on an error (printed).
constexpr int64_t kRecordsPerSplit = 128 * 59;
constexpr int64_t kRecords = 60'000;

int64_t ReadEpochs(int first_epoch, int epochs, int consumers,
                   const std::function<absl::StatusOr<std::unique_ptr<data::Iterator>>(
                       const data::SourceSplit&, uint64_t)>& read) {
  const int64_t splits = (kRecords + kRecordsPerSplit - 1) / kRecordsPerSplit;
  std::atomic<int64_t> batches{0};
  std::atomic<bool> failed{false};
  for (int epoch = first_epoch; epoch < first_epoch + epochs; ++epoch) {
    std::atomic<int64_t> next{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < consumers; ++c) {
      threads.emplace_back([&, epoch] {
        for (int64_t s = next++; s < splits && !failed; s = next++) {
          const data::SourceSplit split{s * kRecordsPerSplit, std::min(kRecords, (s + 1) * kRecordsPerSplit), 1};
          auto it = read(split, data::internal::MixSeed(static_cast<uint64_t>(epoch), static_cast<uint64_t>(s)));
          if (!it.ok()) {
            std::fprintf(stderr, "split %lld: %s\n", static_cast<long long>(s), it.status().ToString().c_str());
            failed = true;
            return;
          }
          while (true) {
            absl::StatusOr<data::Element> e = (*it)->Next();
            if (!e.ok()) {
              if (data::IsEndOfData(e.status())) break;
              std::fprintf(stderr, "split %lld: %s\n", static_cast<long long>(s), e.status().ToString().c_str());
              failed = true;
              return;
            }
            ++batches;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  return failed ? -1 : batches.load();
}

// The main job's pipeline (with and without --augment) read the main job's way, in-process
// (one trainer's pipeline in this process) and through 2 data workers by 2 consumer threads
// (processing mode dynamic, ReadOptions' defaults): the data workers' CPU per batch against the
// in-process pipeline's (aim <= 1.5x), the share of the batches' CPU each data worker took
// (aim max/min <= 1.5, over every round), the consumers' CPU per batch, and batches/s; the
// least CPU per batch of 3 rounds, each an epoch in-process then one through the service. A third case, the
// --augment pipeline decoding from the files as it reads (DecodingPipeline), is CPU-bound in
// the trainer: what the service takes off the trainers is the consumers' CPU per batch against
// the in-process pipeline's (aim <= 0.5x). Returns false on an error.
bool MainJobPipeline(bool quick, bench::Report& report) {
  constexpr char kCpuPerElementAim[] = "main job: data workers' CPU per batch / in-process";
  constexpr char kShareAim[] = "main job: busiest / idlest data worker CPU";
  constexpr char kOffloadAim[] = "decoding pipeline: trainers' CPU per batch, service / in-process";
  report.aims().Declare(kCpuPerElementAim, bench::AimBound::kAtMost, 1.5);
  report.aims().Declare(kShareAim, bench::AimBound::kAtMost, 1.5);
  report.aims().Declare(kOffloadAim, bench::AimBound::kAtMost, 0.5);
  constexpr int kDataWorkers = 2;
  std::printf("data_service_bench: the main job's pipeline (examples/fmnist_pipeline.h, batches of 128, "
              "dynamic splits of %lld records), one epoch of warm-up, then %d round(s) of an epoch in-process and "
              "one through the service\n",
              static_cast<long long>(kRecordsPerSplit), quick ? 1 : 3);
  struct Case {
    std::string label;
    std::string dataset;  // as the data workers' program names it
    std::map<std::string, std::string> args;
    bool augment;
    bool decoding;  // DecodingPipeline: nothing decoded up front, so no warm-up epoch
  };
  // prefetch 0: as the main job registers it.
  const std::vector<Case> cases = {
      {"main job pipeline", "fmnist_train", {{"augment", "0"}, {"prefetch", "0"}}, false, false},
      {"main job pipeline, --augment", "fmnist_train", {{"augment", "1"}, {"prefetch", "0"}}, true, false},
      {"--augment decoding the files", "fmnist_decode", {}, true, true}};
  for (const Case& c : cases) {
    const std::string& label = c.label;
    auto local = c.decoding ? DecodingPipeline() : fmnist::TrainPipeline(MainJobPipelineOptions(c.augment));
    if (!local.ok()) {
      std::fprintf(stderr, "%s\n", local.status().ToString().c_str());
      return false;
    }
    auto in_process = [&](const data::SourceSplit& split, uint64_t seed) {
      return local->MakeSinglePassSplitIterator(split, seed);
    };
    auto service = Service::Start(kDataWorkers);
    if (!service.ok()) {
      std::fprintf(stderr, "starting the service: %s\n", service.status().ToString().c_str());
      return false;
    }
    auto id = data_service::RegisterDataset((*service)->options(), c.dataset, c.args);
    if (!id.ok()) {
      std::fprintf(stderr, "RegisterDataset: %s\n", id.status().ToString().c_str());
      return false;
    }
    const data::Dataset remote = data_service::FromDatasetId(
        (*service)->options(), *id, {.mode = data_service::ProcessingMode::kDynamic});
    auto through_service = [&](const data::SourceSplit& split, uint64_t seed) {
      return remote.MakeSinglePassSplitIterator(split, seed);
    };
    // Warm-up: this process and each data worker decode the files once, as they do once in a
    // job. One thread in-process: a worker's pipeline runs on its closure's thread (and its
    // Prefetch's).
    if (!c.decoding && (ReadEpochs(0, 1, 1, in_process) < 0 || ReadEpochs(0, 1, kDataWorkers, through_service) < 0)) {
      return false;
    }
    // Rounds of one epoch in-process then one through the service, alternately, the least CPU
    // per batch of each kept: other sessions' load inflates a process's CPU per batch (caches,
    // the sibling hyperthread) by up to 1.7x from one second to the next on the shared machine,
    // and reading the two alternately gives both the same chances.
    // The decoding pipeline costs about 5 ms a batch: one round measures it well enough.
    const int rounds = quick || c.decoding ? 1 : 3;
    double local_cpu = 1e30, service_cpu = 1e30, consumer_cpu = 1e30, local_rate = 0, rate = 0;
    // The shares: each data worker's CPU over every round (one epoch's 8 splits, 4 a data
    // worker, leave a round's shares to the moment's load).
    std::vector<double> each((*service)->data_worker_pids().size(), 0.0);
    for (int round = 0; round < rounds; ++round) {
      const int epoch = 1 + round;
      const double cpu0 = CpuNow(CLOCK_PROCESS_CPUTIME_ID);
      const auto t0 = Clock::now();
      const int64_t local_batches = ReadEpochs(epoch, 1, 1, in_process);
      if (local_batches <= 0) return false;
      local_cpu = std::min(local_cpu, (CpuNow(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / static_cast<double>(local_batches));
      local_rate = std::max(local_rate, static_cast<double>(local_batches) /
                                            std::chrono::duration<double>(Clock::now() - t0).count());

      std::vector<double> before;
      for (pid_t pid : (*service)->data_worker_pids()) {
        auto sample = bench::ReadProcSample(pid);
        if (!sample.ok()) return false;
        before.push_back(sample->cpu_seconds);
      }
      const double consumer0 = CpuNow(CLOCK_PROCESS_CPUTIME_ID);
      const auto t1 = Clock::now();
      const int64_t batches = ReadEpochs(epoch, 1, kDataWorkers, through_service);
      if (batches != local_batches) {
        std::fprintf(stderr, "%s: %lld batches through the service, %lld in-process\n", label.c_str(),
                     static_cast<long long>(batches), static_cast<long long>(local_batches));
        return false;
      }
      rate = std::max(rate, static_cast<double>(batches) / std::chrono::duration<double>(Clock::now() - t1).count());
      consumer_cpu =
          std::min(consumer_cpu, (CpuNow(CLOCK_PROCESS_CPUTIME_ID) - consumer0) / static_cast<double>(batches));
      std::vector<double> cpu;
      double total = 0;
      for (size_t i = 0; i < before.size(); ++i) {
        auto sample = bench::ReadProcSample((*service)->data_worker_pids()[i]);
        if (!sample.ok()) return false;
        cpu.push_back(sample->cpu_seconds - before[i]);
        total += cpu.back();
      }
      service_cpu = std::min(service_cpu, total / static_cast<double>(batches));
      for (size_t i = 0; i < cpu.size(); ++i) each[i] += cpu[i];
    }
    const double busiest = *std::max_element(each.begin(), each.end());
    const double idlest = std::max(1e-3, *std::min_element(each.begin(), each.end()));
    double total = 0;
    for (double x : each) total += x;
    std::vector<std::string> shares;
    for (double x : each) shares.push_back(absl::StrFormat("%.0f%%", 100 * x / std::max(total, 1e-9)));
    std::printf("  %-30s in-process %6.0f us CPU/batch %7.0f batches/s (1 thread) | 2 data workers %6.0f us CPU/batch "
                "(%.2fx; shares %s, max/min %.2f), consumers %4.0f us CPU/batch (%.2fx in-process), %7.0f "
                "batches/s (2 consumers); least of %d alternate round(s); load average %.1f\n",
                label.c_str(), 1e6 * local_cpu, local_rate, 1e6 * service_cpu, service_cpu / local_cpu,
                absl::StrJoin(shares, " ").c_str(), busiest / idlest, 1e6 * consumer_cpu, consumer_cpu / local_cpu,
                rate, rounds, bench::LoadAverage1());
    report.Add({.name = absl::StrCat(label, ": in-process CPU per batch"), .value = 1e6 * local_cpu, .unit = "us"});
    report.Add({.name = absl::StrCat(label, ": data workers' CPU per batch"),
                .value = 1e6 * service_cpu,
                .unit = "us",
                .reference = "in-process",
                .reference_value = 1e6 * local_cpu,
                .aim = c.decoding ? "" : kCpuPerElementAim});
    report.Add({.name = absl::StrCat(label, ": busiest data worker's CPU"),
                .value = busiest,
                .unit = "s",
                .reference = "idlest data worker's",
                .reference_value = idlest,
                .aim = c.decoding ? "" : kShareAim});
    report.Add({.name = absl::StrCat(label, ": consumers' CPU per batch"),
                .value = 1e6 * consumer_cpu,
                .unit = "us",
                .reference = "in-process pipeline's CPU per batch",
                .reference_value = 1e6 * local_cpu,
                .aim = c.decoding ? kOffloadAim : "",
                .note = "the trainers' CPU per batch with the service against without it"});
    report.Add({.name = absl::StrCat(label, ": batches/s through 2 data workers, 2 consumers"),
                .value = rate,
                .unit = "batches/s",
                .reference = "in-process, 1 thread",
                .reference_value = local_rate});
  }
  return true;
}

int Main(bool quick, bench::Report& report) {
  if (!std::filesystem::exists(kImages) || !std::filesystem::exists(kLabels)) {
    std::printf(
        "data_service_bench: Fashion-MNIST not found (install dataset-fashion-mnist); nothing "
        "measured\n");
    return 0;
  }
  report.aims().Declare(kRatioAim, bench::AimBound::kAtLeast, 0.7);
  report.aims().Declare(kCpuAim, bench::AimBound::kAtLeast, 0.9);
  const int rounds = quick ? 1 : 3;
  if (!MainJobPipeline(quick, report)) return 1;

  // 1. The Fashion-MNIST batch pipeline: one data worker vs in-process.
  {
    const std::map<std::string, std::string> args = {{"n", quick ? "10000" : "60000"}};
    auto service = Service::Start(1);
    if (!service.ok()) {
      std::fprintf(stderr, "starting the service: %s\n", service.status().ToString().c_str());
      return 1;
    }
    auto id = data_service::RegisterDataset((*service)->options(), "fmnist_batches", args);
    if (!id.ok()) {
      std::fprintf(stderr, "RegisterDataset: %s\n", id.status().ToString().c_str());
      return 1;
    }
    auto local = FmnistBatches(DatasetContext(0, 1, args));
    if (!local.ok()) return 1;
    Pass best_local, best_one, best_service, best_zlib;
    for (int r = 0; r < rounds; ++r) {
      const Pass l = Run(*local);
      // Four reads in flight (ReadOptions::max_outstanding_requests): the data worker produces
      // the next batches while this one travels; one in flight is the round-trip-bound figure.
      const Pass one = Run(data_service::FromDatasetId(
          (*service)->options(), *id,
          {.mode = data_service::ProcessingMode::kOff, .max_outstanding_requests = 1}));
      const Pass s = Run(data_service::FromDatasetId(
          (*service)->options(), *id,
          {.mode = data_service::ProcessingMode::kOff, .max_outstanding_requests = 4}));
      const Pass z =
          Run(data_service::FromDatasetId((*service)->options(), *id,
                                          {.mode = data_service::ProcessingMode::kOff,
                                           .max_outstanding_requests = 4,
                                           .compression = data_service::Compression::kZlib}));
      if (one.elements != l.elements) return 1;
      if (one.elements_per_second > best_one.elements_per_second) best_one = one;
      if (l.elements_per_second < 0 || s.elements_per_second < 0 || z.elements_per_second < 0 ||
          l.elements != s.elements || l.elements != z.elements) {
        std::fprintf(
            stderr,
            "fmnist pipeline: %lld elements in-process, %lld through the service, %lld with zlib\n",
            static_cast<long long>(l.elements), static_cast<long long>(s.elements),
            static_cast<long long>(z.elements));
        return 1;
      }
      if (l.elements_per_second > best_local.elements_per_second) best_local = l;
      if (s.elements_per_second > best_service.elements_per_second) best_service = s;
      if (z.elements_per_second > best_zlib.elements_per_second) best_zlib = z;
    }
    // Bytes on the wire for one batch (a full answer frame), plain and deflated.
    size_t plain_bytes = 0, zlib_bytes = 0;
    {
      auto it = local->MakeIterator();
      if (!it.ok()) return 1;
      auto batch = (*it)->Next();
      if (!batch.ok()) return 1;
      data_service::ElementServer::Result result;
      result.element = *batch;
      net::OutMessage plain, zlib;
      data_service::EncodeResult(result, data_service::Compression::kNone, &plain);
      data_service::EncodeResult(result, data_service::Compression::kZlib, &zlib);
      plain_bytes = net::EncodeFrameToString(plain).size();
      zlib_bytes = net::EncodeFrameToString(zlib).size();
    }
    const double overhead_us =
        1e6 / best_service.elements_per_second - 1e6 / best_local.elements_per_second;
    std::printf(
        "data_service_bench: Fashion-MNIST batches of 128 (%lld per pass), best of %d round(s)\n",
        static_cast<long long>(best_local.elements), rounds);
    std::printf("  %-44s %10.0f elements/s\n", "in-process", best_local.elements_per_second);
    std::printf("  %-44s %10.0f elements/s  ratio %.2f\n",
                "through 1 data worker, 1 read in flight", best_one.elements_per_second,
                best_one.elements_per_second / best_local.elements_per_second);
    report.Add({.name = "fmnist batches through 1 data worker, 1 read in flight",
                .value = best_one.elements_per_second,
                .unit = "elements/s",
                .reference = "in-process",
                .reference_value = best_local.elements_per_second});
    std::printf("  %-44s %10.0f elements/s  ratio %.2f  overhead %.0f us/element\n",
                "through 1 data worker, 4 in flight", best_service.elements_per_second,
                best_service.elements_per_second / best_local.elements_per_second, overhead_us);
    report.Add({.name = "fmnist batches in-process",
                .value = best_local.elements_per_second,
                .unit = "elements/s"});
    report.Add({.name = "fmnist batches through 1 data worker, 4 in flight",
                .value = best_service.elements_per_second,
                .unit = "elements/s",
                .reference = "in-process",
                .reference_value = best_local.elements_per_second,
                .aim = kRatioAim});
    report.Add({.name = "service overhead per fmnist batch", .value = overhead_us, .unit = "us"});
    std::printf(
        "  %-44s %10.0f elements/s  ratio %.2f  %zu bytes/element on the wire (%zu plain, %.2fx)\n",
        "through 1 data worker, 4 in flight, zlib", best_zlib.elements_per_second,
        best_zlib.elements_per_second / best_local.elements_per_second, zlib_bytes, plain_bytes,
        static_cast<double>(plain_bytes) / static_cast<double>(zlib_bytes));
    report.Add({.name = "fmnist batches through 1 data worker, 4 in flight, zlib",
                .value = best_zlib.elements_per_second,
                .unit = "elements/s",
                .reference = "in-process",
                .reference_value = best_local.elements_per_second});
    report.Add({.name = "fmnist batch on the wire, zlib",
                .value = static_cast<double>(zlib_bytes),
                .unit = "bytes",
                .reference = "plain",
                .reference_value = static_cast<double>(plain_bytes)});
  }

  // 2. A ~1 ms/element map: consumer CPU with and without the service; scaling with data workers.
  const int64_t n = quick ? 200 : 2000;
  const std::map<std::string, std::string> args = {{"n", absl::StrCat(n)}};
  auto local = Heavy(DatasetContext(0, 1, args));
  if (!local.ok()) return 1;
  Pass l;
  for (int r = 0; r < rounds; ++r) {
    const Pass pass = Run(*local);
    if (pass.elements != n) return 1;
    if (pass.elements_per_second > l.elements_per_second) l = pass;
  }
  const double local_cpu_us = 1e6 * l.cpu_seconds / static_cast<double>(n);
  std::printf("  CPU-heavy map (%.1f ms CPU/element, %lld elements)\n", kMapMs,
              static_cast<long long>(n));
  std::printf("  %-44s %10.0f elements/s  consumer CPU %.0f us/element\n", "in-process",
              l.elements_per_second, local_cpu_us);
  report.Add(
      {.name = "heavy map in-process", .value = l.elements_per_second, .unit = "elements/s"});
  report.Add(
      {.name = "heavy map consumer CPU in-process", .value = local_cpu_us, .unit = "us/element"});
  // Costs are measured between the 10% and the 90% mark of each read: past the start (the data
  // workers' threads and pipelines starting) and before the end (threads leaving, whose CPU
  // would count for the process but no longer for any thread).
  const int64_t window_begin = n / 10, window_end = n - n / 10;
  std::map<int, Costs> costs;
  for (int workers : {1, 2, 4}) {
    auto service = Service::Start(workers);
    if (!service.ok()) {
      std::fprintf(stderr, "starting the service: %s\n", service.status().ToString().c_str());
      return 1;
    }
    auto id = data_service::RegisterDataset((*service)->options(), "heavy", args);
    if (!id.ok()) return 1;
    // Two reads in flight per data worker (ReadOptions::max_outstanding_requests), so each
    // one computes while the consumer receives from another.
    // The fastest of `rounds` reads, and the costs of its window: others' load only slows a
    // read down (as scaling_bench keeps the fastest run).
    Pass s;
    for (int r = 0; r < rounds; ++r) {
      std::optional<Snapshot> begin, end;
      absl::Status snapshots;
      const Pass pass =
          Run(data_service::FromDatasetId((*service)->options(), *id,
                                          {.mode = data_service::ProcessingMode::kData,
                                           .max_outstanding_requests = 2 * workers}),
              [&](int64_t elements) {
                if (elements != window_begin && elements != window_end) return;
                absl::StatusOr<Snapshot> snapshot = TakeSnapshot(**service);
                if (!snapshot.ok()) {
                  snapshots = snapshot.status();
                  return;
                }
                (elements == window_begin ? begin : end) = *std::move(snapshot);
              });
      if (pass.elements != n) {
        std::fprintf(stderr, "heavy map through %d data workers: %lld elements, want %lld\n",
                     workers, static_cast<long long>(pass.elements), static_cast<long long>(n));
        return 1;
      }
      if (!begin.has_value() || !end.has_value()) {
        std::fprintf(stderr, "heavy map through %d data workers: no CPU window: %s\n", workers,
                     snapshots.ToString().c_str());
        return 1;
      }
      const Costs window = Measure(*begin, *end, static_cast<double>(window_end - window_begin));
      if (pass.elements_per_second > s.elements_per_second) s = pass;
      auto best = costs.find(workers);
      if (best == costs.end() ||
          window.elements_per_second() > best->second.elements_per_second()) {
        costs[workers] = window;
      }
    }
    const double cpu_us = 1e6 * s.cpu_seconds / static_cast<double>(n);
    const double removed = (local_cpu_us - cpu_us) / (kMapMs * 1000);
    std::printf(
        "  %-44s %10.0f elements/s  consumer CPU %.0f us/element (%.0f%% of the map's cost "
        "removed)\n",
        absl::StrFormat("through %d data worker(s)", workers).c_str(), s.elements_per_second,
        cpu_us, 100 * removed);
    report.Add({.name = absl::StrFormat("heavy map through %d data worker(s)", workers),
                .value = s.elements_per_second,
                .unit = "elements/s",
                .reference = "in-process",
                .reference_value = l.elements_per_second});
    if (workers == 1) {
      report.Add({.name = "heavy map consumer CPU through the service",
                  .value = cpu_us,
                  .unit = "us/element",
                  .reference = "in-process",
                  .reference_value = local_cpu_us,
                  .ratio = removed,
                  .aim = kCpuAim,
                  .note = "ratio: the share of the map's 1 ms that left the consumer"});
    }
  }
  // The in-process pipeline runs its map on one thread whatever the cores, so on an idle
  // machine of any size it does 1 / (its CPU per element): the reference of the simulated
  // figures (its measured rate here depends on what else the machine runs).
  ReportScaling(costs, 1e6 / local_cpu_us, kSimulatedCores, report);
  std::printf("%s\n", report.aims().Summary().c_str());
  return 0;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  if (std::getenv("TF_CONFIG") != nullptr) {
    // A dispatcher or data worker of the bench.
    auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
    if (!cluster.ok()) {
      std::fprintf(stderr, "data_service_bench: %s\n", cluster.status().ToString().c_str());
      return 2;
    }
    return asyncps::Serve(*cluster, asyncps::MakeProgram(),
                          asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
  }
  bool quick;
  std::string json;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  asyncps::bench::Report report(argc, argv);
  return report.Finish(json, asyncps::Main(quick, report));
}
