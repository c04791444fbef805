#ifndef ASYNCPS_METRICS_PROCESS_COLLECTOR_H_
#define ASYNCPS_METRICS_PROCESS_COLLECTOR_H_

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace asyncps::metrics {

// The standard series every Prometheus client library exports about its process (names,
// types and units as in client_python and client_golang), read from /proc at each collection
// so every scrape sees current values:
//   process_cpu_seconds_total      counter  user + system CPU time      /proc/self/stat
//   process_resident_memory_bytes  gauge    resident set size           /proc/self/stat
//   process_virtual_memory_bytes   gauge    virtual memory size         /proc/self/stat
//   process_start_time_seconds     gauge    start, since the Unix epoch /proc/self/stat, /proc/stat
//   process_open_fds               gauge    open file descriptors       /proc/self/fd
//   process_max_fds                gauge    their soft limit            /proc/self/limits
// A series whose source cannot be read or parsed is left out of that collection.
class ProcessCollector : public prometheus::Collectable {
 public:
  // `self_dir` is the process's /proc directory and `proc_dir` the /proc root (for its
  // boot time); tests point them at fixtures.
  explicit ProcessCollector(std::string self_dir = "/proc/self", std::string proc_dir = "/proc");

  // Thread-safe: reads files only.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string self_dir_;
  const std::string proc_dir_;
  const long ticks_per_second_;
  const long page_size_;
};

// What the series need from /proc/[pid]/stat.
struct ProcStat {
  double cpu_seconds = 0;               // utime + stime
  double resident_bytes = 0;            // rss pages * page size
  double virtual_bytes = 0;             // vsize
  double start_seconds_after_boot = 0;  // starttime
};

// Parses /proc/[pid]/stat. The command name (field 2) is in parentheses and may itself hold
// spaces and parentheses, so the fields are counted from the last ')'.
// Errors: InvalidArgument when the text is not such a line.
absl::StatusOr<ProcStat> ParseProcStat(std::string_view text, long ticks_per_second,
                                       long page_size);

// The boot time in seconds since the Unix epoch: the "btime" line of /proc/stat.
absl::StatusOr<double> ParseBootTime(std::string_view proc_stat);

// The soft limit of the "Max open files" line of /proc/[pid]/limits; +Inf for "unlimited".
absl::StatusOr<double> ParseMaxOpenFiles(std::string_view limits);

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_PROCESS_COLLECTOR_H_
