#include "coordinator/cluster_coordinator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/closure_outcome.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/worker_handle.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "worker/worker.capnp.h"
#include "worker/worker_service.h"

namespace asyncps {

// What a queued closure carries besides its name: its arguments and when it was scheduled.
struct ClusterCoordinator::ClosureArgs {
  std::vector<ClosureArg> args;
  absl::Time scheduled;
};

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program)
    : ClusterCoordinator(strategy, program, Options()) {}

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program, Options options)
    : strategy_(strategy),
      program_(program),
      options_(options),
      metrics_(std::make_unique<CoordinatorMetrics>(strategy.process_metrics())),
      queue_(options.queue_capacity) {
  const ClusterSpec& cluster = strategy.cluster();
  for (int i = 0; i < cluster.num_workers(); ++i) {
    net::RpcClient::Options o;
    o.address = cluster.workers()[i];
    o.role = "chief";
    o.task_index = cluster.task_index();
    o.token = strategy.options().process.cluster_token;
    o.metrics = &strategy.rpc_metrics();
    workers_.push_back(std::make_unique<WorkerHandle>(i, std::make_unique<net::RpcClient>(strategy.loop(), o)));
  }
  queue_.SetInFlightCancellationHook([this] {
    for (auto& w : workers_) w->CancelRunning();
  });
  for (auto& w : workers_) {
    threads_.emplace_back([this, &w] { MonitorLoop(*w); });
    for (int slot = 0; slot < std::max(1, options_.closures_per_worker); ++slot) {
      threads_.emplace_back([this, &w] { DispatchLoop(*w); });
    }
  }
}

ClusterCoordinator::~ClusterCoordinator() {
  queue_.Stop();  // nothing new is handed out; queued closures are cancelled
  // Cooperative functions stop within the grace and report normally.
  for (auto& w : workers_) w->CancelRunning();
  if (!queue_.WaitUntilNoneInFlight(options_.shutdown_grace)) {
    spdlog::warn("{} closure(s) still running {} after cancelling them; abandoning them", queue_.in_flight(),
                 absl::FormatDuration(options_.shutdown_grace));
  }
  // Abandons every wait on a worker (closures, heartbeats, recovery probes): no thread below
  // is left blocked on the network, so the joins return at once.
  for (auto& w : workers_) w->Stop();
  for (auto& t : threads_) t.join();
}

int ClusterCoordinator::workers_up() const {
  int n = 0;
  for (const auto& w : workers_) n += w->up() ? 1 : 0;
  return n;
}

void ClusterCoordinator::UpdateQueueGauges() {
  metrics_->queue_depth.Set(static_cast<double>(queue_.queued()));
  metrics_->in_flight.Set(static_cast<double>(queue_.in_flight()));
}

void ClusterCoordinator::UpdateWorkerGauge() { metrics_->workers_up.Set(workers_up()); }

absl::StatusOr<RemoteValue> ClusterCoordinator::Schedule(const std::string& function, std::vector<ClosureArg> args) {
  if (program_.FindFunction(function) == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown function '", function, "'"));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (std::holds_alternative<RemoteValue>(args[i].value())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "argument ", i, " of '", function,
          "' is a RemoteValue; fetch it first (results are not fed back to workers)"));
    }
  }
  auto closure = std::make_shared<Closure>();
  closure->id = RandomId();
  closure->function = function;
  closure->payload = std::make_shared<const ClosureArgs>(ClosureArgs{std::move(args), absl::Now()});
  RemoteValue output = closure->output;
  RETURN_IF_ERROR(queue_.Put(std::move(closure)));
  metrics_->scheduled.Increment();
  UpdateQueueGauges();
  return output;
}

absl::Status ClusterCoordinator::Join() {
  absl::Status s = queue_.Wait();
  UpdateQueueGauges();
  return s;
}

absl::StatusOr<bool> ClusterCoordinator::Done() { return queue_.Done(); }

absl::StatusOr<std::vector<Values>> ClusterCoordinator::Fetch(const std::vector<RemoteValue>& values) {
  std::vector<Values> out;
  for (const RemoteValue& v : values) {
    ASSIGN_OR_RETURN(Values value, v.Fetch());
    out.push_back(std::move(value));
  }
  return out;
}

absl::StatusOr<PerWorkerValues> ClusterCoordinator::CreatePerWorkerResource(
    const std::string& factory, std::map<std::string, std::string> args) {
  if (program_.FindResource(factory) == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown resource factory '", factory, "'"));
  }
  ResourceSpec spec{RandomId(), factory, std::move(args)};
  {
    // Recorded first, so that a worker recovering meanwhile builds it too.
    MutexLock lock(&resources_mu_);
    resources_.push_back(spec);
  }
  // Workers that are down get it when they recover; a failed call only marks one down.
  absl::Status failure;
  for (auto& w : workers_) {
    const uint64_t incarnation = w->incarnation();
    absl::Status s = w->CreateResourceIfUp(spec, options_.rpc_timeout);
    if (s.ok()) continue;
    if (!IsResourceFactoryError(s)) {
      WorkerFailed(*w, incarnation, s);
      continue;
    }
    failure = s;
    break;
  }
  if (failure.ok()) return PerWorkerValues(spec.id, factory);
  // The factory failed: the user's error. Leave nothing behind — a recorded spec would be
  // rebuilt at every later recovery and fail there again.
  {
    MutexLock lock(&resources_mu_);
    resources_.erase(std::remove_if(resources_.begin(), resources_.end(),
                                    [&](const ResourceSpec& r) { return r.id == spec.id; }),
                     resources_.end());
  }
  for (auto& w : workers_) w->DeleteResource(spec.id, options_.rpc_timeout);
  spdlog::warn("CreatePerWorkerResource('{}') failed: {}", factory, failure.ToString());
  return failure;
}

void ClusterCoordinator::WorkerFailed(WorkerHandle& worker, uint64_t incarnation, const absl::Status& reason) {
  if (worker.MarkDown(incarnation, reason)) {
    metrics_->worker_failures.Increment();
    UpdateWorkerGauge();
  }
}

void ClusterCoordinator::MonitorLoop(WorkerHandle& worker) {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    if (worker.up()) {
      backoff = absl::Milliseconds(50);
      const uint64_t incarnation = worker.incarnation();
      absl::Status s = worker.Heartbeat(options_.heartbeat_timeout);
      if (!s.ok()) WorkerFailed(worker, incarnation, s);
      // Wakes early when the worker is marked down by a failed call, to start recovering.
      worker.WaitWhileUp(options_.heartbeat_interval);
    } else {
      std::vector<ResourceSpec> resources;
      {
        MutexLock lock(&resources_mu_);
        resources = resources_;
      }
      absl::Status s = worker.Recover(strategy_.directory(), resources, options_.rpc_timeout);
      if (s.ok()) {
        UpdateWorkerGauge();
        metrics_->resources_rebuilt.Increment(static_cast<double>(worker.TakeResourcesRebuilt()));
        continue;
      }
      if (s.code() == absl::StatusCode::kCancelled) return;
      if (s.code() != absl::StatusCode::kUnavailable && s.code() != absl::StatusCode::kDeadlineExceeded) {
        spdlog::error("cannot prepare worker {}: {}", worker.index(), s.ToString());
      }
      // A periodic probe with backoff, not synchronisation: the worker has to come back first.
      if (!worker.WaitUntilUpFor(backoff)) return;
      backoff = std::min(backoff * 2, options_.max_recovery_backoff);
    }
    if (worker.stopping()) return;
  }
}

void ClusterCoordinator::DispatchLoop(WorkerHandle& worker) {
  while (worker.WaitUntilUp()) {
    std::shared_ptr<Closure> closure = queue_.Get(absl::InfiniteDuration());
    if (closure == nullptr) return;  // stopped
    RunClosure(worker, closure);
    UpdateQueueGauges();
  }
}

void ClusterCoordinator::RunClosure(WorkerHandle& worker, const std::shared_ptr<Closure>& closure) {
  const uint64_t incarnation = worker.incarnation();
  auto put_back = [&](const absl::Status& reason) {
    if (worker.stopping()) {  // abandoned by the destructor: the stopped queue cancels it
      queue_.PutBack(closure);
      return;
    }
    WorkerFailed(worker, incarnation, reason);
    metrics_->retried.Increment();
    queue_.PutBack(closure);
  };
  if (incarnation == 0) {  // went down between WaitUntilUp and Get: nothing to report
    queue_.PutBack(closure);
    return;
  }
  if (absl::Status s = worker.SyncDirectory(strategy_.directory(), options_.rpc_timeout); !s.ok()) {
    return put_back(s);
  }
  const auto& payload = *std::static_pointer_cast<const ClosureArgs>(closure->payload);
  for (const ClosureArg& arg : payload.args) {
    const auto* resource = std::get_if<PerWorkerValues>(&arg.value());
    if (resource == nullptr) continue;
    // Its factory failed on this worker (found when the worker was recovered): the closure's
    // input error, raised to the user like a function error.
    if (absl::Status s = worker.ResourceFailure(resource->id()); !s.ok()) {
      spdlog::warn("closure '{}' cannot run on worker {}: {}", closure->function, worker.index(), s.ToString());
      closure->output.SetFailed(s);
      metrics_->failed.Increment();
      queue_.MarkFailed(s);
      return;
    }
  }
  net::OutMessage request;
  auto body = request.InitRequestBody<wire::RunRequest>();
  body.setFunction(closure->function);
  body.setClosureId(closure->id);
  body.setIncarnation(incarnation);
  auto args = body.initArgs(static_cast<unsigned>(payload.args.size()));
  for (unsigned i = 0; i < payload.args.size(); ++i) {
    const auto& v = payload.args[i].value();
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      request.AddTensor(*t, args[i].initTensor());
    } else {
      args[i].setResource(std::get<PerWorkerValues>(v).id());
    }
  }
  worker.AddRunning(closure->id);
  if (queue_.error_pending()) {
    // Another closure failed after this one was taken: it is cancelled without running.
    worker.RemoveRunning(closure->id);
    closure->output.SetCancelled("cancelled after another closure failed");
    metrics_->cancelled.Increment();
    queue_.MarkFinished();
    return;
  }
  auto response = worker.Call("worker.Run", std::move(request), options_.closure_timeout);
  worker.RemoveRunning(closure->id);

  absl::Status rpc = response.status();
  absl::Status status;
  ErrorSource source = ErrorSource::kFunction;
  Values values;
  if (rpc.ok()) {
    rpc = net::CatchDecodeErrors([&]() -> absl::Status {
      auto r = response->ResponseBody<wire::RunResponse>();
      if (r.getCode() != 0) {
        status = absl::Status(static_cast<absl::StatusCode>(r.getCode()), r.getMessage().cStr());
        switch (r.getErrorSource()) {
          case wire::ErrorSource::PS:
            source = ErrorSource::kPs;
            break;
          case wire::ErrorSource::PS_STATE_LOST:
            source = ErrorSource::kPsStateLost;
            break;
          case wire::ErrorSource::CANCELLED:
            source = ErrorSource::kCancelled;
            break;
          default:
            source = ErrorSource::kFunction;
        }
        return absl::OkStatus();
      }
      for (auto ref : r.getValues()) {
        ASSIGN_OR_RETURN(Tensor t, response->TensorAt(ref));
        values.push_back(std::move(t));
      }
      return absl::OkStatus();
    });
  }

  switch (ClassifyClosure(rpc, status, source)) {
    case ClosureOutcome::kSucceeded:
      closure->output.SetReady(std::move(values));
      metrics_->completed.Increment();
      metrics_->closure_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - payload.scheduled));
      queue_.MarkFinished();
      return;
    case ClosureOutcome::kWorkerFailure:
      return put_back(rpc);
    case ClosureOutcome::kCancelled:
      closure->output.SetCancelled("cancelled after another closure failed");
      metrics_->cancelled.Increment();
      queue_.MarkFinished();
      return;
    case ClosureOutcome::kPsUnavailable:
      status = absl::UnavailableError(
          absl::StrCat("parameter server unreachable from worker ", worker.index(), ": ", status.message()));
      break;
    case ClosureOutcome::kPsStateLost: {
      // The message names the PS ("ps N (address) lost variables..."); the mark is rebuilt
      // here because a status crosses the wire as code and message only.
      status = PsStateLostFromMessage(absl::StrCat("closure on worker ", worker.index(), ": ", status.message()));
      metrics_->ps_state_lost.Increment();
      break;
    }
    case ClosureOutcome::kFunctionError:
      break;
  }
  spdlog::warn("closure '{}' failed on worker {}: {}", closure->function, worker.index(), status.ToString());
  closure->output.SetFailed(status);
  metrics_->failed.Increment();
  queue_.MarkFailed(status);
}

}  // namespace asyncps
