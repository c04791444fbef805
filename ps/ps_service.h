#ifndef ASYNCPS_PS_PS_SERVICE_H_
#define ASYNCPS_PS_PS_SERVICE_H_

#include <cstdint>

#include "core/process_options.h"
#include "net/method_table.h"
#include "ps/ps.capnp.h"
#include "ps/ps_metrics.h"
#include "ps/update_dedup.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

// The "ps.*" RPC methods over a VariableStore:
//   ps.CreateVariable  CreateVariableRequest -> CreateVariableResponse (idempotent by name)
//   ps.Read            ReadRequest -> ReadResponse (several variables, one consistent copy each)
//   ps.Update          UpdateRequest -> UpdateResponse (dense or by row; all validated before
//                      any applies)
//   ps.PushGradients   PushGradientsRequest -> UpdateResponse (through each variable's optimizer)
//   ps.Gather          GatherRequest -> GatherResponse (rows by id)
//   ps.ListVariables   Empty -> ListVariablesResponse
//   ps.Health          Empty -> Empty (answered on the I/O thread)
// A request that fails validation (unknown variable, wrong dtype or shape, out-of-range id)
// changes nothing and returns the error.
//
// Limits on what one client can make the PS do, each checked before anything is allocated
// or applied, each refusal counted in PsMetrics:
//   * variable bytes: the store's cap (VariableStore::max_bytes); a create past it is
//     ResourceExhausted naming the variable and the cap;
//   * response bytes: the tensors of one ps.Read / ps.Gather answer (or the entries of a
//     ps.ListVariables answer) at most max_response_bytes, else ResourceExhausted;
//   * non-finite gradients: a gradient holding NaN or Inf is InvalidArgument naming the
//     variable, and nothing of the push is applied, unless allow_nonfinite_gradients;
//   * creation: an invalid shape or initializer (see Initialize) is InvalidArgument naming
//     the variable; an optimizer on a non-f32 variable likewise.
// Integer arithmetic of ps.Update wraps (see Variable::Update).
//
// Exactly once: a ps.Update or ps.PushGradients tagged by a closure (UpdateTag) applies each
// variable's part at most once per (closure, call), and a repeat — or a zombie attempt of a
// finished closure — is answered OK with UpdateResponse.alreadyApplied counting what was
// skipped (see UpdateDedup; its window is capped at dedup_max_entries keys). Untagged
// requests (the chief's own updates) are applied every time.
//
// `store` (and `options.metrics`) must outlive the server the service is registered with.
class CopyExtensionState;

class PsService {
 public:
  // The state one copy of a shard group holds: its variables and its window of applied
  // closure updates. Neither is owned.
  struct ShardState {
    VariableStore* store = nullptr;
    UpdateDedup* dedup = nullptr;
    // What the copy holds beside its variables (a replicated group copy's embedding tables,
    // ps/replication/copy_extension.h); PsService never uses it. Not owned; may be null.
    CopyExtensionState* extension = nullptr;
  };

  struct Options {
    uint64_t max_response_bytes = kDefaultPsMaxResponseBytes;
    bool allow_nonfinite_gradients = false;
    // ps.Update and ps.PushGradients of at most net::kSmallRequestPayloadBytes always run on
    // the I/O thread (net::Dispatch::kInlineIfSmall). Off by default, when they run there only
    // while the PS is otherwise quiet (net::Dispatch::kAdaptive): ps_bench "small push"
    // measured always-inline (with the PS and the client pinned to different CPUs of a
    // loaded 2-core VM) at ~0.25x the pooled throughput with 8-64 in flight.
    bool inline_small_updates = false;
    uint64_t dedup_max_entries = UpdateDedup::kDefaultMaxEntries;
    PsMetrics* metrics = nullptr;  // optional; not owned
  };

  // How ps.Gather is dispatched (here and by ReplicatedPs): on the I/O thread when its ids
  // are small (at most net::kSmallRequestPayloadBytes, 2048 i64 ids) and the pool is idle,
  // else on the pool. A gather of a few thousand rows costs less than the pool hand-off it
  // would otherwise wait for; its answer is bounded by those ids x the row width.
  static constexpr net::Dispatch kGatherDispatch = net::Dispatch::kAdaptive;

  explicit PsService(VariableStore& store) : PsService(store, Options()) {}
  PsService(VariableStore& store, Options options)
      : store_(store), options_(options), dedup_(DedupOptions(options)) {}

  void RegisterWith(net::MethodTable& server);

  // The window of applied closure updates (for tests and metrics).
  const UpdateDedup& dedup() const { return dedup_; }
  // The store and window the methods registered by RegisterWith serve.
  ShardState default_state() { return {&store_, &dedup_}; }
  const Options& options() const { return options_; }

  // The methods' work against another copy (ps/replication/): `body` is the request, read
  // from `frame`, whose payloads its TensorRefs index. Callable from any thread; the caller
  // orders writes to one copy where the order matters (replication applies them one at a
  // time, in sequence order).
  absl::Status CreateVariableIn(ShardState state, const net::InMessage& frame,
                                wire::CreateVariableRequest::Reader body, net::OutMessage* response);
  absl::Status ReadIn(ShardState state, wire::ReadRequest::Reader body, net::OutMessage* response);
  absl::Status UpdateIn(ShardState state, const net::InMessage& frame, wire::UpdateRequest::Reader body,
                        net::OutMessage* response);
  // `answer_read_after`: the request's readAfter variables are answered (UpdateResponse.values)
  // once the push is applied; the copy that answers the client passes true, a backup replaying
  // the write false. Either way they are checked before anything is applied (an unknown name or
  // an answer over max_response_bytes refuses the whole push), so every copy decides alike.
  absl::Status PushGradientsIn(ShardState state, const net::InMessage& frame,
                               wire::PushGradientsRequest::Reader body, net::OutMessage* response,
                               bool answer_read_after = false);
  absl::Status GatherIn(ShardState state, const net::InMessage& frame, wire::GatherRequest::Reader body,
                        net::OutMessage* response);
  absl::Status ListVariablesIn(ShardState state, net::OutMessage* response);

 private:
  absl::Status CreateVariable(const net::InMessage& request, net::OutMessage* response);
  absl::Status Read(const net::InMessage& request, net::OutMessage* response);
  absl::Status Update(const net::InMessage& request, net::OutMessage* response);
  absl::Status PushGradients(const net::InMessage& request, net::OutMessage* response);
  absl::Status Gather(const net::InMessage& request, net::OutMessage* response);
  absl::Status ListVariables(const net::InMessage& request, net::OutMessage* response);

  // Counts `reason`, makes sure `status` is logged, and returns it.
  absl::Status Reject(RejectReason reason, absl::Status status) const;
  absl::Status CheckResponseBytes(const char* method, uint64_t bytes) const;
  static UpdateDedup::Options DedupOptions(const Options& options);

  VariableStore& store_;
  const Options options_;
  UpdateDedup dedup_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PS_SERVICE_H_
