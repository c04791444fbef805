#include "worker/shard_map_cache.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "core/sync.h"
#include "net/rpc_client.h"
#include "ps/ps.capnp.h"
#include "worker/ps_future.h"

namespace asyncps {

struct ShardMapCache::State {
  struct Waiter {
    int group;
    uint64_t seen;
    absl::Time until;
    std::function<void(absl::Status)> then;
  };
  mutable Mutex mu;
  ps::ShardMap map ABSL_GUARDED_BY(mu);
  std::vector<Waiter> waiters ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
  int64_t fetches ABSL_GUARDED_BY(mu) = 0;

  ShardMapCache::Route LookupLocked(int group) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const ps::GroupEntry* g = map.Find(static_cast<uint32_t>(group));
    if (g == nullptr) return {};
    return {g->primary, g->generation};
  }
};

ShardMapCache::ShardMapCache(std::vector<net::RpcClient*> ps, Options options)
    : ps_(std::move(ps)), options_(options), state_(std::make_shared<State>()) {
  fetcher_ = std::thread([this] { FetchLoop(); });
}

ShardMapCache::~ShardMapCache() {
  std::vector<State::Waiter> waiters;
  {
    MutexLock lock(&state_->mu);
    state_->stopped = true;
    waiters.swap(state_->waiters);
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

bool ShardMapCache::Install(const ps::ShardMap& map) {
  std::vector<State::Waiter> ready;
  {
    MutexLock lock(&state_->mu);
    if (map.generation <= state_->map.generation) return false;
    state_->map = map;
    // Waiters whose group moved on are answered now, not at the next fetch.
    auto& waiters = state_->waiters;
    for (size_t i = 0; i < waiters.size();) {
      if (state_->LookupLocked(waiters[i].group).generation > waiters[i].seen) {
        ready.push_back(std::move(waiters[i]));
        waiters[i] = std::move(waiters.back());
        waiters.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (State::Waiter& w : ready) w.then(absl::OkStatus());
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
      state_->mu.Await(absl::Condition(
          +[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->stopped || !s->waiters.empty(); }, state_.get()));
      if (state_->stopped) return;
    }
    // Ask every PS at once; keep the highest generation that answers.
    struct Fetched {
      Mutex mu;
      ps::ShardMap best ABSL_GUARDED_BY(mu);
    };
    auto fetched = std::make_shared<Fetched>();
    std::vector<PsFuture<void>> answers;
    for (size_t i = 0; i < ps_.size(); ++i) {
      auto [future, complete] = PsFuture<void>::Make();
      answers.push_back(std::move(future));
      const int num_ps = static_cast<int>(ps_.size());
      ps_[i]->CallAsync("ps.GetShardMap", net::OutMessage(), net::RpcClient::CallOptions{options_.fetch_timeout, false},
                        [fetched, num_ps, complete = std::move(complete)](absl::StatusOr<net::InMessage> r) {
                          if (r.ok()) {
                            absl::StatusOr<ps::ShardMap> map;
                            absl::Status decoded = net::CatchDecodeErrors([&] {
                              map = ps::ShardMapFromWire(r->ResponseBody<wire::GetShardMapResponse>().getMap(), num_ps);
                              return map.status();
                            });
                            if (decoded.ok()) {
                              MutexLock lock(&fetched->mu);
                              if (map->generation > fetched->best.generation) fetched->best = *std::move(map);
                            } else {
                              spdlog::warn("ps.GetShardMap answered a malformed map: {}", decoded.ToString());
                            }
                          }
                          complete(absl::OkStatus());
                        });
    }
    for (auto& a : answers) (void)a.Get();
    ps::ShardMap best;
    {
      MutexLock lock(&fetched->mu);
      best = std::move(fetched->best);
    }
    {
      MutexLock lock(&state_->mu);
      ++state_->fetches;
    }
    Install(best);
    // Waiters whose time is up try again with the map they have.
    std::vector<State::Waiter> due;
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
    }
    for (State::Waiter& w : due) w.then(absl::OkStatus());
    MutexLock lock(&state_->mu);
    // Not a sleep as synchronisation: the poll interval bounds how often a waiting client asks
    // every PS for its map; a destructor cuts it short.
    state_->mu.AwaitWithTimeout(
        absl::Condition(+[](State* s) ABSL_NO_THREAD_SAFETY_ANALYSIS { return s->stopped; }, state_.get()),
        options_.poll_interval);
  }
}

}  // namespace asyncps
