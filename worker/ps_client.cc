#include "worker/ps_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/sync.h"
#include "core/status_macros.h"
#include "net/rpc_client.h"
#include "ps/ps.capnp.h"
#include "ps/ps_wire.h"
#include "worker/routed_call.h"

namespace asyncps {
namespace {

struct Outgoing {
  int ps;
  net::OutMessage message;
  // Optional: where this call's answer payloads are read to (RpcClient::CallOptions).
  net::PayloadPlacer place_payloads = nullptr;
};

using CallResults = std::vector<absl::StatusOr<net::InMessage>>;

// Sends every call at once; `on_all` gets the results, in call order, once the last one is
// in (on the loop thread of the client that answered last, or here when `calls` is empty).
// With `shard_map` (replicated shards), a call's `ps` is a shard group, sent to the group's
// primary and retried there across a failover (worker/routed_call.h).
void CallAllAsync(const std::vector<net::RpcClient*>& ps, const std::string& method,
                  std::vector<Outgoing> calls, const net::RpcClient::CallOptions& options,
                  std::function<void(CallResults)> on_all, ShardMapCache* shard_map = nullptr) {
  if (calls.empty()) {
    on_all(CallResults());
    return;
  }
  // The placement names the PS; one this client has no connection to is a directory that
  // does not fit the cluster (refused before anything is sent, never an index past ps_).
  for (const Outgoing& call : calls) {
    if (call.ps < 0 || static_cast<size_t>(call.ps) >= ps.size()) {
      CallResults refused;
      refused.emplace_back(absl::InvalidArgumentError(
          absl::StrCat(method, ": the placement names ps ", call.ps, ", but this client knows ", ps.size(), " PS")));
      on_all(std::move(refused));
      return;
    }
  }
  // Each answer fills its own slot; the release/acquire on `remaining` hands every slot to
  // whichever callback finishes last, so no lock is needed.
  struct State {
    explicit State(size_t n, std::function<void(CallResults)> f)
        : remaining(n), on_all(std::move(f)) {
      results.reserve(n);
      for (size_t i = 0; i < n; ++i) results.emplace_back(absl::Status(absl::StatusCode::kUnknown, ""));
    }
    std::atomic<size_t> remaining;
    CallResults results;
    std::function<void(CallResults)> on_all;
  };
  auto state = std::make_shared<State>(calls.size(), std::move(on_all));
  for (size_t i = 0; i < calls.size(); ++i) {
    auto answered = [state, i](int p, const std::string* address, absl::StatusOr<net::InMessage> r) {
      if (p >= 0) {
        if (!r.ok() && r.status().code() == absl::StatusCode::kNotFound) {
          // Every name sent came from the directory: the PS lost it.
          r = PsStateLostError(p, *address, r.status().message());
        } else if (!r.ok() && IsPsUnreachable(r.status())) {
          r = absl::Status(r.status().code(), absl::StrCat("ps ", p, " (", *address, "): ", r.status().message()));
        }
      }
      state->results[i] = std::move(r);
      if (state->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        state->on_all(std::move(state->results));
      }
    };
    const int p = calls[i].ps;
    net::RpcClient::CallOptions call_options = options;
    if (calls[i].place_payloads) call_options.place_payloads = std::move(calls[i].place_payloads);
    if (shard_map != nullptr) {
      CallGroupAsync(ps, *shard_map, method, p, std::move(calls[i].message), call_options, std::move(answered));
    } else {
      ps[p]->CallAsync(method, std::move(calls[i].message), call_options,
                       [p, address = &ps[p]->address(), answered = std::move(answered)](
                           absl::StatusOr<net::InMessage> r) mutable { answered(p, address, std::move(r)); });
    }
  }
}

// Sends every call at once and waits for all of them. Results are in call order.
CallResults CallAll(const std::vector<net::RpcClient*>& ps, const std::string& method,
                    std::vector<Outgoing> calls, const net::RpcClient::CallOptions& options,
                    ShardMapCache* shard_map = nullptr) {
  auto [future, complete] = PsFuture<CallResults>::Make();
  CallAllAsync(
      ps, method, std::move(calls), options,
      [complete = std::move(complete)](CallResults r) { complete(std::move(r)); }, shard_map);
  return *future.Get();
}

// The first error among `results`, preferring an unreachable PS (it explains the others).
absl::Status FirstError(const std::vector<absl::StatusOr<net::InMessage>>& results) {
  absl::Status first;
  for (const auto& r : results) {
    if (r.ok()) continue;
    if (IsPsUnreachable(r.status())) return r.status();
    if (first.ok()) first = r.status();
  }
  return first;
}

absl::StatusOr<std::vector<int64_t>> IdsOf(const Tensor& ids) {
  if (ids.rank() != 1 || (ids.dtype() != DType::kI64 && ids.dtype() != DType::kI32)) {
    return absl::InvalidArgumentError(absl::StrCat("row ids must be a 1-D i32/i64 tensor, got ",
                                                   ids.DebugString(0)));
  }
  std::vector<int64_t> out(static_cast<size_t>(ids.num_elements()));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = ids.dtype() == DType::kI64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
  }
  return out;
}

// Row ids grouped by the shard holding them: local ids and positions in the input.
struct RoutedRows {
  std::vector<int64_t> local_ids;
  std::vector<size_t> positions;
};

absl::StatusOr<std::vector<RoutedRows>> RouteIds(const VariablePlacement& p,
                                                 const std::vector<int64_t>& ids) {
  if (p.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", p.name, "' is a scalar; it has no rows"));
  }
  std::vector<RoutedRows> routed(p.shards.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int shard = p.ShardOfRow(ids[i]);
    if (shard < 0) {
      return absl::OutOfRangeError(
          absl::StrCat("row id ", ids[i], " out of range [0, ", p.shape[0], ") for '", p.name, "'"));
    }
    routed[shard].local_ids.push_back(ids[i] - p.shards[shard].row_begin);
    routed[shard].positions.push_back(i);
  }
  return routed;
}

// Copies rows `positions` of `value` into a new tensor (the one copy a scatter needs).
Tensor TakeRows(const Tensor& value, const std::vector<size_t>& positions) {
  Shape shape = value.shape();
  shape[0] = static_cast<int64_t>(positions.size());
  Tensor out(value.dtype(), shape);
  const size_t row_bytes = static_cast<size_t>(value.row_elements()) * DTypeSize(value.dtype());
  for (size_t i = 0; i < positions.size(); ++i) {
    std::memcpy(static_cast<char*>(out.raw_data()) + i * row_bytes,
                static_cast<const char*>(value.raw_data()) + positions[i] * row_bytes, row_bytes);
  }
  return out;
}

absl::Status CheckValue(const VariablePlacement& p, const Tensor& value, const Shape& expected) {
  if (value.dtype() != p.dtype || value.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", p.name, "' expects ", DTypeName(p.dtype),
                                                   ShapeString(expected), ", got ", DTypeName(value.dtype()),
                                                   ShapeString(value.shape())));
  }
  return absl::OkStatus();
}

// One piece of an update or gradient, addressed to one shard.
struct ShardPiece {
  std::string shard_name;
  Tensor value;
  std::optional<Tensor> local_ids;
  UpdateKind kind = UpdateKind::kAssign;
  int64_t base_version = -1;  // gradients: the version it was computed from; -1 unknown
  Compression compression;    // gradients: the form a dense f32 piece travels in
};

// Splits a dense or row update of `p` into per-shard pieces, grouped by PS. Validates first.
// Dense pieces get `compression` (gradients only); row pieces are never compressed.
absl::Status SplitUpdate(const VariablePlacement& p, UpdateKind kind, const Tensor& value,
                         const std::optional<Tensor>& ids, std::map<int, std::vector<ShardPiece>>* by_ps,
                         const Compression& compression = {}) {
  if (!ids.has_value()) {
    RETURN_IF_ERROR(CheckValue(p, value, p.shape));
    for (size_t s = 0; s < p.shards.size(); ++s) {
      Tensor part = value;
      if (p.sharded()) {
        ASSIGN_OR_RETURN(part, value.Slice(p.shards[s].row_begin, p.shards[s].row_end));
      }
      (*by_ps)[p.shards[s].ps].push_back({p.shards[s].name, part, std::nullopt, kind, -1, compression});
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> global, IdsOf(*ids));
  ASSIGN_OR_RETURN(std::vector<RoutedRows> routed, RouteIds(p, global));
  Shape expected = p.shape;
  expected[0] = static_cast<int64_t>(global.size());
  RETURN_IF_ERROR(CheckValue(p, value, expected));
  for (size_t s = 0; s < p.shards.size(); ++s) {
    if (routed[s].positions.empty()) continue;
    Tensor local_ids = Tensor::FromVector(routed[s].local_ids);
    // A plain variable takes the caller's rows as they are; shards get their own rows.
    Tensor rows = p.shards.size() == 1 ? value : TakeRows(value, routed[s].positions);
    (*by_ps)[p.shards[s].ps].push_back({p.shards[s].name, rows, local_ids, kind, -1, Compression{}});
  }
  return absl::OkStatus();
}

}  // namespace

namespace {
constexpr char kPsStateLostUrl[] = "type.asyncps/ps_state_lost";
constexpr absl::string_view kLostText = ") lost variables it held";

absl::Status MarkPsStateLost(absl::Status status, int ps) {
  status.SetPayload(kPsStateLostUrl, absl::Cord(std::to_string(ps)));
  return status;
}
}  // namespace

absl::Status PsStateLostError(int ps, const std::string& address, absl::string_view detail) {
  return MarkPsStateLost(absl::UnavailableError(absl::StrCat("ps ", ps, " (", address, kLostText,
                                                             " (it restarted empty): ", detail)),
                         ps);
}

absl::Status PsStateLostFromMessage(absl::string_view message) {
  // "... ps <N> (<address>) lost variables it held ...", possibly inside a longer message.
  int ps = -1;
  const size_t lost = message.find(kLostText);
  if (lost != absl::string_view::npos) {
    const size_t open = message.rfind(" (", lost);
    const size_t word = open == absl::string_view::npos ? open : message.rfind("ps ", open);
    if (word != absl::string_view::npos &&
        !absl::SimpleAtoi(message.substr(word + 3, open - word - 3), &ps)) {
      ps = -1;
    }
  }
  return MarkPsStateLost(absl::UnavailableError(message), ps);
}

bool IsPsStateLost(const absl::Status& status) { return status.GetPayload(kPsStateLostUrl).has_value(); }

int LostPs(const absl::Status& status) {
  auto payload = status.GetPayload(kPsStateLostUrl);
  int ps = -1;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &ps)) return -1;
  return ps;
}

bool IsPsUnreachable(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

// The closure ids this client gives its own writes, and those still in flight (the lowest is
// the watermark: every lower id has completed and is never sent again).
struct PsClient::OwnWrites {
  OwnWrites() : coordinator((RandomId() >> 2) | 1), next(coordinator) {}
  const uint64_t coordinator;
  Mutex mu;
  uint64_t next ABSL_GUARDED_BY(mu);
  std::set<uint64_t> in_flight ABSL_GUARDED_BY(mu);
};

PsClient::PsClient(std::vector<net::RpcClient*> ps, const VariableDirectory& directory, Options options)
    : ps_(std::move(ps)),
      directory_(directory),
      options_(options),
      own_writes_(options_.tag_own_writes && options_.shard_map != nullptr ? std::make_shared<OwnWrites>()
                                                                           : nullptr) {}

ps::UpdateTag PsClient::TagOwnWrite(const ps::UpdateTag& tag, PsCallback<void>* done) {
  if (tag.tagged() || own_writes_ == nullptr) return tag;
  ps::UpdateTag own;
  own.coordinator = own_writes_->coordinator;
  own.sequence = 1;
  {
    MutexLock lock(&own_writes_->mu);
    own.closure = own_writes_->next++;
    own_writes_->in_flight.insert(own.closure);
    own.watermark = *own_writes_->in_flight.begin();
  }
  *done = [writes = own_writes_, id = own.closure, done = std::move(*done)](absl::Status s) {
    {
      MutexLock lock(&writes->mu);
      writes->in_flight.erase(id);
    }
    done(std::move(s));
  };
  return own;
}

absl::StatusOr<std::vector<Tensor>> PsClient::Read(const std::vector<std::string>& names) {
  return ReadAsync(names).Get();
}

absl::Status PsClient::Update(const std::vector<VariableUpdate>& updates, const ps::UpdateTag& tag) {
  return UpdateAsync(updates, tag).Get();
}

absl::Status PsClient::PushGradients(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag) {
  return PushGradientsAsync(gradients, tag).Get();
}

absl::StatusOr<Tensor> PsClient::Gather(const std::string& name, const Tensor& ids) {
  return GatherAsync(name, ids).Get();
}

absl::Status PsClient::PushGradients(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag,
                                     const ShardVersions& base) {
  return PushGradientsAsync(gradients, tag, base).Get();
}

absl::StatusOr<VersionedValues> PsClient::ReadVersioned(const std::vector<std::string>& names) {
  return ReadVersionedAsync(names).Get();
}

absl::StatusOr<VersionedRows> PsClient::GatherVersioned(const std::string& name, const Tensor& ids) {
  return GatherVersionedAsync(name, ids).Get();
}

PsFuture<VersionedValues> PsClient::ReadVersionedAsync(const std::vector<std::string>& names) {
  auto [future, complete] = PsFuture<VersionedValues>::Make();
  ReadVersionedAsync(names, std::move(complete));
  return future;
}

PsFuture<VersionedRows> PsClient::GatherVersionedAsync(const std::string& name, const Tensor& ids) {
  auto [future, complete] = PsFuture<VersionedRows>::Make();
  GatherVersionedAsync(name, ids, std::move(complete));
  return future;
}

PsFuture<void> PsClient::PushGradientsAsync(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag,
                                            const ShardVersions& base) {
  auto [future, complete] = PsFuture<void>::Make();
  PushGradientsAsync(gradients, std::move(complete), tag, base);
  return future;
}

void PsClient::ReadAsync(const std::vector<std::string>& names, PsCallback<std::vector<Tensor>> done) {
  ReadVersionedAsync(names, [done = std::move(done)](absl::StatusOr<VersionedValues> r) {
    if (!r.ok()) return done(r.status());
    done(std::move(r->values));
  });
}

void PsClient::GatherAsync(const std::string& name, const Tensor& ids, PsCallback<Tensor> done) {
  GatherVersionedAsync(name, ids, [done = std::move(done)](absl::StatusOr<VersionedRows> r) {
    if (!r.ok()) return done(r.status());
    done(std::move(r->rows));
  });
}

void PsClient::PushGradientsAsync(const std::vector<GradientUpdate>& gradients, PsCallback<void> done,
                                  const ps::UpdateTag& tag) {
  PushGradientsAsync(gradients, std::move(done), tag, ShardVersions());
}

PsFuture<std::vector<Tensor>> PsClient::ReadAsync(const std::vector<std::string>& names) {
  auto [future, complete] = PsFuture<std::vector<Tensor>>::Make();
  ReadAsync(names, std::move(complete));
  return future;
}

PsFuture<void> PsClient::UpdateAsync(const std::vector<VariableUpdate>& updates, const ps::UpdateTag& tag) {
  auto [future, complete] = PsFuture<void>::Make();
  UpdateAsync(updates, std::move(complete), tag);
  return future;
}

PsFuture<void> PsClient::PushGradientsAsync(const std::vector<GradientUpdate>& gradients,
                                            const ps::UpdateTag& tag) {
  auto [future, complete] = PsFuture<void>::Make();
  PushGradientsAsync(gradients, std::move(complete), tag);
  return future;
}

PsFuture<Tensor> PsClient::GatherAsync(const std::string& name, const Tensor& ids) {
  auto [future, complete] = PsFuture<Tensor>::Make();
  GatherAsync(name, ids, std::move(complete));
  return future;
}

namespace {

// What ReadAsync needs to reassemble the answers: for each call, the (variable, shard) of
// each name it asked for.
struct ReadPlan {
  struct Ref {
    size_t variable;
    size_t shard;
  };
  std::vector<std::shared_ptr<const VariablePlacement>> placements;
  std::vector<std::vector<Ref>> refs;  // per call
  // Per variable: for a sharded one, its whole value, uninitialised; each shard's answer is
  // received straight into its rows (PlaceRead) or copied there (FinishRead), so no shard
  // is copied twice. Empty for a variable of one shard (its answer is the value).
  std::vector<Tensor> wholes;
  std::vector<char*> whole_data;  // per variable: wholes[v]'s bytes, written as answers arrive
  // The reads asked for f32 values in bf16 (PsClient::Options::transport): such answers are
  // widened into the values; without it a bf16 answer is refused.
  bool bf16 = false;
  // The reads asked for f32 values as int8 blocks (PsClient::Options::pull): decoded into the
  // values; without it such an answer is refused.
  bool int8 = false;
  // ReadRequest.valuesAs (and readAfterAs) for this plan.
  uint8_t values_as() const { return int8 ? kInt8BlockWireCode : bf16 ? kBf16WireCode : 0; }
  // Whether variable `v` is read into its whole value (a plan without wholes concatenates).
  bool InPlace(size_t v) const { return v < wholes.size() && wholes[v].num_bytes() > 0; }
  // Where shard `shard` of sharded variable `variable` belongs in its whole value.
  char* ShardData(const Ref& ref) const {
    const VariablePlacement& p = *placements[ref.variable];
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    const size_t row_bytes = rows > 0 ? wholes[ref.variable].num_bytes() / static_cast<size_t>(rows) : 0;
    return whole_data[ref.variable] + static_cast<size_t>(p.shards[ref.shard].row_begin) * row_bytes;
  }
};

// The whole value a sharded variable is read into, uninitialised: every byte is one shard's,
// and the value is handed out only once every shard is in (FinishRead).
Tensor UninitializedWhole(const VariablePlacement& p, BlockPool& pool) {
  const size_t bytes = static_cast<size_t>(NumElements(p.shape)) * DTypeSize(p.dtype);
  std::shared_ptr<void> block = pool.AllocateUninitialized(bytes);
  void* data = block.get();
  return Tensor::View(p.dtype, p.shape, std::move(block), data);
}

// Adds `p` to the variables `plan` reads (a sharded one whole, into a block of `pool`).
void AddRead(ReadPlan& plan, std::shared_ptr<const VariablePlacement> p, BlockPool& pool) {
  plan.wholes.push_back(p->shards.size() > 1 ? UninitializedWhole(*p, pool) : Tensor());
  plan.whole_data.push_back(static_cast<char*>(plan.wholes.back().raw_data()));
  plan.placements.push_back(std::move(p));
}

// The values a read's answer carries: ps.Read's, or those of a ps.PushGradients with readAfter
// (issue 23), which has the same TensorRefs and versions under other field names.
capnp::List<wire::TensorRef>::Reader AnsweredValues(wire::ReadResponse::Reader body) { return body.getTensors(); }
capnp::List<wire::TensorRef>::Reader AnsweredValues(wire::UpdateResponse::Reader body) { return body.getValues(); }
template <typename Response>
constexpr const char* AnsweringMethod() {
  return std::is_same_v<Response, wire::ReadResponse> ? "ps.Read" : "ps.PushGradients";
}

// Call `c` of `plan`'s answer (a `Response`) is read, payload by payload, straight into the
// rows of the whole values its shards belong to, where the answer describes a shard as the
// placement does (anything else lands in the frame's own block, and FinishRead refuses or
// copies it).
template <typename Response>
net::PayloadPlacer PlaceRead(std::shared_ptr<const ReadPlan> plan, size_t c) {
  return [plan = std::move(plan), c](const net::InMessage& header) {
    net::PayloadPlacement placement;
    auto tensors = AnsweredValues(header.ResponseBody<Response>());
    const std::vector<ReadPlan::Ref>& refs = plan->refs[c];
    if (tensors.size() != refs.size()) return placement;
    for (unsigned i = 0; i < tensors.size(); ++i) {
      const ReadPlan::Ref& ref = refs[i];
      if (!plan->InPlace(ref.variable)) continue;  // unsharded: the answer is the value
      const VariablePlacement& p = *plan->placements[ref.variable];
      auto tensor = tensors[i];
      const uint32_t payload = tensor.getPayload();
      absl::StatusOr<DType> dtype = DTypeFromWire(tensor.getDtype());
      if (payload >= header.num_payloads() || !dtype.ok() || *dtype != p.dtype ||
          net::GetShape(tensor.getShape()) != p.ShardShape(ref.shard)) {
        continue;
      }
      if (placement.destinations.size() <= payload) placement.destinations.resize(payload + 1);
      const Shape shard_shape = p.ShardShape(ref.shard);
      placement.destinations[payload] = {plan->ShardData(ref),
                                         static_cast<size_t>(NumElements(shard_shape)) * DTypeSize(p.dtype)};
    }
    placement.owner = plan;
    return placement;
  };
}

// Gives every call of `plan` that reads a sharded variable its placer (PlaceRead).
template <typename Response>
void PlaceReads(const std::shared_ptr<const ReadPlan>& plan, std::vector<Outgoing>& calls) {
  for (size_t c = 0; c < calls.size(); ++c) {
    const std::vector<ReadPlan::Ref>& refs = plan->refs[c];
    if (std::any_of(refs.begin(), refs.end(), [&](const ReadPlan::Ref& ref) { return plan->InPlace(ref.variable); })) {
      calls[c].place_payloads = PlaceRead<Response>(plan, c);
    }
  }
}

// The one reassembly of a read's answers (ps.Read's ReadResponse, or the values a
// ps.PushGradients with readAfter answered in its UpdateResponse): every answered shard is
// checked against the placement (another count, shape or dtype is Internal, never a value),
// sharded variables come whole (received in place or copied there), and the versions are
// collected. A call with no refs (a PS only pushed to) is skipped. With `unanswered` (the
// fused push-and-read), a call that was asked for values and answered none (a PS older than
// readAfter) sets it and nothing is returned; without it, that is the wrong count.
template <typename Response>
absl::StatusOr<VersionedValues> FinishRead(const ReadPlan& plan, const CallResults& results,
                                           bool* unanswered = nullptr) {
  if (unanswered != nullptr) *unanswered = false;
  RETURN_IF_ERROR(FirstError(results));
  constexpr const char* kMethod = AnsweringMethod<Response>();
  ShardVersions versions;
  const size_t num_variables = plan.placements.size();
  std::vector<std::vector<Tensor>> shards(num_variables);
  for (size_t v = 0; v < num_variables; ++v) shards[v].resize(plan.placements[v]->shards.size());
  for (size_t c = 0; c < results.size(); ++c) {
    if (plan.refs[c].empty()) continue;
    bool none = false;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      auto body = results[c]->ResponseBody<Response>();
      auto tensors = AnsweredValues(body);
      if (tensors.size() == 0 && unanswered != nullptr) {
        none = true;
        return absl::OkStatus();
      }
      if (tensors.size() != plan.refs[c].size()) {
        return absl::InternalError(absl::StrCat(kMethod, " answered the wrong count of values"));
      }
      // Absent from a PS older than versions: its shards stay unversioned (pushed unchecked).
      auto shard_versions = body.getVersions();
      const bool has_versions = shard_versions.size() == tensors.size();
      for (unsigned i = 0; i < tensors.size(); ++i) {
        const ReadPlan::Ref& ref = plan.refs[c][i];
        const VariablePlacement& p = *plan.placements[ref.variable];
        const Shape expected = p.ShardShape(ref.shard);
        if (net::InMessage::IsBf16(tensors[i])) {
          // Asked for in bf16 (a PS that predates it answers f32, read below as usual): widened
          // straight into the whole value, or into a value of its own.
          ASSIGN_OR_RETURN(net::InMessage::Bf16View bf16, results[c]->Bf16At(tensors[i]));
          if (!plan.bf16 || p.dtype != DType::kF32 || bf16.shape != expected) {
            return absl::InternalError(absl::StrCat(kMethod, " answered bf16", ShapeString(bf16.shape), " for '",
                                                    p.shards[ref.shard].name, "', which is ", DTypeName(p.dtype),
                                                    ShapeString(expected), plan.bf16 ? "" : " (asked for as it is)"));
          }
          if (plan.InPlace(ref.variable)) {
            WidenFromBf16(bf16.data, reinterpret_cast<float*>(plan.ShardData(ref)), bf16.count);
          } else {
            ASSIGN_OR_RETURN(shards[ref.variable][ref.shard], results[c]->WidenedTensorAt(tensors[i]));
          }
          if (has_versions) versions[p.shards[ref.shard].name] = shard_versions[i];
          continue;
        }
        if (net::InMessage::IsCompressed(tensors[i])) {
          // Asked for as int8 blocks: decoded (its size checked against the shard's shape
          // first) into a value of its own, then copied into the whole value when sharded.
          if (!plan.int8 || p.dtype != DType::kF32 || tensors[i].getDtype() != kInt8BlockWireCode) {
            return absl::InternalError(absl::StrCat(kMethod, " answered a compressed value for '",
                                                    p.shards[ref.shard].name, "', which is ", DTypeName(p.dtype),
                                                    plan.int8 ? "" : " (asked for as it is)"));
          }
          absl::StatusOr<Tensor> decoded = results[c]->DecodeCompressedAt(tensors[i], expected);
          if (!decoded.ok()) return absl::InternalError(absl::StrCat(kMethod, ": ", decoded.status().message()));
          if (plan.InPlace(ref.variable)) {
            if (decoded->num_bytes() > 0) std::memcpy(plan.ShardData(ref), decoded->raw_data(), decoded->num_bytes());
          } else {
            shards[ref.variable][ref.shard] = *std::move(decoded);
          }
          if (has_versions) versions[p.shards[ref.shard].name] = shard_versions[i];
          continue;
        }
        ASSIGN_OR_RETURN(Tensor shard, results[c]->TensorAt(tensors[i]));
        // The answer becomes the caller's value as it is (or is concatenated): a PS answering
        // another shape or dtype than the placement's is refused, not handed on.
        if (shard.dtype() != p.dtype || shard.shape() != expected) {
          return absl::InternalError(absl::StrCat(kMethod, " answered ", DTypeName(shard.dtype()),
                                                  ShapeString(shard.shape()), " for '", p.shards[ref.shard].name,
                                                  "', which is ", DTypeName(p.dtype), ShapeString(expected)));
        }
        if (plan.InPlace(ref.variable)) {
          // Received in place unless the placement did not take (e.g. the payload was shared).
          char* into = plan.ShardData(ref);
          if (shard.raw_data() != into && shard.num_bytes() > 0) std::memcpy(into, shard.raw_data(), shard.num_bytes());
        } else {
          shards[ref.variable][ref.shard] = std::move(shard);
        }
        if (has_versions) versions[p.shards[ref.shard].name] = shard_versions[i];
      }
      return absl::OkStatus();
    }));
    if (none) {
      *unanswered = true;
      return VersionedValues();
    }
  }
  VersionedValues out;
  out.values.reserve(num_variables);
  for (size_t v = 0; v < num_variables; ++v) {
    if (plan.InPlace(v)) {
      out.values.push_back(plan.wholes[v]);  // every shard's rows are in it now
    } else if (shards[v].size() == 1) {
      out.values.push_back(std::move(shards[v][0]));  // zero-copy view of the response
    } else {
      ASSIGN_OR_RETURN(Tensor whole, Concat(shards[v]));  // sharded, but empty
      out.values.push_back(std::move(whole));
    }
  }
  out.versions = std::move(versions);
  return out;
}

// A compressed gradient piece in flight (error feedback; worker/gradient_residuals.h): what
// settles the shard's residual once its PS answers.
struct Feedback {
  std::string shard;
  uint8_t code = 0;       // kBf16WireCode, kInt8BlockWireCode or kTopKWireCode
  Tensor payload;         // the encoded bytes sent (u8)
  std::vector<float> taken;     // r, the residual the push took (empty: none)
  std::vector<float> residual;  // g + r - C(g + r)
};
using CallFeedback = std::vector<std::vector<Feedback>>;  // per call

// Encodes dense f32 gradient `piece` as its compression says, with the shard's residual of
// `residuals` added first, into `message` (described in `ref`). False, with nothing added, for
// a piece that travels exactly (kNone, not f32, rows, empty, or too large for u32 indices).
bool AddCompressed(const ShardPiece& piece, GradientResiduals& residuals, net::OutMessage& message,
                   wire::TensorRef::Builder ref, std::vector<Feedback>* feedback) {
  if (!piece.compression.lossy() || piece.local_ids || piece.value.dtype() != DType::kF32) return false;
  const size_t n = static_cast<size_t>(piece.value.num_elements());
  if (n == 0 || n > std::numeric_limits<uint32_t>::max()) return false;
  Feedback f;
  f.shard = piece.shard_name;
  // r stays as it is (given back bit for bit for a push that is not applied); the new residual
  // g + r - C(g + r) is written into a buffer of its own.
  std::optional<std::vector<float>> held = residuals.Take(piece.shard_name, n);
  f.residual = residuals.Buffer(n);
  const float* g = piece.value.data<float>();
  const float* r = held ? held->data() : nullptr;
  const size_t bytes = EncodedBytes(piece.compression, n);
  std::shared_ptr<void> block = AllocateAlignedUninitialized(std::max<size_t>(1, bytes));
  auto* out = static_cast<uint8_t*>(block.get());
  if (piece.compression.kind == CompressionKind::kInt8) {
    f.code = kInt8BlockWireCode;
    EncodeInt8WithFeedback(g, r, n, out, f.residual.data());  // one pass: r + g, encode, residual
  } else {
    float* sum = f.residual.data();
    if (r != nullptr) {
      for (size_t i = 0; i < n; ++i) sum[i] = r[i] + g[i];
    } else {
      std::memcpy(sum, g, n * sizeof(float));
    }
    switch (piece.compression.kind) {
      case CompressionKind::kBf16:
        f.code = kBf16WireCode;
        EncodeBf16InPlace(sum, n, reinterpret_cast<uint16_t*>(out));
        break;
      case CompressionKind::kTopK:
        f.code = kTopKWireCode;
        EncodeTopKInPlace(sum, n, piece.compression.topk_fraction, out);
        break;
      case CompressionKind::kInt8:
      case CompressionKind::kNone:
        break;
    }
  }
  if (held) f.taken = *std::move(held);
  f.payload = Tensor::View(DType::kU8, {static_cast<int64_t>(bytes)}, std::move(block), out);
  message.AddEncoded(f.code, f.payload, piece.value.shape(), ref);
  feedback->push_back(std::move(f));
  return true;
}

// Settles the residuals of compressed pieces once their calls are answered: a call its PS
// applied leaves g + r - C(g + r); one the PS skipped as applied before (a re-run closure), or
// one that failed, gives back r alone (this attempt's gradient dropped, as an uncompressed
// re-run drops it).
void SettleFeedback(GradientResiduals& residuals, CallFeedback& feedback, const CallResults& results) {
  for (size_t c = 0; c < feedback.size(); ++c) {
    if (feedback[c].empty()) continue;
    bool applied = false;
    if (results.size() == feedback.size() && results[c].ok()) {
      const net::InMessage& answer = *results[c];
      applied = net::CatchDecodeErrors([&]() -> absl::Status {
                  if (answer.ResponseBody<wire::UpdateResponse>().getAlreadyApplied() != 0) {
                    return absl::AlreadyExistsError("applied before");
                  }
                  return absl::OkStatus();
                }).ok();
    }
    for (Feedback& f : feedback[c]) {
      if (applied) {
        residuals.Give(f.shard, std::move(f.residual));
        residuals.Recycle(std::move(f.taken));
      } else {
        if (!f.taken.empty()) residuals.Give(f.shard, std::move(f.taken));
        residuals.Recycle(std::move(f.residual));
      }
    }
  }
}

// One request per PS carrying `by_ps`'s pieces as an update or gradient list, tagged with
// `tag` when it is (exactly-once updates; see ps::UpdateDedup).
// With `bf16` (gradients only: PsClient::Options::transport), f32 values travel narrowed to bf16.
// With `residuals` (gradients only), pieces with a lossy compression travel compressed, and
// `feedback` gets, per call, what settles their residuals (SettleFeedback).
template <typename Request>
std::vector<Outgoing> PieceCalls(std::map<int, std::vector<ShardPiece>>& by_ps, const ps::UpdateTag& tag,
                                 bool bf16 = false, GradientResiduals* residuals = nullptr,
                                 CallFeedback* feedback = nullptr) {
  std::vector<Outgoing> calls;
  calls.reserve(by_ps.size());
  if (feedback != nullptr) feedback->assign(by_ps.size(), {});
  for (auto& entry : by_ps) {
    // Not a structured binding: clang 14 cannot capture one in the lambda below.
    const int ps = entry.first;
    std::vector<ShardPiece>& pieces = entry.second;
    Outgoing call{ps, net::OutMessage()};
    auto body = call.message.InitRequestBody<Request>();
    if (tag.tagged()) ps::UpdateTagToWire(tag, body.initTag());
    auto list = [&] {
      if constexpr (std::is_same_v<Request, wire::UpdateRequest>) {
        return body.initUpdates(static_cast<unsigned>(pieces.size()));
      } else {
        return body.initGradients(static_cast<unsigned>(pieces.size()));
      }
    }();
    for (unsigned i = 0; i < pieces.size(); ++i) {
      list[i].setName(pieces[i].shard_name);
      if constexpr (std::is_same_v<Request, wire::UpdateRequest>) {
        list[i].setKind(ps::UpdateKindToWire(pieces[i].kind));
      }
      if (residuals == nullptr ||
          !AddCompressed(pieces[i], *residuals, call.message, list[i].initValue(), &(*feedback)[calls.size()])) {
        call.message.AddTensorAs(pieces[i].value, bf16, list[i].initValue());
      }
      if constexpr (std::is_same_v<Request, wire::PushGradientsRequest>) {
        if (pieces[i].base_version >= 0) list[i].setBaseVersion(pieces[i].base_version);
      }
      if (pieces[i].local_ids) {
        list[i].setHasIds(true);
        call.message.AddTensor(*pieces[i].local_ids, list[i].initIds());
      }
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

// What GatherAsync needs to put the answered rows in id order.
struct GatherPlan {
  std::shared_ptr<const VariablePlacement> placement;
  size_t num_ids = 0;
  std::vector<RoutedRows> routed;
  std::vector<std::vector<size_t>> call_shards;  // per call: the shards it asked for
};

absl::StatusOr<VersionedRows> FinishGather(const GatherPlan& plan, CallResults results) {
  RETURN_IF_ERROR(FirstError(results));
  ShardVersions versions;
  const VariablePlacement& p = *plan.placement;
  Shape out_shape = p.shape;
  out_shape[0] = static_cast<int64_t>(plan.num_ids);
  const size_t row_bytes =
      static_cast<size_t>(NumElements(p.shape) / std::max<int64_t>(1, p.shape[0])) * DTypeSize(p.dtype);
  std::optional<Tensor> single;
  Tensor out;
  const bool one_shard = plan.call_shards.size() == 1 && plan.call_shards[0].size() == 1;
  if (!one_shard) out = Tensor(p.dtype, out_shape);
  for (size_t c = 0; c < results.size(); ++c) {
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      auto body = results[c]->ResponseBody<wire::GatherResponse>();
      auto values = body.getValues();
      if (values.size() != plan.call_shards[c].size()) {
        return absl::InternalError("ps.Gather answered the wrong count");
      }
      auto shard_versions = body.getVersions();
      for (unsigned i = 0; i < values.size(); ++i) {
        if (shard_versions.size() == values.size()) {
          versions[p.shards[plan.call_shards[c][i]].name] = shard_versions[i];
        }
        ASSIGN_OR_RETURN(Tensor rows, results[c]->TensorAt(values[i]));
        const RoutedRows& r = plan.routed[plan.call_shards[c][i]];
        // The whole shape, not only the row count: rows narrower than the variable's would
        // make the copy below read past the answer's payload.
        Shape expected = p.shape;
        expected[0] = static_cast<int64_t>(r.positions.size());
        if (rows.dtype() != p.dtype || rows.shape() != expected) {
          return absl::InternalError(absl::StrCat("ps.Gather answered ", DTypeName(rows.dtype()),
                                                  ShapeString(rows.shape()), " for '",
                                                  p.shards[plan.call_shards[c][i]].name, "', expected ",
                                                  DTypeName(p.dtype), ShapeString(expected)));
        }
        if (one_shard) {
          single = rows;  // rows already in id order: zero-copy
          continue;
        }
        for (size_t k = 0; k < r.positions.size(); ++k) {
          std::memcpy(static_cast<char*>(out.raw_data()) + r.positions[k] * row_bytes,
                      static_cast<const char*>(rows.raw_data()) + k * row_bytes, row_bytes);
        }
      }
      return absl::OkStatus();
    }));
  }
  if (one_shard) return VersionedRows{*std::move(single), std::move(versions)};
  return VersionedRows{std::move(out), std::move(versions)};
}

}  // namespace

void PsClient::ReadVersionedAsync(const std::vector<std::string>& names, PsCallback<VersionedValues> done) {
  auto plan = std::make_shared<ReadPlan>();
  plan->bf16 = bf16_transport() || options_.pull.kind == CompressionKind::kBf16;
  plan->int8 = options_.pull.kind == CompressionKind::kInt8;
  std::map<int, std::vector<std::pair<const std::string*, ReadPlan::Ref>>> by_ps;
  for (size_t v = 0; v < names.size(); ++v) {
    absl::StatusOr<std::shared_ptr<const VariablePlacement>> p = directory_.Find(names[v]);
    if (!p.ok()) return done(p.status());
    for (size_t s = 0; s < (*p)->shards.size(); ++s) {
      by_ps[(*p)->shards[s].ps].push_back({&(*p)->shards[s].name, ReadPlan::Ref{v, s}});
    }
    AddRead(*plan, *std::move(p), whole_values_);
  }
  std::vector<Outgoing> calls;
  calls.reserve(by_ps.size());
  for (const auto& [ps, items] : by_ps) {
    Outgoing call{ps, net::OutMessage()};
    auto body = call.message.InitRequestBody<wire::ReadRequest>();
    body.setValuesAs(plan->values_as());
    auto list = body.initNames(static_cast<unsigned>(items.size()));
    std::vector<ReadPlan::Ref> refs;
    refs.reserve(items.size());
    for (unsigned i = 0; i < items.size(); ++i) {
      list.set(i, *items[i].first);
      refs.push_back(items[i].second);
    }
    calls.push_back(std::move(call));
    plan->refs.push_back(std::move(refs));
  }
  PlaceReads<wire::ReadResponse>(plan, calls);
  CallAllAsync(ps_, "ps.Read", std::move(calls), {options_.timeout, std::nullopt},
               [plan = std::move(plan), done = std::move(done)](CallResults results) {
                 done(FinishRead<wire::ReadResponse>(*plan, results));
               },
               options_.shard_map);
}

void PsClient::UpdateAsync(const std::vector<VariableUpdate>& updates, PsCallback<void> done,
                           const ps::UpdateTag& given_tag) {
  const ps::UpdateTag tag = TagOwnWrite(given_tag, &done);
  std::map<int, std::vector<ShardPiece>> by_ps;
  for (const VariableUpdate& u : updates) {
    absl::StatusOr<std::shared_ptr<const VariablePlacement>> p = directory_.Find(u.name);
    if (!p.ok()) return done(p.status());
    if (absl::Status s = SplitUpdate(**p, u.kind, u.value, u.ids, &by_ps); !s.ok()) return done(s);
  }
  CallAllAsync(ps_, "ps.Update", PieceCalls<wire::UpdateRequest>(by_ps, tag), {options_.timeout, std::nullopt},
               [done = std::move(done)](CallResults results) { done(FirstError(results)); }, options_.shard_map);
}

void PsClient::PushGradientsAsync(const std::vector<GradientUpdate>& gradients, PsCallback<void> done,
                                  const ps::UpdateTag& given_tag, const ShardVersions& base) {
  const ps::UpdateTag tag = TagOwnWrite(given_tag, &done);
  std::map<int, std::vector<ShardPiece>> by_ps;
  for (const GradientUpdate& g : gradients) {
    absl::StatusOr<std::shared_ptr<const VariablePlacement>> p = directory_.Find(g.name);
    if (!p.ok()) return done(p.status());
    if (absl::Status s = SplitUpdate(**p, UpdateKind::kAssign, g.value, g.ids, &by_ps,
                                     g.compression.value_or(options_.compression));
        !s.ok()) {
      return done(s);
    }
  }
  if (!base.empty()) {
    for (auto& [ps, pieces] : by_ps) {
      for (ShardPiece& piece : pieces) {
        if (auto it = base.find(piece.shard_name); it != base.end()) piece.base_version = it->second;
      }
    }
  }
  auto feedback = std::make_shared<CallFeedback>();
  std::vector<Outgoing> calls =
      PieceCalls<wire::PushGradientsRequest>(by_ps, tag, bf16_transport(), residuals_.get(), feedback.get());
  CallAllAsync(ps_, "ps.PushGradients", std::move(calls), {options_.timeout, std::nullopt},
               [residuals = residuals_, feedback, done = std::move(done)](CallResults results) {
                 SettleFeedback(*residuals, *feedback, results);
                 done(FirstError(results));
               },
               options_.shard_map);
}

void PsClient::GatherVersionedAsync(const std::string& name, const Tensor& ids, PsCallback<VersionedRows> done) {
  auto plan = std::make_shared<GatherPlan>();
  absl::StatusOr<std::shared_ptr<const VariablePlacement>> found = directory_.Find(name);
  if (!found.ok()) return done(found.status());
  plan->placement = *std::move(found);
  const VariablePlacement& p = *plan->placement;
  absl::StatusOr<std::vector<int64_t>> global = IdsOf(ids);
  if (!global.ok()) return done(global.status());
  absl::StatusOr<std::vector<RoutedRows>> routed = RouteIds(p, *global);
  if (!routed.ok()) return done(routed.status());
  plan->num_ids = global->size();
  plan->routed = *std::move(routed);
  std::map<int, std::vector<size_t>> shards_by_ps;
  for (size_t s = 0; s < p.shards.size(); ++s) {
    if (!plan->routed[s].positions.empty()) shards_by_ps[p.shards[s].ps].push_back(s);
  }
  std::vector<Outgoing> calls;
  for (auto& [ps, shards] : shards_by_ps) {
    Outgoing call{ps, net::OutMessage()};
    auto list = call.message.InitRequestBody<wire::GatherRequest>().initLookups(static_cast<unsigned>(shards.size()));
    for (unsigned i = 0; i < shards.size(); ++i) {
      list[i].setName(p.shards[shards[i]].name);
      call.message.AddTensor(Tensor::FromVector(plan->routed[shards[i]].local_ids), list[i].initIds());
    }
    calls.push_back(std::move(call));
    plan->call_shards.push_back(std::move(shards));
  }
  CallAllAsync(ps_, "ps.Gather", std::move(calls), {options_.timeout, std::nullopt},
               [plan = std::move(plan), done = std::move(done)](CallResults results) {
                 done(FinishGather(*plan, std::move(results)));
               },
               options_.shard_map);
}

// ---- The fused push-and-read (issue 23): PushGradientsAndReadAsync ---------------------------

PsFuture<VersionedValues> PsClient::PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                                              const std::vector<std::string>& read_after,
                                                              const ps::UpdateTag& tag, const ShardVersions& base) {
  auto [future, complete] = PsFuture<VersionedValues>::Make();
  PushGradientsAndReadAsync(gradients, read_after, [](absl::Status) {}, std::move(complete), tag, base);
  return future;
}

void PsClient::PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                         const std::vector<std::string>& read_after, PsCallback<void> pushed,
                                         PsCallback<VersionedValues> done, const ps::UpdateTag& given_tag,
                                         const ShardVersions& base) {
  // An untagged write tagged here (Options::tag_own_writes) leaves the in-flight set once the
  // push is answered, as PushGradientsAsync's does.
  const ps::UpdateTag tag = TagOwnWrite(given_tag, &pushed);
  auto fail = [&](absl::Status status) {
    pushed(status);
    done(std::move(status));
  };
  std::map<int, std::vector<ShardPiece>> by_ps;
  for (const GradientUpdate& g : gradients) {
    absl::StatusOr<std::shared_ptr<const VariablePlacement>> p = directory_.Find(g.name);
    if (!p.ok()) return fail(p.status());
    if (absl::Status s = SplitUpdate(**p, UpdateKind::kAssign, g.value, g.ids, &by_ps,
                                     g.compression.value_or(options_.compression));
        !s.ok()) {
      return fail(s);
    }
  }
  for (auto& [ps, pieces] : by_ps) {
    for (ShardPiece& piece : pieces) {
      if (auto it = base.find(piece.shard_name); it != base.end()) piece.base_version = it->second;
    }
  }
  // The reads ride on the pushes: a PS holding only read shards gets a push of no gradients.
  auto plan = std::make_shared<ReadPlan>();
  plan->bf16 = bf16_transport() || options_.pull.kind == CompressionKind::kBf16;
  plan->int8 = options_.pull.kind == CompressionKind::kInt8;
  std::map<int, std::vector<std::pair<const std::string*, ReadPlan::Ref>>> reads_by_ps;
  for (size_t v = 0; v < read_after.size(); ++v) {
    absl::StatusOr<std::shared_ptr<const VariablePlacement>> p = directory_.Find(read_after[v]);
    if (!p.ok()) return fail(p.status());
    for (size_t s = 0; s < (*p)->shards.size(); ++s) {
      reads_by_ps[(*p)->shards[s].ps].push_back({&(*p)->shards[s].name, ReadPlan::Ref{v, s}});
      by_ps.try_emplace((*p)->shards[s].ps);
    }
    AddRead(*plan, *std::move(p), whole_values_);
  }
  auto feedback = std::make_shared<CallFeedback>();
  std::vector<Outgoing> calls =
      PieceCalls<wire::PushGradientsRequest>(by_ps, tag, bf16_transport(), residuals_.get(), feedback.get());
  std::vector<int> call_ps;
  call_ps.reserve(calls.size());
  for (Outgoing& call : calls) {
    call_ps.push_back(call.ps);
    std::vector<ReadPlan::Ref> refs;
    if (auto it = reads_by_ps.find(call.ps); it != reads_by_ps.end()) {
      auto body = call.message.envelope().getRequest().getBody().getAs<wire::PushGradientsRequest>();
      body.setReadAfterAs(plan->values_as());
      auto names = body.initReadAfter(static_cast<unsigned>(it->second.size()));
      refs.reserve(it->second.size());
      for (unsigned i = 0; i < it->second.size(); ++i) {
        names.set(i, *it->second[i].first);
        refs.push_back(it->second[i].second);
      }
    }
    plan->refs.push_back(std::move(refs));
  }
  // The values are received like a read's: sharded variables straight into their whole values.
  PlaceReads<wire::UpdateResponse>(plan, calls);
  CallAllAsync(
      ps_, "ps.PushGradients", std::move(calls), {options_.timeout, std::nullopt},
      [connections = ps_, shard_map = options_.shard_map, timeout = options_.timeout, call_ps = std::move(call_ps),
       plan = std::move(plan), residuals = residuals_, feedback, pushed = std::move(pushed),
       done = std::move(done)](CallResults results) mutable {
        SettleFeedback(*residuals, *feedback, results);
        absl::Status status = FirstError(results);
        pushed(status);
        if (!status.ok()) return done(std::move(status));
        bool unanswered = false;
        absl::StatusOr<VersionedValues> values = FinishRead<wire::UpdateResponse>(*plan, results, &unanswered);
        if (!unanswered) return done(std::move(values));
        // A PS that predates readAfter applied the push and answered no values: every read is
        // sent again as a ps.Read, now that the push is applied (what the caller would have
        // done without the fused call), and reassembled as ReadVersionedAsync does.
        // Read into the same whole values: no shard of them has been handed out.
        auto reread = std::make_shared<ReadPlan>();
        reread->placements = plan->placements;
        reread->wholes = plan->wholes;
        reread->whole_data = plan->whole_data;
        reread->bf16 = plan->bf16;
        reread->int8 = plan->int8;
        std::vector<Outgoing> reads;
        for (size_t c = 0; c < plan->refs.size(); ++c) {
          if (plan->refs[c].empty()) continue;
          Outgoing call{call_ps[c], net::OutMessage()};
          auto read = call.message.InitRequestBody<wire::ReadRequest>();
          read.setValuesAs(reread->values_as());
          auto names = read.initNames(static_cast<unsigned>(plan->refs[c].size()));
          for (unsigned i = 0; i < plan->refs[c].size(); ++i) {
            const ReadPlan::Ref& ref = plan->refs[c][i];
            names.set(i, plan->placements[ref.variable]->shards[ref.shard].name);
          }
          reads.push_back(std::move(call));
          reread->refs.push_back(plan->refs[c]);
        }
        PlaceReads<wire::ReadResponse>(reread, reads);
        CallAllAsync(
            connections, "ps.Read", std::move(reads), {timeout, std::nullopt},
            [reread, done = std::move(done)](CallResults r) { done(FinishRead<wire::ReadResponse>(*reread, r)); },
            shard_map);
      },
      options_.shard_map);
}

absl::Status PsClient::CreateVariable(const VariablePlacement& placement, const ps::InitializerSpec& init,
                                      const OptimizerConfig* optimizer, bool wait_for_ready) {
  std::vector<Outgoing> calls;
  for (size_t s = 0; s < placement.shards.size(); ++s) {
    const ShardPlacement& shard = placement.shards[s];
    Outgoing call{shard.ps, net::OutMessage()};
    auto req = call.message.InitRequestBody<wire::CreateVariableRequest>();
    req.setName(shard.name);
    req.setDtype(static_cast<uint8_t>(placement.dtype));
    const Shape shape = placement.ShardShape(s);
    net::SetShape(req.initShape(static_cast<unsigned>(shape.size())), shape);
    ps::InitializerSpec spec = init;
    spec.full_shape = placement.shape;
    spec.row_offset = shard.row_begin;
    if (spec.kind == "tensor" && placement.sharded()) {
      ASSIGN_OR_RETURN(spec.tensor, init.tensor.Slice(shard.row_begin, shard.row_end));
    }
    ps::InitializerToWire(spec, call.message, req.initInitializer());
    ps::OptimizerToWire(optimizer, req.initOptimizer());
    calls.push_back(std::move(call));
  }
  return FirstError(CallAll(ps_, "ps.CreateVariable", std::move(calls), {options_.timeout, wait_for_ready},
                            options_.shard_map));
}

absl::Status PsClient::Health(int ps, absl::Duration timeout, bool wait_for_ready) {
  std::vector<Outgoing> calls;
  calls.push_back({ps, net::OutMessage()});
  return FirstError(CallAll(ps_, "ps.Health", std::move(calls), {timeout, wait_for_ready}));
}

}  // namespace asyncps
