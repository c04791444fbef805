#ifndef ASYNCPS_WORKER_ROUTED_CALL_H_
#define ASYNCPS_WORKER_ROUTED_CALL_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "net/message.h"
#include "net/rpc_client.h"

namespace asyncps {

class ShardMapCache;

// The answer to a routed call, the PS that gave it and that PS's address (-1 and null when
// none was asked: no primary was known before the deadline).
using RoutedCallback = std::function<void(int ps, const std::string* address, absl::StatusOr<net::InMessage>)>;

// Sends `request` (a ps.Read, ps.Gather, ps.Update, ps.PushGradients, ps.CreateVariable,
// ps.SaveCheckpoint or ps.RestoreCheckpoint body, or one of the embedding methods': lookup, push
// (repeated like ps.PushGradients), create, stats, save, restore) for shard group `group` to that group's
// primary in `cache`, with the route {group, generation} set in the body, and rides out a
// failover: when the PS refuses it as a stale shard map (ps::IsStaleShardMap), answers
// NotFound (a copy that restarted empty and lost its role), or cannot be reached, it waits
// for a newer map (ShardMapCache::AwaitNewer, at most 100 ms at a time) and sends again to
// whichever PS is then primary, until `options.timeout` after this call. Each try is safe to
// repeat: a refused request was not applied, reads change nothing, and a write that may have
// been applied (its primary dropped the connection) is sent again only when it carries an
// update tag (the replicated dedup window applies it once) or creates a variable (idempotent);
// an untagged ps.Update or ps.PushGradients whose primary became unreachable gets that error.
// A try that stays unanswered is watched (ShardMapCache::WatchPrimary: from the cache's
// `watch_after` on, maps are fetched): when the group fails over meanwhile (its primary went
// silent, or the workers could not reach it and the chief moved it), a repeatable request is
// sent to the new primary at once instead of waiting on the old one's connection, whose answer,
// if it ever comes, is dropped. An untagged write keeps waiting for its own answer (or its
// connection's end, net/silent_peer.h): it may have been applied.
// A group that lost every copy and awaits its restore (ps::IsRestorePending) is answered at
// once: automatic PS recovery restores it only once no closure runs.
// Any other method goes to PS `group` as it is, once.
//
// `done` runs exactly once, on an RPC loop thread, on the cache's fetching thread or in a
// caller of ShardMapCache::Install (never on the calling thread). `ps` and `cache` must outlive every call in flight.
void CallGroupAsync(const std::vector<net::RpcClient*>& ps, ShardMapCache& cache, const std::string& method,
                    int group, net::OutMessage request, const net::RpcClient::CallOptions& options,
                    RoutedCallback done);

// A copy of `message` (envelope and payload references) that can be sent while the original is
// kept for another try. The tensors are shared, not copied.
net::OutMessage CopyOutMessage(net::OutMessage& message);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_ROUTED_CALL_H_
