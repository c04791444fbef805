#include "worker/shard_map_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "core/sync.h"
#include "net/rpc_client.h"
#include "ps/ps.capnp.h"

namespace asyncps {

struct ShardMapCache::State {
  struct Waiter {
    int group;
    uint64_t seen;
    absl::Time until;
    std::function<void(absl::Status)> then;
  };
  struct Watch {
    int group;
    uint64_t generation;
    int primary;
    absl::Time due;  // when it starts the fetching
    std::function<void()> moved;
  };
  mutable Mutex mu;
  ps::ShardMap map ABSL_GUARDED_BY(mu);
  std::vector<Waiter> waiters ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, Watch> watches ABSL_GUARDED_BY(mu);
  uint64_t next_watch ABSL_GUARDED_BY(mu) = 1;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  int64_t fetches ABSL_GUARDED_BY(mu) = 0;
  // Per PS: a ps.GetShardMap to it is outstanding. A silent PS's fetch waits out its timeout
  // while the others are asked again every poll interval.
  std::vector<bool> fetching ABSL_GUARDED_BY(mu);
  int64_t moved ABSL_GUARDED_BY(mu) = 0;

  ShardMapCache::Route LookupLocked(int group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const ps::GroupEntry* g = map.Find(static_cast<uint32_t>(group));
    if (g == nullptr) return {};
    return {g->primary, g->generation};
  }

  // Takes out the watches whose group the map moved to another primary; the caller calls them
  // once the lock is released.
  std::vector<std::function<void()>> TakeMovedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::vector<std::function<void()>> out;
    for (auto it = watches.begin(); it != watches.end();) {
      const ShardMapCache::Route now = LookupLocked(it->second.group);
      if (now.generation > it->second.generation && now.primary != it->second.primary) {
        out.push_back(std::move(it->second.moved));
        watches.erase(it++);
      } else {
        ++it;
      }
    }
    moved += static_cast<int64_t>(out.size());
    return out;
  }

  // ShardMapCache::Install on this state (also from fetches that outlive the cache).
  bool Install(const ps::ShardMap& map) ABSL_LOCKS_EXCLUDED(mu);

  // When the earliest watch is due (InfiniteFuture: none).
  absl::Time EarliestWatchLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    absl::Time earliest = absl::InfiniteFuture();
    for (const auto& [id, w] : watches) earliest = std::min(earliest, w.due);
    return earliest;
  }
};

ShardMapCache::ShardMapCache(std::vector<net::RpcClient*> ps, Options options)
    : ps_(std::move(ps)), options_(options), state_(std::make_shared<State>()) {
  {
    MutexLock lock(&state_->mu);
    state_->fetching.assign(ps_.size(), false);
  }
  fetcher_ = std::thread([this] { FetchLoop(); });
}

ShardMapCache::~ShardMapCache() {
  std::vector<State::Waiter> waiters;
  absl::flat_hash_map<uint64_t, State::Watch> watches;  // let go without being called
  {
    MutexLock lock(&state_->mu);
    state_->stopped = true;
    waiters.swap(state_->waiters);
    watches.swap(state_->watches);
  }
  fetcher_.join();
  for (State::Waiter& w : waiters) w.then(absl::CancelledError("the shard map cache is shutting down"));
}

ShardMapCache::Route ShardMapCache::Lookup(int group) const {
  MutexLock lock(&state_->mu);
  return state_->LookupLocked(group);
}

ps::ShardMap ShardMapCache::map() const {
  MutexLock lock(&state_->mu);
  return state_->map;
}

int64_t ShardMapCache::fetches() const {
  MutexLock lock(&state_->mu);
  return state_->fetches;
}

int64_t ShardMapCache::moved() const {
  MutexLock lock(&state_->mu);
  return state_->moved;
}

uint64_t ShardMapCache::WatchPrimary(int group, uint64_t generation, int primary, std::function<void()> moved) {
  MutexLock lock(&state_->mu);
  const uint64_t id = state_->next_watch++;
  // Not checked against the map here: `moved` must not run on the caller's thread before its
  // try is sent. A map that moved already is seen at the next install or fetch.
  state_->watches.emplace(id, State::Watch{group, generation, primary, absl::Now() + options_.watch_after,
                                           std::move(moved)});
  return id;
}

void ShardMapCache::Unwatch(uint64_t id) {
  MutexLock lock(&state_->mu);
  state_->watches.erase(id);
}

bool ShardMapCache::Install(const ps::ShardMap& map) { return state_->Install(map); }

bool ShardMapCache::State::Install(const ps::ShardMap& fresh) {
  std::vector<Waiter> ready;
  std::vector<std::function<void()>> moved_now;
  {
    MutexLock lock(&mu);
    if (fresh.generation <= map.generation) return false;
    map = fresh;
    // Waiters whose group moved on are answered now, not at the next fetch.
    for (size_t i = 0; i < waiters.size();) {
      if (LookupLocked(waiters[i].group).generation > waiters[i].seen) {
        ready.push_back(std::move(waiters[i]));
        waiters[i] = std::move(waiters.back());
        waiters.pop_back();
      } else {
        ++i;
      }
    }
    moved_now = TakeMovedLocked();
  }
  for (Waiter& w : ready) w.then(absl::OkStatus());
  for (auto& m : moved_now) m();
  return true;
}

void ShardMapCache::AwaitNewer(int group, uint64_t seen, absl::Duration max_wait,
                               std::function<void(absl::Status)> then) {
  {
    MutexLock lock(&state_->mu);
    if (!state_->stopped) {
      if (state_->LookupLocked(group).generation <= seen) {
        state_->waiters.push_back({group, seen, absl::Now() + max_wait, std::move(then)});
        return;
      }
    } else {
      then = [then = std::move(then)](absl::Status) { then(absl::CancelledError("the shard map cache is shutting down")); };
    }
  }
  then(absl::OkStatus());
}

void ShardMapCache::FetchLoop() {
  while (true) {
    {
      MutexLock lock(&state_->mu);
      // Fetch while a call waits for a newer map, or once a watched try has waited long enough.
      while (true) {
        if (state_->stopped) return;
        if (!state_->waiters.empty()) break;
        const absl::Time now = absl::Now();
        const absl::Time due = state_->EarliestWatchLocked();
        if (due <= now) break;
        // Not a sleep as synchronisation: until the earliest watch is due, or a quarter of
        // `watch_after` (a watch made meanwhile is looked at then, well before the failover it
        // waits for can happen), or a waiter arrives. Watches do not wake this thread: every
        // routed try makes one, and nearly all end within milliseconds.
        state_->mu.AwaitWithTimeout(
            absl::Condition(
                +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->stopped || !s->waiters.empty(); },
                state_.get()),
            std::max(absl::Milliseconds(10), std::min(due - now, options_.watch_after / 4)));
      }
    }
    // Ask every PS that has no fetch outstanding; each map that answers is kept at once
    // (Install keeps the highest generation), so a silent PS, whose fetch waits out its
    // timeout, holds back neither the maps the others give nor the next round.
    std::vector<size_t> ask;
    {
      MutexLock lock(&state_->mu);
      ++state_->fetches;
      for (size_t i = 0; i < ps_.size(); ++i) {
        if (state_->fetching[i]) continue;
        state_->fetching[i] = true;
        ask.push_back(i);
      }
    }
    const int num_ps = static_cast<int>(ps_.size());
    for (size_t i : ask) {
      // The answer may come after this cache is gone: it holds the state, not the cache.
      ps_[i]->CallAsync("ps.GetShardMap", net::OutMessage(), net::RpcClient::CallOptions{options_.fetch_timeout, false},
                        [state = state_, i, num_ps](absl::StatusOr<net::InMessage> r) {
                          if (r.ok()) {
                            absl::StatusOr<ps::ShardMap> map;
                            absl::Status decoded = net::CatchDecodeErrors([&] {
                              map = ps::ShardMapFromWire(r->ResponseBody<wire::GetShardMapResponse>().getMap(), num_ps);
                              return map.status();
                            });
                            if (decoded.ok()) {
                              state->Install(*map);
                            } else {
                              spdlog::warn("ps.GetShardMap answered a malformed map: {}", decoded.ToString());
                            }
                          }
                          MutexLock lock(&state->mu);
                          state->fetching[i] = false;
                        });
    }
    // Waiters whose time is up try again with the map they have; watches whose group moved
    // (also before they were made: Install saw no change then) are told.
    std::vector<State::Waiter> due;
    std::vector<std::function<void()>> moved;
    {
      MutexLock lock(&state_->mu);
      const absl::Time now = absl::Now();
      auto& waiters = state_->waiters;
      for (size_t i = 0; i < waiters.size();) {
        if (waiters[i].until <= now) {
          due.push_back(std::move(waiters[i]));
          waiters[i] = std::move(waiters.back());
          waiters.pop_back();
        } else {
          ++i;
        }
      }
      moved = state_->TakeMovedLocked();
    }
    for (State::Waiter& w : due) w.then(absl::OkStatus());
    for (auto& m : moved) m();
    MutexLock lock(&state_->mu);
    // Not a sleep as synchronisation: the poll interval bounds how often a waiting client asks
    // every PS for its map; a destructor cuts it short.
    state_->mu.AwaitWithTimeout(
        absl::Condition(+[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->stopped; }, state_.get()),
        options_.poll_interval);
  }
}

}  // namespace asyncps
