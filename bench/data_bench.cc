// Input pipeline throughput: examples/s of IdxFile(Fashion-MNIST train images, gzipped) +
// Batch(128), and of the full training pipeline (+ Shuffle + Prefetch), beside a raw zlib
// gzread of the same file measured in the same run (its bytes counted as 784-byte examples).
//
// Also: parallel Map with a CPU-bound function of about 1 ms per element (calibrated on this
// machine), at num_parallel_calls 1, 2 and kAutotune, against the sequential Map, in the same
// run (the load average is printed beside it: the machine is shared).
//
// Usage: data_bench [--quick] [--json=PATH]    (--json: the figures as JSON too, bench/report.h)
//
// Rounds alternate raw / pipeline so that noise on the shared machine hits both alike; the
// best round of each is reported. Exits 0 whether or not the ratio is good: it is a
// measurement, not a test (but a pipeline that yields the wrong count fails).

#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/report.h"
#include "data/dataset.h"

namespace asyncps::data {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kImages[] = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
constexpr int64_t kExampleBytes = 28 * 28;
constexpr int64_t kHeaderBytes = 16;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Decompresses the first `examples` images' worth of the file with gzread; returns
// examples/s, or a negative value on failure.
double RawGzread(int64_t examples) {
  const auto start = Clock::now();
  gzFile f = gzopen(kImages, "rb");
  if (f == nullptr) return -1;
  gzbuffer(f, 256 << 10);
  std::vector<char> buf(256 << 10);
  const int64_t want = kHeaderBytes + examples * kExampleBytes;
  int64_t total = 0;
  while (total < want) {
    int n =
        gzread(f, buf.data(), static_cast<unsigned>(std::min<int64_t>(buf.size(), want - total)));
    if (n <= 0) break;
    total += n;
  }
  gzclose(f);
  if (total != want) return -1;
  return static_cast<double>(examples) / Seconds(start);
}

// Runs `dataset` to the end; returns examples/s (rows of the first component), or negative
// when it fails or yields a different count.
double Pipeline(const Dataset& dataset, int64_t examples) {
  const auto start = Clock::now();
  auto it = dataset.MakeIterator();
  if (!it.ok()) {
    std::fprintf(stderr, "MakeIterator: %s\n", it.status().ToString().c_str());
    return -1;
  }
  int64_t rows = 0;
  while (true) {
    absl::StatusOr<Element> batch = (*it)->Next();
    if (!batch.ok()) {
      if (IsEndOfData(batch.status())) break;
      std::fprintf(stderr, "Next: %s\n", batch.status().ToString().c_str());
      return -1;
    }
    rows += (*batch)[0].dim(0);
  }
  if (rows != examples) {
    std::fprintf(stderr, "pipeline yielded %lld examples, expected %lld\n",
                 static_cast<long long>(rows), static_cast<long long>(examples));
    return -1;
  }
  return static_cast<double>(examples) / Seconds(start);
}

// CPU work that the optimiser cannot drop: `n` rounds of a 64-bit mix.
uint64_t Burn(uint64_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < n; ++i) x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull + i;
  return x;
}

// Rounds of Burn per millisecond on one core of this machine (best of a few tries, so a
// preempted try does not inflate the per-element cost).
uint64_t CalibrateRoundsPerMs() {
  double best = 0;
  volatile uint64_t sink = 0;
  for (int t = 0; t < 5; ++t) {
    const uint64_t n = 2'000'000;
    const auto start = Clock::now();
    sink = sink + Burn(n, t);
    best = std::max(best, static_cast<double>(n) / (Seconds(start) * 1000));
  }
  return static_cast<uint64_t>(best);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

void ParallelMapBench(bool quick, bench::Report& report) {
  const uint64_t rounds_per_ms = CalibrateRoundsPerMs();
  const int64_t elements = quick ? 60 : 600;
  auto fn = [rounds_per_ms](Element e) -> absl::StatusOr<Element> {
    const uint64_t x = Burn(rounds_per_ms, static_cast<uint64_t>(*e[0].data<int64_t>()));
    return Element{Tensor::Scalar<int64_t>(static_cast<int64_t>(x & 0xff))};
  };
  const Dataset input = Dataset::Range(0, elements);
  struct Case {
    const char* name;
    Dataset dataset;
    double best = 0;
  };
  std::vector<Case> cases = {
      {"Map (sequential)", input.Map(fn)},
      {"Map num_parallel_calls=1", input.Map(fn, 1)},
      {"Map num_parallel_calls=2", input.Map(fn, 2)},
      {"Map num_parallel_calls=kAutotune", input.Map(fn, kAutotune)},
  };
  const std::string load_before = LoadAverage();
  for (int r = 0; r < (quick ? 1 : 3); ++r) {
    for (Case& c : cases) {
      const auto start = Clock::now();
      auto it = c.dataset.MakeIterator();
      int64_t n = 0;
      while (it.ok() && (*it)->Next().ok()) ++n;
      if (n == elements) c.best = std::max(c.best, static_cast<double>(n) / Seconds(start));
    }
  }
  std::printf("data_bench: parallel Map, %lld elements of a ~1 ms CPU map, %u hardware threads, "
              "load average %s (before) / %s (after)\n",
              static_cast<long long>(elements), std::thread::hardware_concurrency(),
              load_before.c_str(), LoadAverage().c_str());
  const double sequential = cases[0].best;
  for (const Case& c : cases) {
    report.Add({.name = c.name,
                .value = c.best,
                .unit = "elements/s",
                .reference = "Map (sequential)",
                .reference_value = sequential});
    std::printf("  %-46s %12.0f elements/s  ratio %.2f of sequential\n", c.name, c.best,
                sequential > 0 ? c.best / sequential : 0.0);
  }
}

int Main(bool quick, bench::Report& report) {
  ParallelMapBench(quick, report);
  if (!std::filesystem::exists(kImages)) {
    std::printf("data_bench: %s not found (install dataset-fashion-mnist); nothing measured\n",
                kImages);
    return 0;
  }
  const int64_t examples = quick ? 5000 : 60000;
  const int rounds = quick ? 1 : 3;
  const Dataset images = Dataset::IdxFile(kImages).Take(examples);
  struct Case {
    const char* name;
    Dataset dataset;
    double best = 0;
  };
  std::vector<Case> cases = {
      {"IdxFile+Batch(128)", images.Batch(128)},
      {"IdxFile+Shuffle(10k)+Batch(128)+Prefetch(2)",
       images.Shuffle(10000, 1).Batch(128).Prefetch(2)},
  };
  double raw_best = 0;
  for (int r = 0; r < rounds; ++r) {
    const double raw = RawGzread(examples);
    if (raw < 0) {
      std::fprintf(stderr, "raw gzread of %s failed\n", kImages);
      return 1;
    }
    raw_best = std::max(raw_best, raw);
    for (Case& c : cases) {
      const double eps = Pipeline(c.dataset, examples);
      if (eps < 0) return 1;
      c.best = std::max(c.best, eps);
    }
  }
  std::printf("data_bench: %lld Fashion-MNIST train images (gzipped IDX), best of %d round(s)\n",
              static_cast<long long>(examples), rounds);
  std::printf("  %-46s %12.0f examples/s  (reference)\n", "raw gzread of the same bytes", raw_best);
  report.Add({.name = "raw gzread of the same bytes", .value = raw_best, .unit = "examples/s"});
  for (const Case& c : cases) {
    report.Add({.name = c.name,
                .value = c.best,
                .unit = "examples/s",
                .reference = "raw gzread",
                .reference_value = raw_best});
    std::printf("  %-46s %12.0f examples/s  ratio %.2f of raw\n", c.name, c.best,
                c.best / raw_best);
  }
  return 0;
}

}  // namespace
}  // namespace asyncps::data

int main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  asyncps::bench::Report report(argc, argv);
  return report.Finish(json, asyncps::data::Main(quick, report));
}
