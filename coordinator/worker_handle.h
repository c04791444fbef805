#ifndef ASYNCPS_COORDINATOR_WORKER_HANDLE_H_
#define ASYNCPS_COORDINATOR_WORKER_HANDLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "net/rpc_client.h"
#include "worker/variable_directory.h"

namespace asyncps {

// A per-worker resource the coordinator keeps alive on every worker.
struct ResourceSpec {
  uint64_t id = 0;
  std::string factory;
  std::map<std::string, std::string> args;
};

// The coordinator's view of one worker: its connection, whether it is up, which incarnation
// was prepared (variable directory sent, per-worker resources created), and the closures it
// is running. A worker is admitted ("up") only after Recover has rebuilt everything on it.
//
// Thread-safe. Internal to the coordinator.
class WorkerHandle {
 public:
  WorkerHandle(int index, std::unique_ptr<net::RpcClient> client);

  int index() const { return index_; }
  const std::string& address() const { return client_->address(); }

  bool up() const;
  // The incarnation that was prepared; 0 while down.
  uint64_t incarnation() const;

  // Blocks until the worker is up (true) or Stop was called (false).
  bool WaitUntilUp() const;
  // Blocks until the worker is down or Stop was called, at most `timeout`.
  void WaitWhileUp(absl::Duration timeout) const;
  // Blocks until the worker is up or Stop was called, at most `timeout`; false when stopping.
  bool WaitUntilUpFor(absl::Duration timeout) const;
  bool stopping() const;

  // Marks the worker down unless it already is, or `incarnation` is that of an earlier
  // incarnation (a stale report). Drops the connection so calls in flight fail now.
  // Returns true when this call changed the state.
  bool MarkDown(uint64_t incarnation, const absl::Status& reason);

  // Probes a down worker and, when it answers, prepares it: sends the variable directory,
  // creates every resource in `resources` it lacks, then marks it up.
  absl::Status Recover(const VariableDirectory& directory, const std::vector<ResourceSpec>& resources,
                       absl::Duration timeout);

  // Per-worker resources rebuilt on restarted incarnations by Recover since the last call.
  int64_t TakeResourcesRebuilt();

  // Checks an up worker: an error when it does not answer within `timeout` or answers as a
  // different incarnation (it restarted).
  absl::Status Heartbeat(absl::Duration timeout);

  // Creates `spec` on the worker if it is up (serialised with Recover, so a worker being
  // recovered gets it one way or the other).
  absl::Status CreateResourceIfUp(const ResourceSpec& spec, absl::Duration timeout);

  // Sends the directory when the worker has an older version.
  absl::Status SyncDirectory(const VariableDirectory& directory, absl::Duration timeout);

  net::RpcClient& client() { return *client_; }

  // Closures in flight here, for cancellation.
  void AddRunning(uint64_t closure_id);
  void RemoveRunning(uint64_t closure_id);
  // Asks the worker to cancel every closure it is running (fire and forget).
  void CancelRunning();

  void Stop();

 private:
  absl::Status SendDirectory(const VariableDirectory& directory, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  absl::Status SendResource(const ResourceSpec& spec, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);

  const int index_;
  std::unique_ptr<net::RpcClient> client_;

  Mutex setup_mu_;  // serialises Recover, CreateResourceIfUp and SyncDirectory (held across RPCs)
  mutable Mutex mu_;  // guards the state below; never held across an RPC
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t directory_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint64_t> resources_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> running_ ABSL_GUARDED_BY(mu_);
  int64_t resources_rebuilt_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_WORKER_HANDLE_H_
