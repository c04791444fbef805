#ifndef ASYNCPS_WORKER_WORKER_SERVICE_H_
#define ASYNCPS_WORKER_WORKER_SERVICE_H_

#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
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
// A takeover can land while a call of the replaced chief is between its admission and its
// effect (the Run's closure starting, the directory replaced, a resource kept or erased, ids
// cancelled). Each effect is therefore made under the same lock as a second check that the
// caller is still the chief served, and the takeover's drop runs under that lock too: an
// effect lands either before the drop (and is dropped or cancelled with the rest) or not at
// all (FailedPrecondition, as for a call that arrives after the takeover).
//
// Thread-safe. `program` and `ps` must outlive the server it is registered with.
class WorkerService {
 public:
  // `metrics` (optional, not owned) must outlive the service.
  WorkerService(const Program& program, int worker_index, int num_workers, PsClient& ps,
                VariableDirectory& directory, WorkerMetrics* metrics = nullptr);

  void RegisterWith(net::MethodTable& server);

  // Tests only: `hook` is called with the method's name ("worker.Run", "worker.SetDirectory",
  // "worker.DeleteResource", "worker.Cancel", "worker.CreateResource") by every call of those
  // methods after it was admitted and before its effect, without any lock held, so a test
  // can make a new chief take over at the worst moment. Set it before the service serves.
  void SetBeforeEffectHookForTesting(std::function<void(absl::string_view method)> hook) {
    before_effect_hook_ = std::move(hook);
  }

 private:
  // `incarnation`: the calling chief's (see AdmitCoordinator).
  absl::Status Run(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status CreateResource(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status DeleteResource(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status SetDirectory(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status Cancel(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  absl::Status Heartbeat(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response);
  // Checks `incarnation` (the calling chief's) against the fence; on a new chief, drops its
  // predecessor's state before returning.
  absl::Status AdmitCoordinator(uint64_t incarnation);
  // The second check, made under mu_ together with the effect: OK while `incarnation` is
  // still the chief served (see CoordinatorFence::Serves), FailedPrecondition naming
  // `what` once another chief took over since the call was admitted.
  absl::Status CheckStillServedLocked(uint64_t incarnation, absl::string_view what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The effect of a call of `method` admitted for chief `incarnation`: runs the test hook
  // (BeforeEffect), then `effect` under mu_ if that chief is still served, checked under the
  // same hold of mu_ (CheckStillServedLocked's error, naming `what`, if not), so a takeover
  // either comes before the check or after the effect. `effect` runs with mu_ held: annotate
  // the lambda ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
  absl::Status EffectIfStillServed(uint64_t incarnation, absl::string_view method, absl::string_view what,
                                   absl::FunctionRef<void()> effect) ABSL_LOCKS_EXCLUDED(mu_);
  void BeforeEffect(absl::string_view method) const {
    if (before_effect_hook_) before_effect_hook_(method);
  }

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
  std::function<void(absl::string_view)> before_effect_hook_;  // set before serving; tests only
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
