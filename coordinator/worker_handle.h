#ifndef ASYNCPS_COORDINATOR_WORKER_HANDLE_H_
#define ASYNCPS_COORDINATOR_WORKER_HANDLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "coordinator/resource_spec.h"
#include "core/sync.h"
#include "net/rpc_client.h"
#include "worker/variable_directory.h"

namespace asyncps {

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

  // Marks the worker down unless it already is, the handle is stopping, or `incarnation` is
  // that of an earlier incarnation (a stale report). Drops the connection so calls in flight
  // fail now. Returns true when this call changed the state.
  bool MarkDown(uint64_t incarnation, const absl::Status& reason);

  // Probes a down worker and, when it answers, prepares it: sends the variable directory,
  // creates every resource in `resources` it lacks, then marks it up. A resource whose
  // factory fails there does not keep the worker out: the failure is recorded (see
  // ResourceFailure) and the worker is admitted for closures that do not use it. Any other
  // error (the worker does not answer) leaves it down.
  absl::Status Recover(const VariableDirectory& directory, const std::vector<ResourceSpec>& resources,
                       absl::Duration timeout);

  // Per-worker resources rebuilt on restarted incarnations by Recover since the last call.
  int64_t TakeResourcesRebuilt();

  // Checks an up worker: an error when it does not answer within `timeout` or answers as a
  // different incarnation (it restarted). On success `ps_silence` (optional) gets what the
  // worker reports of each PS: how long it has owed the worker an answer (empty from a worker
  // that reports none).
  absl::Status Heartbeat(absl::Duration timeout, std::vector<absl::Duration>* ps_silence = nullptr);

  // Creates `spec` on the worker if it is up (serialised with Recover, so a worker being
  // recovered gets it one way or the other). The factory's error (IsResourceFactoryError) or
  // a failed call; nothing is recorded on failure.
  absl::Status CreateResourceIfUp(const ResourceSpec& spec, absl::Duration timeout);

  // Deletes resource `id` on the worker if it is up (best effort: a worker that is down has
  // lost it anyway) and forgets it, including a recorded failure.
  void DeleteResource(uint64_t id, absl::Duration timeout);

  // The factory error that resource `id` hit on this worker's current incarnation, or OK.
  absl::Status ResourceFailure(uint64_t id) const;

  // Sends the directory when the worker has an older version.
  absl::Status SyncDirectory(const VariableDirectory& directory, absl::Duration timeout);

  // Calls `method` on the worker like RpcClient::Call, but the wait is abortable: once Stop
  // is called, every Call waiting here returns Cancelled at once, whatever its timeout and
  // whether or not the worker ever answers (a hung worker, a probe of a stopped process).
  // The request itself may still reach the worker; its answer is then dropped. Every
  // blocking call the coordinator makes to a worker goes through here, so that destroying
  // the coordinator never waits on a worker.
  absl::StatusOr<net::InMessage> Call(const std::string& method, net::OutMessage request,
                                      absl::Duration timeout);

  // Closures in flight here, for cancellation.
  void AddRunning(uint64_t closure_id);
  void RemoveRunning(uint64_t closure_id);
  // Asks the worker to cancel every closure it is running (fire and forget).
  void CancelRunning();

  // Elastic membership: a draining worker takes no new closure. A dispatch thread brackets
  // each closure it took with BeginDispatch/EndDispatch; BeginDispatch returns false (and
  // counts nothing) once the worker drains, so the caller puts the closure back. Together
  // with StartDraining (under the same lock) no closure slips past a drain: either it was
  // counted before the drain began, and the drain waits for it, or it goes back.
  bool BeginDispatch();
  void EndDispatch();
  // Starts draining; false when it already was.
  bool StartDraining();
  bool draining() const;
  // Waits until no closure is being dispatched here, at most `timeout`; true when none is.
  bool WaitUntilIdle(absl::Duration timeout) const;
  // Counts a closure of a draining worker that went back to the queue instead of finishing.
  void NoteRequeued();
  int requeued() const;

  // Stops the handle for good: wakes every waiter (WaitUntilUp & co.) and aborts every Call
  // in progress with Cancelled; later Calls fail at once. Does not block.
  void Stop();

 private:
  struct PendingCall;

  absl::Status SendDirectory(const VariableDirectory& directory, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);
  absl::Status SendResource(const ResourceSpec& spec, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(setup_mu_);

  const int index_;
  std::unique_ptr<net::RpcClient> client_;

  Mutex setup_mu_;  // serialises Recover, CreateResourceIfUp and SyncDirectory (held across RPCs)
  // Guards the state below. Never held across an RPC. The one blocking call made under it is
  // MarkDown's RpcClient::Disconnect, on purpose (see MarkDown): it waits only for this
  // process's I/O loop to close a local socket — no network round trip, so a hung or dead
  // worker cannot stretch it — and the loop thread never takes mu_ (no callback of this
  // class locks it), so the wait is bounded by the loop's queue and cannot deadlock.
  mutable Mutex mu_;
  bool up_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t directory_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint64_t> resources_ ABSL_GUARDED_BY(mu_);
  // Resources whose factory failed on this incarnation (retried when it restarts).
  absl::flat_hash_map<uint64_t, absl::Status> failed_resources_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> running_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  int dispatching_ ABSL_GUARDED_BY(mu_) = 0;
  int requeued_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls waiting in Call, so Stop can abort them (lock order: mu_, then a call's own lock).
  absl::flat_hash_set<std::shared_ptr<PendingCall>> pending_ ABSL_GUARDED_BY(mu_);
  int64_t resources_rebuilt_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_WORKER_HANDLE_H_
