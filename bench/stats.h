#ifndef ASYNCPS_BENCH_STATS_H_
#define ASYNCPS_BENCH_STATS_H_

// Summaries of a benchmark's samples (copies: the caller's order is kept).

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace asyncps::bench {

// The `p` quantile (0..1) of `v`; 0 for no samples.
inline double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// The median of `v` (the upper one for an even count); 0 for no samples.
inline double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_STATS_H_
