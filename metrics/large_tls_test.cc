// A process that has loaded LibTorch carries ~105 KiB of static TLS (OpenBLAS, glog,
// libtorch_cpu). glibc carves a thread's static TLS out of its stack, so an HTTP server that
// starts its threads with small fixed stacks (civetweb: 100 KiB) cannot start at all in such
// a process. The metrics endpoint's one thread is a std::thread with the default stack.
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "tests/testutil/http_get.h"

// More static TLS than LibTorch brings, in every thread of this test binary.
thread_local char big_tls_block[200 << 10];

namespace asyncps::metrics {
namespace {

TEST(LargeStaticTlsTest, MetricsEndpointServesFromAThreadWithIt) {
  auto metrics = ProcessMetrics::Create("ps", 0, "127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_GT((*metrics)->port(), 0);
  (*metrics)->AddHandler("/tls", [] {
    // Runs on the server's thread: its whole TLS block is usable.
    std::memset(big_tls_block, 1, sizeof(big_tls_block));
    return ProcessMetrics::HttpResponse{200, "text/plain",
                                        std::to_string(big_tls_block[sizeof(big_tls_block) - 1])};
  });
  EXPECT_EQ(testutil::HttpGetBody((*metrics)->port(), "/tls"), "1");
  EXPECT_NE(testutil::HttpGetBody((*metrics)->port(), "/metrics").find("asyncps_build_info"),
            std::string::npos);
}

}  // namespace
}  // namespace asyncps::metrics
