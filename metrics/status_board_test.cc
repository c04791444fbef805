#include "metrics/status_board.h"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace asyncps::metrics {
namespace {

TEST(StatusBoardTest, JsonCarriesMembersValuesSeriesAndEvents) {
  auto metrics = ProcessMetrics::Create("chief", 0, "");
  ASSERT_TRUE(metrics.ok());
  StatusBoard board(**metrics);
  board.SetMember("worker", 1, "127.0.0.1:5", "up", 0xabcdef0123456789ULL);
  board.SetMember("worker", 0, "127.0.0.1:4", "down", 0);
  board.SetMember("worker", 0, "127.0.0.1:4", "recovering", 0);  // replaces
  board.AddEvent("worker_down", "worker 0: connection reset");
  ASSERT_TRUE(board.ReportScalar("loss", 10, 2.5).ok());
  ASSERT_TRUE(board.ReportScalar("loss", 20, 1.5).ok());
  board.SetValuesSource([] { return std::map<std::string, double>{{"queue_depth", 7}}; });

  const auto doc = nlohmann::json::parse(board.Json());
  ASSERT_EQ(doc["members"].size(), 2u);
  EXPECT_EQ(doc["members"][0]["state"], "recovering");
  EXPECT_EQ(doc["members"][1]["incarnation"], "abcdef0123456789");
  EXPECT_EQ(doc["values"]["queue_depth"], 7);
  ASSERT_EQ(doc["series"]["loss"].size(), 2u);
  EXPECT_EQ(doc["series"]["loss"][1][0], 20);
  EXPECT_EQ(doc["series"]["loss"][1][1], 1.5);
  EXPECT_EQ(doc["events"][0]["kind"], "worker_down");

  board.ClearValuesSource();
  EXPECT_TRUE(nlohmann::json::parse(board.Json())["values"].empty());
  const std::string text = (*metrics)->Serialize();
  EXPECT_NE(text.find("asyncps_scalar{role=\"chief\",task=\"0\",name=\"loss\"} 1.5"), std::string::npos) << text;
  EXPECT_NE(text.find("asyncps_scalar_step{role=\"chief\",task=\"0\",name=\"loss\"} 20"), std::string::npos);
}

// A member back with a new incarnation (the launcher, Kubernetes or a person restarted it) is a
// restart; the same incarnation again, or the unknown (0) of a down member, is not.
TEST(StatusBoardTest, CountsRestartsByNewIncarnations) {
  auto metrics = ProcessMetrics::Create("chief", 0, "");
  ASSERT_TRUE(metrics.ok());
  StatusBoard board(**metrics);
  auto restarts = [&board] {
    return nlohmann::json::parse(board.Json())["members"][0]["restarts"];
  };
  board.SetMember("worker", 1, "127.0.0.1:5", "starting", 0);
  board.SetMember("worker", 1, "127.0.0.1:5", "up", 0x11);
  EXPECT_EQ(restarts(), 0);
  board.SetMember("worker", 1, "127.0.0.1:5", "up", 0x11);
  board.SetMember("worker", 1, "127.0.0.1:5", "down", 0);
  board.SetMember("worker", 1, "127.0.0.1:5", "recovering", 0);
  EXPECT_EQ(restarts(), 0);
  board.SetMember("worker", 1, "127.0.0.1:5", "up", 0x22);
  EXPECT_EQ(restarts(), 1);
  board.SetMember("worker", 1, "127.0.0.1:5", "down", 0);
  board.SetMember("worker", 1, "127.0.0.1:5", "up", 0x33);
  EXPECT_EQ(restarts(), 2);
  EXPECT_EQ(nlohmann::json::parse(board.Json())["members"][0]["incarnation"], "33");
}

// The closures/s tile showed "-" throughout runs: the page divided two of its own polls, so a
// fresh page (or a screenshot, which renders one poll) had no rate. The chief now computes it
// over its last kRateWindow, starting from a sample taken when the values source is set.
TEST(StatusBoardTest, ClosureRateIsComputedByTheChiefFromTheFirstRequest) {
  auto metrics = ProcessMetrics::Create("chief", 0, "");
  ASSERT_TRUE(metrics.ok());
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  StatusBoard board(**metrics, [&now] { return now; });
  double completed = 0;
  auto rate = [&board]() -> nlohmann::json { return nlohmann::json::parse(board.Json())["values"]["closures_per_second"]; };
  board.SetValuesSource([&completed] { return std::map<std::string, double>{{"closures_completed", completed}}; });
  // No time has passed since the first sample: no rate yet (the page shows "-").
  EXPECT_TRUE(rate().is_null());
  // The first request after 5 s sees 500 closures done: 100/s, without a second request.
  now += absl::Seconds(5);
  completed = 500;
  EXPECT_DOUBLE_EQ(rate().get<double>(), 100);
  // Later the rate follows the last kRateWindow (10 s), not the whole run: 2000 more in 10 s.
  now += absl::Seconds(10);
  completed = 2500;
  EXPECT_DOUBLE_EQ(rate().get<double>(), 200);
  now += absl::Seconds(10);
  completed = 2500;  // stalled for a whole window
  EXPECT_DOUBLE_EQ(rate().get<double>(), 0);
  // A new coordinator's counter (lower) starts the rate over instead of going negative.
  now += absl::Seconds(1);
  completed = 10;
  EXPECT_TRUE(rate().is_null());
  now += absl::Seconds(2);
  completed = 30;
  EXPECT_DOUBLE_EQ(rate().get<double>(), 10);
}

// The page draws the chief's figure: nothing of the old two-poll arithmetic is left in it.
TEST(StatusBoardTest, PageShowsTheChiefsRate) {
  const std::string page = StatusPageHtml();
  EXPECT_NE(page.find("v.closures_per_second"), std::string::npos);
  EXPECT_EQ(page.find("last.completed"), std::string::npos);
}

TEST(StatusBoardTest, RejectsBadScalarsAndBoundsWhatItKeeps) {
  auto metrics = ProcessMetrics::Create("chief", 0, "");
  ASSERT_TRUE(metrics.ok());
  StatusBoard board(**metrics);
  EXPECT_FALSE(board.ReportScalar("Loss{x=\"1\"}", 1, 1).ok());
  EXPECT_FALSE(board.ReportScalar("", 1, 1).ok());
  EXPECT_FALSE(board.ReportScalar("loss", 1, std::nan("")).ok());
  for (int i = 0; i < StatusBoard::kMaxScalars; ++i) {
    ASSERT_TRUE(board.ReportScalar("s" + std::to_string(i), 0, i).ok());
  }
  EXPECT_FALSE(board.ReportScalar("one_too_many", 0, 1).ok());
  for (int step = 0; step < 5000; ++step) ASSERT_TRUE(board.ReportScalar("s0", step, step).ok());
  for (int i = 0; i < 500; ++i) board.AddEvent("e", std::string("bad utf8 \xff ") + std::to_string(i));
  const auto doc = nlohmann::json::parse(board.Json());
  const auto& points = doc["series"]["s0"];
  EXPECT_LE(points.size(), StatusBoard::kMaxPointsPerScalar);
  EXPECT_GT(points.size(), StatusBoard::kMaxPointsPerScalar / 4);
  EXPECT_EQ(points[points.size() - 1][0], 4999);  // the latest point is kept
  EXPECT_EQ(doc["events"].size(), StatusBoard::kMaxEvents);
  EXPECT_NE(doc["events"][StatusBoard::kMaxEvents - 1]["text"].get<std::string>().find("499"), std::string::npos);
}

TEST(StatusBoardTest, PageIsSelfContained) {
  const std::string page = StatusPageHtml();
  EXPECT_NE(page.find("status.json"), std::string::npos);
  EXPECT_EQ(page.find("http://"), page.find("http://www.w3.org/2000/svg"));  // only the SVG namespace
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_EQ(page.find("<script src"), std::string::npos);
}

TEST(StatusBoardTest, DataServiceSectionOnlyOnceSet) {
  auto metrics = ProcessMetrics::Create("chief", 0, "");
  ASSERT_TRUE(metrics.ok());
  StatusBoard board(**metrics);
  EXPECT_FALSE(nlohmann::json::parse(board.Json()).contains("data_service"));
  StatusBoard::DataServiceStatus status;
  status.dispatcher = "127.0.0.1:9";
  status.dispatcher_state = "up";
  status.in_chief = true;
  status.generation = 0x1234;
  status.datasets = 2;
  status.num_jobs = 3;
  status.jobs.push_back({3, "shared", 2, "off"});
  status.data_workers.push_back({0, "127.0.0.1:10", "up", 0.2, 1, 4, 500});
  status.data_workers.push_back({1, "127.0.0.1:11", "absent", -1, 0, 0, 0});
  board.SetDataService(status);
  const auto doc = nlohmann::json::parse(board.Json());
  const auto& d = doc["data_service"];
  EXPECT_EQ(d["dispatcher"], "127.0.0.1:9");
  EXPECT_EQ(d["in_chief"], true);
  EXPECT_EQ(d["generation"], "1234");
  EXPECT_EQ(d["num_jobs"], 3);
  ASSERT_EQ(d["jobs"].size(), 1u);
  EXPECT_EQ(d["jobs"][0]["name"], "shared");
  ASSERT_EQ(d["data_workers"].size(), 2u);
  EXPECT_EQ(d["data_workers"][0]["split_streams"], 4);
  EXPECT_EQ(d["data_workers"][1]["state"], "absent");
  EXPECT_NE(std::string(StatusPageHtml()).find("data_service"), std::string::npos);
}

}  // namespace
}  // namespace asyncps::metrics
