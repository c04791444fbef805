#ifndef ASYNCPS_NET_ELASTIC_MEMBER_H_
#define ASYNCPS_NET_ELASTIC_MEMBER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster_spec.h"

namespace asyncps::net {

class RpcClient;
class ServerProcess;

// How a serving task (a worker, a PS) takes part in an elastic job (issue 37): it registers
// with the chief's membership service, and asks to leave before it exits on SIGTERM. The
// calls themselves are the task's (each role has its own methods and messages).
struct MemberCalls {
  const char* role = "worker";  // for logs: "worker", "ps"
  // One registration. OK with whether it was a member already and a line for the log; the
  // call's status otherwise.
  struct Registered {
    bool already_member = false;
    std::string text;
  };
  std::function<absl::StatusOr<Registered>(RpcClient& chief)> join;
  // Asks to leave, waiting up to leave_timeout. OK with a line for the log.
  std::function<absl::StatusOr<std::string>(RpcClient& chief, absl::Duration timeout)> leave;
  absl::Duration leave_timeout = absl::Seconds(25);
  // A registered task registers again this often (a no-op for a member), so that a restarted
  // chief re-admits it.
  absl::Duration reregister_every = absl::Seconds(5);
};

// Serves like ServerProcess::ServeUntilSignal, and meanwhile registers (calls.join, retried
// with backoff while the chief answers Unavailable or DeadlineExceeded: it may not be serving
// yet, or be restarting). Any other refusal (a wrong token, an index that is taken) is logged
// and ends the process with its exit code. On SIGTERM/SIGINT a registered task asks to leave
// (calls.leave): once it has left it exits 0, a departure and not a failure; otherwise with
// the signal's exit code. Returns the exit code. Call from main's thread, after registering
// the task's handlers on process.server().
int ServeAsMember(ServerProcess& process, const ClusterSpec& cluster, const MemberCalls& calls);

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_ELASTIC_MEMBER_H_
