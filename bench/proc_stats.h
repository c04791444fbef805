#ifndef ASYNCPS_BENCH_PROC_STATS_H_
#define ASYNCPS_BENCH_PROC_STATS_H_

// What the kernel has counted for a process so far: CPU time, of all threads and of each.
// scaling_bench reads it before and after a measured window for every process of a cluster,
// so it can say what one unit of work cost each process role in CPU-seconds — a figure that
// holds whatever else shares the machine, unlike wall-clock throughput.

#include <sys/types.h>

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"

namespace asyncps::bench {

struct ProcSample {
  // utime + stime of the whole process (every thread, live or exited), in seconds.
  double cpu_seconds = 0;
  // Time on a CPU of each live thread, by thread id (schedstat: nanoseconds, where utime +
  // stime come in clock ticks, too coarse for one thread over a short window).
  std::map<pid_t, double> thread_cpu_seconds;
};

// Reads /proc/<pid>/stat and /proc/<pid>/task/*/schedstat. NotFound when the process is gone;
// Internal when a file does not parse. The process total comes in clock ticks (usually 10 ms):
// measure windows of CPU-seconds, not microseconds.
absl::StatusOr<ProcSample> ReadProcSample(pid_t pid);

// What happened between two samples of one process.
struct ProcDelta {
  double cpu_seconds = 0;
  // The busiest single thread's CPU-seconds in the window: cpu_seconds / this bounds how
  // many cores the process could keep busy at once (1 for a single busy thread).
  double busiest_thread_seconds = 0;
};
// Threads in `after` absent from `before` count from zero (they started in the window).
ProcDelta Difference(const ProcSample& before, const ProcSample& after);

// Core-seconds the whole machine spent busy since boot (every CPU's user, nice, system, irq,
// softirq and steal time in /proc/stat); -1 if unreadable. Differences over a window, less
// what our own processes used, say how much of the machine others took meanwhile.
double MachineBusySeconds();

// The 1-minute load average of the machine (/proc/loadavg); -1 if unreadable.
double LoadAverage1();

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_PROC_STATS_H_
