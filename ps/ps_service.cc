#include "ps/ps_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/compression.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "ps/ps.capnp.h"
#include "ps/shard_initializer.h"
#include "ps/ps_wire.h"
#include "ps/staleness_gate.h"

namespace asyncps::ps {

void PsService::RegisterWith(net::MethodTable& server) {
  auto bind = [this](absl::Status (PsService::*method)(const net::InMessage&, net::OutMessage*)) {
    return [this, method](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
      return (this->*method)(req, resp);
    };
  };
  server.Register<wire::CreateVariableRequest>("ps.CreateVariable", net::PsCallers(), bind(&PsService::CreateVariable));
  server.Register<wire::ReadRequest>("ps.Read", net::PsReaders(), bind(&PsService::Read));
  // An update's work is proportional to what it carries, so a small one runs on the I/O
  // thread when nothing else is going on (kAdaptive), or always (Options::inline_small_updates).
  const net::Dispatch updates =
      options_.inline_small_updates ? net::Dispatch::kInlineIfSmall : net::Dispatch::kAdaptive;
  server.Register<wire::UpdateRequest>("ps.Update", net::PsCallers(), bind(&PsService::Update), updates);
  server.Register<wire::PushGradientsRequest>("ps.PushGradients", net::PsCallers(), bind(&PsService::PushGradients),
                                              updates);
  server.Register<wire::GatherRequest>("ps.Gather", net::PsReaders(), bind(&PsService::Gather), kGatherDispatch);
  server.Register<wire::Empty>("ps.ListVariables", net::PsReaders(), bind(&PsService::ListVariables));
  server.Register<wire::Empty>(
      "ps.Health", net::PsReaders(), [](const net::RequestContext&, const net::InMessage&, net::OutMessage*) { return absl::OkStatus(); },
      net::Dispatch::kInline);
}

namespace {

// `status` with the variable named in its message (clients create many variables at once and
// need to know which one failed).
absl::Status Named(const std::string& name, absl::Status status) {
  if (status.ok() || absl::StrContains(status.message(), absl::StrCat("'", name, "'"))) return status;
  return absl::Status(status.code(), absl::StrCat("variable '", name, "': ", status.message()));
}

// A tensor of an update or gradient for variable `name`, its error naming the variable.
absl::StatusOr<Tensor> TensorFor(const std::string& name, const net::InMessage& request, wire::TensorRef::Reader ref) {
  absl::StatusOr<Tensor> tensor = request.TensorAt(ref);
  if (!tensor.ok()) return Named(name, tensor.status());
  return tensor;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t out;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

// The form a read answers its f32 values in: ReadRequest.valuesAs and
// PushGradientsRequest.readAfterAs, 0 (each variable's own dtype), the bf16 wire code or the
// int8-blocks one (core/compression.h). Returned as the code.
absl::StatusOr<uint8_t> ValuesAs(uint8_t code, const char* field) {
  if (code == 0 || code == kBf16WireCode || code == kInt8BlockWireCode) return code;
  return absl::InvalidArgumentError(absl::StrCat(field, " ", code, " is none of 0 (each variable's dtype), ",
                                                 kBf16WireCode, " (bf16) and ", kInt8BlockWireCode, " (int8)"));
}

// Adds `value` to `response` in the form `as` (ValuesAs) when it is f32, as it is otherwise.
void AddValueAs(net::OutMessage* response, const Tensor& value, uint8_t as, wire::TensorRef::Builder ref) {
  if (as == kInt8BlockWireCode && value.dtype() == DType::kF32 && value.num_elements() > 0) {
    const size_t n = static_cast<size_t>(value.num_elements());
    const size_t bytes = Int8EncodedBytes(n);
    std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
    auto* out = static_cast<uint8_t*>(block.get());
    EncodeInt8(value.data<float>(), n, out);
    response->AddEncoded(kInt8BlockWireCode,
                         Tensor::View(DType::kU8, {static_cast<int64_t>(bytes)}, std::move(block), out),
                         value.shape(), ref);
    return;
  }
  response->AddTensorAs(value, as == kBf16WireCode, ref);
}

}  // namespace

UpdateDedup::Options PsService::DedupOptions(const Options& options) {
  UpdateDedup::Options o;
  o.max_entries = options.dedup_max_entries;
  o.metrics = options.metrics;
  return o;
}

absl::Status PsService::Reject(RejectReason reason, absl::Status status) const {
  if (options_.metrics != nullptr) options_.metrics->RecordRejected(reason);
  // The RPC server logs InvalidArgument itself; the rest would go unlogged.
  if (status.code() != absl::StatusCode::kInvalidArgument) spdlog::warn("refused: {}", status.ToString());
  return status;
}

absl::Status PsService::CheckResponseBytes(const char* method, uint64_t bytes) const {
  if (bytes <= options_.max_response_bytes) return absl::OkStatus();
  return Reject(RejectReason::kResponseBytes,
                absl::ResourceExhaustedError(absl::StrCat(
                    method, " would answer ", bytes, " bytes, over this parameter server's cap of ",
                    options_.max_response_bytes, " response bytes (--ps_max_response_bytes); ask for less at once")));
}

absl::Status PsService::CreateVariable(const net::InMessage& request, net::OutMessage* response) {
  return CreateVariableIn(default_state(), request, request.RequestBody<wire::CreateVariableRequest>(), response);
}

absl::Status PsService::CreateVariableIn(ShardState state, const net::InMessage& request,
                                         wire::CreateVariableRequest::Reader req, net::OutMessage* response) {
  VariableStore& store = *state.store;
  const std::string name = req.getName().cStr();
  if (name.empty()) return absl::InvalidArgumentError("variable name is empty");
  auto wire_dtype = DTypeFromWire(req.getDtype());
  RETURN_IF_ERROR(Named(name, wire_dtype.status()));
  const DType dtype = *wire_dtype;
  const Shape shape = net::GetShape(req.getShape());
  RETURN_IF_ERROR(Named(name, ValidateShape(shape, dtype)));
  auto optimizer_or = OptimizerFromWire(req.getOptimizer());
  RETURN_IF_ERROR(Named(name, optimizer_or.status()));
  std::unique_ptr<OptimizerConfig> optimizer = std::move(*optimizer_or);
  // Checked whether or not the variable exists: an idempotent create is answered OK only for a
  // request that could have created it.
  size_t num_slots = 0;
  if (optimizer != nullptr) {
    if (dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("variable '", name, "' is ", DTypeName(dtype),
                                                     "; server-side optimizers need f32 variables"));
    }
    auto opt = UpdateRule::Create(*optimizer);
    RETURN_IF_ERROR(Named(name, opt.status()));
    num_slots = (*opt)->slots().size();
  }

  bool created = false;
  auto existing = store.Find(name);
  if (existing.ok()) {
    // Idempotent create: skip building the initial value (it may be large).
    if ((*existing)->dtype() != dtype || (*existing)->shape() != shape) {
      return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' exists as ",
                                                   DTypeName((*existing)->dtype()),
                                                   ShapeString((*existing)->shape())));
    }
  } else {
    // Everything that can be checked is checked before the value and slots are allocated.
    auto reservation = store.Reserve(name, Variable::ChargedBytes(name, dtype, shape, num_slots));
    if (!reservation.ok()) return Reject(RejectReason::kVariableBytes, reservation.status());
    auto spec = InitializerFromWire(request, req.getInitializer());
    RETURN_IF_ERROR(Named(name, spec.status()));
    auto initial = Initialize(*spec, dtype, shape);
    RETURN_IF_ERROR(Named(name, initial.status()));
    ASSIGN_OR_RETURN(auto variable, Variable::Create(name, std::move(*initial), optimizer.get(), store.apply_pool()));
    ASSIGN_OR_RETURN(created, store.Insert(std::move(variable), std::move(*reservation)));
    if (options_.metrics != nullptr) {
      options_.metrics->SetVariableBytes(store.bytes());
      options_.metrics->SetVariables(store.List().size());
    }
  }
  response->InitResponseBody<wire::CreateVariableResponse>().setCreated(created);
  return absl::OkStatus();
}

absl::Status PsService::Read(const net::InMessage& request, net::OutMessage* response) {
  return ReadIn(default_state(), request.RequestBody<wire::ReadRequest>(), response);
}

absl::Status PsService::ReadIn(ShardState state, wire::ReadRequest::Reader body, net::OutMessage* response) {
  VariableStore& store = *state.store;
  ASSIGN_OR_RETURN(const uint8_t values_as, ValuesAs(body.getValuesAs(), "ps.Read valuesAs"));
  auto names = body.getNames();
  std::vector<std::shared_ptr<Variable>> variables;
  for (auto name : names) {
    ASSIGN_OR_RETURN(auto v, store.Find(name.cStr()));
    variables.push_back(std::move(v));
  }
  // The same variable may be named many times over: the total is what would be copied.
  uint64_t bytes = 0;
  for (const auto& v : variables) {
    bytes = SaturatingAdd(bytes, static_cast<uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype()));
  }
  RETURN_IF_ERROR(CheckResponseBytes("ps.Read", bytes));
  auto answer = response->InitResponseBody<wire::ReadResponse>();
  auto out = answer.initTensors(names.size());
  auto versions = answer.initVersions(names.size());
  for (unsigned i = 0; i < variables.size(); ++i) {
    int64_t version = 0;
    AddValueAs(response, variables[i]->ReadVersioned(&version), values_as, out[i]);
    versions.set(i, version);
  }
  return absl::OkStatus();
}

namespace {

// One validated update or gradient, ready to apply.
struct Prepared {
  std::shared_ptr<Variable> variable;
  UpdateKind kind = UpdateKind::kAssign;
  Tensor value;
  std::optional<Tensor> ids;
  std::optional<int64_t> base_version;  // gradients that name the version they were computed from
  // A row gradient, checked and its duplicates summed (Variable::PrepareRowGradients).
  std::unique_ptr<const RowGradientBatch> rows;
};

// Locks the bounded variables `admission` applies and checks the gradients' staleness
// (StalenessGate); a refusal is counted, not logged (under a tight bound it is routine).
absl::Status EnterGate(StalenessGate& gate, const std::vector<Prepared>& prepared,
                       const UpdateDedup::Admission& admission, PsMetrics* metrics) {
  std::vector<StalenessGate::Entry> entries;
  entries.reserve(prepared.size());
  for (size_t i = 0; i < prepared.size(); ++i) {
    entries.push_back({prepared[i].variable.get(), admission.apply(i), prepared[i].base_version});
  }
  absl::Status status = gate.Enter(entries);
  if (!status.ok() && metrics != nullptr) metrics->RecordRejected(RejectReason::kStaleGradient);
  return status;
}

// Which of `prepared` a request tagged by `tag` (absent: untagged) applies.
template <typename Reader>
absl::StatusOr<UpdateDedup::Admission> Admit(UpdateDedup& dedup, const Reader& request,
                                             const std::vector<Prepared>& prepared) {
  if (!request.hasTag()) return UpdateDedup::Admission();
  const UpdateTag tag = UpdateTagFromWire(request.getTag());
  if (!tag.tagged()) return UpdateDedup::Admission();
  std::vector<UpdateDedup::Target> targets;
  targets.reserve(prepared.size());
  for (const Prepared& p : prepared) targets.push_back({p.variable->name(), p.variable->restores()});
  return dedup.Admit(tag, targets);
}

// Rows an update wrote: its ids, or every row of a dense value (a scalar is one row).
uint64_t RowsOf(const Prepared& p) {
  if (p.ids) return static_cast<uint64_t>(p.ids->num_elements());
  return p.value.shape().empty() ? 1 : static_cast<uint64_t>(p.value.shape()[0]);
}

// Counts the rows of the updates `admission` applied (not those answered "already applied").
void CountRows(PsMetrics* metrics, const std::vector<Prepared>& prepared, const UpdateDedup::Admission& admission) {
  if (metrics == nullptr) return;
  uint64_t rows = 0;
  for (size_t i = 0; i < prepared.size(); ++i) rows += admission.apply(i) ? RowsOf(prepared[i]) : 0;
  metrics->AddRowsUpdated(rows);
}

}  // namespace

absl::Status PsService::Update(const net::InMessage& request, net::OutMessage* response) {
  return UpdateIn(default_state(), request, request.RequestBody<wire::UpdateRequest>(), response);
}

absl::Status PsService::UpdateIn(ShardState state, const net::InMessage& request, wire::UpdateRequest::Reader req,
                                 net::OutMessage* response) {
  VariableStore& store = *state.store;
  UpdateDedup& dedup = *state.dedup;
  auto updates = req.getUpdates();
  std::vector<Prepared> prepared;
  for (auto u : updates) {
    Prepared p;
    ASSIGN_OR_RETURN(p.variable, store.Find(u.getName().cStr()));
    ASSIGN_OR_RETURN(p.kind, UpdateKindFromWire(u.getKind()));
    ASSIGN_OR_RETURN(p.value, TensorFor(p.variable->name(), request, u.getValue()));
    if (u.getHasIds()) {
      ASSIGN_OR_RETURN(Tensor ids, TensorFor(p.variable->name(), request, u.getIds()));
      p.ids = std::move(ids);
    }
    // Includes the value-dependent checks (integer division by zero, bool bytes), so that a
    // batch whose later update fails them is rejected before any earlier one is applied.
    RETURN_IF_ERROR(p.variable->CheckUpdate(p.kind, p.ids ? &*p.ids : nullptr, p.value));
    prepared.push_back(std::move(p));
  }
  ASSIGN_OR_RETURN(UpdateDedup::Admission admission, Admit(dedup, req, prepared));
  // Writes to variables that bound staleness are ordered with their pushes' checks.
  StalenessGate gate;
  RETURN_IF_ERROR(EnterGate(gate, prepared, admission, options_.metrics));
  // Everything is valid, so each update below succeeds (it re-checks, finding nothing wrong).
  for (size_t i = 0; i < prepared.size(); ++i) {
    if (!admission.apply(i)) continue;
    const Prepared& p = prepared[i];
    RETURN_IF_ERROR(p.ids ? p.variable->UpdateRows(p.kind, *p.ids, p.value)
                          : p.variable->Update(p.kind, p.value));
  }
  admission.Commit();
  CountRows(options_.metrics, prepared, admission);
  response->InitResponseBody<wire::UpdateResponse>().setAlreadyApplied(admission.already_applied());
  return absl::OkStatus();
}

absl::Status PsService::PushGradients(const net::InMessage& request, net::OutMessage* response) {
  return PushGradientsIn(default_state(), request, request.RequestBody<wire::PushGradientsRequest>(), response,
                         /*answer_read_after=*/true);
}

absl::Status PsService::PushGradientsIn(ShardState state, const net::InMessage& request,
                                        wire::PushGradientsRequest::Reader req, net::OutMessage* response,
                                        bool answer_read_after) {
  VariableStore& store = *state.store;
  UpdateDedup& dedup = *state.dedup;
  // readAfter (the fused push-and-read): resolved and sized before anything is applied, so a
  // bad name or an oversized answer refuses the push rather than answering an error for a push
  // that was applied (an untagged retry would apply it twice).
  std::vector<std::shared_ptr<Variable>> read_after;
  ASSIGN_OR_RETURN(const uint8_t read_after_as, ValuesAs(req.getReadAfterAs(), "ps.PushGradients readAfterAs"));
  if (req.hasReadAfter()) {
    auto names = req.getReadAfter();
    read_after.reserve(names.size());
    uint64_t bytes = 0;
    for (auto name : names) {
      ASSIGN_OR_RETURN(auto v, store.Find(name.cStr()));
      bytes = SaturatingAdd(bytes, static_cast<uint64_t>(NumElements(v->shape())) * DTypeSize(v->dtype()));
      read_after.push_back(std::move(v));
    }
    RETURN_IF_ERROR(CheckResponseBytes("ps.PushGradients (readAfter)", bytes));
  }
  auto gradients = req.getGradients();
  std::vector<Prepared> prepared;
  for (auto g : gradients) {
    Prepared p;
    ASSIGN_OR_RETURN(p.variable, store.Find(g.getName().cStr()));
    if (net::InMessage::IsCompressed(g.getValue())) {
      // Gradient compression (core/compression.h): dense f32 gradients only. The shape is
      // checked against the variable's before the payload is expanded (DecodeCompressedAt),
      // then the f32 gradient is checked and applied like any other. Integer variables never
      // take a lossy form: their updates stay exact.
      if (p.variable->dtype() != DType::kF32) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", p.variable->name(),
                                                       "' is compressed, which only f32 variables take; it is ",
                                                       DTypeName(p.variable->dtype())));
      }
      if (g.getHasIds()) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", p.variable->name(),
                                                       "' is compressed and has ids: only dense gradients are"));
      }
      absl::StatusOr<Tensor> decoded = request.DecodeCompressedAt(g.getValue(), p.variable->shape());
      if (!decoded.ok()) return Named(p.variable->name(), decoded.status());
      p.value = *std::move(decoded);
    } else if (net::InMessage::IsBf16(g.getValue())) {
      // Reduced-precision transport: widened (exactly) to f32 here, then checked — finiteness,
      // ids — and applied like any f32 gradient. Variables stay f32. The shape is checked
      // first: a payload that does not fit the variable costs no f32 copy (twice its bytes).
      if (p.variable->dtype() != DType::kF32) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", p.variable->name(),
                                                       "' is bf16, which only f32 variables take; it is ",
                                                       DTypeName(p.variable->dtype())));
      }
      if (g.getHasIds()) {
        ASSIGN_OR_RETURN(Tensor ids, TensorFor(p.variable->name(), request, g.getIds()));
        p.ids = std::move(ids);
      }
      absl::StatusOr<net::InMessage::Bf16View> view = request.Bf16At(g.getValue());
      if (!view.ok()) return Named(p.variable->name(), view.status());
      Shape expected = p.variable->shape();
      if (p.ids && !expected.empty()) expected[0] = p.ids->num_elements();
      if (view->shape != expected) {
        return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", p.variable->name(), "' is bf16",
                                                       ShapeString(view->shape), "; it must be f32",
                                                       ShapeString(expected), " (or bf16 of that shape)"));
      }
      p.value = net::InMessage::Widened(*view);
    } else {
      ASSIGN_OR_RETURN(p.value, TensorFor(p.variable->name(), request, g.getValue()));
      if (g.getHasIds()) {
        ASSIGN_OR_RETURN(Tensor ids, TensorFor(p.variable->name(), request, g.getIds()));
        p.ids = std::move(ids);
      }
    }
    // -1 is the wire's "unknown" (not checked, not scaled); any other negative value is no
    // version at all, and taking it for unknown would let a push step around max_staleness.
    if (g.getBaseVersion() < -1) {
      return absl::InvalidArgumentError(absl::StrCat("gradient for variable '", p.variable->name(),
                                                     "' names baseVersion ", g.getBaseVersion(),
                                                     "; a version is >= 0, or -1 for unknown"));
    }
    if (g.getBaseVersion() >= 0) p.base_version = g.getBaseVersion();
    // A row gradient is checked, its floats included, in the pass that sums its duplicates.
    if (p.ids) {
      ASSIGN_OR_RETURN(p.rows, p.variable->PrepareRowGradients(*p.ids, p.value));
    } else {
      RETURN_IF_ERROR(p.variable->CheckGradient(nullptr, p.value));
    }
    if (p.rows ? !p.rows->all_finite() : !AllFinite(p.value, store.apply_pool())) {
      if (options_.metrics != nullptr) options_.metrics->RecordNonfiniteGradient();
      if (!options_.allow_nonfinite_gradients) {
        return Reject(RejectReason::kNonfiniteGradient,
                      absl::InvalidArgumentError(absl::StrCat(
                          "gradient for variable '", p.variable->name(),
                          "' holds NaN or Inf; nothing of this push was applied "
                          "(--allow_nonfinite_gradients applies such gradients)")));
      }
    }
    prepared.push_back(std::move(p));
  }
  ASSIGN_OR_RETURN(UpdateDedup::Admission admission, Admit(dedup, req, prepared));
  // A refused push applies nothing and commits nothing: the admission's claims are released,
  // so the closure's re-run applies it (docs/staleness.md, "exactly once").
  StalenessGate gate;
  RETURN_IF_ERROR(EnterGate(gate, prepared, admission, options_.metrics));
  int64_t max_staleness = -1;
  for (size_t i = 0; i < prepared.size(); ++i) {
    if (!admission.apply(i)) continue;
    const Prepared& p = prepared[i];
    if (p.rows) {
      p.variable->ApplyRowGradients(*p.rows, gate.lr_scale(i));
    } else {
      RETURN_IF_ERROR(p.variable->ApplyGradient(p.value, gate.lr_scale(i)));
    }
    if (gate.staleness(i) >= 0) {
      max_staleness = std::max(max_staleness, gate.staleness(i));
      if (options_.metrics != nullptr) options_.metrics->ObserveStaleness(gate.staleness(i));
    }
  }
  admission.Commit();
  CountRows(options_.metrics, prepared, admission);
  auto body = response->InitResponseBody<wire::UpdateResponse>();
  body.setAlreadyApplied(admission.already_applied());
  body.setStaleness(max_staleness);
  if (answer_read_after && !read_after.empty()) {
    // After the apply (or after finding it applied before): the values include this push.
    auto out = body.initValues(static_cast<unsigned>(read_after.size()));
    auto versions = body.initVersions(static_cast<unsigned>(read_after.size()));
    for (unsigned i = 0; i < read_after.size(); ++i) {
      int64_t version = 0;
      AddValueAs(response, read_after[i]->ReadVersioned(&version), read_after_as, out[i]);
      versions.set(i, version);
    }
  }
  return absl::OkStatus();
}

absl::Status PsService::Gather(const net::InMessage& request, net::OutMessage* response) {
  return GatherIn(default_state(), request, request.RequestBody<wire::GatherRequest>(), response);
}

absl::Status PsService::GatherIn(ShardState state, const net::InMessage& request, wire::GatherRequest::Reader body,
                                 net::OutMessage* response) {
  VariableStore& store = *state.store;
  auto lookups = body.getLookups();
  std::vector<std::pair<std::shared_ptr<Variable>, Tensor>> resolved;
  // Ids may repeat a row any number of times: the answer's size is ids x row bytes, checked
  // before any row is copied.
  uint64_t bytes = 0;
  for (auto l : lookups) {
    ASSIGN_OR_RETURN(auto variable, store.Find(l.getName().cStr()));
    ASSIGN_OR_RETURN(Tensor ids, request.TensorAt(l.getIds()));
    const Shape& shape = variable->shape();
    const uint64_t row_bytes =
        shape.empty() ? 0 : static_cast<uint64_t>(NumElements(Shape(shape.begin() + 1, shape.end()))) *
                                DTypeSize(variable->dtype());
    bytes = SaturatingAdd(bytes, SaturatingMul(static_cast<uint64_t>(ids.num_elements()), row_bytes));
    resolved.emplace_back(std::move(variable), std::move(ids));
  }
  RETURN_IF_ERROR(CheckResponseBytes("ps.Gather", bytes));
  std::vector<Tensor> rows;
  std::vector<int64_t> row_versions;
  for (const auto& [variable, ids] : resolved) {
    int64_t version = 0;
    ASSIGN_OR_RETURN(Tensor values, variable->GatherVersioned(ids, &version));
    rows.push_back(std::move(values));
    row_versions.push_back(version);
  }
  auto answer = response->InitResponseBody<wire::GatherResponse>();
  auto out = answer.initValues(lookups.size());
  auto versions = answer.initVersions(lookups.size());
  for (unsigned i = 0; i < rows.size(); ++i) {
    response->AddTensor(rows[i], out[i]);
    versions.set(i, row_versions[i]);
  }
  return absl::OkStatus();
}

absl::Status PsService::ListVariables(const net::InMessage&, net::OutMessage* response) {
  return ListVariablesIn(default_state(), response);
}

absl::Status PsService::ListVariablesIn(ShardState state, net::OutMessage* response) {
  VariableStore& store = *state.store;
  auto variables = store.List();
  // Names are as long as clients made them: the answer is bounded like any other.
  uint64_t bytes = 0;
  for (const auto& v : variables) bytes = SaturatingAdd(bytes, v->name().size() + 8 * v->shape().size() + 32);
  RETURN_IF_ERROR(CheckResponseBytes("ps.ListVariables", bytes));
  auto out = response->InitResponseBody<wire::ListVariablesResponse>().initVariables(
      static_cast<unsigned>(variables.size()));
  for (unsigned i = 0; i < variables.size(); ++i) {
    out[i].setName(variables[i]->name());
    out[i].setDtype(static_cast<uint8_t>(variables[i]->dtype()));
    net::SetShape(out[i].initShape(static_cast<unsigned>(variables[i]->shape().size())),
                  variables[i]->shape());
    out[i].setIterations(variables[i]->iterations());
    out[i].setVersion(variables[i]->version());
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
