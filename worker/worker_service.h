#ifndef ASYNCPS_WORKER_WORKER_SERVICE_H_
#define ASYNCPS_WORKER_WORKER_SERVICE_H_

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "core/sync.h"
#include "net/method_table.h"
#include "worker/closure_cancellation.h"
#include "worker/coordinator_fence.h"
#include "worker/program.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"
#include "worker/worker_metrics.h"

namespace asyncps {

// The "worker.*" RPC methods:
//   worker.Run             RunRequest -> RunResponse: runs a Program function. The function's
//                          own error travels inside RunResponse (RPC status OK); an RPC error
//                          means the worker cannot run closures (e.g. FailedPrecondition when
//                          a per-worker resource it names is missing after a restart).
//   worker.CreateResource  CreateResourceRequest -> Empty (idempotent by id). A factory that
//                          fails (or throws, or returns null) gives its own code, with a
//                          message made by ResourceFactoryError, so the caller can tell it
//                          from a failed call.
//   worker.DeleteResource  DeleteResourceRequest -> Empty
//   worker.SetDirectory    SetDirectoryRequest -> Empty (where variables live)
//   worker.Cancel          CancelRequest -> Empty (cooperative: sets StepContext::cancelled)
//   worker.Heartbeat       Empty -> HeartbeatResponse (answered on the I/O thread)
//
// Coordinator restart: every call is first checked against the caller's incarnation (see
// CoordinatorFence). The first call from a new chief process drops what its predecessor set
// up — per-worker resources (datasets, iterators, models), the variable directory (reported
// as version 0 until the new chief sends its own) — and cancels the closures still running
// for it; calls from a replaced chief are refused with FailedPrecondition (as is a resource
// whose factory was still running for it when it was replaced: it is not kept). The dropped
// resources are released by that first call (on the I/O thread when it is a Heartbeat) or by
// the last closure still holding them, so their destructors must not block for long.
//
// Thread-safe. `program` and `ps` must outlive the server it is registered with.
class WorkerService {
 public:
  // `metrics` (optional, not owned) must outlive the service.
  WorkerService(const Program& program, int worker_index, int num_workers, PsClient& ps,
                VariableDirectory& directory, WorkerMetrics* metrics = nullptr);

  void RegisterWith(net::MethodTable& server);

 private:
  absl::Status Run(const net::InMessage& request, net::OutMessage* response);
  // `incarnation`: the calling chief's (see AdmitCoordinator).
  absl::Status CreateResource(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status DeleteResource(const net::InMessage& request, net::OutMessage* response);
  absl::Status SetDirectory(const net::InMessage& request, net::OutMessage* response);
  absl::Status Cancel(const net::InMessage& request, net::OutMessage* response);
  absl::Status Heartbeat(const net::InMessage& request, net::OutMessage* response);
  // Checks `incarnation` (the calling chief's) against the fence; on a new chief, drops its
  // predecessor's state before returning.
  absl::Status AdmitCoordinator(uint64_t incarnation);

  const Program& program_;
  const int worker_index_;
  const int num_workers_;
  PsClient& ps_;
  VariableDirectory& directory_;
  WorkerMetrics* const metrics_;

  Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Resource>> resources_ ABSL_GUARDED_BY(mu_);
  CoordinatorFence fence_ ABSL_GUARDED_BY(mu_);
  ClosureCancellation cancellation_;  // one flag per attempt of each running closure
};

// The error worker.CreateResource answers when the factory itself failed: `error`'s code, a
// message naming the factory and worker that starts with kResourceFactoryFailed.
inline constexpr char kResourceFactoryFailed[] = "per-worker resource factory";
absl::Status ResourceFactoryError(const std::string& factory, int worker_index, const absl::Status& error);
// True for a status made by ResourceFactoryError, also after it crossed the wire: the
// factory's error (the user's), not the worker or connection failing.
bool IsResourceFactoryError(const absl::Status& status);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_WORKER_SERVICE_H_
