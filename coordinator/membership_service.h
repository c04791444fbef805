#ifndef ASYNCPS_COORDINATOR_MEMBERSHIP_SERVICE_H_
#define ASYNCPS_COORDINATOR_MEMBERSHIP_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "net/method_table.h"

namespace asyncps {

// Elastic membership (issue 37): the chief's "membership.*" methods, served on the chief's
// cluster address when the job runs with --elastic (ClusterCoordinator does it).
//
//   membership.Join  (worker.capnp JoinRequest -> JoinResponse)  a worker registers, as the
//       task it authenticated as in the handshake (the cluster token: a wrong one never gets
//       past it). A new index is admitted once its per-worker datasets and resources are
//       built (the same path as a recovered worker); the index of a member at the same
//       address is a no-op (alreadyMember: a starting worker, or a repeated request).
//   membership.Leave (LeaveRequest -> LeaveResponse)  a worker asks to be drained: it takes no
//       new closure, its closures finish (or, past the request's deadline, go back to the
//       queue), then it is no longer a member: a departure, not a failure. Answered once it
//       has left.
//   membership.JoinPs  (JoinRequest -> JoinResponse)  elastic PS (ProcessOptions::initial_ps):
//       PS slot `index` registers, serving at the address its slot lists; shard-group copies
//       start moving to it (coordinator/ps_monitor.h, AdmitPs). A member: a no-op
//       (alreadyMember).
//   membership.LeavePs (LeaveRequest -> LeaveResponse)  a PS asks to leave: its copies move to
//       the other PS, and the answer (groupsMoved) comes once it holds none; then it may exit.
//       Refused when the PS left could not hold every group's copies (FailedPrecondition: a
//       scale to 0 PS, or below --ps_replicas), or when the job's PS are not elastic.
// Refused, with nothing changed: an index other than the caller's own (PermissionDenied), a
// bad index or address (InvalidArgument), an index that is a member at another address
// (AlreadyExists), a Leave of a worker that is not a member (NotFound) or already draining
// (FailedPrecondition), any request once the coordinator is shutting down (Unavailable).
class MembershipService {
 public:
  // Indices at or past this are refused: a typo, not a plan.
  static constexpr int kMaxWorkerIndex = 4096;
  static constexpr size_t kMaxAddressBytes = 255;

  // What the service changes: ClusterCoordinator (and a stub in the fuzzer). Thread-safe.
  class Members {
   public:
    struct Joined {
      int members = 0;
      bool already_member = false;
    };
    virtual ~Members() = default;
    virtual absl::StatusOr<Joined> Join(int index, const std::string& address) = 0;
    // Returns how many closures went back to the queue.
    virtual absl::StatusOr<int> Leave(int index, absl::Duration timeout) = 0;
    // Elastic PS; by default refused (FailedPrecondition: the job's PS are fixed).
    virtual absl::StatusOr<Joined> JoinPs(int index, const std::string& address);
    // Returns how many group copies moved off the PS.
    virtual absl::StatusOr<int> LeavePs(int index, absl::Duration timeout);
  };

  // Registers the methods on `methods`, calling into `members` (which must outlive them).
  static void Register(net::MethodTable& methods, Members& members);
};

}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_MEMBERSHIP_SERVICE_H_
