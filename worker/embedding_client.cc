#include "worker/embedding_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "net/message.h"
#include "net/rpc_client.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/embedding/key_partition.h"
#include "worker/ps_client.h"
#include "worker/routed_call.h"

namespace asyncps {
namespace {

struct Outgoing {
  int ps;
  net::OutMessage message;
};

using CallResults = std::vector<absl::StatusOr<net::InMessage>>;

// Sends every call at once; `on_all` gets the results in call order once the last is in.
// (PsClient's fan-out, without its variable-directory reading of NotFound: a table name comes
// from the caller, so NotFound stays the caller's unknown table.)
// With `shard_map`, a call's `ps` is a shard group, sent to its primary (routed_call.h).
void CallAllAsync(const std::vector<net::RpcClient*>& ps, const char* method,
                  std::vector<Outgoing> calls, const net::RpcClient::CallOptions& options,
                  std::function<void(CallResults)> on_all, ShardMapCache* shard_map) {
  if (calls.empty()) {
    on_all(CallResults());
    return;
  }
  struct State {
    State(size_t n, std::function<void(CallResults)> f) : remaining(n), on_all(std::move(f)) {
      for (size_t i = 0; i < n; ++i) results.emplace_back(absl::UnknownError(""));
    }
    std::atomic<size_t> remaining;
    CallResults results;
    std::function<void(CallResults)> on_all;
  };
  auto state = std::make_shared<State>(calls.size(), std::move(on_all));
  for (size_t i = 0; i < calls.size(); ++i) {
    const int p = calls[i].ps;
    if (shard_map != nullptr) {
      CallGroupAsync(ps, *shard_map, method, p, std::move(calls[i].message), options,
                     [state, i, p, method](int at, const std::string* address, absl::StatusOr<net::InMessage> r) {
                       if (!r.ok()) {
                         r = absl::Status(r.status().code(),
                                          absl::StrCat(method, " for shard group ", p, " on ps ", at, " (",
                                                       address != nullptr ? *address : "", "): ", r.status().message()));
                       }
                       state->results[i] = std::move(r);
                       if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1)
                         state->on_all(std::move(state->results));
                     });
      continue;
    }
    ps[static_cast<size_t>(p)]->CallAsync(
        method, std::move(calls[i].message), options,
        [state, i, p, method,
         address = &ps[static_cast<size_t>(p)]->address()](absl::StatusOr<net::InMessage> r) {
          if (!r.ok()) {
            r = absl::Status(r.status().code(), absl::StrCat(method, " on ps ", p, " (", *address,
                                                             "): ", r.status().message()));
          }
          state->results[i] = std::move(r);
          if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1)
            state->on_all(std::move(state->results));
        });
  }
}

// The first error, preferring an unreachable PS (it explains the others).
absl::Status FirstError(const CallResults& results) {
  absl::Status first;
  for (const auto& r : results) {
    if (r.ok()) continue;
    if (IsPsUnreachable(r.status())) return r.status();
    if (first.ok()) first = r.status();
  }
  return first;
}

absl::Status CheckKeys(const std::string& table, const Tensor& keys) {
  if (table.empty()) return absl::InvalidArgumentError("embedding table name is empty");
  if (keys.dtype() != DType::kI64 || keys.rank() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("keys of embedding table '", table, "' must be i64 [n], got ",
                     DTypeName(keys.dtype()), ShapeString(keys.shape())));
  }
  return absl::OkStatus();
}

// A call's keys, deduplicated and routed: each PS's distinct keys, and where each of the
// caller's positions finds its row.
struct Routing {
  std::vector<std::vector<int64_t>> keys_by_ps;  // indexed by PS
  struct Slot {
    int ps;
    uint32_t index;  // in keys_by_ps[ps]
  };
  std::vector<Slot> slots;  // per caller position
};

Routing Route(const Tensor& keys, int num_ps) {
  Routing r;
  r.keys_by_ps.resize(static_cast<size_t>(num_ps));
  const absl::Span<const int64_t> k = keys.flat<int64_t>();
  r.slots.reserve(k.size());
  absl::flat_hash_map<int64_t, Routing::Slot> seen;
  seen.reserve(k.size());
  for (int64_t key : k) {
    auto [it, inserted] = seen.try_emplace(key, Routing::Slot{0, 0});
    if (inserted) {
      const int p = ps::PsForKey(key, num_ps);
      std::vector<int64_t>& list = r.keys_by_ps[static_cast<size_t>(p)];
      it->second = {p, static_cast<uint32_t>(list.size())};
      list.push_back(key);
    }
    r.slots.push_back(it->second);
  }
  return r;
}

bool IsUnknownTable(const absl::StatusOr<net::InMessage>& r) {
  return !r.ok() && r.status().code() == absl::StatusCode::kNotFound &&
         r.status().message().find("no embedding table") != absl::string_view::npos;
}

// A PS answering "no embedding table" for a table another PS holds lost it (it restarted
// empty): that answer becomes PsStateLostError, which the coordinator's PS recovery acts on.
// Whether another PS holds it: one answered this call, else PS `probe` is asked
// (ps.EmbeddingStats) before `then` runs. With one PS nothing tells a lost table from an
// unknown one: NotFound stays.
void MarkLostTables(const std::vector<net::RpcClient*>& clients, const std::string& table, std::vector<int> call_ps,
                    CallResults results, absl::Duration timeout, std::function<void(CallResults)> then) {
  bool unknown = false, answered = false;
  for (const auto& r : results) {
    unknown = unknown || IsUnknownTable(r);
    answered = answered || r.ok();
  }
  if (!unknown || clients.size() < 2) return then(std::move(results));
  auto mark = [clients, call_ps](CallResults results) {
    for (size_t c = 0; c < results.size(); ++c) {
      if (!IsUnknownTable(results[c])) continue;
      const int p = call_ps[c];
      results[c] = PsStateLostError(p, clients[static_cast<size_t>(p)]->address(), results[c].status().message());
    }
    return results;
  };
  if (answered) return then(mark(std::move(results)));
  // Ask a PS this call did not reach, or any other than the first that said NotFound.
  int probe = -1;
  for (int q = 0; q < static_cast<int>(clients.size()) && probe < 0; ++q) {
    if (std::find(call_ps.begin(), call_ps.end(), q) == call_ps.end()) probe = q;
  }
  if (probe < 0) probe = call_ps.empty() ? 0 : (call_ps[0] + 1) % static_cast<int>(clients.size());
  net::OutMessage stats;
  const std::string name = table;
  ps::BuildEmbeddingStatsRequest({&name, 1}, stats);
  auto held = std::make_shared<CallResults>(std::move(results));
  clients[static_cast<size_t>(probe)]->CallAsync(
      ps::kEmbeddingStatsMethod, std::move(stats), {timeout, std::nullopt},
      [held, mark, then = std::move(then)](absl::StatusOr<net::InMessage> r) mutable {
        then(r.ok() ? mark(std::move(*held)) : std::move(*held));
      });
}

// Fills `out` (f32 [n, dim], allocated here once dim is known) from the per-PS answers.
absl::StatusOr<Tensor> FinishLookup(const std::string& table, const Routing& routing,
                                    const std::vector<int>& call_ps, CallResults results) {
  RETURN_IF_ERROR(FirstError(results));
  std::vector<Tensor> rows_by_ps(routing.keys_by_ps.size());
  int64_t dim = -1;
  for (size_t c = 0; c < results.size(); ++c) {
    const int p = call_ps[c];
    ASSIGN_OR_RETURN(std::vector<Tensor> values, ps::ReadEmbeddingLookupResponse(*results[c], 1));
    const Tensor& rows = values[0];
    const int64_t n = static_cast<int64_t>(routing.keys_by_ps[static_cast<size_t>(p)].size());
    if (rows.dtype() != DType::kF32 || rows.rank() != 2 || rows.dim(0) != n ||
        (dim >= 0 && rows.dim(1) != dim)) {
      return absl::InternalError(absl::StrCat("ps.EmbeddingLookup of '", table, "' on ps ", p,
                                              " answered ", DTypeName(rows.dtype()),
                                              ShapeString(rows.shape()), " for ", n, " keys",
                                              dim >= 0 ? absl::StrCat(" of dim ", dim) : ""));
    }
    dim = rows.dim(1);
    rows_by_ps[static_cast<size_t>(p)] = rows;
  }
  Tensor out(DType::kF32, {static_cast<int64_t>(routing.slots.size()), dim});
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < routing.slots.size(); ++i) {
    const Routing::Slot& s = routing.slots[i];
    std::memcpy(dst + i * row_bytes,
                static_cast<const char*>(rows_by_ps[static_cast<size_t>(s.ps)].raw_data()) +
                    s.index * row_bytes,
                row_bytes);
  }
  return out;
}

}  // namespace

EmbeddingClient::EmbeddingClient(std::vector<net::RpcClient*> ps, absl::Duration timeout, ShardMapCache* shard_map)
    : ps_(std::move(ps)), timeout_(timeout), shard_map_(shard_map) {}

absl::Status EmbeddingClient::CreateTable(const ps::EmbeddingTableConfig& config,
                                          bool wait_for_ready) {
  RETURN_IF_ERROR(ps::ValidateEmbeddingTableConfig(config));
  std::vector<Outgoing> calls;
  for (int p = 0; p < num_ps(); ++p) {
    calls.push_back({p, net::OutMessage()});
    ps::BuildCreateEmbeddingTableRequest(config, calls.back().message);
  }
  auto [future, complete] = PsFuture<CallResults>::Make();
  CallAllAsync(ps_, ps::kCreateEmbeddingTableMethod, std::move(calls), {timeout_, wait_for_ready},
               [complete = std::move(complete)](CallResults r) { complete(std::move(r)); }, shard_map_);
  return FirstError(*future.Get());
}

void EmbeddingClient::LookupAsync(const std::string& table, const Tensor& keys, bool train,
                                  PsCallback<Tensor> done) {
  if (absl::Status s = CheckKeys(table, keys); !s.ok()) return done(s);
  if (keys.num_elements() == 0) return done(Tensor(DType::kF32, {0, 0}));
  if (ps_.empty())
    return done(absl::FailedPreconditionError("no parameter servers to look embeddings up on"));
  auto routing = std::make_shared<Routing>(Route(keys, num_ps()));
  std::vector<Outgoing> calls;
  std::vector<int> call_ps;
  for (int p = 0; p < num_ps(); ++p) {
    std::vector<int64_t>& list = routing->keys_by_ps[static_cast<size_t>(p)];
    if (list.empty()) continue;
    calls.push_back({p, net::OutMessage()});
    const ps::EmbeddingKeys lookup{table, Tensor::FromVector(list)};
    ps::BuildEmbeddingLookupRequest({&lookup, 1}, train, calls.back().message);
    call_ps.push_back(p);
  }
  CallAllAsync(
      ps_, ps::kEmbeddingLookupMethod, std::move(calls), {timeout_, std::nullopt},
      [clients = ps_, timeout = timeout_, table, routing, call_ps = std::move(call_ps),
       done = std::move(done)](CallResults results) mutable {
        std::vector<int> probed = call_ps;
        MarkLostTables(clients, table, std::move(probed), std::move(results), timeout,
                       [table, routing, call_ps, done = std::move(done)](CallResults results) {
                         absl::StatusOr<Tensor> out;
                         absl::Status decoded = net::CatchDecodeErrors([&]() -> absl::Status {
                           out = FinishLookup(table, *routing, call_ps, std::move(results));
                           return absl::OkStatus();
                         });
                         done(decoded.ok() ? std::move(out) : absl::StatusOr<Tensor>(decoded));
                       });
      },
      shard_map_);
}

void EmbeddingClient::PushAsync(const std::string& table, const Tensor& keys,
                                const Tensor& gradients, PsCallback<void> done,
                                const ps::UpdateTag& tag) {
  if (absl::Status s = CheckKeys(table, keys); !s.ok()) return done(s);
  if (gradients.dtype() != DType::kF32 || gradients.rank() != 2 ||
      gradients.dim(0) != keys.dim(0)) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "gradients of embedding table '", table, "' must be f32 [", keys.dim(0), ", dim], got ",
        DTypeName(gradients.dtype()), ShapeString(gradients.shape()))));
  }
  if (keys.num_elements() == 0) return done(absl::OkStatus());
  if (ps_.empty())
    return done(absl::FailedPreconditionError("no parameter servers to push embeddings to"));
  const Routing routing = Route(keys, num_ps());
  const int64_t dim = gradients.dim(1);
  const size_t row = static_cast<size_t>(dim);
  std::vector<Tensor> sums(ps_.size());
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (!routing.keys_by_ps[p].empty())
      sums[p] = Tensor(DType::kF32, {static_cast<int64_t>(routing.keys_by_ps[p].size()), dim});
  }
  const float* g = gradients.data<float>();
  for (size_t i = 0; i < routing.slots.size(); ++i) {
    const Routing::Slot& s = routing.slots[i];
    float* dst = sums[static_cast<size_t>(s.ps)].data<float>() + s.index * row;
    const float* src = g + i * row;
    for (size_t d = 0; d < row; ++d) dst[d] += src[d];
  }
  std::vector<Outgoing> calls;
  std::vector<int> call_ps;
  for (size_t p = 0; p < ps_.size(); ++p) {
    if (routing.keys_by_ps[p].empty()) continue;
    call_ps.push_back(static_cast<int>(p));
    calls.push_back({static_cast<int>(p), net::OutMessage()});
    const ps::EmbeddingGradients push{table, Tensor::FromVector(routing.keys_by_ps[p]), sums[p]};
    ps::BuildEmbeddingPushRequest({&push, 1}, tag, calls.back().message);
  }
  CallAllAsync(ps_, ps::kEmbeddingPushMethod, std::move(calls), {timeout_, std::nullopt},
               [clients = ps_, timeout = timeout_, table, call_ps = std::move(call_ps),
                done = std::move(done)](CallResults results) mutable {
                 MarkLostTables(clients, table, std::move(call_ps), std::move(results), timeout,
                                [done = std::move(done)](CallResults results) { done(FirstError(results)); });
               },
               shard_map_);
}

absl::StatusOr<Tensor> EmbeddingClient::Lookup(const std::string& table, const Tensor& keys,
                                               bool train) {
  return LookupAsync(table, keys, train).Get();
}

absl::Status EmbeddingClient::Push(const std::string& table, const Tensor& keys,
                                   const Tensor& gradients, const ps::UpdateTag& tag) {
  return PushAsync(table, keys, gradients, tag).Get();
}

PsFuture<Tensor> EmbeddingClient::LookupAsync(const std::string& table, const Tensor& keys,
                                              bool train) {
  auto [future, complete] = PsFuture<Tensor>::Make();
  LookupAsync(table, keys, train, std::move(complete));
  return future;
}

PsFuture<void> EmbeddingClient::PushAsync(const std::string& table, const Tensor& keys,
                                          const Tensor& gradients, const ps::UpdateTag& tag) {
  auto [future, complete] = PsFuture<void>::Make();
  PushAsync(table, keys, gradients, std::move(complete), tag);
  return future;
}

}  // namespace asyncps
