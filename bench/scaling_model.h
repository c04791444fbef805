#ifndef ASYNCPS_BENCH_SCALING_MODEL_H_
#define ASYNCPS_BENCH_SCALING_MODEL_H_

// A model of cluster throughput, fed with what scaling_bench measures on a small machine
// (CPU-seconds and bytes per unit of work, per process role) and asked what a machine with
// more cores would do. Operational analysis of a closed network (Lazowska et al., Quantitative
// System Performance, ch. 5-6):
//   * caps (asymptotic bounds): every resource a unit needs caps throughput at its capacity /
//     its demand per unit — each worker's, the busiest PS's and the chief's busiest thread (one
//     core each), all cores / total CPU, memory bandwidth / loopback bytes;
//   * W workers each run one closure at a time, so W units circulate: exact mean value
//     analysis (MVA) of that closed network gives the throughput with queueing. With a core per
//     process, the serial parts (the chief's and the busiest PS's busiest thread) queue and the
//     rest is delay; with fewer cores than processes, the cores are one multi-server queue
//     (Seidmann's approximation: demand/C queueing + the rest delay).
// The prediction is the smaller of the MVA figure and the caps. It binds on a cap when within
// 10% of it; else on "latency" (workers waiting on round trips) when within 10% of W / (one
// unit's uncontended time); else on the queue MVA finds most utilised ("PS queue", ...).
//
// What it leaves out, on purpose (each would need a measurement this machine cannot make):
// memory-bandwidth contention between cores beyond the single bandwidth figure given, caches
// shared between processes, a NIC instead of loopback, CPU cost per unit that changes with the
// core count (less batching of requests when nobody queues), and any serialisation in the
// chief that is not CPU (a lock held while waiting) beyond what the fitted latency absorbs.

#include <string>
#include <vector>

namespace asyncps::bench {

// Costs measured at one configuration (W workers, P PS), per unit of work (an example).
struct MeasuredCosts {
  int workers = 1;
  int ps = 1;
  // CPU-seconds per unit, summed over the role's processes.
  double worker_cpu = 0;
  double ps_cpu = 0;
  double chief_cpu = 0;
  // The busiest single thread's CPU-seconds per unit, summed over the role's processes (a
  // thread runs on one core at a time, so a role cannot go faster than its threads allow).
  double worker_thread = 0;
  // For the PS, whose shards are fixed (not balanced at run time): the busiest PS's CPU and
  // its busiest thread, each per unit.
  double busiest_ps_cpu = 0;
  double busiest_ps_thread = 0;
  double chief_thread = 0;
  // Bytes through the PS sockets per unit (read + written).
  double ps_bytes = 0;
};

struct Machine {
  double cores = 16;
  // Memory bandwidth in bytes/s that loopback copies share; each socket byte costs
  // `copies_per_byte` bytes of memory traffic (written into the kernel, read out: two copies,
  // each a read and a write).
  double memory_bytes_per_second = 20e9;
  double copies_per_byte = 4;
  // Seconds per unit one worker spends waiting that no CPU accounts for (wake-ups, the wire):
  // fitted from a measured single-worker run (see FitLatency).
  double latency_per_unit = 0;
};

struct Bound {
  std::string
      resource;  // "latency" (W / uncontended time), "workers", "PS", "chief", "cores", "memory"
  double units_per_second;  // the cap
};

struct Prediction {
  double units_per_second = 0;
  std::string binding;  // see the file comment
  double mva_units_per_second = 0;
  std::vector<Bound> bounds;  // every cap, in a fixed order
};

// Exact MVA of a closed network: `customers` units circulating through queueing centers of
// the given demands (seconds per unit) and a total delay (no queueing). Throughput in units/s.
// `utilisation`, when given, receives each queueing center's utilisation at `customers`.
double MvaThroughput(int customers, const std::vector<double>& queueing, double delay,
                     std::vector<double>* utilisation = nullptr);

// Uncontended time of one unit through one worker: its worker CPU, the busiest PS's share
// (PS requests of a step go out in parallel), the chief's dispatch (one closure per worker at
// a time, so it is in series) and `latency_per_unit`.
double UncontendedSecondsPerUnit(const MeasuredCosts& costs, double latency_per_unit);

// The latency that makes UncontendedSecondsPerUnit match a measured single-worker throughput
// (W = 1: nothing else for that worker to wait on); 0 when the CPU alone already explains it.
double FitLatency(const MeasuredCosts& single_worker, double measured_units_per_second);

Prediction Predict(const MeasuredCosts& costs, const Machine& machine);

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_SCALING_MODEL_H_
