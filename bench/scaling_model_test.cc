#include "bench/scaling_model.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps::bench {
namespace {

// A configuration whose roles cost what the test says, per unit, with single-threaded
// processes (busiest thread = whole process) and balanced PS.
MeasuredCosts Costs(int workers, int ps, double worker, double ps_total, double chief) {
  MeasuredCosts c;
  c.workers = workers;
  c.ps = ps;
  c.worker_cpu = worker;
  c.worker_thread = worker;
  c.ps_cpu = ps_total;
  c.busiest_ps_cpu = ps_total / ps;
  c.busiest_ps_thread = ps_total / ps;
  c.chief_cpu = chief;
  c.chief_thread = chief;
  return c;
}

Machine Cores(double cores) {
  Machine m;
  m.cores = cores;
  return m;
}

TEST(ScalingModelTest, OneWorkerIsBoundByItsSerialLatency) {
  Machine m = Cores(16);
  m.latency_per_unit = 1e-4;
  const Prediction p = Predict(Costs(1, 1, 1e-3, 2e-4, 1e-4), m);
  EXPECT_EQ(p.binding, "latency");
  EXPECT_NEAR(p.units_per_second, 1 / (1e-3 + 2e-4 + 1e-4 + 1e-4), 1e-6);
}

TEST(ScalingModelTest, ManyWorkersOnFewCoresAreBoundByTheCores) {
  const Prediction p = Predict(Costs(8, 1, 1e-3, 1e-4, 1e-5), Cores(2));
  EXPECT_EQ(p.binding, "cores");
  // At the cap, less what queueing for the two cores costs with 8 units circulating.
  const double cap = 2 / (1e-3 + 1e-4 + 1e-5);
  EXPECT_LE(p.units_per_second, cap);
  EXPECT_GE(p.units_per_second, 0.95 * cap);
}

TEST(ScalingModelTest, AChiefThatCostsMoreThanAWorkerBindsOnABigMachine) {
  // 8 workers could do 8000 units/s, the chief's one thread only 5000.
  const Prediction p = Predict(Costs(8, 4, 1e-3, 4e-5, 2e-4), Cores(64));
  EXPECT_EQ(p.binding, "chief");
  EXPECT_LE(p.units_per_second, 5000);
  EXPECT_GE(p.units_per_second, 4500);
}

TEST(ScalingModelTest, TheBusiestPsBindsWhenShardsAreUneven) {
  MeasuredCosts c = Costs(8, 2, 1e-4, 4e-4, 1e-6);
  c.busiest_ps_cpu = 3e-4;  // one PS does three quarters of the work
  c.busiest_ps_thread = 3e-4;
  const Prediction p = Predict(c, Cores(64));
  EXPECT_EQ(p.binding, "PS");
  EXPECT_LE(p.units_per_second, 1 / 3e-4);
  EXPECT_GE(p.units_per_second, 0.9 / 3e-4);
}

TEST(ScalingModelTest, AThreadedPsIsBoundByItsBusiestThread) {
  MeasuredCosts c = Costs(8, 1, 1e-5, 4e-4, 1e-7);
  c.busiest_ps_thread = 1e-4;  // four threads share the PS's work
  const Prediction p = Predict(c, Cores(64));
  EXPECT_EQ(p.binding, "PS");
  EXPECT_LE(p.units_per_second, 1e4);
  EXPECT_GE(p.units_per_second, 9e3);
}

TEST(ScalingModelTest, LoopbackBytesCanBindBeforeCpu) {
  MeasuredCosts c = Costs(8, 4, 1e-5, 1e-5, 1e-7);
  c.ps_bytes = 1e6;
  Machine m = Cores(64);
  m.memory_bytes_per_second = 20e9;
  m.copies_per_byte = 4;
  const Prediction p = Predict(c, m);
  EXPECT_EQ(p.binding, "memory");
  EXPECT_NEAR(p.units_per_second, 20e9 / 4e6, 1e-6);
}

TEST(ScalingModelTest, NearTheKneeQueueingAtTheBusiestPsBinds) {
  // Two workers, each unit 1 ms of worker CPU then 1 ms of the PS's one thread: both the PS
  // cap and W / latency say 1000 units/s, but the two units often meet at the PS.
  const Prediction p = Predict(Costs(2, 1, 1e-3, 1e-3, 0), Cores(16));
  EXPECT_EQ(p.binding, "PS queue");
  EXPECT_NEAR(p.units_per_second, 800, 1e-6);  // MVA: 2 / (1 ms + 1.5 ms)
}

TEST(ScalingModelTest, MvaMatchesHandComputedValues) {
  // One queue of 1 s and 1 s of delay: 1 unit -> 0.5/s; 2 units -> 2 / (1 + 1.5) = 0.8/s.
  EXPECT_NEAR(MvaThroughput(1, {1.0}, 1.0), 0.5, 1e-12);
  std::vector<double> utilisation;
  EXPECT_NEAR(MvaThroughput(2, {1.0}, 1.0, &utilisation), 0.8, 1e-12);
  ASSERT_EQ(utilisation.size(), 1u);
  EXPECT_NEAR(utilisation[0], 0.8, 1e-12);
  // Many units saturate the queue at 1 / demand.
  EXPECT_NEAR(MvaThroughput(200, {0.5, 0.1}, 1.0), 2.0, 1e-3);
}

TEST(ScalingModelTest, EveryBoundIsReportedAndTheSmallestWins) {
  const Prediction p = Predict(Costs(4, 2, 1e-3, 1e-4, 1e-5), Cores(16));
  ASSERT_EQ(p.bounds.size(), 6u);
  for (const Bound& b : p.bounds) EXPECT_GE(b.units_per_second, p.units_per_second) << b.resource;
}

TEST(ScalingModelTest, FittedLatencyReproducesTheMeasuredSingleWorkerRate) {
  const MeasuredCosts c = Costs(1, 1, 1e-3, 2e-4, 1e-4);
  const double latency = FitLatency(c, 500);  // 2 ms a unit, 1.3 ms of it CPU
  EXPECT_NEAR(latency, 7e-4, 1e-9);
  Machine m = Cores(16);
  m.latency_per_unit = latency;
  EXPECT_NEAR(Predict(c, m).units_per_second, 500, 1e-6);
  // Faster than the CPU alone allows (a measurement glitch): no negative latency.
  EXPECT_EQ(FitLatency(c, 1e6), 0);
}

}  // namespace
}  // namespace asyncps::bench
