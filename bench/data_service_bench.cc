// The tf.data service (data_service/) against the same pipelines run in-process, in one run:
//  - elements/s of the Fashion-MNIST batch pipeline (IdxFile images + labels, Shuffle(10k),
//    Batch(128), Prefetch) read through one data worker (processing mode OFF, 4 reads in flight;
//    also 1, and 4 with zlib compression, with the bytes per batch on the wire) vs iterated in
//    this process; the ratio (aim >= 0.7) and the overhead per element in us;
//  - a CPU-heavy map (about 1 ms of CPU per element): the consumer's CPU per element with the
//    service vs without, as a share of the map's cost removed from the consumer (aim >= 0.9),
//    and elements/s with 1, 2 and 4 data workers (processing mode DATA: each element once).
// The dispatcher and data workers are this binary again (TF_CONFIG set: it serves its role).
//
// Usage: data_service_bench [--quick] [--json=PATH]    (--json: bench/report.h)
//
// A measurement, not a test: it exits 0 whatever the ratios (a wrong element count fails).
// The machine may be shared: the report records the load average at start and end.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "core/subprocess.h"
#include "data/dataset.h"
#include "data_service/service_dataset.h"
#include "data_service/wire.h"
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

// Datasets the data workers build.
Program MakeProgram() {
  Program program;
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

// Iterates `dataset` to its end; elements/s < 0 on failure.
Pass Run(const data::Dataset& dataset) {
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
  }
  it->reset();
  pass.cpu_seconds = CpuNow(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  pass.elements_per_second = static_cast<double>(pass.elements) /
                             std::chrono::duration<double>(Clock::now() - start).count();
  return pass;
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
          (*service)->options(), *id, {.mode = data_service::ProcessingMode::kOff}));
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
  const Pass l = Run(*local);
  if (l.elements != n) return 1;
  const double local_cpu_us = 1e6 * l.cpu_seconds / static_cast<double>(n);
  std::printf("  CPU-heavy map (%.1f ms CPU/element, %lld elements)\n", kMapMs,
              static_cast<long long>(n));
  std::printf("  %-44s %10.0f elements/s  consumer CPU %.0f us/element\n", "in-process",
              l.elements_per_second, local_cpu_us);
  report.Add(
      {.name = "heavy map in-process", .value = l.elements_per_second, .unit = "elements/s"});
  report.Add(
      {.name = "heavy map consumer CPU in-process", .value = local_cpu_us, .unit = "us/element"});
  for (int workers : quick ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 4}) {
    auto service = Service::Start(workers);
    if (!service.ok()) {
      std::fprintf(stderr, "starting the service: %s\n", service.status().ToString().c_str());
      return 1;
    }
    auto id = data_service::RegisterDataset((*service)->options(), "heavy", args);
    if (!id.ok()) return 1;
    // Two reads in flight per data worker (ReadOptions::max_outstanding_requests), so each
    // one computes while the consumer receives from another.
    const Pass s = Run(data_service::FromDatasetId(
        (*service)->options(), *id,
        {.mode = data_service::ProcessingMode::kData, .max_outstanding_requests = 2 * workers}));
    if (s.elements != n) {
      std::fprintf(stderr, "heavy map through %d data workers: %lld elements, want %lld\n", workers,
                   static_cast<long long>(s.elements), static_cast<long long>(n));
      return 1;
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
