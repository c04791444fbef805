// Operating a training job, end to end with real tools: a Fashion-MNIST cluster started by
// asyncps_launch, scraped by Debian's Prometheus through the launcher's file_sd targets file,
// the Grafana dashboard's queries checked against that scrape, and the chief's status page
// rendered by headless Chromium. Every wait is on a condition with a deadline.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/durable_file.h"
#include "core/subprocess.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "tests/testutil/http_get.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kPs = 1;
constexpr int kWorkers = 2;
constexpr absl::Duration kDeadline = absl::Seconds(120);

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// Calls `check` until it returns true or `timeout` passes; polling pacing only.
bool WaitFor(const std::function<bool()>& check, absl::Duration timeout = kDeadline) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (check()) return true;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(250));
  }
  return check();
}

std::string Which(const std::string& program) {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/", program);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// One training cluster and one Prometheus for the whole suite (each takes seconds to start).
class ObservabilityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/observability_", getpid()));
    fs::create_directories(*dir_ + "/prometheus-data");
    const std::string targets = *dir_ + "/targets.json";

    Subprocess::Options launch;
    // Far more epochs than the tests need: the suite stops the cluster when it is done.
    launch.argv = {ASYNCPS_BIN_DIR "/asyncps_launch", "--ps", std::to_string(kPs), "--workers",
                   std::to_string(kWorkers), "--file_sd", targets, "--", ASYNCPS_BIN_DIR "/fashion_mnist",
                   "--epochs", "100", "--batch_size", "256", "--eval_every", "0.2"};
    launch.env = {{"ASYNCPS_METRICS_PORT", "0"}};
    auto launcher = Subprocess::Start(launch);
    ASSERT_TRUE(launcher.ok()) << launcher.status();
    launcher_ = launcher->release();
    auto status_line = launcher_->WaitForLine("status page http://127.0.0.1:", absl::Seconds(30));
    ASSERT_TRUE(status_line.ok()) << status_line.status() << launcher_->output();
    const std::string port_text = status_line->substr(status_line->rfind(':') + 1);
    ASSERT_TRUE(absl::SimpleAtoi(port_text.substr(0, port_text.find('/')), &chief_port_)) << *status_line;

    const std::string prometheus = Which("prometheus");
    ASSERT_FALSE(prometheus.empty()) << "Debian's prometheus is missing (scripts/install_deps.sh installs it)";
    auto port = PickUnusedPort();
    ASSERT_TRUE(port.ok());
    prometheus_port_ = *port;
    std::ofstream(*dir_ + "/prometheus.yml") << "global:\n"
                                                // A 1 s timeout failed a worker's scrapes on a
                                                // loaded CI machine (a failed scrape marks its
                                                // series stale at once): allow 2 s.
                                                "  scrape_interval: 2s\n"
                                                "  scrape_timeout: 2s\n"
                                                "scrape_configs:\n"
                                                "  - job_name: asyncps\n"
                                                "    file_sd_configs:\n"
                                                "      - files: ['" << targets << "']\n"
                                                "        refresh_interval: 1s\n";
    Subprocess::Options prom;
    prom.argv = {prometheus, "--config.file=" + *dir_ + "/prometheus.yml",
                 "--storage.tsdb.path=" + *dir_ + "/prometheus-data",
                 absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port_), "--log.level=warn"};
    auto p = Subprocess::Start(prom);
    ASSERT_TRUE(p.ok()) << p.status();
    prometheus_ = p->release();
    ASSERT_TRUE(WaitFor([] { return !testutil::HttpGetBody(prometheus_port_, "/-/ready").empty(); }))
        << prometheus_->output();
  }

  static void TearDownTestSuite() {
    // SIGTERM, so the launcher stops its tasks (a SIGKILL would orphan them).
    for (Subprocess* p : {launcher_, prometheus_}) {
      if (p == nullptr) continue;
      p->Signal(SIGTERM);
      if (!p->Wait(absl::Seconds(30)).ok()) p->Signal(SIGKILL);
      delete p;  // reaps
    }
    launcher_ = prometheus_ = nullptr;
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(launcher_, nullptr);
    ASSERT_NE(prometheus_, nullptr);
    ASSERT_TRUE(launcher_->running()) << "training ended before the checks:\n" << launcher_->output();
  }

  // The `result` array of an instant query, or null when the query failed.
  static json Query(const std::string& promql) {
    const std::string body = testutil::HttpGetBody(prometheus_port_, "/api/v1/query?query=" + UrlEncode(promql));
    json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || doc.value("status", "") != "success") return nullptr;
    return doc["data"]["result"];
  }

  // True when `promql` answers at least `min_series` series, each with a value above `above`.
  static bool AllAbove(const std::string& promql, double above, size_t min_series = 1) {
    json result = Query(promql);
    if (!result.is_array() || result.size() < min_series) return false;
    for (const json& r : result) {
      double v = 0;
      if (!absl::SimpleAtod(r["value"][1].get<std::string>(), &v) || !(v > above)) return false;
    }
    return true;
  }

  static std::string* dir_;
  static Subprocess* launcher_;
  static Subprocess* prometheus_;
  static int chief_port_;
  static int prometheus_port_;
};

std::string* ObservabilityTest::dir_ = nullptr;
Subprocess* ObservabilityTest::launcher_ = nullptr;
Subprocess* ObservabilityTest::prometheus_ = nullptr;
int ObservabilityTest::chief_port_ = 0;
int ObservabilityTest::prometheus_port_ = 0;

TEST_F(ObservabilityTest, PrometheusScrapesEveryProcessOfATrainingRun) {
  constexpr size_t kProcesses = 1 + kPs + kWorkers;
  EXPECT_TRUE(WaitFor([] { return AllAbove("up{job=\"asyncps\"}", 0.5, kProcesses); }))
      << Query("up").dump();
  EXPECT_EQ(Query("up{job=\"asyncps\"}").size(), kProcesses);
  for (const char* role : {"chief", "ps", "worker"}) {
    EXPECT_TRUE(AllAbove(absl::StrCat("up{job=\"asyncps\",asyncps_role=\"", role, "\"}"), 0.5)) << role;
  }
  EXPECT_TRUE(WaitFor([] { return AllAbove("asyncps_coordinator_closures_completed_total", 0); }));
  // The PS's per-method latency histogram has observations (pulls and pushes).
  EXPECT_TRUE(WaitFor([] {
    return AllAbove("sum by (method) (asyncps_rpc_server_seconds_count{role=\"ps\",method=\"ps.PushGradients\"})", 0);
  })) << Query("asyncps_rpc_server_seconds_count").dump();
  EXPECT_TRUE(AllAbove("sum(asyncps_rpc_server_seconds_bucket{role=\"ps\",le=\"+Inf\"})", 0));
  // The user scalar the example reports; a loss is positive.
  EXPECT_TRUE(WaitFor([] { return AllAbove("asyncps_scalar{name=\"loss\"}", 0); }))
      << Query("{__name__=~\"asyncps_scalar.*\"}").dump();
  EXPECT_TRUE(WaitFor([] { return AllAbove("asyncps_worker_examples_total", 0, kWorkers); }))
      << Query("asyncps_worker_examples_total").dump() << "\n" << Query("up").dump();
  EXPECT_TRUE(AllAbove("asyncps_ps_rows_updated_total", 0));
  EXPECT_TRUE(AllAbove("asyncps_ps_variables", 0));
  // The standard process series of every process (metrics/process_collector.h).
  EXPECT_TRUE(AllAbove("process_resident_memory_bytes{job=\"asyncps\"}", 0, kProcesses))
      << Query("process_resident_memory_bytes").dump();
  EXPECT_TRUE(AllAbove("process_open_fds{job=\"asyncps\"}", 0, kProcesses));
  EXPECT_TRUE(AllAbove("process_start_time_seconds{job=\"asyncps\"}", 0, kProcesses));
}

TEST_F(ObservabilityTest, EveryDashboardQueryNamesAScrapedMetric) {
  auto text = ReadFileToString(ASYNCPS_SOURCE_DIR "/deploy/grafana/asyncps.json", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.status();
  const json dashboard = json::parse(*text);
  std::vector<std::string> exprs;
  for (const json& panel : dashboard["panels"]) {
    for (const json& target : panel["targets"]) exprs.push_back(target["expr"].get<std::string>());
  }
  ASSERT_GE(exprs.size(), 10u);
  const std::regex metric(R"((asyncps_[a-z0-9_]+|\bprocess_[a-z_]+|\bup\b))");
  std::set<std::string> named;
  // Label matchers and grouping clauses name labels, not metrics.
  const std::regex labels(R"re(\{[^}]*\}|\b(by|without)\s*\([^)]*\))re");
  for (const std::string& expr : exprs) {
    const std::string names_only = std::regex_replace(expr, labels, " ");
    for (std::sregex_iterator it(names_only.begin(), names_only.end(), metric), end; it != end; ++it) {
      named.insert(it->str());
    }
  }
  EXPECT_GE(named.size(), 20u);
  // Each process's series appear with its first scrape, and every test of this suite runs in a
  // process of its own with a fresh cluster: wait until every named metric has been scraped (a
  // metric no process exports keeps this false until the deadline, and is listed below).
  std::set<std::string> scraped;
  WaitFor([&] {
    const json names = json::parse(testutil::HttpGetBody(prometheus_port_, "/api/v1/label/__name__/values"), nullptr,
                                   /*allow_exceptions=*/false);
    if (names.is_discarded() || !names.contains("data")) return false;
    scraped = std::set<std::string>(names["data"].begin(), names["data"].end());
    return std::all_of(named.begin(), named.end(), [&](const std::string& n) { return scraped.count(n) > 0; });
  });
  // Every expression is valid PromQL for this Prometheus.
  for (const std::string& expr : exprs) EXPECT_FALSE(Query(expr).is_null()) << expr;
  for (const std::string& name : named) EXPECT_TRUE(scraped.count(name)) << name << " is not in the scrape";
}

TEST_F(ObservabilityTest, StatusPageRendersMembersAndPlotsInChromium) {
  const std::string chromium = Which("chromium");
  ASSERT_FALSE(chromium.empty()) << "Debian's chromium is missing (scripts/install_deps.sh installs it)";
  // Loss points and an accuracy evaluation exist before the browser looks.
  ASSERT_TRUE(WaitFor([] {
    json s = json::parse(testutil::HttpGetBody(chief_port_, "/status.json"), nullptr, false);
    return !s.is_discarded() && s["series"].contains("accuracy") && s["series"]["loss"].size() >= 20;
  }));
  const std::string url = absl::StrCat("http://127.0.0.1:", chief_port_, "/status");
  auto browse = [&](std::vector<std::string> extra) {
    Subprocess::Options o;
    // Root in a container needs --no-sandbox; the profile goes in the test's directory.
    o.argv = {chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--user-data-dir=" + *dir_ + "/chromium", "--window-size=1280,1500",
              // Virtual time runs the page's polling (a few rounds) before the DOM is read.
              "--virtual-time-budget=4000"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.argv.push_back(url);
    auto p = Subprocess::Start(o);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return std::string();
    auto code = (*p)->Wait(absl::Seconds(90));
    EXPECT_TRUE(code.ok() && *code == 0) << (*p)->output();
    return (*p)->output();
  };
  const std::string dom = browse({"--dump-dom"});
  // What the JavaScript rendered from status.json: every worker and PS listed...
  std::smatch m;
  const std::regex worker_row(R"re(<tr class="member" data-role="worker" data-state="(up|starting)")re");
  int workers = 0;
  for (std::sregex_iterator it(dom.begin(), dom.end(), worker_row), end; it != end; ++it) ++workers;
  EXPECT_EQ(workers, kWorkers) << dom;
  EXPECT_NE(dom.find("data-role=\"ps\""), std::string::npos);
  // ...with its restart count (no task was restarted here)...
  EXPECT_NE(dom.find("<td class=\"restarts\">0</td>"), std::string::npos) << dom;
  // ...a loss plot and an accuracy plot with points...
  for (const char* plot : {"plot-loss", "plot-accuracy"}) {
    const size_t at = dom.find(absl::StrCat("id=\"", plot, "\""));
    ASSERT_NE(at, std::string::npos) << plot << "\n" << dom;
    const size_t end = dom.find("</svg>", at);
    const std::string svg = dom.substr(at, end - at);
    EXPECT_NE(svg.find("<polyline"), std::string::npos) << svg;
    EXPECT_NE(svg.find("<circle class=\"point\""), std::string::npos) << svg;
  }
  // ...a closures/s figure once two polls were seen, and the worker_up events.
  EXPECT_TRUE(std::regex_search(dom, m, std::regex(R"(id="rate">[0-9.]+<)"))) << dom;
  EXPECT_NE(dom.find("data-kind=\"worker_up\""), std::string::npos);

  // A screenshot for a person to look at, kept in the build tree.
  const std::string artifacts = ASYNCPS_BINARY_DIR "/test-artifacts";
  fs::create_directories(artifacts);
  const std::string png = artifacts + "/status_page.png";
  fs::remove(png);
  browse({"--screenshot=" + png, "--hide-scrollbars"});
  std::error_code ec;
  EXPECT_GT(fs::file_size(png, ec), 10000u) << ec.message();
}

}  // namespace
}  // namespace asyncps
