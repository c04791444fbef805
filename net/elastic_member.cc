#include "net/elastic_member.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/exit_code.h"
#include "core/process_options.h"
#include "core/sync.h"
#include "net/rpc_client.h"
#include "net/server_process.h"

namespace asyncps::net {

int ServeAsMember(ServerProcess& process, const ClusterSpec& cluster, const MemberCalls& calls) {
  if (absl::Status s = process.server().Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return ExitCodeForStatus(s);
  }
  const int index = cluster.task_index();
  spdlog::info("{} {} ready on {} (elastic: registering with the chief at {})", calls.role, index,
               cluster.self_address(), cluster.chief());
  RpcClient chief(process.loop(), process.ClientOptions(cluster.chief()));
  Mutex mu;
  bool stop = false;
  bool registered = false;
  std::atomic<int> refused_code{-1};
  std::thread registration([&] {
    absl::Duration backoff = absl::Milliseconds(100);
    while (true) {
      absl::StatusOr<MemberCalls::Registered> r = calls.join(chief);
      MutexLock lock(&mu);
      auto stopped = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop; };
      if (r.ok()) {
        if (!registered || !r->already_member) spdlog::info("{} {}: {}", calls.role, index, r->text);
        registered = true;
        if (mu.AwaitWithTimeout(absl::Condition(&stopped), calls.reregister_every)) return;
        backoff = absl::Milliseconds(100);
        continue;
      }
      const absl::Status& s = r.status();
      if (s.code() != absl::StatusCode::kUnavailable && s.code() != absl::StatusCode::kDeadlineExceeded) {
        spdlog::error("{} {}: the chief refused its registration: {}", calls.role, index, s.ToString());
        refused_code = ExitCodeForStatus(s) == 0 ? kExitFailure : ExitCodeForStatus(s);
        kill(getpid(), SIGTERM);  // wakes the wait below
        return;
      }
      // The chief is not serving membership yet (starting up, or restarting): try again, not a
      // failure.
      if (mu.AwaitWithTimeout(absl::Condition(&stopped), backoff)) return;
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  });
  const int signal = WaitForTerminationSignal();
  bool was_registered = false;
  {
    MutexLock lock(&mu);
    stop = true;
    was_registered = registered;
  }
  registration.join();
  if (refused_code >= 0) {
    process.server().Shutdown();
    return refused_code;
  }
  int code = ExitCodeForSignal(signal);
  if (was_registered) {
    spdlog::info("signal {}: {} {} asks the chief to let it leave", signal, calls.role, index);
    absl::StatusOr<std::string> left = calls.leave(chief, calls.leave_timeout);
    if (left.ok()) {
      spdlog::info("{} {} left the job: {}", calls.role, index, *left);
      code = kExitOk;  // a departure, not a failure: nothing restarts it
    } else if (absl::IsUnavailable(left.status())) {
      spdlog::info("{} {}: the chief is gone ({}); shutting down", calls.role, index, left.status().ToString());
    } else {
      spdlog::warn("{} {}: did not leave cleanly ({}); shutting down", calls.role, index, left.status().ToString());
    }
  }
  process.server().Shutdown();
  return code;
}

}  // namespace asyncps::net
