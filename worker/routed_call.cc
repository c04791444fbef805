#include "worker/routed_call.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/ps.capnp.h"
#include "ps/replication/shard_map.h"
#include "worker/shard_map_cache.h"

namespace asyncps {
namespace {

// How long a refused or unanswered try waits for a newer map before trying again anyway.
constexpr absl::Duration kRetryWait = absl::Milliseconds(100);
// How long a call refused by a PS whose map lags the client's waits before it tries again: the
// chief pushes every map to every PS as it installs it in its own client, so that PS takes it
// within about a round trip.
constexpr absl::Duration kLaggingPsRetryWait = absl::Milliseconds(5);

template <typename Request>
void SetRouteAs(net::OutMessage& m, uint32_t group, uint64_t generation) {
  auto route = m.envelope().getRequest().getBody().getAs<Request>().initRoute();
  route.setGroup(group);
  route.setGeneration(generation);
}

// Sets the route of `m`, a request of `method`. False for a method that takes no route.
bool SetRoute(const std::string& method, net::OutMessage& m, uint32_t group, uint64_t generation) {
  if (method == "ps.Read") {
    SetRouteAs<wire::ReadRequest>(m, group, generation);
  } else if (method == "ps.Gather") {
    SetRouteAs<wire::GatherRequest>(m, group, generation);
  } else if (method == "ps.Update") {
    SetRouteAs<wire::UpdateRequest>(m, group, generation);
  } else if (method == "ps.PushGradients") {
    SetRouteAs<wire::PushGradientsRequest>(m, group, generation);
  } else if (method == "ps.CreateVariable") {
    SetRouteAs<wire::CreateVariableRequest>(m, group, generation);
  } else if (method == "ps.SaveCheckpoint") {
    SetRouteAs<wire::SaveCheckpointRequest>(m, group, generation);
  } else if (method == "ps.RestoreCheckpoint") {
    SetRouteAs<wire::RestoreCheckpointRequest>(m, group, generation);
  } else if (method == ps::kEmbeddingLookupMethod) {
    SetRouteAs<wire::EmbeddingLookupRequest>(m, group, generation);
  } else if (method == ps::kEmbeddingPushMethod) {
    SetRouteAs<wire::EmbeddingPushRequest>(m, group, generation);
  } else if (method == ps::kCreateEmbeddingTableMethod) {
    SetRouteAs<wire::CreateEmbeddingTableRequest>(m, group, generation);
  } else if (method == ps::kEmbeddingStatsMethod) {
    SetRouteAs<wire::EmbeddingStatsRequest>(m, group, generation);
  } else if (method == "ps.SaveEmbeddingTables") {
    SetRouteAs<wire::SaveEmbeddingTablesRequest>(m, group, generation);
  } else if (method == "ps.RestoreEmbeddingTables") {
    SetRouteAs<wire::RestoreEmbeddingTablesRequest>(m, group, generation);
  } else {
    return false;
  }
  return true;
}

// Whether a write that may have been applied before its primary dropped may be sent again.
bool RepeatableAfterLoss(const std::string& method, net::OutMessage& m) {
  if (method == "ps.Update") return m.envelope().getRequest().getBody().getAs<wire::UpdateRequest>().hasTag();
  if (method == "ps.PushGradients") {
    return m.envelope().getRequest().getBody().getAs<wire::PushGradientsRequest>().hasTag();
  }
  if (method == ps::kEmbeddingPushMethod) {
    return m.envelope().getRequest().getBody().getAs<wire::EmbeddingPushRequest>().hasTag();
  }
  // Reads; creation and checkpoints are idempotent; a training lookup sent again may count its
  // keys towards admission twice (an admission one occurrence early), never change a row.
  return true;
}

struct GroupCall {
  std::vector<net::RpcClient*> ps;
  ShardMapCache* cache;
  std::string method;
  uint32_t group;
  net::OutMessage request;  // kept unsent: each try sends a copy
  bool repeatable;
  std::optional<bool> wait_for_ready;
  net::PayloadPlacer place_payloads;  // passed on to every attempt (CallOptions::place_payloads)
  absl::Time deadline;
  RoutedCallback done;
};

// One try of a GroupCall: its answer and the failover that abandons it (ShardMapCache::
// WatchPrimary) race, and whichever comes first settles it.
struct Attempt {
  std::atomic<bool> settled{false};
  uint64_t watch = 0;  // 0: not watched
  absl::Time sent;
};

void Try(std::shared_ptr<GroupCall> call);

const std::string* Address(const GroupCall& call, int ps) {
  return ps >= 0 ? &call.ps[static_cast<size_t>(ps)]->address() : nullptr;
}

// Waits for a newer map of the call's group than `seen`, then tries again; `last` is what the
// caller gets if the deadline passes first.
void RetryLater(std::shared_ptr<GroupCall> call, uint64_t seen, int last_ps, absl::StatusOr<net::InMessage> last) {
  const absl::Duration left = call->deadline - absl::Now();
  const absl::Duration wait =
      !last.ok() && ps::IsStaleShardMapOfALaggingPs(last.status()) ? kLaggingPsRetryWait : kRetryWait;
  if (left <= absl::ZeroDuration()) {
    call->done(last_ps, Address(*call, last_ps), std::move(last));
    return;
  }
  auto held = std::make_shared<absl::StatusOr<net::InMessage>>(std::move(last));
  ShardMapCache* cache = call->cache;
  const uint32_t group = call->group;
  cache->AwaitNewer(group, seen, std::min(left, wait),
                    [call = std::move(call), held, last_ps](absl::Status waited) mutable {
                      // Past the deadline the caller gets the last answer, not a new try.
                      if (!waited.ok() || absl::Now() >= call->deadline) {
                        call->done(last_ps, Address(*call, last_ps), std::move(*held));
                        return;
                      }
                      Try(std::move(call));
                    });
}

void Try(std::shared_ptr<GroupCall> call) {
  const ShardMapCache::Route route = call->cache->Lookup(static_cast<int>(call->group));
  const absl::Duration left = call->deadline - absl::Now();
  if (route.primary < 0 || static_cast<size_t>(route.primary) >= call->ps.size()) {
    absl::Status none = absl::UnavailableError(
        absl::StrCat(call->method, ": no primary known for shard group ", call->group,
                     route.generation == 0 ? " (no shard map yet)" : absl::StrCat(" at generation ", route.generation)));
    RetryLater(std::move(call), route.generation, -1, std::move(none));
    return;
  }
  if (left <= absl::ZeroDuration()) {
    call->done(route.primary, Address(*call, route.primary), absl::DeadlineExceededError(absl::StrCat(call->method, ": deadline passed riding out a failover of shard group ", call->group)));
    return;
  }
  net::OutMessage message = CopyOutMessage(call->request);
  SetRoute(call->method, message, call->group, route.generation);
  net::RpcClient* client = call->ps[static_cast<size_t>(route.primary)];
  const std::string method = call->method;
  const net::RpcClient::CallOptions options{left, call->wait_for_ready, call->place_payloads};
  auto attempt = std::make_shared<Attempt>();
  attempt->sent = absl::Now();
  if (call->repeatable) {
    // A primary that went silent (a partition, a host gone without a reset) never answers, and
    // its connection may hold this try for many seconds. Once the group has failed over, the
    // try is sent to the new primary instead: safe for a repeatable request (a tagged write
    // that landed on the old primary too is applied once by the new one's dedup window, or
    // never counted, the old primary being fenced and rebuilt). An untagged write is left to
    // its answer or its connection's end, as it may have been applied.
    attempt->watch = call->cache->WatchPrimary(
        static_cast<int>(call->group), route.generation, route.primary, [call, attempt, route]() mutable {
          if (attempt->settled.exchange(true)) return;
          spdlog::info("{} for shard group {}: ps {} left it unanswered for {} and the group moved to another "
                       "primary: sending it there",
                       call->method, call->group, route.primary, absl::FormatDuration(absl::Now() - attempt->sent));
          Try(std::move(call));
        });
  }
  client->CallAsync(method, std::move(message), options,
                    [call = std::move(call), route, attempt](absl::StatusOr<net::InMessage> r) mutable {
                      if (attempt->settled.exchange(true)) return;  // abandoned for the new primary
                      if (attempt->watch != 0) call->cache->Unwatch(attempt->watch);
                      if (r.ok()) {
                        call->done(route.primary, Address(*call, route.primary), std::move(r));
                        return;
                      }
                      const absl::Status& s = r.status();
                      if (ps::IsRestorePending(s)) {
                        // Not ridden out: the restore waits for this call's closure to end.
                        call->done(route.primary, Address(*call, route.primary), std::move(r));
                        return;
                      }
                      const bool refused = ps::IsStaleShardMap(s) || s.code() == absl::StatusCode::kNotFound;
                      const bool lost = s.code() == absl::StatusCode::kUnavailable;
                      if (refused || (lost && call->repeatable)) {
                        RetryLater(std::move(call), route.generation, route.primary, std::move(r));
                        return;
                      }
                      call->done(route.primary, Address(*call, route.primary), std::move(r));
                    });
}

}  // namespace

net::OutMessage CopyOutMessage(net::OutMessage& message) {
  net::OutMessage copy;
  copy.builder().getRoot<capnp::AnyPointer>().set(message.builder().getRoot<capnp::AnyPointer>().asReader());
  // AddTensor numbers payloads in order, so adding the same tensors in the same order keeps
  // every TensorRef of the copied envelope pointing at the right one.
  capnp::MallocMessageBuilder scratch(64);
  auto ref = scratch.initRoot<wire::TensorRef>();
  for (const Tensor& t : message.payloads()) copy.AddTensor(t, ref);
  return copy;
}

void CallGroupAsync(const std::vector<net::RpcClient*>& ps, ShardMapCache& cache, const std::string& method,
                    int group, net::OutMessage request, const net::RpcClient::CallOptions& options,
                    RoutedCallback done) {
  auto call = std::make_shared<GroupCall>();
  call->ps = ps;
  call->cache = &cache;
  call->method = method;
  call->group = static_cast<uint32_t>(group);
  call->request = std::move(request);
  call->repeatable = RepeatableAfterLoss(method, call->request);
  call->wait_for_ready = options.wait_for_ready;
  call->place_payloads = options.place_payloads;
  call->deadline = options.timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + options.timeout;
  call->done = std::move(done);
  if (!SetRoute(method, call->request, call->group, 0)) {
    // Not a group's request (ps.Health and the like): nothing to route.
    auto* client = ps[static_cast<size_t>(group)];
    client->CallAsync(method, std::move(call->request), options,
                      [call, group](absl::StatusOr<net::InMessage> r) { call->done(group, Address(*call, group), std::move(r)); });
    return;
  }
  Try(std::move(call));
}

}  // namespace asyncps
