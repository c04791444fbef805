#include "coordinator/membership_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cluster_spec.h"
#include "core/status_macros.h"
#include "worker/worker.capnp.h"

namespace asyncps {
namespace {

// A worker speaks for itself only: one worker cannot join or drain another.
absl::Status CheckCaller(const net::RequestContext& ctx, int index) {
  if (index < 0 || index >= MembershipService::kMaxWorkerIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", index, " is out of range [0, ", MembershipService::kMaxWorkerIndex, ")"));
  }
  if (ctx.peer.task_index != index) {
    return absl::PermissionDeniedError(absl::StrCat("worker ", ctx.peer.task_index,
                                                    " may join or leave only as itself, not as worker ", index));
  }
  return absl::OkStatus();
}

}  // namespace

void MembershipService::Register(net::MethodTable& methods, Members& members) {
  methods.Register<wire::JoinRequest>(
      "membership.Join", {"worker"},
      [&members](const net::RequestContext& ctx, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
        auto request = in.RequestBody<wire::JoinRequest>();
        const int index = request.getIndex();
        RETURN_IF_ERROR(CheckCaller(ctx, index));
        const auto text = request.getAddress();
        if (text.size() > kMaxAddressBytes) {
          return absl::InvalidArgumentError(
              absl::StrCat("worker ", index, ": an address of ", text.size(), " bytes (at most ", kMaxAddressBytes, ")"));
        }
        const std::string address(text.cStr(), text.size());
        std::string host;
        int port = 0;
        if (absl::Status s = ParseHostPort(address, &host, &port); !s.ok() || port <= 0) {
          return absl::InvalidArgumentError(absl::StrCat("worker ", index, ": '", address, "' is not host:port"));
        }
        absl::StatusOr<Members::Joined> joined = members.Join(index, address);
        if (!joined.ok()) {
          spdlog::warn("membership.Join of worker {} at {} refused: {}", index, address, joined.status().ToString());
          return joined.status();
        }
        auto response = out->InitResponseBody<wire::JoinResponse>();
        response.setMembers(joined->members);
        response.setAlreadyMember(joined->already_member);
        return absl::OkStatus();
      });
  methods.Register<wire::LeaveRequest>(
      "membership.Leave", {"worker"},
      [&members](const net::RequestContext& ctx, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
        const int index = in.RequestBody<wire::LeaveRequest>().getIndex();
        RETURN_IF_ERROR(CheckCaller(ctx, index));
        // The drain waits for the worker's closures until shortly before the caller gives up;
        // then whatever still runs goes back to the queue, and the answer still arrives.
        absl::Duration timeout = std::min(absl::Minutes(5), ctx.deadline - absl::Now());
        timeout = std::max(absl::ZeroDuration(), timeout - std::min(absl::Seconds(2), timeout / 4));
        absl::StatusOr<int> requeued = members.Leave(index, timeout);
        if (!requeued.ok()) {
          spdlog::warn("membership.Leave of worker {} refused: {}", index, requeued.status().ToString());
          return requeued.status();
        }
        out->InitResponseBody<wire::LeaveResponse>().setRequeued(*requeued);
        return absl::OkStatus();
      });
}

}  // namespace asyncps
