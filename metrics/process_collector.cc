#include "metrics/process_collector.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace asyncps::metrics {
namespace {

// The whole of a small file; /proc files report size 0, so read to the end. Empty on error.
std::string ReadSmallFile(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0 && out.size() < (1 << 20);)
    out.append(buf, n);
  std::fclose(f);
  return out;
}

// Entries of a directory other than "." and "..", or -1 when it cannot be opened.
double CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return -1;
  double n = 0;
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") ++n;
  }
  closedir(d);
  return n;
}

prometheus::MetricFamily Family(std::string name, std::string help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

absl::StatusOr<ProcStat> ParseProcStat(std::string_view text, long ticks_per_second,
                                       long page_size) {
  const size_t close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') > close || ticks_per_second <= 0 ||
      page_size <= 0) {
    return absl::InvalidArgumentError("not a /proc/[pid]/stat line: no (command)");
  }
  // fields[0] is field 3 (state) of proc(5).
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text.data() + close + 1, text.size() - close - 1), ' ',
                     absl::SkipWhitespace());
  auto field = [&](int number, double* out) {
    const size_t i = static_cast<size_t>(number - 3);
    uint64_t v;
    if (i >= fields.size() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[i]), &v))
      return false;
    *out = static_cast<double>(v);
    return true;
  };
  double utime, stime, starttime, vsize, rss;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &starttime) || !field(23, &vsize) ||
      !field(24, &rss)) {
    return absl::InvalidArgumentError(
        "not a /proc/[pid]/stat line: fields 14-24 missing or not numbers");
  }
  const double ticks = static_cast<double>(ticks_per_second);
  ProcStat s;
  s.cpu_seconds = (utime + stime) / ticks;
  s.resident_bytes = rss * static_cast<double>(page_size);
  s.virtual_bytes = vsize;
  s.start_seconds_after_boot = starttime / ticks;
  return s;
}

absl::StatusOr<double> ParseBootTime(std::string_view proc_stat) {
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(proc_stat.data(), proc_stat.size()), '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) {
      uint64_t v;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &v)) return static_cast<double>(v);
      break;
    }
  }
  return absl::InvalidArgumentError("no btime line in /proc/stat");
}

absl::StatusOr<double> ParseMaxOpenFiles(std::string_view limits) {
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(limits.data(), limits.size()), '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (words.empty()) break;
    if (words[0] == "unlimited") return std::numeric_limits<double>::infinity();
    uint64_t v;
    if (absl::SimpleAtoi(words[0], &v)) return static_cast<double>(v);
    break;
  }
  return absl::InvalidArgumentError("no 'Max open files' soft limit in /proc/[pid]/limits");
}

ProcessCollector::ProcessCollector(std::string self_dir, std::string proc_dir)
    : self_dir_(std::move(self_dir)),
      proc_dir_(std::move(proc_dir)),
      ticks_per_second_(sysconf(_SC_CLK_TCK)),
      page_size_(sysconf(_SC_PAGESIZE)) {}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  if (auto stat = ParseProcStat(ReadSmallFile(self_dir_ + "/stat"), ticks_per_second_, page_size_);
      stat.ok()) {
    out.push_back(Family("process_cpu_seconds_total",
                         "Total user and system CPU time spent in seconds.", MetricType::Counter,
                         stat->cpu_seconds));
    out.push_back(Family("process_resident_memory_bytes", "Resident memory size in bytes.",
                         MetricType::Gauge, stat->resident_bytes));
    out.push_back(Family("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         MetricType::Gauge, stat->virtual_bytes));
    if (auto boot = ParseBootTime(ReadSmallFile(proc_dir_ + "/stat")); boot.ok()) {
      out.push_back(Family("process_start_time_seconds",
                           "Start time of the process since unix epoch in seconds.",
                           MetricType::Gauge, *boot + stat->start_seconds_after_boot));
    }
  }
  // The count includes the descriptor opendir holds while counting.
  if (const double fds = CountEntries(self_dir_ + "/fd"); fds >= 0) {
    out.push_back(
        Family("process_open_fds", "Number of open file descriptors.", MetricType::Gauge, fds));
  }
  if (auto max = ParseMaxOpenFiles(ReadSmallFile(self_dir_ + "/limits")); max.ok()) {
    out.push_back(Family("process_max_fds", "Maximum number of open file descriptors.",
                         MetricType::Gauge, *max));
  }
  return out;
}

}  // namespace asyncps::metrics
