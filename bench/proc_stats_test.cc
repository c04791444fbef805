#include "bench/proc_stats.h"

#include <unistd.h>

#include <chrono>

#include "gtest/gtest.h"

namespace asyncps::bench {
namespace {

TEST(ProcStatsTest, CpuSpentInOneThreadIsCountedForTheProcessAndThatThread) {
  auto before = ReadProcSample(getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  // Spins until the kernel has charged at least 5 clock ticks, or gives up after 30 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  ProcDelta d;
  volatile uint64_t sink = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 1000000; ++i) sink = sink + static_cast<uint64_t>(i);
    auto now = ReadProcSample(getpid());
    ASSERT_TRUE(now.ok()) << now.status();
    d = Difference(*before, *now);
    if (d.cpu_seconds >= 0.05) break;
  }
  EXPECT_GE(d.cpu_seconds, 0.05);
  // Only this thread worked: it is the busiest, and it accounts for (nearly) all of it.
  EXPECT_GT(d.busiest_thread_seconds, 0);
  EXPECT_LE(d.busiest_thread_seconds, d.cpu_seconds + 0.011);
}

TEST(ProcStatsTest, AThreadStartedInTheWindowCountsFromZero) {
  ProcSample before;
  before.cpu_seconds = 1.0;
  before.thread_cpu_seconds = {{10, 1.0}};
  ProcSample after;
  after.cpu_seconds = 1.7;
  after.thread_cpu_seconds = {{10, 1.2}, {11, 0.5}};
  const ProcDelta d = Difference(before, after);
  EXPECT_DOUBLE_EQ(d.cpu_seconds, 0.7);
  EXPECT_DOUBLE_EQ(d.busiest_thread_seconds, 0.5);
}

TEST(ProcStatsTest, AProcessThatIsGoneIsNotFound) {
  // Pid numbers wrap far below this on Linux (pid_max <= 2^22).
  EXPECT_EQ(ReadProcSample(1 << 30).status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcStatsTest, MachineCountersAreReadable) {
  EXPECT_GE(MachineBusySeconds(), 0);
  EXPECT_GE(LoadAverage1(), 0);
}

}  // namespace
}  // namespace asyncps::bench
