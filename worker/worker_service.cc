#include "core/sync.h"
#include "worker/worker_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "net/rpc_client.h"
#include "worker/dataset_resources.h"
#include "worker/worker.capnp.h"
#include "worker/step_context.h"

namespace asyncps {

// SplitOutcome crosses the wire by value.
static_assert(static_cast<int>(SplitOutcome::kUnread) == static_cast<int>(wire::SplitOutcome::UNREAD) &&
              static_cast<int>(SplitOutcome::kMore) == static_cast<int>(wire::SplitOutcome::MORE) &&
              static_cast<int>(SplitOutcome::kLast) == static_cast<int>(wire::SplitOutcome::LAST) &&
              static_cast<int>(SplitOutcome::kPastEnd) == static_cast<int>(wire::SplitOutcome::PAST_END) &&
              static_cast<int>(SplitOutcome::kBeyondSource) == static_cast<int>(wire::SplitOutcome::BEYOND_SOURCE));

WorkerService::WorkerService(const Program& program, int worker_index, int num_workers, PsClient& ps,
                             VariableDirectory& directory, WorkerMetrics* metrics)
    : program_(program),
      worker_index_(worker_index),
      num_workers_(num_workers),
      ps_(ps),
      directory_(directory),
      metrics_(metrics) {}

void WorkerService::RegisterWith(net::MethodTable& server) {
  auto bind = [this](absl::Status (WorkerService::*method)(uint64_t, const net::InMessage&, net::OutMessage*)) {
    return [this, method](const net::RequestContext& ctx, const net::InMessage& req, net::OutMessage* resp) {
      RETURN_IF_ERROR(AdmitCoordinator(ctx.peer.incarnation));
      return (this->*method)(ctx.peer.incarnation, req, resp);
    };
  };
  server.Register<wire::RunRequest>("worker.Run", net::WorkerCallers(), bind(&WorkerService::Run));
  server.Register<wire::CreateResourceRequest>("worker.CreateResource", net::WorkerCallers(),
                                               bind(&WorkerService::CreateResource));
  server.Register<wire::DeleteResourceRequest>("worker.DeleteResource", net::WorkerCallers(), bind(&WorkerService::DeleteResource));
  server.Register<wire::SetDirectoryRequest>("worker.SetDirectory", net::WorkerCallers(), bind(&WorkerService::SetDirectory));
  server.Register<wire::CancelRequest>("worker.Cancel", net::WorkerCallers(), bind(&WorkerService::Cancel), net::Dispatch::kInline);
  server.Register<wire::Empty>("worker.Heartbeat", net::WorkerCallers(), bind(&WorkerService::Heartbeat), net::Dispatch::kInline);
}

absl::Status WorkerService::AdmitCoordinator(uint64_t incarnation) {
  absl::flat_hash_map<uint64_t, std::shared_ptr<Resource>> dropped;  // released after the lock
  {
    MutexLock lock(&mu_);
    switch (fence_.Admit(incarnation)) {
      case CoordinatorFence::Verdict::kCurrent:
        return absl::OkStatus();
      case CoordinatorFence::Verdict::kSuperseded:
        return absl::FailedPreconditionError(absl::StrCat("worker ", worker_index_, " now serves coordinator ",
                                                          fence_.current(), "; coordinator ", incarnation,
                                                          " was replaced by it"));
      case CoordinatorFence::Verdict::kNewCoordinator:
        break;
    }
    // Still under mu_: no call of the new chief (admitted as kCurrent from now on) may create
    // a resource or set the directory before this drop is complete.
    dropped.swap(resources_);
    directory_.Reset({}, 0);
    const size_t cancelled = cancellation_.CancelAll();
    spdlog::warn(
        "worker {}: a new coordinator (incarnation {}) took over; dropped its predecessor's {} per-worker "
        "resource(s) and variable directory, cancelled {} running closure(s)",
        worker_index_, incarnation, dropped.size(), cancelled);
  }
  return absl::OkStatus();
}

absl::Status WorkerService::CheckStillServedLocked(uint64_t incarnation, absl::string_view what) const {
  if (fence_.Serves(incarnation)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("worker ", worker_index_, " now serves coordinator ",
                                                    fence_.current(), "; coordinator ", incarnation,
                                                    " was replaced by it before its ", what, " took effect"));
}

absl::Status WorkerService::EffectIfStillServed(uint64_t incarnation, absl::string_view method,
                                                absl::string_view what, absl::FunctionRef<void()> effect) {
  BeforeEffect(method);
  MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckStillServedLocked(incarnation, what));
  effect();
  return absl::OkStatus();
}

absl::Status WorkerService::Run(uint64_t incarnation, const net::InMessage& request, net::OutMessage* response) {
  auto req = request.RequestBody<wire::RunRequest>();
  const std::string function_name = req.getFunction().cStr();
  const uint64_t closure_id = req.getClosureId();
  if (req.getIncarnation() != 0 && req.getIncarnation() != ProcessIncarnation()) {
    return absl::FailedPreconditionError("worker restarted since the coordinator prepared it");
  }
  // Dynamic sharding: the iterator argument the coordinator bound to one batch.
  std::shared_ptr<BoundSplitIterator> bound;
  const bool has_split = req.hasSplit();
  const uint64_t split_resource = has_split ? req.getSplit().getResource() : 0;
  std::vector<StepContext::BoundArg> args;
  for (auto a : req.getArgs()) {
    if (a.which() == wire::Argument::TENSOR) {
      ASSIGN_OR_RETURN(Tensor t, request.TensorAt(a.getTensor()));
      args.emplace_back(std::move(t));
      continue;
    }
    MutexLock lock(&mu_);
    auto it = resources_.find(a.getResource());
    if (it == resources_.end()) {
      // Not the function's fault: this worker lost its resources (it restarted) and must be
      // rebuilt by the coordinator before it runs this closure.
      return absl::FailedPreconditionError(
          absl::StrCat("per-worker resource ", a.getResource(), " does not exist on worker ", worker_index_));
    }
    if (has_split && bound == nullptr && a.getResource() == split_resource) {
      auto iterator = std::dynamic_pointer_cast<DynamicIteratorResource>(it->second);
      if (iterator == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("per-worker resource ", split_resource, " is not a dynamically sharded iterator"));
      }
      auto w = req.getSplit();
      bound = std::make_shared<BoundSplitIterator>(
          std::move(iterator), SplitBinding{w.getEpoch(), w.getSplit(), w.getBegin(), w.getEnd(), w.getBatch()});
      args.emplace_back(bound);
      continue;
    }
    args.emplace_back(it->second);
  }
  if (has_split && bound == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the split binds resource ", split_resource, ", which is not an argument of the closure"));
  }

  const StepFunction* fn = program_.FindFunction(function_name);
  // The closure starts only while its chief is still served: registered under mu_, it is
  // either cancelled by a takeover's CancelAll (under mu_ too) or refused here. The resources
  // looked up above may be a replaced chief's; then this refuses the closure as well.
  ClosureCancellation::Attempt attempt;
  RETURN_IF_ERROR(EffectIfStillServed(incarnation, "worker.Run", absl::StrCat("closure ", closure_id), [&] {
    if (fn != nullptr) attempt = cancellation_.Start(closure_id);
  }));
  auto body = response->InitResponseBody<wire::RunResponse>();
  if (fn == nullptr) {
    body.setCode(static_cast<int>(absl::StatusCode::kNotFound));
    body.setMessage(absl::StrCat("unknown function '", function_name, "'"));
    return absl::OkStatus();
  }
  StepContext ctx(worker_index_, std::move(args), ps_, attempt.cancelled);
  if (req.getCoordinator() != 0) {
    ctx.TagUpdates(ps::UpdateTag{req.getCoordinator(), closure_id, /*sequence=*/0, req.getWatermark()});
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<Values> result;
  try {
    result = (*fn)(ctx);
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("function '", function_name, "' threw: ", e.what()));
  } catch (...) {
    // Still the function's error: escaping as an RPC error would read as this worker failing
    // (the coordinator would take it down and put the closure back to run again).
    result = absl::InternalError(absl::StrCat("function '", function_name, "' threw a non-standard exception"));
  }
  cancellation_.Finish(attempt);
  if (bound != nullptr) body.setSplit(static_cast<wire::SplitOutcome>(bound->outcome()));
  if (metrics_ != nullptr) {
    metrics_->RecordStep(function_name, result.ok(), absl::ToDoubleSeconds(absl::Now() - start),
                         absl::ToDoubleSeconds(ctx.input_wait()), ctx.examples());
    metrics_->RecordPhases(function_name, ctx.phase_times());
  }
  if (!result.ok()) {
    body.setCode(static_cast<int>(result.status().code()));
    body.setMessage(std::string(result.status().message()));
    body.setErrorSource(ctx.cancelled()        ? wire::ErrorSource::CANCELLED
                        : ctx.ps_state_lost()  ? wire::ErrorSource::PS_STATE_LOST
                        : ctx.ps_unreachable() ? wire::ErrorSource::PS
                                               : wire::ErrorSource::FUNCTION);
    return absl::OkStatus();
  }
  auto values = body.initValues(static_cast<unsigned>(result->size()));
  for (unsigned i = 0; i < result->size(); ++i) response->AddTensor((*result)[i], values[i]);
  return absl::OkStatus();
}

absl::Status WorkerService::CreateResource(uint64_t incarnation, const net::InMessage& request, net::OutMessage*) {
  auto req = request.RequestBody<wire::CreateResourceRequest>();
  const uint64_t id = req.getId();
  {
    MutexLock lock(&mu_);
    // A successor's resource of the same id is not the replaced chief's to be told about.
    RETURN_IF_ERROR(CheckStillServedLocked(incarnation, absl::StrCat("per-worker resource ", id)));
    if (resources_.contains(id)) return absl::OkStatus();
  }
  const std::string factory_name = req.getFactory().cStr();
  const ResourceFactory* factory = program_.FindResource(factory_name);
  if (factory == nullptr) {
    return ResourceFactoryError(factory_name, worker_index_, absl::NotFoundError("unknown to this worker's program"));
  }
  std::map<std::string, std::string> args;
  for (auto a : req.getArgs()) args[a.getName().cStr()] = a.getValue().cStr();
  ResourceContext ctx(worker_index_, num_workers_, args);
  absl::StatusOr<std::unique_ptr<Resource>> resource;
  try {
    resource = (*factory)(ctx);
  } catch (const std::exception& e) {
    resource = absl::InternalError(absl::StrCat("threw: ", e.what()));
  } catch (...) {
    resource = absl::InternalError("threw a non-standard exception");
  }
  if (resource.ok() && *resource == nullptr) resource = absl::InternalError("returned null");
  if (!resource.ok()) {
    spdlog::warn("per-worker resource {} ({}) failed: {}", id, factory_name, resource.status().ToString());
    return ResourceFactoryError(factory_name, worker_index_, resource.status());
  }
  // The factory ran without the lock: a new chief may have taken over meanwhile and dropped
  // its predecessor's resources. One built for the replaced chief is not kept (its successor
  // would neither know nor delete it, and would be told it exists).
  RETURN_IF_ERROR(EffectIfStillServed(incarnation, "worker.CreateResource", absl::StrCat("per-worker resource ", id),
                                      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                                        resources_.try_emplace(id, *std::move(resource));
                                      }));
  spdlog::info("created per-worker resource {} ({})", id, factory_name);
  return absl::OkStatus();
}

absl::Status ResourceFactoryError(const std::string& factory, int worker_index, const absl::Status& error) {
  return absl::Status(error.code(), absl::StrCat(kResourceFactoryFailed, " '", factory, "' on worker ", worker_index,
                                                 ": ", error.message()));
}

bool IsResourceFactoryError(const absl::Status& status) {
  return !status.ok() && absl::StartsWith(status.message(), kResourceFactoryFailed);
}

absl::Status WorkerService::DeleteResource(uint64_t incarnation, const net::InMessage& request, net::OutMessage*) {
  const uint64_t id = request.RequestBody<wire::DeleteResourceRequest>().getId();
  // Ids are the chief's: after a takeover the same id can name the successor's resource.
  return EffectIfStillServed(incarnation, "worker.DeleteResource",
                             absl::StrCat("deletion of per-worker resource ", id),
                             [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { resources_.erase(id); });
}

absl::Status WorkerService::SetDirectory(uint64_t incarnation, const net::InMessage& request, net::OutMessage*) {
  auto req = request.RequestBody<wire::SetDirectoryRequest>();
  std::vector<VariablePlacement> placements;
  for (auto v : req.getVariables()) {
    VariablePlacement p;
    p.name = v.getName().cStr();
    ASSIGN_OR_RETURN(p.dtype, DTypeFromWire(v.getDtype()));
    p.shape = net::GetShape(v.getShape());
    RETURN_IF_ERROR(ValidateShape(p.shape, p.dtype));
    const int64_t rows = p.shape.empty() ? 1 : p.shape[0];
    int64_t next_row = 0;
    for (auto s : v.getShards()) {
      ShardPlacement shard{s.getName().cStr(), s.getPs(), s.getRowBegin(), s.getRowEnd()};
      if (shard.ps < 0 || shard.ps >= ps_.num_ps() || shard.row_begin != next_row || shard.row_end < shard.row_begin) {
        return absl::InvalidArgumentError(absl::StrCat("bad shard placement for '", p.name, "'"));
      }
      next_row = shard.row_end;
      p.shards.push_back(std::move(shard));
    }
    if (p.shards.empty() || next_row != rows) {
      return absl::InvalidArgumentError(absl::StrCat("shards of '", p.name, "' do not cover its rows"));
    }
    placements.push_back(std::move(p));
  }
  // Under mu_, like the takeover's reset: a replaced chief's directory never replaces the
  // successor's (or the empty one its takeover left).
  const uint64_t version = req.getVersion();
  return EffectIfStillServed(incarnation, "worker.SetDirectory", absl::StrCat("directory version ", version),
                             [&] { directory_.Reset(std::move(placements), version); });
}

absl::Status WorkerService::Cancel(uint64_t incarnation, const net::InMessage& request, net::OutMessage*) {
  std::vector<uint64_t> ids;
  for (uint64_t id : request.RequestBody<wire::CancelRequest>().getClosureIds()) ids.push_back(id);
  // Closure ids are the chief's too: a replaced chief's cancel must not stop (or, remembered,
  // cancel from the start) its successor's closures of the same ids.
  return EffectIfStillServed(incarnation, "worker.Cancel", "cancel", [&] { cancellation_.Cancel(ids); });
}

absl::Status WorkerService::Heartbeat(uint64_t, const net::InMessage&, net::OutMessage* response) {
  auto body = response->InitResponseBody<wire::HeartbeatResponse>();
  body.setIncarnation(ProcessIncarnation());
  body.setDirectoryVersion(directory_.version());
  // What this worker can tell the chief and the chief cannot see: which PS leave it without
  // answers (a gray failure, when the chief still hears them).
  const std::vector<net::RpcClient*>& connections = ps_.connections();
  auto silence = body.initPsSilenceMicros(static_cast<unsigned>(connections.size()));
  for (unsigned i = 0; i < connections.size(); ++i) {
    silence.set(i, absl::ToInt64Microseconds(connections[i]->Silence()));
  }
  MutexLock lock(&mu_);
  auto ids = body.initResources(static_cast<unsigned>(resources_.size()));
  unsigned i = 0;
  for (const auto& [id, r] : resources_) ids.set(i++, id);
  return absl::OkStatus();
}

}  // namespace asyncps
