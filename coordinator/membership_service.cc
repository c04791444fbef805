#include "coordinator/membership_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/cluster_spec.h"
#include "core/status_macros.h"
#include "ps/ps.capnp.h"
#include "worker/worker.capnp.h"

namespace asyncps {
namespace {

// A task speaks for itself only: one worker (or PS) cannot join or drain another.
absl::Status CheckCaller(const net::RequestContext& ctx, int index, const char* role = "worker") {
  if (index < 0 || index >= MembershipService::kMaxWorkerIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " index ", index, " is out of range [0, ", MembershipService::kMaxWorkerIndex, ")"));
  }
  if (ctx.peer.task_index != index) {
    return absl::PermissionDeniedError(absl::StrCat(role, " ", ctx.peer.task_index, " may join or leave only as itself, not as ",
                                                    role, " ", index));
  }
  return absl::OkStatus();
}

// The address a join request names, checked: host:port of at most kMaxAddressBytes.
template <typename Request>
absl::StatusOr<std::string> JoinAddress(Request request, const char* role) {
  const auto text = request.getAddress();
  if (text.size() > MembershipService::kMaxAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat(role, " ", request.getIndex(), ": an address of ", text.size(),
                                                   " bytes (at most ", MembershipService::kMaxAddressBytes, ")"));
  }
  std::string address(text.cStr(), text.size());
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(address, &host, &port); !s.ok() || port <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(role, " ", request.getIndex(), ": '", address, "' is not host:port"));
  }
  return address;
}

// What a Leave may wait: until shortly before the caller gives up, so the answer arrives.
absl::Duration LeaveTimeout(const net::RequestContext& ctx) {
  absl::Duration timeout = std::min(absl::Minutes(5), ctx.deadline - absl::Now());
  return std::max(absl::ZeroDuration(), timeout - std::min(absl::Seconds(2), timeout / 4));
}

}  // namespace

absl::StatusOr<MembershipService::Members::Joined> MembershipService::Members::JoinPs(int index, const std::string&) {
  return absl::FailedPreconditionError(absl::StrCat(
      "ps ", index, " cannot join: this job's PS are fixed (start it with --initial_ps, e.g. asyncps_launch --max_ps)"));
}

absl::StatusOr<int> MembershipService::Members::LeavePs(int index, absl::Duration) {
  return absl::FailedPreconditionError(absl::StrCat(
      "ps ", index, " cannot leave: this job's PS are fixed (start it with --initial_ps, e.g. asyncps_launch --max_ps)"));
}

void MembershipService::Register(net::MethodTable& methods, Members& members) {
  methods.Register<wire::JoinRequest>(
      "membership.Join", {"worker"},
      [&members](const net::RequestContext& ctx, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
        auto request = in.RequestBody<wire::JoinRequest>();
        const int index = request.getIndex();
        RETURN_IF_ERROR(CheckCaller(ctx, index));
        ASSIGN_OR_RETURN(const std::string address, JoinAddress(request, "worker"));
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
        absl::StatusOr<int> requeued = members.Leave(index, LeaveTimeout(ctx));
        if (!requeued.ok()) {
          spdlog::warn("membership.Leave of worker {} refused: {}", index, requeued.status().ToString());
          return requeued.status();
        }
        out->InitResponseBody<wire::LeaveResponse>().setRequeued(*requeued);
        return absl::OkStatus();
      });
  methods.Register<wire::JoinPsRequest>(
      "membership.JoinPs", {"ps"},
      [&members](const net::RequestContext& ctx, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
        auto request = in.RequestBody<wire::JoinPsRequest>();
        const int index = request.getIndex();
        RETURN_IF_ERROR(CheckCaller(ctx, index, "ps"));
        ASSIGN_OR_RETURN(const std::string address, JoinAddress(request, "ps"));
        absl::StatusOr<Members::Joined> joined = members.JoinPs(index, address);
        if (!joined.ok()) {
          spdlog::warn("membership.JoinPs of ps {} at {} refused: {}", index, address, joined.status().ToString());
          return joined.status();
        }
        auto response = out->InitResponseBody<wire::JoinPsResponse>();
        response.setMembers(joined->members);
        response.setAlreadyMember(joined->already_member);
        return absl::OkStatus();
      });
  methods.Register<wire::LeavePsRequest>(
      "membership.LeavePs", {"ps"},
      [&members](const net::RequestContext& ctx, const net::InMessage& in, net::OutMessage* out) -> absl::Status {
        const int index = in.RequestBody<wire::LeavePsRequest>().getIndex();
        RETURN_IF_ERROR(CheckCaller(ctx, index, "ps"));
        absl::StatusOr<int> moved = members.LeavePs(index, LeaveTimeout(ctx));
        if (!moved.ok()) {
          spdlog::warn("membership.LeavePs of ps {} refused: {}", index, moved.status().ToString());
          return moved.status();
        }
        out->InitResponseBody<wire::LeavePsResponse>().setGroupsMoved(*moved);
        return absl::OkStatus();
      });
}

}  // namespace asyncps
