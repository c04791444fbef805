#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/sync.h"

#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "tests/testutil/http_get.h"

namespace asyncps::metrics {
namespace {

using ::asyncps::testutil::HttpGet;

TEST(ProcessMetricsTest, ServesBuildInfoAndRpcFamiliesOverHttp) {
  auto metrics = ProcessMetrics::Create("ps", 3, "127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_GT((*metrics)->port(), 0);
  RpcMetrics rpc(**metrics);
  rpc.RecordServerCall("ps.Read", 0, 0.002);
  rpc.RecordServerCall("ps.Read", 0, 0.004);
  rpc.RecordClientCall("worker.Run", 14, 0.5);
  rpc.AddBytesReceived(1000);
  rpc.RecordRejected("bad_proof");

  const std::string body = HttpGet((*metrics)->port(), "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("asyncps_build_info{"), std::string::npos);
  EXPECT_NE(body.find("role=\"ps\""), std::string::npos);
  EXPECT_NE(body.find("task=\"3\""), std::string::npos);
  EXPECT_NE(body.find("asyncps_rpc_server_requests_total{role=\"ps\",task=\"3\",code=\"0\",method=\"ps.Read\"} 2"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("asyncps_rpc_server_seconds_count{role=\"ps\",task=\"3\",method=\"ps.Read\"} 2"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("asyncps_net_received_bytes_total{role=\"ps\",task=\"3\"} 1000"),
            std::string::npos);
  EXPECT_NE(body.find("asyncps_rpc_server_rejected_total{role=\"ps\",task=\"3\",reason=\"bad_proof\"} 1"), std::string::npos);
}

TEST(ProcessMetricsTest, NoEndpointStillRecords) {
  auto metrics = ProcessMetrics::Create("worker", 0, "");
  ASSERT_TRUE(metrics.ok());
  EXPECT_EQ((*metrics)->port(), 0);
  RpcMetrics rpc(**metrics);
  rpc.RecordWrite(42, 3);
  rpc.RecordWrite(8, 0);  // the rest of a frame that did not fit the first write
  const std::string body = (*metrics)->Serialize();
  EXPECT_NE(body.find("asyncps_net_sent_bytes_total{role=\"worker\",task=\"0\"} 50"), std::string::npos) << body;
  EXPECT_NE(body.find("asyncps_net_socket_writes_total{role=\"worker\",task=\"0\"} 2"), std::string::npos) << body;
  EXPECT_NE(body.find("asyncps_net_sent_frames_total{role=\"worker\",task=\"0\"} 3"), std::string::npos) << body;
  EXPECT_EQ(rpc.SocketWrites(), 2);
  EXPECT_EQ(rpc.FramesSent(), 3);
}

TEST(ProcessMetricsTest, StaysReachableWithManyIdleConnectionsOpen) {
  // Idle connections each hold one of civetweb's threads until its request timeout; with a
  // bounded timeout they are dropped in turn and a real scrape gets through.
  ProcessMetrics::HttpOptions http;  // the defaults processes run with
  auto metrics = ProcessMetrics::Create("ps", 0, "127.0.0.1:0", http);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const int port = (*metrics)->port();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);
  }
  std::string body;
  Notification done;
  const absl::Time start = absl::Now();
  std::thread scraper([&] {
    body = HttpGet(port, "/metrics");
    done.Notify();
  });
  const bool answered = done.WaitForNotificationWithTimeout(absl::Seconds(60));
  scraper.join();
  for (int fd : idle) close(fd);
  ASSERT_TRUE(answered);
  EXPECT_NE(body.find("200 OK"), std::string::npos);
  EXPECT_NE(body.find("asyncps_build_info"), std::string::npos);
  std::printf("scrape behind 200 idle connections answered after %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
}

TEST(ProcessMetricsTest, ServesAddedPagesBesideMetrics) {
  auto metrics = ProcessMetrics::Create("chief", 0, "127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  int calls = 0;  // handlers run on civetweb threads; HttpGet returns after the answer
  (*metrics)->AddHandler("/status.json", [&calls] {
    ++calls;
    return ProcessMetrics::HttpResponse{200, "application/json", "{\"ok\":true}"};
  });
  const std::string page = HttpGet((*metrics)->port(), "/status.json");
  EXPECT_NE(page.find("200 OK"), std::string::npos) << page;
  EXPECT_NE(page.find("Content-Type: application/json"), std::string::npos) << page;
  EXPECT_NE(page.find("{\"ok\":true}"), std::string::npos) << page;
  EXPECT_EQ(calls, 1);
  EXPECT_NE(HttpGet((*metrics)->port(), "/metrics").find("asyncps_build_info"), std::string::npos);
  EXPECT_NE(HttpGet((*metrics)->port(), "/nothing").find("404"), std::string::npos);
}

TEST(ProcessMetricsTest, UnbindableAddressIsAnError) {
  auto metrics = ProcessMetrics::Create("ps", 0, "256.1.1.1:1");
  EXPECT_FALSE(metrics.ok());
}

}  // namespace
}  // namespace asyncps::metrics
