#include "bench/report.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace asyncps::bench {
namespace {

Report MakeReport() {
  static char name[] = "/some/dir/ps_bench";
  static char quick[] = "--quick";
  static char only[] = "--only=dense pull";
  static char json[] = "--json=/tmp/somewhere.json";
  static char* argv[] = {name, quick, json, only};
  return Report(4, argv);
}

TEST(Report, ParseJsonFlag) {
  std::string path;
  EXPECT_TRUE(ParseJsonFlag("--json=/tmp/x.json", &path));
  EXPECT_EQ(path, "/tmp/x.json");
  EXPECT_FALSE(ParseJsonFlag("--json=", &path));
  EXPECT_FALSE(ParseJsonFlag("--json", &path));
  EXPECT_FALSE(ParseJsonFlag("--quick", &path));
}

TEST(Report, JsonHoldsFiguresAndAims) {
  Report report = MakeReport();
  report.aims().Declare("dense pull", AimBound::kAtLeast, 0.9);
  report.aims().Declare("sparse", AimBound::kAtLeast, 0.5);
  EXPECT_FALSE(report.Add({.name = "ps=1 dense pull 4MiB",
                           .value = 1.5,
                           .unit = "GB/s",
                           .reference = "raw TCP",
                           .reference_value = 2.0,
                           .aim = "dense pull"}));
  EXPECT_TRUE(report.Add({.name = "call floor", .value = 40, .unit = "us"}));
  EXPECT_TRUE(report.Add({.name = "dedup",
                          .value = 7,
                          .unit = "ms",
                          .reference = "off",
                          .reference_value = 7,
                          .ratio = 1.01,
                          .note = "paired"}));

  const nlohmann::json j = nlohmann::json::parse(report.Json(true));
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["bench"], "ps_bench");
  EXPECT_EQ(j["args"], nlohmann::json({"--quick", "--only=dense pull"}));  // not --json
  EXPECT_EQ(j["complete"], true);
  ASSERT_EQ(j["figures"].size(), 3u);
  const nlohmann::json& pull = j["figures"][0];
  EXPECT_EQ(pull["name"], "ps=1 dense pull 4MiB");
  EXPECT_EQ(pull["value"], 1.5);
  EXPECT_EQ(pull["unit"], "GB/s");
  EXPECT_EQ(pull["reference"]["name"], "raw TCP");
  EXPECT_EQ(pull["reference"]["value"], 2.0);
  EXPECT_EQ(pull["ratio"], 0.75);
  EXPECT_EQ(pull["aim"]["name"], "dense pull");
  EXPECT_EQ(pull["aim"]["condition"], ">= 0.90");
  EXPECT_EQ(pull["aim"]["met"], false);
  EXPECT_TRUE(j["figures"][1]["reference"].is_null());
  EXPECT_TRUE(j["figures"][1]["ratio"].is_null());
  EXPECT_TRUE(j["figures"][1]["aim"].is_null());
  EXPECT_EQ(j["figures"][2]["ratio"], 1.01);  // the bench's own ratio, not value / reference
  EXPECT_EQ(j["figures"][2]["note"], "paired");

  ASSERT_EQ(j["aims"].size(), 2u);
  EXPECT_EQ(j["aims"][0]["state"], "missed");
  EXPECT_EQ(j["aims"][0]["cases"], 1);
  EXPECT_EQ(j["aims"][1]["name"], "sparse");
  EXPECT_EQ(j["aims"][1]["state"], "not run");
  EXPECT_EQ(j["aims"][1]["cases"], 0);
}

TEST(Report, AimOnValueWhenNoRatio) {
  Report report = MakeReport();
  report.aims().Declare("accuracy", AimBound::kAtLeast, 0.88);
  EXPECT_TRUE(report.Add({.name = "test accuracy", .value = 0.884, .unit = "", .aim = "accuracy"}));
  EXPECT_EQ(report.aims().State("accuracy"), AimState::kMet);
}

TEST(Report, UndeclaredAimIsMissedInTheJsonToo) {
  Report report = MakeReport();
  EXPECT_FALSE(report.Add({.name = "x", .value = 5, .unit = "s", .aim = "typo"}));
  const nlohmann::json j = nlohmann::json::parse(report.Json(true));
  EXPECT_EQ(j["figures"][0]["aim"]["met"], false);
  EXPECT_EQ(j["aims"][0]["state"], "missed");
}

TEST(Report, NonFiniteNumbersAreNull) {
  Report report = MakeReport();
  report.Add({.name = "x",
              .value = std::numeric_limits<double>::quiet_NaN(),
              .unit = "s",
              .reference = "y",
              .reference_value = 0});
  const nlohmann::json j = nlohmann::json::parse(report.Json(false));
  EXPECT_EQ(j["complete"], false);
  EXPECT_TRUE(j["figures"][0]["value"].is_null());
  EXPECT_TRUE(j["figures"][0]["ratio"].is_null());
}

TEST(Report, FinishWritesTheFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("report_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "out.json").string();
  Report report = MakeReport();
  report.Add({.name = "x", .value = 1, .unit = "s"});
  EXPECT_EQ(report.Finish(path, 0), 0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j["figures"][0]["name"], "x");
  EXPECT_EQ(j["complete"], true);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // A failed run still writes what it measured, marked incomplete, and keeps its exit code.
  EXPECT_EQ(report.Finish(path, 3), 3);
  std::ifstream again(path);
  EXPECT_EQ(nlohmann::json::parse(again)["complete"], false);
  // Nothing to write without a path; an unwritable path turns success into failure.
  EXPECT_EQ(report.Finish("", 0), 0);
  EXPECT_EQ(report.Finish((dir / "missing" / "out.json").string(), 0), 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace asyncps::bench
