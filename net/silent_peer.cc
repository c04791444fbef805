#include "net/silent_peer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace asyncps::net {

void DetectSilentPeers(int fd) {
  const int on = 1;
  const int idle = static_cast<int>(absl::ToInt64Seconds(kKeepAliveIdle));
  const int interval = static_cast<int>(absl::ToInt64Seconds(kKeepAliveInterval));
  const int probes = kKeepAliveProbes;
  const unsigned user_timeout = static_cast<unsigned>(absl::ToInt64Milliseconds(kUnacknowledgedTimeout));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

}  // namespace asyncps::net
