// Variable initialisation on the PS (ps::Initialize) against filling the same bytes with
// std::fill, measured in the same run: what a CreateVariable of a large random table costs
// beyond touching its memory.
//
// Usage: init_bench [--quick]
//
// Cases: an f32[10^8] (400 MB) vector — the shape that once took over a minute because every
// row seeded its own generator — with truncated_normal, normal, uniform and zeros, and a
// [10^6, 100] table with truncated_normal (same bytes, rows of 100). --quick uses 10^6
// elements. Each figure is the best of a few runs, alternating with the reference fill.
//
// Exits 0 (a measurement, not a test); 1 when an initializer fails or returns a wrong value.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "core/tensor.h"
#include "ps/initializer.h"

namespace asyncps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// Allocates a fresh zero-filled tensor and overwrites it, as Initialize does (it allocates
// its result): the reference pays the same allocation and first touch.
double FillSeconds(const Shape& shape) {
  const auto begin = Clock::now();
  Tensor t(DType::kF32, shape);
  std::fill_n(t.data<float>(), t.num_elements(), 0.5f);
  const double s = Seconds(begin);
  if (t.data<float>()[t.num_elements() / 2] != 0.5f) std::fprintf(stderr, "fill check failed\n");
  return s;
}

bool Run(const std::string& kind, const Shape& shape, int repeats) {
  ps::InitializerSpec spec;
  spec.kind = kind;
  spec.seed = 7;
  spec.stddev = 1;
  double best = 1e9, best_fill = 1e9;
  for (int i = 0; i < repeats; ++i) {
    const auto begin = Clock::now();
    auto t = ps::Initialize(spec, DType::kF32, shape);
    const double s = Seconds(begin);
    if (!t.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", kind.c_str(), t.status().ToString().c_str());
      return false;
    }
    const float mid = t->data<float>()[t->num_elements() / 2];
    if (!std::isfinite(mid) || (kind == "truncated_normal" && std::fabs(mid) > 2)) {
      std::fprintf(stderr, "%s returned a wrong value %g\n", kind.c_str(), mid);
      return false;
    }
    best = std::min(best, s);
    best_fill = std::min(best_fill, FillSeconds(shape));
  }
  const double elements = static_cast<double>(NumElements(shape));
  std::printf("init %-16s f32%-14s %8.1f ms  %6.1f ns/elem | fill same bytes %7.1f ms | ratio %6.1fx fill\n",
              kind.c_str(), ShapeString(shape).c_str(), best * 1e3, best / elements * 1e9, best_fill * 1e3,
              best / best_fill);
  return true;
}

int Main(int argc, char** argv) {
  bool quick;
  if (!bench::ParseBenchFlags(argc, argv, &quick)) return 2;
  const int64_t n = quick ? 1000000 : 100000000;
  const int repeats = quick ? 1 : 3;
  bool ok = true;
  for (const char* kind : {"truncated_normal", "normal", "uniform", "zeros"}) ok = ok && Run(kind, {n}, repeats);
  ok = ok && Run("truncated_normal", {n / 100, 100}, repeats);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
