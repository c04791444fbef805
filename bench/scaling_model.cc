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
  return std::max(0.0,
                  1.0 / measured_units_per_second - UncontendedSecondsPerUnit(single_worker, 0));
}

double MvaThroughput(int customers, const std::vector<double>& queueing, double delay,
                     std::vector<double>* utilisation) {
  std::vector<double> queue(queueing.size(), 0.0);
  double throughput = 0;
  for (int n = 1; n <= customers; ++n) {
    double response = delay;
    std::vector<double> residence(queueing.size());
    for (size_t k = 0; k < queueing.size(); ++k) {
      residence[k] = queueing[k] * (1 + queue[k]);
      response += residence[k];
    }
    throughput = response > 0 ? n / response : std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < queueing.size(); ++k) queue[k] = throughput * residence[k];
  }
  if (utilisation != nullptr) {
    utilisation->clear();
    for (double d : queueing) utilisation->push_back(throughput * d);
  }
  return throughput;
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
  Bound cap{"", std::numeric_limits<double>::infinity()};
  for (const Bound& b : p.bounds) {
    if (b.resource != "latency" && b.units_per_second < cap.units_per_second) cap = b;
  }

  // The closed network of W circulating units.
  const double total_cpu_delay =
      costs.worker_cpu + costs.busiest_ps_cpu + costs.chief_cpu + machine.latency_per_unit;
  std::vector<double> queueing;
  std::vector<std::string> names;
  double delay = 0;
  if (machine.cores >= costs.workers + costs.ps + 1) {
    queueing = {costs.busiest_ps_thread, costs.chief_thread};
    names = {"PS queue", "chief queue"};
    delay = total_cpu_delay - costs.busiest_ps_thread - costs.chief_thread;
  } else {
    queueing = {total_cpu / machine.cores};
    names = {"cores queue"};
    delay = total_cpu * (machine.cores - 1) / machine.cores + machine.latency_per_unit;
  }
  std::vector<double> utilisation;
  p.mva_units_per_second =
      MvaThroughput(costs.workers, queueing, std::max(0.0, delay), &utilisation);

  p.units_per_second = std::min(p.mva_units_per_second, cap.units_per_second);
  if (p.units_per_second >= 0.9 * cap.units_per_second) {
    p.binding = cap.resource;
  } else if (p.units_per_second >= 0.9 * p.bounds[0].units_per_second) {
    p.binding = "latency";
  } else {
    const size_t busiest = static_cast<size_t>(
        std::max_element(utilisation.begin(), utilisation.end()) - utilisation.begin());
    p.binding = names[busiest];
  }
  return p;
}

}  // namespace asyncps::bench
