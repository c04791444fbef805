#include "ps/ps_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "net/ps.capnp.h"
#include "ps/initializer.h"
#include "ps/ps_wire.h"

namespace asyncps::ps {

void PsService::RegisterWith(net::MethodTable& server) {
  auto bind = [this](absl::Status (PsService::*method)(const net::InMessage&, net::OutMessage*)) {
    return [this, method](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
      return (this->*method)(req, resp);
    };
  };
  server.Register<wire::CreateVariableRequest>("ps.CreateVariable", net::PsCallers(), bind(&PsService::CreateVariable));
  server.Register<wire::ReadRequest>("ps.Read", net::PsReaders(), bind(&PsService::Read));
  server.Register<wire::UpdateRequest>("ps.Update", net::PsCallers(), bind(&PsService::Update));
  server.Register<wire::PushGradientsRequest>("ps.PushGradients", net::PsCallers(), bind(&PsService::PushGradients));
  server.Register<wire::GatherRequest>("ps.Gather", net::PsReaders(), bind(&PsService::Gather));
  server.Register<wire::Empty>("ps.ListVariables", net::PsReaders(), bind(&PsService::ListVariables));
  server.Register<wire::Empty>(
      "ps.Health", net::PsReaders(), [](const net::RequestContext&, const net::InMessage&, net::OutMessage*) { return absl::OkStatus(); },
      net::Dispatch::kInline);
}

absl::Status PsService::CreateVariable(const net::InMessage& request, net::OutMessage* response) {
  auto req = request.RequestBody<wire::CreateVariableRequest>();
  const std::string name = req.getName().cStr();
  if (name.empty()) return absl::InvalidArgumentError("variable name is empty");
  ASSIGN_OR_RETURN(DType dtype, DTypeFromWire(req.getDtype()));
  const Shape shape = net::GetShape(req.getShape());
  RETURN_IF_ERROR(ValidateShape(shape, dtype));
  auto optimizer = OptimizerFromWire(req.getOptimizer());

  bool created = false;
  auto existing = store_.Find(name);
  if (existing.ok()) {
    // Idempotent create: skip building the initial value (it may be large).
    if ((*existing)->dtype() != dtype || (*existing)->shape() != shape) {
      return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' exists as ",
                                                   DTypeName((*existing)->dtype()),
                                                   ShapeString((*existing)->shape())));
    }
  } else {
    ASSIGN_OR_RETURN(InitializerSpec spec, InitializerFromWire(request, req.getInitializer()));
    ASSIGN_OR_RETURN(Tensor initial, Initialize(spec, dtype, shape));
    ASSIGN_OR_RETURN(auto variable, Variable::Create(name, std::move(initial), optimizer.get()));
    ASSIGN_OR_RETURN(created, store_.Insert(std::move(variable)));
  }
  response->InitResponseBody<wire::CreateVariableResponse>().setCreated(created);
  return absl::OkStatus();
}

absl::Status PsService::Read(const net::InMessage& request, net::OutMessage* response) {
  auto names = request.RequestBody<wire::ReadRequest>().getNames();
  std::vector<std::shared_ptr<Variable>> variables;
  for (auto name : names) {
    ASSIGN_OR_RETURN(auto v, store_.Find(name.cStr()));
    variables.push_back(std::move(v));
  }
  auto out = response->InitResponseBody<wire::ReadResponse>().initTensors(names.size());
  for (unsigned i = 0; i < variables.size(); ++i) response->AddTensor(variables[i]->Read(), out[i]);
  return absl::OkStatus();
}

namespace {

// One validated update or gradient, ready to apply.
struct Prepared {
  std::shared_ptr<Variable> variable;
  UpdateKind kind = UpdateKind::kAssign;
  Tensor value;
  std::optional<Tensor> ids;
};

// The value-dependent checks Variable::Update/UpdateRows make (arithmetic on bool, integer
// division by zero), repeated here so that a batch whose later update fails them is rejected
// before any earlier update is applied.
absl::Status CheckKind(const Variable& variable, UpdateKind kind, const Tensor& value) {
  const DType dtype = variable.dtype();
  if (dtype == DType::kBool && kind != UpdateKind::kAssign) {
    return absl::InvalidArgumentError(absl::StrCat("variable '", variable.name(),
                                                   "' is bool; only assign is allowed, not ",
                                                   UpdateKindName(kind)));
  }
  if (kind == UpdateKind::kDiv && (dtype == DType::kI32 || dtype == DType::kI64 || dtype == DType::kU8)) {
    const size_t size = DTypeSize(dtype);
    const char* bytes = static_cast<const char*>(value.raw_data());
    for (int64_t i = 0; i < value.num_elements(); ++i) {
      bool zero = true;
      for (size_t b = 0; b < size; ++b) zero = zero && bytes[static_cast<size_t>(i) * size + b] == 0;
      if (zero) {
        return absl::InvalidArgumentError(
            absl::StrCat("integer division by zero in update of '", variable.name(), "'"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PsService::Update(const net::InMessage& request, net::OutMessage*) {
  auto updates = request.RequestBody<wire::UpdateRequest>().getUpdates();
  std::vector<Prepared> prepared;
  for (auto u : updates) {
    Prepared p;
    ASSIGN_OR_RETURN(p.variable, store_.Find(u.getName().cStr()));
    ASSIGN_OR_RETURN(p.kind, UpdateKindFromWire(u.getKind()));
    ASSIGN_OR_RETURN(p.value, request.TensorAt(u.getValue()));
    if (u.getHasIds()) {
      ASSIGN_OR_RETURN(Tensor ids, request.TensorAt(u.getIds()));
      RETURN_IF_ERROR(p.variable->CheckRows(ids, p.value));
      p.ids = std::move(ids);
    } else {
      RETURN_IF_ERROR(p.variable->CheckDense(p.value));
    }
    RETURN_IF_ERROR(CheckKind(*p.variable, p.kind, p.value));
    prepared.push_back(std::move(p));
  }
  // Everything is valid, so each update below succeeds (it re-checks, finding nothing wrong).
  for (const Prepared& p : prepared) {
    RETURN_IF_ERROR(p.ids ? p.variable->UpdateRows(p.kind, *p.ids, p.value)
                          : p.variable->Update(p.kind, p.value));
  }
  return absl::OkStatus();
}

absl::Status PsService::PushGradients(const net::InMessage& request, net::OutMessage*) {
  auto gradients = request.RequestBody<wire::PushGradientsRequest>().getGradients();
  std::vector<Prepared> prepared;
  for (auto g : gradients) {
    Prepared p;
    ASSIGN_OR_RETURN(p.variable, store_.Find(g.getName().cStr()));
    ASSIGN_OR_RETURN(p.value, request.TensorAt(g.getValue()));
    if (g.getHasIds()) {
      ASSIGN_OR_RETURN(Tensor ids, request.TensorAt(g.getIds()));
      p.ids = std::move(ids);
    }
    RETURN_IF_ERROR(p.variable->CheckGradient(p.ids ? &*p.ids : nullptr, p.value));
    prepared.push_back(std::move(p));
  }
  for (const Prepared& p : prepared) {
    RETURN_IF_ERROR(p.ids ? p.variable->ApplyRowGradients(*p.ids, p.value)
                          : p.variable->ApplyGradient(p.value));
  }
  return absl::OkStatus();
}

absl::Status PsService::Gather(const net::InMessage& request, net::OutMessage* response) {
  auto lookups = request.RequestBody<wire::GatherRequest>().getLookups();
  std::vector<Tensor> rows;
  for (auto l : lookups) {
    ASSIGN_OR_RETURN(auto variable, store_.Find(l.getName().cStr()));
    ASSIGN_OR_RETURN(Tensor ids, request.TensorAt(l.getIds()));
    ASSIGN_OR_RETURN(Tensor values, variable->Gather(ids));
    rows.push_back(std::move(values));
  }
  auto out = response->InitResponseBody<wire::GatherResponse>().initValues(lookups.size());
  for (unsigned i = 0; i < rows.size(); ++i) response->AddTensor(rows[i], out[i]);
  return absl::OkStatus();
}

absl::Status PsService::ListVariables(const net::InMessage&, net::OutMessage* response) {
  auto variables = store_.List();
  auto out = response->InitResponseBody<wire::ListVariablesResponse>().initVariables(
      static_cast<unsigned>(variables.size()));
  for (unsigned i = 0; i < variables.size(); ++i) {
    out[i].setName(variables[i]->name());
    out[i].setDtype(static_cast<uint8_t>(variables[i]->dtype()));
    net::SetShape(out[i].initShape(static_cast<unsigned>(variables[i]->shape().size())),
                  variables[i]->shape());
    out[i].setIterations(variables[i]->iterations());
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
