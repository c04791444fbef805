#ifndef ASYNCPS_BENCH_PROMETHEUS_SCRAPE_H_
#define ASYNCPS_BENCH_PROMETHEUS_SCRAPE_H_

// What a benchmark needs to read the processes' own instrumentation (fetched with
// testutil::HttpGetBody): sums over samples of a family in a Prometheus text exposition, a
// process's CPU time from /proc, the load average. Header-only; benchmarks only (no error
// handling beyond "absent").

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <sstream>
#include <string>

namespace asyncps::bench {

// The sum of every sample of `series` (a family name with its suffix, e.g.
// "asyncps_rpc_server_seconds_sum") whose labels contain every one of `labels` (each like
// `method="ps.Read"`). 0 when there is none.
inline double SumSamples(const std::string& text, const std::string& series,
                         std::initializer_list<std::string> labels = {}) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, series.size(), series) != 0) continue;
    const size_t rest = series.size();
    if (rest >= line.size() || (line[rest] != '{' && line[rest] != ' ')) continue;
    bool match = true;
    for (const std::string& label : labels) match = match && line.find(label) != std::string::npos;
    if (!match) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    sum += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

// User plus system CPU seconds process `pid` has used (/proc/PID/stat); 0 when unreadable.
inline double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces; the fields after it start past its ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. here; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The 1-minute load average (/proc/loadavg); -1 when unreadable.
inline double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_PROMETHEUS_SCRAPE_H_
