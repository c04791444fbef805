#include "metrics/process_collector.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace asyncps::metrics {
namespace {

namespace fs = std::filesystem;

// A real line (from `cat /proc/self/stat`) whose command is "a) b (c": the name holds spaces
// and parentheses, as any process may set with prctl(PR_SET_NAME).
// utime 250, stime 150, starttime 57550, vsize 3133440, rss 359.
constexpr char kStat[] =
    "14794 (a) b (c) R 14792 14792 6197 0 -1 4194304 96 0 0 0 250 150 0 0 20 0 1 0 57550 3133440 "
    "359 "
    "18446744073709551615 94586619678720 94586619698601 140723793460960 0 0 0 0 0 0 0 0 0 17 0 0 0 "
    "0 0 0 "
    "94586619714608 94586619716224 94586820730880 140723793463947 140723793463967 140723793463967 "
    "140723793465323 0\n";

constexpr char kLimits[] =
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max open files            20000                1048576              files     \n"
    "Max locked memory         8388608              8388608              bytes     \n";

TEST(ParseProcStatTest, CountsFieldsFromTheLastParenthesis) {
  auto s = ParseProcStat(kStat, /*ticks_per_second=*/100, /*page_size=*/4096);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 4.0);  // (250 + 150) / 100
  EXPECT_DOUBLE_EQ(s->resident_bytes, 359.0 * 4096);
  EXPECT_DOUBLE_EQ(s->virtual_bytes, 3133440.0);
  EXPECT_DOUBLE_EQ(s->start_seconds_after_boot, 575.5);
}

TEST(ParseProcStatTest, MalformedLinesAreErrors) {
  EXPECT_FALSE(ParseProcStat("", 100, 4096).ok());
  EXPECT_FALSE(ParseProcStat("14794 cat R 1 2 3", 100, 4096).ok());
  EXPECT_FALSE(ParseProcStat("14794 (cat) R 1 2 3", 100, 4096).ok());  // cut short
  EXPECT_FALSE(
      ParseProcStat("1 (x) R 1 1 1 0 -1 0 0 0 0 0 ten 0 0 0 20 0 1 0 5 6 7", 100, 4096).ok());
}

TEST(ParseProcFilesTest, BootTimeAndOpenFileLimit) {
  EXPECT_EQ(*ParseBootTime("cpu  1 2 3\nintr 5\nbtime 1795612176\nprocesses 9\n"), 1795612176.0);
  EXPECT_FALSE(ParseBootTime("cpu 1 2 3\n").ok());
  EXPECT_EQ(*ParseMaxOpenFiles(kLimits), 20000.0);
  EXPECT_TRUE(std::isinf(
      *ParseMaxOpenFiles("Max open files            unlimited            unlimited     files\n")));
  EXPECT_FALSE(ParseMaxOpenFiles("Max cpu time   unlimited   unlimited   seconds\n").ok());
}

std::map<std::string, double> Values(const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, double> out;
  for (const auto& f : families) {
    if (f.metric.size() != 1) continue;
    out[f.name] = f.type == prometheus::MetricType::Counter ? f.metric[0].counter.value
                                                            : f.metric[0].gauge.value;
  }
  return out;
}

// A fake /proc: the collector reads exactly the files it names.
class FixtureProcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = absl::StrCat(::testing::TempDir(), "/process_collector_", getpid());
    fs::create_directories(root_ + "/self/fd");
    std::ofstream(root_ + "/self/stat") << kStat;
    std::ofstream(root_ + "/self/limits") << kLimits;
    for (const char* fd : {"0", "1", "2", "7"}) std::ofstream(root_ + "/self/fd/" + fd);
    std::ofstream(root_ + "/stat") << "cpu  1 2 3\nbtime 1795612176\n";
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

TEST_F(FixtureProcTest, CollectsEverySeriesFromTheFiles) {
  const long ticks = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  const auto families = ProcessCollector(root_ + "/self", root_).Collect();
  auto v = Values(families);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_DOUBLE_EQ(v["process_cpu_seconds_total"], 400.0 / static_cast<double>(ticks));
  EXPECT_DOUBLE_EQ(v["process_resident_memory_bytes"], 359.0 * static_cast<double>(page));
  EXPECT_DOUBLE_EQ(v["process_virtual_memory_bytes"], 3133440.0);
  EXPECT_DOUBLE_EQ(v["process_start_time_seconds"],
                   1795612176.0 + 57550.0 / static_cast<double>(ticks));
  EXPECT_DOUBLE_EQ(v["process_open_fds"], 4.0);
  EXPECT_DOUBLE_EQ(v["process_max_fds"], 20000.0);
  for (const auto& f : families) {
    EXPECT_EQ(f.type, f.name == "process_cpu_seconds_total" ? prometheus::MetricType::Counter
                                                            : prometheus::MetricType::Gauge)
        << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
  }
}

TEST_F(FixtureProcTest, LeavesOutSeriesWhoseFilesAreMissing) {
  fs::remove(root_ + "/self/stat");
  fs::remove_all(root_ + "/self/fd");
  auto v = Values(ProcessCollector(root_ + "/self", root_).Collect());
  EXPECT_EQ(v.size(), 1u);
  EXPECT_EQ(v.count("process_max_fds"), 1u);
}

TEST(ProcessCollectorTest, ReadsThisProcess) {
  auto v = Values(ProcessCollector().Collect());
  ASSERT_EQ(v.size(), 6u);
  EXPECT_GT(v["process_resident_memory_bytes"], 0);
  EXPECT_GE(v["process_virtual_memory_bytes"], v["process_resident_memory_bytes"]);
  EXPECT_GE(v["process_cpu_seconds_total"], 0);
  EXPECT_GE(v["process_open_fds"], 3);  // stdin, stdout, stderr
  EXPECT_GE(v["process_max_fds"], v["process_open_fds"]);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_LE(v["process_start_time_seconds"], now + 1);
  EXPECT_GT(v["process_start_time_seconds"], now - 86400);  // this test started today
}

}  // namespace
}  // namespace asyncps::metrics
