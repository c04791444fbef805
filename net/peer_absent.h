#ifndef ASYNCPS_NET_PEER_ABSENT_H_
#define ASYNCPS_NET_PEER_ABSENT_H_

#include "absl/status/status.h"

namespace asyncps::net {

// Whether a failed call carries evidence that no process is serving at the peer's address:
// its host answered the connection attempt with a refusal (a TCP reset: nothing listens on
// that port). A process that serves from start to exit refuses only once it is gone, so the
// incarnation the caller knew there, with whatever it held in memory, is gone too. Silence (a
// connect or call that times out, a host unreachable) proves nothing of the kind: a partition,
// a paused process and a dead host look alike from one side. (A firewall rule that rejects
// with a reset instead of dropping would look like a dead process; the project's partition
// tools drop.) RpcClient marks the statuses of its calls (MarkPeerAbsent) while its latest
// connection attempt was refused.
bool IsPeerAbsent(const absl::Status& status);

// `status` marked as IsPeerAbsent (OK stays OK).
absl::Status MarkPeerAbsent(absl::Status status);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_PEER_ABSENT_H_
