#ifndef ASYNCPS_WORKER_SHARD_MAP_CACHE_H_
#define ASYNCPS_WORKER_SHARD_MAP_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "ps/replication/shard_map.h"

namespace asyncps {
namespace net {
class RpcClient;
}  // namespace net

// A client's copy of the shard map (ps/replication/shard_map.h) with replicated shards
// (ps_replicas >= 2): which PS is the primary of each group, at which generation. PsClient
// sends a request for group g to Lookup(g) and, when the PS refuses it as a stale shard map
// or cannot be reached, asks AwaitNewer for a newer map before trying again.
//
// Maps are learned two ways: Install (the chief's own shard-map owner hands each map it pushes
// straight to its client), and by fetching ps.GetShardMap from every PS that answers and
// keeping the highest generation. Fetches happen on one background thread, only while some
// call waits in AwaitNewer or a watched try has waited `watch_after` (WatchPrimary), at most
// every `poll_interval`: a failover costs each client a few small calls, not a storm. Each map
// fetched is kept as soon as it arrives, so a silent PS (its fetch waits out `fetch_timeout`)
// does not hold back the map the others give.
//
// Thread-safe. The RPC clients are not owned and must outlive this object.
class ShardMapCache {
 public:
  struct Options {
    // How often a waiting call re-fetches the maps while no newer one is found.
    absl::Duration poll_interval = absl::Milliseconds(50);
    // Deadline of each ps.GetShardMap.
    absl::Duration fetch_timeout = absl::Seconds(1);
    // How long a watched try (WatchPrimary) waits before the cache starts fetching maps for
    // it. A primary that went silent is failed over by the chief after its heartbeat timeout
    // (or, when only the workers cannot reach it, after they have told the chief), so about
    // half that timeout: fetching starts before the new map exists, and costs nothing while
    // every try is answered sooner.
    absl::Duration watch_after = absl::Seconds(1);
  };

  // Where a group's requests go: its primary (-1: none known) and generation (0: no map yet).
  struct Route {
    int primary = -1;
    uint64_t generation = 0;
  };

  ShardMapCache(std::vector<net::RpcClient*> ps, Options options);
  // Stops the fetching thread; calls still waiting in AwaitNewer get Cancelled, later ones at
  // once.
  ~ShardMapCache();

  ShardMapCache(const ShardMapCache&) = delete;
  ShardMapCache& operator=(const ShardMapCache&) = delete;

  // The route of `group` in the newest map seen ({-1, 0} when none is known).
  Route Lookup(int group) const;
  // The newest map seen (generation 0: none).
  ps::ShardMap map() const;

  // Keeps `map` when its generation is above the one held; true when it did.
  bool Install(const ps::ShardMap& map);

  // Calls `then` once the map holds `group` at a generation above `seen` (OK), or `max_wait`
  // after the call with whatever map it then holds (OK: the caller retries its request), or
  // with Cancelled when this cache is destroyed. Starts fetching maps from every PS meanwhile.
  // `then` runs on the fetching thread, or on the RPC loop thread of the fetch that brought the
  // newer map, or in Install's caller (here when the cache is already stopped), and must not
  // block.
  void AwaitNewer(int group, uint64_t seen, absl::Duration max_wait, std::function<void(absl::Status)> then);

  // Watches a try sent to `primary`, the primary of `group` at `generation` in this cache's
  // map: from `watch_after` on (Options) maps are fetched as for AwaitNewer while the watch
  // lasts, and `moved` is called once, when the map names another primary for the group at a
  // higher generation (the group failed over while the try waited; its primary may be silent
  // for good). Ends with Unwatch, with `moved`, or with the cache (then nothing is called).
  // `moved` runs on the fetching thread or wherever the map was installed (an RPC loop thread,
  // Install's caller), must not block, and may run while Unwatch is being called for the same
  // watch: the caller settles which of its try's answer and `moved` came first. Returns the
  // watch's id (never 0).
  uint64_t WatchPrimary(int group, uint64_t generation, int primary, std::function<void()> moved);
  // Ends watch `id`; nothing is called for it afterwards (unless `moved` is already running).
  void Unwatch(uint64_t id);

  // Maps fetched so far (for tests and metrics).
  int64_t fetches() const;
  // Watches that ended with `moved`: tries abandoned for a new primary (for tests and logs).
  int64_t moved() const;

 private:
  struct State;
  void FetchLoop();

  const std::vector<net::RpcClient*> ps_;
  const Options options_;
  std::shared_ptr<State> state_;
  std::thread fetcher_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_SHARD_MAP_CACHE_H_
