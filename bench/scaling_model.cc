#include "bench/scaling_model.h"

#include <algorithm>
#include <limits>

namespace asyncps::bench {
namespace {

// capacity / demand; unbounded when nothing is demanded.
double Cap(double capacity, double demand) {
  return demand > 0 ? capacity / demand : std::numeric_limits<double>::infinity();
}

}  // namespace

double UncontendedSecondsPerUnit(const MeasuredCosts& costs, double latency_per_unit) {
  return costs.worker_cpu + costs.busiest_ps_cpu + costs.chief_cpu + latency_per_unit;
}

double FitLatency(const MeasuredCosts& single_worker, double measured_units_per_second) {
  if (measured_units_per_second <= 0) return 0;
  return std::max(0.0, 1.0 / measured_units_per_second - UncontendedSecondsPerUnit(single_worker, 0));
}

Prediction Predict(const MeasuredCosts& costs, const Machine& machine) {
  Prediction p;
  const double total_cpu = costs.worker_cpu + costs.ps_cpu + costs.chief_cpu;
  p.bounds = {
      {"latency", Cap(costs.workers, UncontendedSecondsPerUnit(costs, machine.latency_per_unit))},
      // Each worker's busiest thread on a core of its own.
      {"workers", Cap(costs.workers, costs.worker_thread)},
      // The busiest PS: its busiest thread on one core, and all its threads on at most the
      // cores the machine has.
      {"PS", std::min(Cap(1, costs.busiest_ps_thread), Cap(machine.cores, costs.busiest_ps_cpu))},
      {"chief", Cap(1, costs.chief_thread)},
      {"cores", Cap(machine.cores, total_cpu)},
      {"memory", Cap(machine.memory_bytes_per_second, machine.copies_per_byte * costs.ps_bytes)},
  };
  p.units_per_second = std::numeric_limits<double>::infinity();
  for (const Bound& b : p.bounds) {
    if (b.units_per_second < p.units_per_second) {
      p.units_per_second = b.units_per_second;
      p.binding = b.resource;
    }
  }
  return p;
}

}  // namespace asyncps::bench
