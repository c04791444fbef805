#include "metrics/thread_stacks.h"

#include <pthread.h>

#include <cstring>

#include "gtest/gtest.h"
#include "metrics/process_metrics.h"

// 200 KiB of static TLS: more than civetweb's fixed 100 KiB thread stacks, like a process that
// has loaded LibTorch (OpenBLAS, glog, libtorch_cpu together carry ~105 KiB).
thread_local char big_tls_block[200 << 10];

namespace asyncps::metrics {
namespace {

void* TouchTls(void*) {
  std::memset(big_tls_block, 1, sizeof(big_tls_block));
  return nullptr;
}

TEST(ThreadStacksTest, CountsThisProcessStaticTls) {
  TouchTls(nullptr);
  EXPECT_GE(StaticTlsBytes(), sizeof(big_tls_block));
  EXPECT_TRUE(TlsAwareStacksInstalled());
}

TEST(ThreadStacksTest, SmallRequestedStackStillStartsAThread) {
  // glibc alone refuses this (EINVAL): the TLS does not fit in 100 KiB.
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 100 << 10), 0);
  size_t granted = 0;
  ASSERT_EQ(pthread_attr_getstacksize(&attr, &granted), 0);
  EXPECT_GE(granted, (100u << 10) + sizeof(big_tls_block));
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, &TouchTls, nullptr), 0);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
  pthread_attr_destroy(&attr);
}

TEST(ThreadStacksTest, MetricsEndpointStartsWithLargeStaticTls) {
  // The regression: civetweb's server failed with "null context when constructing
  // CivetServer" in every LibTorch process.
  auto metrics = ProcessMetrics::Create("ps", 0, "127.0.0.1:0");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT((*metrics)->port(), 0);
}

}  // namespace
}  // namespace asyncps::metrics
