// bf16_bench: the bf16 wire conversion (core/bf16.h) against memcpy of the same bytes, in the
// same run: narrowing n f32 to bf16 (reads 4n bytes, writes 2n) against a memcpy of 4n bytes,
// widening (reads 2n, writes 4n) against the same memcpy, and a naive scalar loop (a branch per
// element, as first measured in docs/performance.md) for scale. Sizes: the Fashion-MNIST MLP's
// 235,146 parameters (what a training step pulls and pushes) and 16 Mi floats (64 MiB, past the
// caches). Each figure is the best of several repeats (the least disturbed).
//
// Usage: bf16_bench [--quick] [--json=PATH]   (--json: the figures as JSON too, bench/report.h)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "core/bf16.h"

namespace asyncps {
namespace {

// The branchy conversion a first version would write: per element, a NaN test then rounding.
__attribute__((noinline)) void NaiveNarrow(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(in[i])) {
      out[i] = 0x7fc0;
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, in + i, 4);
    out[i] = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
  }
}

template <typename Fn>
double BestSeconds(int repeats, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

// Keeps the compiler from dropping a conversion whose result is never read.
volatile uint32_t sink;

void Run(size_t n, int repeats, const std::string& label, bench::Report& report) {
  std::vector<float> f32(n), back(n), copy(n);
  std::vector<uint16_t> bf16(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 0.05f);
  for (float& v : f32) v = normal(rng);
  const double memcpy_s = BestSeconds(repeats, [&] { std::memcpy(copy.data(), f32.data(), n * 4); sink = copy[n / 2] != 0; });
  const double narrow_s = BestSeconds(repeats, [&] { NarrowToBf16(f32.data(), bf16.data(), n); sink = bf16[n / 2]; });
  const double widen_s = BestSeconds(repeats, [&] { WidenFromBf16(bf16.data(), back.data(), n); sink = back[n / 2] != 0; });
  const double naive_s = BestSeconds(repeats, [&] { NaiveNarrow(f32.data(), bf16.data(), n); sink = bf16[n / 2]; });
  const std::string ref = absl::StrCat("memcpy of the f32 bytes (", label, ")");
  auto add = [&](const char* what, double s) {
    std::printf("  %-34s %-10s %8.3f ms  %6.2f GB/s of f32  %.2fx memcpy's time\n", what, label.c_str(), s * 1e3,
                n * 4 / s / 1e9, s / memcpy_s);
    report.Add({.name = absl::StrCat(what, " ", label), .value = s * 1e3, .unit = "ms", .reference = ref,
                .reference_value = memcpy_s * 1e3});
  };
  std::printf("  %-34s %-10s %8.3f ms  %6.2f GB/s\n", "memcpy f32 (reference)", label.c_str(), memcpy_s * 1e3,
              n * 4 / memcpy_s / 1e9);
  add("narrow f32->bf16 (NarrowToBf16)", narrow_s);
  add("widen bf16->f32 (WidenFromBf16)", widen_s);
  add("naive narrow (branch per element)", naive_s);
}

int Main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  bench::Report report(argc, argv);
  const int repeats = quick ? 3 : 50;
  std::printf("bf16_bench: the wire conversion against memcpy (best of %d)\n", repeats);
  Run(235146, repeats, "235k (MLP)", report);
  if (!quick) Run(size_t{16} << 20, std::max(3, repeats / 10), "16Mi", report);
  return report.Finish(json, 0);
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
