#include "bench/proc_stats.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace asyncps::bench {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// utime + stime (fields 14 and 15) of a /proc stat line, in seconds. The command name (field
// 2) is in parentheses and may hold spaces, so fields are counted after the last ')'.
absl::StatusOr<double> StatCpuSeconds(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  const size_t close = text->rfind(')');
  if (close == std::string::npos)
    return absl::InternalError(absl::StrCat("no command name in ", path));
  const std::vector<std::string> fields =
      absl::StrSplit(text->substr(close + 1), ' ', absl::SkipEmpty());
  // After ')': field 3 (state) is index 0, so utime (14) is index 11 and stime (15) index 12.
  uint64_t utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(absl::StrCat("cannot parse ", path));
  }
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  return static_cast<double>(utime + stime) /
         static_cast<double>(ticks_per_second > 0 ? ticks_per_second : 100);
}

// A thread's time on a CPU from its schedstat (first field, nanoseconds): clock ticks are too
// coarse for one thread over a short window. Falls back on the thread's stat.
absl::StatusOr<double> ThreadCpuSeconds(const std::string& task_dir) {
  if (absl::StatusOr<std::string> text = ReadFile(task_dir + "/schedstat"); text.ok()) {
    uint64_t nanoseconds = 0;
    if (absl::SimpleAtoi(text->substr(0, text->find(' ')), &nanoseconds))
      return static_cast<double>(nanoseconds) * 1e-9;
  }
  return StatCpuSeconds(task_dir + "/stat");
}

}  // namespace

absl::StatusOr<ProcSample> ReadProcSample(pid_t pid) {
  ProcSample sample;
  const std::string dir = absl::StrCat("/proc/", pid);
  absl::StatusOr<double> cpu = StatCpuSeconds(dir + "/stat");
  if (!cpu.ok()) return cpu.status();
  sample.cpu_seconds = *cpu;
  if (DIR* tasks = opendir((dir + "/task").c_str()); tasks != nullptr) {
    while (dirent* entry = readdir(tasks)) {
      pid_t tid = 0;
      if (!absl::SimpleAtoi(entry->d_name, &tid)) continue;  // "." and ".."
      // A thread may end between readdir and the read: it is simply not counted.
      absl::StatusOr<double> t = ThreadCpuSeconds(absl::StrCat(dir, "/task/", tid));
      if (t.ok()) sample.thread_cpu_seconds[tid] = *t;
    }
    closedir(tasks);
  }
  return sample;
}

ProcDelta Difference(const ProcSample& before, const ProcSample& after) {
  ProcDelta d;
  d.cpu_seconds = after.cpu_seconds - before.cpu_seconds;
  for (const auto& [tid, seconds] : after.thread_cpu_seconds) {
    auto it = before.thread_cpu_seconds.find(tid);
    const double used = seconds - (it == before.thread_cpu_seconds.end() ? 0.0 : it->second);
    if (used > d.busiest_thread_seconds) d.busiest_thread_seconds = used;
  }
  return d;
}

double MachineBusySeconds() {
  absl::StatusOr<std::string> text = ReadFile("/proc/stat");
  if (!text.ok()) return -1;
  // "cpu  user nice system idle iowait irq softirq steal ...", in clock ticks.
  const std::string first = text->substr(0, text->find('\n'));
  const std::vector<std::string> fields = absl::StrSplit(first, ' ', absl::SkipEmpty());
  if (fields.size() < 9 || fields[0] != "cpu") return -1;
  uint64_t busy = 0;
  for (int i : {1, 2, 3, 6, 7, 8}) {
    uint64_t ticks = 0;
    if (!absl::SimpleAtoi(fields[i], &ticks)) return -1;
    busy += ticks;
  }
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  return static_cast<double>(busy) /
         static_cast<double>(ticks_per_second > 0 ? ticks_per_second : 100);
}

double LoadAverage1() {
  absl::StatusOr<std::string> text = ReadFile("/proc/loadavg");
  double load = -1;
  if (!text.ok()) return load;
  const std::vector<std::string> fields = absl::StrSplit(*text, ' ');
  if (fields.empty() || !absl::SimpleAtod(fields[0], &load)) return -1;
  return load;
}

}  // namespace asyncps::bench
