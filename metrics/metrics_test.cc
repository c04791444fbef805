#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/process_options.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/http_test_client.h"
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
  // 200 idle connections against 16 slots: each new connection evicts the oldest idle one
  // (and each is dropped after its request timeout anyway), so a real scrape gets through.
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
  int calls = 0;  // handlers run on the server's thread; HttpGet returns after the answer
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
  for (const char* bad : {"127.0.0.1", "::1:80", "127.0.0.1:http", "localhost:0"}) {
    EXPECT_EQ(ProcessMetrics::Create("ps", 0, bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto foreign = ProcessMetrics::Create("ps", 0, "192.0.2.1:0");  // TEST-NET-1: not this host's
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kUnavailable) << foreign.status();
  EXPECT_NE(foreign.status().message().find("/metrics: cannot listen on 192.0.2.1:0"), std::string::npos)
      << foreign.status();
}

TEST(ProcessMetricsTest, NegativePortInTheOptionsMeansNoEndpoint) {
  ProcessOptions options;
  options.metrics_port = -1;
  auto metrics = ProcessMetrics::Create("worker", 2, options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ((*metrics)->port(), 0);
  EXPECT_EQ((*metrics)->bound_address(), "");
}

// The value of the unlabelled sample `name` in a text exposition, or NaN.
double Sample(const std::string& exposition, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    double v;
    if (absl::ConsumePrefix(&line, name + " ") && absl::SimpleAtod(line, &v)) return v;
  }
  return std::nan("");
}

// The acceptance check of the bind-address option and the process_* series: an endpoint bound
// to every interface by --metrics_bind_address, scraped over loopback (and over another
// interface of this host when it has one), with sane values.
TEST(ProcessMetricsTest, BindsTheOptionsAddressAndServesProcessSeries) {
  std::vector<std::string> args = {"prog", "--metrics_bind_address=0.0.0.0", "--metrics_port=0"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  auto options = ProcessOptions::Parse(static_cast<int>(argv.size()), argv.data());
  ASSERT_TRUE(options.ok()) << options.status();
  auto metrics = ProcessMetrics::Create("ps", 0, *options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const int port = (*metrics)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*metrics)->bound_address(), "0.0.0.0");
  // The kernel's view: a listening socket (state 0A) on 0.0.0.0:port.
  std::ifstream tcp("/proc/net/tcp");
  const std::string wildcard = absl::StrCat(" 00000000:", absl::AsciiStrToUpper(absl::StrCat(absl::Hex(port, absl::kZeroPad4))), " ");
  bool listening = false;
  for (std::string line; std::getline(tcp, line);) {
    const size_t at = line.find(wildcard);
    if (at != std::string::npos && line.substr(at + wildcard.size(), 17) == "00000000:0000 0A ") listening = true;
  }
  EXPECT_TRUE(listening) << "no LISTEN entry for 0.0.0.0:" << port << " in /proc/net/tcp";

  const std::string first = test_client::Get("127.0.0.1", port, "/metrics");
  ASSERT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  EXPECT_GT(Sample(first, "process_resident_memory_bytes"), 0);
  EXPECT_GE(Sample(first, "process_virtual_memory_bytes"), Sample(first, "process_resident_memory_bytes"));
  EXPECT_GT(Sample(first, "process_open_fds"), 0);
  EXPECT_GE(Sample(first, "process_max_fds"), Sample(first, "process_open_fds"));
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const double start = Sample(first, "process_start_time_seconds");
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 86400);
  EXPECT_NE(first.find("# TYPE process_cpu_seconds_total counter"), std::string::npos) << first;

  // CPU seconds grow as this process burns CPU (the kernel counts in clock ticks).
  const double cpu0 = Sample(first, "process_cpu_seconds_total");
  ASSERT_GE(cpu0, 0);
  double cpu = cpu0;
  volatile uint64_t sink = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!(cpu > cpu0) && absl::Now() < deadline) {
    for (uint64_t i = 0; i < 20'000'000; ++i) sink = sink + i * i;
    cpu = Sample(test_client::Get("127.0.0.1", port, "/metrics"), "process_cpu_seconds_total");
  }
  EXPECT_GT(cpu, cpu0);

  // Reachable on a non-loopback address of this host too, when it has one.
  ifaddrs* interfaces = nullptr;
  ASSERT_EQ(getifaddrs(&interfaces), 0);
  std::string other;
  for (ifaddrs* i = interfaces; i != nullptr && other.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text))) other = text;
  }
  freeifaddrs(interfaces);
  if (other.empty()) GTEST_SKIP() << "this host has no IPv4 address besides loopback";
  const std::string via_other = test_client::Get(other, port, "/metrics");
  EXPECT_EQ(via_other.rfind("HTTP/1.1 200", 0), 0u) << other << ": " << via_other;
  EXPECT_GT(Sample(via_other, "process_resident_memory_bytes"), 0) << other;
}

TEST(ProcessMetricsTest, LoopbackByDefault) {
  ProcessOptions options;  // metrics_port 0: a free port on the default address
  auto metrics = ProcessMetrics::Create("ps", 0, options);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ((*metrics)->bound_address(), "127.0.0.1");
  EXPECT_NE(HttpGet((*metrics)->port(), "/metrics").find("process_open_fds "), std::string::npos);
}

}  // namespace
}  // namespace asyncps::metrics
