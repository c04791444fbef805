// Variable initialisation on the PS (ps::Initialize) against filling the same bytes with
// std::fill, measured in the same run: what a CreateVariable of a large random table costs
// beyond touching its memory.
//
// Usage: init_bench [--quick] [--json=PATH]    (--json: the figures as JSON too, bench/report.h)
//
// Cases: an f32[10^8] (400 MB) vector — the shape that once took over a minute because every
// row seeded its own generator — with truncated_normal, normal, uniform and zeros, and a
// [10^6, 100] table with truncated_normal (same bytes, rows of 100). --quick uses 10^6
// elements. Each figure is the best of a few runs, alternating with the reference fill, in
// wall time and in the thread's CPU time (the ratio uses CPU time: on a shared 2-core machine
// wall time mostly measures the other processes).
//
// Exits 0 (a measurement, not a test); 1 when an initializer fails or returns a wrong value.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "core/tensor.h"
#include "ps/shard_initializer.h"

namespace asyncps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timing {
  double wall = 1e9;
  double cpu = 1e9;
};

// Allocates a fresh zero-filled tensor and overwrites it, as Initialize does (it allocates
// its result): the reference pays the same allocation and first touch.
Timing FillTiming(const Shape& shape) {
  const auto begin = Clock::now();
  const double cpu = ThreadCpuSeconds();
  Tensor t(DType::kF32, shape);
  std::fill_n(t.data<float>(), t.num_elements(), 0.5f);
  Timing out{Seconds(begin), ThreadCpuSeconds() - cpu};
  if (t.data<float>()[t.num_elements() / 2] != 0.5f) std::fprintf(stderr, "fill check failed\n");
  return out;
}

bool Run(const std::string& kind, const Shape& shape, int repeats, bench::Report& report) {
  ps::InitializerSpec spec;
  spec.kind = kind;
  spec.seed = 7;
  spec.stddev = 1;
  Timing best, best_fill;
  for (int i = 0; i < repeats; ++i) {
    const auto begin = Clock::now();
    const double cpu = ThreadCpuSeconds();
    auto t = ps::Initialize(spec, DType::kF32, shape);
    const Timing timing{Seconds(begin), ThreadCpuSeconds() - cpu};
    if (!t.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", kind.c_str(), t.status().ToString().c_str());
      return false;
    }
    const float mid = t->data<float>()[t->num_elements() / 2];
    if (!std::isfinite(mid) || (kind == "truncated_normal" && std::fabs(mid) > 2)) {
      std::fprintf(stderr, "%s returned a wrong value %g\n", kind.c_str(), mid);
      return false;
    }
    const Timing fill = FillTiming(shape);
    best = {std::min(best.wall, timing.wall), std::min(best.cpu, timing.cpu)};
    best_fill = {std::min(best_fill.wall, fill.wall), std::min(best_fill.cpu, fill.cpu)};
  }
  const double elements = static_cast<double>(NumElements(shape));
  std::printf(
      "init %-16s f32%-14s cpu %7.1f ms (%5.1f ns/elem, wall %7.1f ms) | fill same bytes cpu %6.1f ms "
      "(wall %6.1f ms) | ratio %5.1fx fill\n",
      kind.c_str(), ShapeString(shape).c_str(), best.cpu * 1e3, best.cpu / elements * 1e9, best.wall * 1e3,
      best_fill.cpu * 1e3, best_fill.wall * 1e3, best.cpu / best_fill.cpu);
  report.Add({.name = absl::StrCat("init ", kind, " f32", ShapeString(shape), " CPU time"),
              .value = best.cpu * 1e3,
              .unit = "ms",
              .reference = "std::fill of the same bytes",
              .reference_value = best_fill.cpu * 1e3,
              .note = absl::StrFormat("wall %.1f ms, fill wall %.1f ms", best.wall * 1e3,
                                      best_fill.wall * 1e3)});
  return true;
}

int Main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  bench::Report report(argc, argv);
  const int64_t n = quick ? 1000000 : 100000000;
  const int repeats = quick ? 1 : 3;
  bool ok = true;
  for (const char* kind : {"truncated_normal", "normal", "uniform", "zeros"}) {
    ok = ok && Run(kind, {n}, repeats, report);
  }
  ok = ok && Run("truncated_normal", {n / 100, 100}, repeats, report);
  return report.Finish(json, ok ? 0 : 1);
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
