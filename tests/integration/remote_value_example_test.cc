// The README's main job as a test: asyncps_launch starts 2 PS, 2 workers and the chief of
// examples/remote_value as five processes, and the chief prints TensorFlow's documented numbers.
#include <string>

#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

TEST(RemoteValueExampleTest, LaunchedClusterReproducesTensorFlowNumbers) {
  Subprocess::Options o;
  // --log_level info: the tasks' start and stop lines (the launcher's default, warn, hides them).
  o.argv = {testutil::LocalCluster::BinaryPath("asyncps_launch"), "--log_level", "info", "--ps", "2",
            "--workers", "2", "--", testutil::LocalCluster::BinaryPath("remote_value")};
  o.env = {{"ASYNCPS_METRICS_PORT", "-1"}};
  auto launcher = Subprocess::Start(o);
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  auto code = (*launcher)->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << code.status();
  const std::string out = (*launcher)->output();
  EXPECT_EQ(*code, 0) << out;
  EXPECT_NE(out.find("[chief] first result: 0.125000"), std::string::npos) << out;
  EXPECT_NE(out.find("[chief] after 11 steps: v1 = 1.100000, v2 = -1.200000"), std::string::npos) << out;
  // Both PS and both workers really took part and were ended by the launcher.
  for (const char* task : {"[ps:0]", "[ps:1]", "[worker:0]", "[worker:1]"}) {
    EXPECT_NE(out.find(std::string(task) + " "), std::string::npos) << task << " missing:\n" << out;
  }
  EXPECT_NE(out.find("v1 on ps 0, v2 on ps 1"), std::string::npos) << "round-robin placement";
}

}  // namespace
}  // namespace asyncps
