#include "deploy/file_sd.h"

#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"

namespace asyncps::deploy {
namespace {

TEST(FileSdTest, OneGroupPerProcessWithRoleLabels) {
  const auto json = nlohmann::json::parse(
      FileSdJson({{"127.0.0.1:9100", "chief", 0}, {"127.0.0.1:9101", "ps", 1}}));
  ASSERT_TRUE(json.is_array());
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[1]["targets"][0], "127.0.0.1:9101");
  EXPECT_EQ(json[1]["labels"]["asyncps_role"], "ps");
  EXPECT_EQ(json[1]["labels"]["asyncps_task"], "1");
  EXPECT_FALSE(json[0]["labels"].contains("role"));  // would clash with the scraped label
}

TEST(FileSdTest, WritesTheFileAndNamesItOnError) {
  testutil::TestDir temp("file_sd_test");
  const std::string& dir = temp.path();
  const std::string path = dir + "/targets.json";
  ASSERT_TRUE(WriteFileSd(path, {{"127.0.0.1:1", "worker", 0}}).ok());
  auto text = ReadFileToString(path, 1 << 20);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(nlohmann::json::parse(*text)[0]["labels"]["asyncps_role"], "worker");
  absl::Status missing = WriteFileSd(dir + "/no/such/dir/t.json", {});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.message()).find("no/such/dir"), std::string::npos) << missing;
}

}  // namespace
}  // namespace asyncps::deploy
