#ifndef ASYNCPS_NET_SILENT_PEER_H_
#define ASYNCPS_NET_SILENT_PEER_H_

#include "absl/time/time.h"

namespace asyncps::net {

// How long a silent peer goes unnoticed on an open connection (a host that lost power, a link
// or firewall that drops everything: nothing answers, no reset arrives). Without these the
// kernel keeps such a connection for hours: an idle one forever, one with unacknowledged data
// for about 15 minutes of retransmissions, and every call on it times out without a reconnect.
//   * an idle connection is probed after kKeepAliveIdle and closed after kKeepAliveProbes
//     unanswered probes kKeepAliveInterval apart (about 6 s of silence in all);
//   * data the peer has not acknowledged for kUnacknowledgedTimeout closes the connection
//     (TCP_USER_TIMEOUT; also a peer that stops reading for that long, e.g. a paused process).
// A closed connection fails its calls (Unavailable) and the next call reconnects (with the
// client's connect timeout). Calls have deadlines of their own: these bound what outlives them.
inline constexpr absl::Duration kKeepAliveIdle = absl::Seconds(3);
inline constexpr absl::Duration kKeepAliveInterval = absl::Seconds(1);
inline constexpr int kKeepAliveProbes = 3;
inline constexpr absl::Duration kUnacknowledgedTimeout = absl::Seconds(10);

// Sets the options above on TCP socket `fd` (every Connection's, client and server side).
// Best effort: a socket that refuses one keeps the kernel's default for it.
void DetectSilentPeers(int fd);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_SILENT_PEER_H_
