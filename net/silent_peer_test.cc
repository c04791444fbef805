#include "net/silent_peer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace asyncps::net {
namespace {

int IntOption(int fd, int level, int name) {
  int value = -1;
  socklen_t size = sizeof(value);
  EXPECT_EQ(getsockopt(fd, level, name, &value, &size), 0);
  return value;
}

// The options that bound how long a silent peer goes unnoticed are on the socket. (That the
// kernel then closes a connection to a peer behind a dropping partition is shown with hosts
// in network namespaces: scripts/netns_hosts.py and its tests.)
TEST(SilentPeerTest, KeepAliveAndUnacknowledgedTimeoutAreSet) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(IntOption(fd, SOL_SOCKET, SO_KEEPALIVE), 0) << "off by default";
  DetectSilentPeers(fd);
  EXPECT_EQ(IntOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(IntOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), absl::ToInt64Seconds(kKeepAliveIdle));
  EXPECT_EQ(IntOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), absl::ToInt64Seconds(kKeepAliveInterval));
  EXPECT_EQ(IntOption(fd, IPPROTO_TCP, TCP_KEEPCNT), kKeepAliveProbes);
  EXPECT_EQ(IntOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), absl::ToInt64Milliseconds(kUnacknowledgedTimeout));
  close(fd);
}

}  // namespace
}  // namespace asyncps::net
