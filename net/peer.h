#ifndef ASYNCPS_NET_PEER_H_
#define ASYNCPS_NET_PEER_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace asyncps::net {

// Who is on the other end of a connection, as it said in its handshake.
struct PeerInfo {
  std::string role;
  int task_index = -1;
  uint64_t incarnation = 0;  // 0: never connected
  std::string address;
};

// Per-request facts a server handler may use.
struct RequestContext {
  PeerInfo peer;
  absl::Time deadline = absl::InfiniteFuture();
};

// Wire protocol version carried in the handshake; bumped on incompatible changes (2: the
// token-free challenge-response handshake).
inline constexpr uint32_t kProtocolVersion = 2;

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_PEER_H_
