#include "coordinator/cluster_coordinator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/closure_outcome.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/membership_service.h"
#include "coordinator/ps_monitor.h"
#include "coordinator/worker_handle.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "metrics/status_board.h"
#include "net/envelope.capnp.h"
#include "net/rpc_server.h"
#include "worker/worker.capnp.h"
#include "worker/worker_service.h"

namespace asyncps {

// What a queued closure carries besides its name: its arguments and when it was scheduled.
struct ClusterCoordinator::ClosureArgs {
  std::vector<ClosureArg> args;
  absl::Time scheduled;
};

// Automatic PS recovery's handle on the split cursors (PsRecovery::CoordinatorState).
class ClusterCoordinator::CursorRollback : public PsRecovery::CoordinatorState {
 public:
  explicit CursorRollback(ClusterCoordinator& coordinator) : coordinator_(coordinator) {}

  absl::Status CheckRollBack(const std::map<std::string, std::string>& state) override {
    return coordinator_.RollBackSplitCursors(state, nullptr);
  }

  CheckpointManager::FinishedClosures Finished() override {
    return {coordinator_.closure_ids_.first_id(), coordinator_.closure_ids_.Watermark()};
  }

  void RollBack(const std::map<std::string, std::string>& state, PsRecovery::Restored* restored) override {
    // Cannot fail: CheckRollBack passed on the same state, and nothing is dispatched since.
    if (absl::Status s = coordinator_.RollBackSplitCursors(state, restored); !s.ok()) {
      spdlog::error("split cursors not rolled back: {}", s.ToString());
    }
  }

 private:
  ClusterCoordinator& coordinator_;
};

// The membership service's view of the coordinator.
class ClusterCoordinator::MembersAdapter : public MembershipService::Members {
 public:
  explicit MembersAdapter(ClusterCoordinator& coordinator) : coordinator_(coordinator) {}
  absl::StatusOr<Joined> Join(int index, const std::string& address) override {
    ASSIGN_OR_RETURN(ClusterCoordinator::Joined j, coordinator_.JoinWorker(index, address));
    return Joined{j.members, j.already_member};
  }
  absl::StatusOr<int> Leave(int index, absl::Duration timeout) override {
    return coordinator_.DrainWorker(index, timeout);
  }
  absl::StatusOr<Joined> JoinPs(int index, const std::string& address) override {
    PsMonitor* monitor = coordinator_.strategy_.process().ps_monitor();
    if (monitor == nullptr) return Members::JoinPs(index, address);
    ASSIGN_OR_RETURN(PsMonitor::Admitted a, monitor->AdmitPs(index, address));
    return Joined{a.members, a.already_member};
  }
  absl::StatusOr<int> LeavePs(int index, absl::Duration timeout) override {
    PsMonitor* monitor = coordinator_.strategy_.process().ps_monitor();
    if (monitor == nullptr) return Members::LeavePs(index, timeout);
    return monitor->DrainPs(index, timeout);
  }

 private:
  ClusterCoordinator& coordinator_;
};

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program)
    : ClusterCoordinator(strategy, program, Options()) {}

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy, const Program& program, Options options)
    : strategy_(strategy),
      program_(program),
      options_(options),
      metrics_(std::make_unique<CoordinatorMetrics>(strategy.process().process_metrics())),
      queue_(options.queue_capacity) {
  const ClusterSpec& cluster = strategy.cluster();
  {
    MutexLock lock(&workers_mu_);
    for (int i = 0; i < cluster.num_workers(); ++i) {
      workers_.push_back(std::make_unique<WorkerHandle>(i, strategy.process().Connect(cluster.workers()[i])));
    }
  }
  if (options_.ps_recovery.enabled) {
    cursor_rollback_ = std::make_unique<CursorRollback>(*this);
    ps_recovery_ = std::make_unique<PsRecovery>(
        queue_,
        PsRecovery::MakeClusterPsRepair(strategy, options_.ps_recovery.checkpoints, cursor_rollback_.get()),
        metrics_.get(), options_.ps_recovery);
    if (PsMonitor* monitor = strategy.process().ps_monitor(); monitor != nullptr) {
      // Replicated shards: a group that lost every copy is restored at once, not when its
      // closures fail at their deadline.
      monitor->SetRestoreListener([this](const absl::Status& why) { ps_recovery_->OnPsFailure(why); });
    }
  }
  metrics::StatusBoard& board = strategy_.process().status_board();
  for (WorkerHandle* w : Members()) board.SetMember("worker", w->index(), w->address(), "starting", 0);
  board.SetValuesSource([this] {
    return std::map<std::string, double>{
        {"closures_completed", metrics_->completed.Value()}, {"closures_failed", metrics_->failed.Value()},
        {"closures_retried", metrics_->retried.Value()},     {"queue_depth", static_cast<double>(queue_.queued())},
        {"closures_in_flight", static_cast<double>(queue_.in_flight())},
        {"workers_up", static_cast<double>(workers_up())},  {"workers", static_cast<double>(num_workers())},
        {"worker_recoveries", metrics_->worker_recoveries.Value()},
        {"worker_joins", metrics_->worker_joins.Value()},   {"worker_departures", metrics_->worker_departures.Value()}};
  });
  queue_.SetInFlightCancellationHook([this] {
    for (WorkerHandle* w : Members()) w->CancelRunning();
  });
  {
    MutexLock lock(&workers_mu_);
    for (auto& w : workers_) StartWorkerThreads(w.get());
  }
  if (strategy_.process().options().process.elastic) ServeMembership();
}

void ClusterCoordinator::StartWorkerThreads(WorkerHandle* worker) {
  threads_.emplace_back([this, worker] { MonitorLoop(*worker); });
  for (int slot = 0; slot < std::max(1, options_.closures_per_worker); ++slot) {
    threads_.emplace_back([this, worker] { DispatchLoop(*worker); });
  }
}

void ClusterCoordinator::ServeMembership() {
  const ClusterSpec& cluster = strategy_.cluster();
  metrics::StatusBoard& board = strategy_.process().status_board();
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(cluster.self_address(), &host, &port); !s.ok() || cluster.dispatcher_in_chief()) {
    // The in-chief tf.data dispatcher serves on the chief's address already.
    const std::string why = s.ok() ? "the tf.data dispatcher runs in the chief on its address" : s.ToString();
    spdlog::error("--elastic: no membership service ({}); workers cannot join or leave", why);
    board.AddEvent("membership_off", why);
    return;
  }
  // A name (a Kubernetes pod's "J-chief-0.J-chief") is not an address to listen on: every
  // interface then, as the pod's Service routes to it.
  const bool literal = host == "localhost" || host.find_first_not_of("0123456789.:[]abcdefABCDEF") == std::string::npos;
  net::RpcServer::Options o;
  o.host = host == "localhost" ? "127.0.0.1" : (literal ? host : "0.0.0.0");
  o.port = port;
  o.role = "chief";
  o.task_index = cluster.task_index();
  o.token = strategy_.process().options().process.cluster_token;
  o.handler_threads = 4;
  o.metrics = &strategy_.process().rpc_metrics();
  members_adapter_ = std::make_unique<MembersAdapter>(*this);
  auto server = std::make_unique<net::RpcServer>(strategy_.process().loop(), o);
  MembershipService::Register(server->methods(), *members_adapter_);
  if (absl::Status s = server->Start(); !s.ok()) {
    spdlog::error("--elastic: the membership service cannot serve on {}: {}", cluster.self_address(), s.ToString());
    board.AddEvent("membership_off", s.ToString());
    return;
  }
  spdlog::info("membership service on {} (workers join and leave: --elastic)", cluster.self_address());
  membership_server_ = std::move(server);
}

int ClusterCoordinator::membership_port() const {
  return membership_server_ != nullptr ? membership_server_->port() : 0;
}

std::vector<WorkerHandle*> ClusterCoordinator::Members() const {
  MutexLock lock(&workers_mu_);
  std::vector<WorkerHandle*> out;
  out.reserve(workers_.size());
  for (const auto& w : workers_) out.push_back(w.get());
  return out;
}

int ClusterCoordinator::num_workers() const {
  MutexLock lock(&workers_mu_);
  return static_cast<int>(workers_.size());
}

absl::StatusOr<ClusterCoordinator::Joined> ClusterCoordinator::JoinWorker(int index, const std::string& address) {
  if (index < 0 || index >= MembershipService::kMaxWorkerIndex) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker index ", index, " is out of range [0, ", MembershipService::kMaxWorkerIndex, ")"));
  }
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(address, &host, &port); !s.ok() || port <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", index, ": '", address, "' is not host:port"));
  }
  Joined joined;
  {
    MutexLock lock(&workers_mu_);
    if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
    for (const auto& w : workers_) {
      if (w->index() != index) continue;
      if (w->address() != address) {
        return absl::AlreadyExistsError(absl::StrCat("worker ", index, " is already a member, at ", w->address(),
                                                     "; a joining worker needs an index of its own"));
      }
      joined.members = static_cast<int>(workers_.size());
      joined.already_member = true;
      return joined;
    }
    workers_.push_back(std::make_unique<WorkerHandle>(index, strategy_.process().Connect(address)));
    StartWorkerThreads(workers_.back().get());
    joined.members = static_cast<int>(workers_.size());
  }
  metrics_->worker_joins.Increment();
  metrics::StatusBoard& board = strategy_.process().status_board();
  board.SetMember("worker", index, address, "joining", 0);
  board.AddEvent("worker_joining", absl::StrCat("worker ", index, " at ", address,
                                                " registered; building its per-worker resources"));
  spdlog::info("worker {} at {} joins ({} members)", index, address, joined.members);
  return joined;
}

absl::StatusOr<int> ClusterCoordinator::DrainWorker(int index, absl::Duration timeout) {
  WorkerHandle* worker = nullptr;
  {
    MutexLock lock(&workers_mu_);
    if (shutting_down_) return absl::UnavailableError("the coordinator is shutting down");
    for (const auto& w : workers_) {
      if (w->index() == index) worker = w.get();
    }
  }
  if (worker == nullptr) return absl::NotFoundError(absl::StrCat("worker ", index, " is not a member"));
  if (!worker->StartDraining()) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", index, " is already draining"));
  }
  metrics::StatusBoard& board = strategy_.process().status_board();
  {
    MutexLock lock(&member_state_mu_);
    board.SetMember("worker", index, worker->address(), "draining", worker->incarnation());
  }
  board.AddEvent("worker_draining", absl::StrCat("worker ", index, ": no new closures; waiting for its own"));
  const absl::Time start = absl::Now();
  if (!worker->WaitUntilIdle(timeout)) {
    spdlog::warn("worker {}: closures still running {} into its drain; they go back to the queue", index,
                 absl::FormatDuration(timeout));
  }
  // Abandons what still runs there (it goes back to the queue, keeping its batch and id) and
  // ends the worker's threads; the dispatch threads then finish at once.
  worker->Stop();
  worker->WaitUntilIdle(absl::InfiniteDuration());
  const int requeued = worker->requeued();
  if (PsMonitor* monitor = strategy_.process().ps_monitor(); monitor != nullptr) monitor->ForgetWorker(index);
  {
    // The splits it was reading go to the others before any new one.
    MutexLock lock(&dynamic_mu_);
    for (auto& [name, d] : dynamic_datasets_) {
      for (auto& [epoch, cursor] : d.epochs) cursor->Disown(index);
    }
  }
  {
    MutexLock lock(&workers_mu_);
    auto it = std::find_if(workers_.begin(), workers_.end(), [&](const auto& w) { return w.get() == worker; });
    departed_.push_back(std::move(*it));
    workers_.erase(it);
  }
  metrics_->worker_departures.Increment();
  UpdateWorkerGauge();
  {
    MutexLock lock(&member_state_mu_);
    board.SetMember("worker", index, worker->address(), "left", 0);
  }
  board.AddEvent("worker_left", absl::StrCat("worker ", index, " drained in ",
                                             absl::FormatDuration(absl::Trunc(absl::Now() - start, absl::Milliseconds(1))),
                                             "; ", requeued, " closure(s) went back to the queue"));
  spdlog::info("worker {} left ({} closure(s) requeued)", index, requeued);
  return requeued;
}

ClusterCoordinator::~ClusterCoordinator() {
  {
    MutexLock lock(&workers_mu_);
    shutting_down_ = true;  // no worker joins or leaves from here on
  }
  if (PsMonitor* monitor = strategy_.process().ps_monitor(); monitor != nullptr && ps_recovery_ != nullptr) {
    monitor->SetRestoreListener(nullptr);
  }
  if (ps_recovery_ != nullptr) ps_recovery_->Stop();  // a repair in progress stops at its next step
  // Waits for a status request reading this coordinator; later ones see no values.
  strategy_.process().status_board().ClearValuesSource();
  queue_.Stop();  // nothing new is handed out; queued closures are cancelled
  // Cooperative functions stop within the grace and report normally.
  for (WorkerHandle* w : Members()) w->CancelRunning();
  if (!queue_.WaitUntilNoneInFlight(options_.shutdown_grace)) {
    spdlog::warn("{} closure(s) still running {} after cancelling them; abandoning them", queue_.in_flight(),
                 absl::FormatDuration(options_.shutdown_grace));
  }
  // Abandons every wait on a worker (closures, heartbeats, recovery probes): no thread below
  // is left blocked on the network, so the joins return at once.
  std::vector<std::thread> threads;
  {
    MutexLock lock(&workers_mu_);
    for (auto& w : workers_) w->Stop();
    threads = std::move(threads_);
  }
  // A drain in progress ends now (its worker is stopped); then no handler uses this.
  if (membership_server_ != nullptr) membership_server_->Shutdown();
  for (auto& t : threads) t.join();
  ps_recovery_.reset();
}

PsRecovery::Stats ClusterCoordinator::ps_recovery_stats() const {
  return ps_recovery_ != nullptr ? ps_recovery_->stats() : PsRecovery::Stats();
}

int ClusterCoordinator::workers_up() const {
  int n = 0;
  for (WorkerHandle* w : Members()) n += w->up() ? 1 : 0;
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
  {
    int dynamic = 0;
    MutexLock lock(&dynamic_mu_);
    for (const ClosureArg& arg : args) {
      const auto* v = std::get_if<PerWorkerValues>(&arg.value());
      if (v != nullptr && cursors_.contains(v->id())) ++dynamic;
    }
    if (dynamic > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", function, "' takes ", dynamic, " dynamically sharded iterators; a closure reads at most one"));
    }
  }
  auto closure = std::make_shared<Closure>();
  closure_ids_.Assign(closure);
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
  if (s.ok()) {
    MutexLock lock(&dynamic_mu_);
    if (std::exchange(end_of_data_, false)) {
      return absl::OutOfRangeError("end of data: a dynamically sharded iterator's epoch is complete");
    }
  }
  return s;
}

absl::StatusOr<bool> ClusterCoordinator::Done() {
  ASSIGN_OR_RETURN(bool done, queue_.Done());
  if (done) {
    MutexLock lock(&dynamic_mu_);
    if (std::exchange(end_of_data_, false)) {
      return absl::OutOfRangeError("end of data: a dynamically sharded iterator's epoch is complete");
    }
  }
  return done;
}

void ClusterCoordinator::RegisterDynamicDataset(const std::string& name, int64_t records_per_split) {
  MutexLock lock(&dynamic_mu_);
  dynamic_datasets_[name].records_per_split = records_per_split;
}

void ClusterCoordinator::StartEpoch(const std::string& name, uint64_t iterator_id) {
  MutexLock lock(&dynamic_mu_);
  DynamicDataset& d = dynamic_datasets_[name];
  std::shared_ptr<SplitCursor> cursor;
  if (auto it = restored_cursors_.find(name); it != restored_cursors_.end()) {
    cursor = std::move(it->second);
    restored_cursors_.erase(it);
    spdlog::info("dataset '{}': continuing epoch {} from the restored split cursor ({} batches done)", name,
                 cursor->epoch(), cursor->batches_completed());
  } else {
    cursor = std::make_shared<SplitCursor>(d.next_epoch, d.records_per_split);
  }
  d.next_epoch = cursor->epoch() + 1;
  d.latest = cursor;
  d.latest_iterator = iterator_id;
  d.epochs[cursor->epoch()] = cursor;
  cursors_[iterator_id] = std::move(cursor);
}

std::shared_ptr<SplitCursor> ClusterCoordinator::CursorFor(const std::vector<ClosureArg>& args, uint64_t* iterator_id) const {
  MutexLock lock(&dynamic_mu_);
  for (const ClosureArg& arg : args) {
    const auto* v = std::get_if<PerWorkerValues>(&arg.value());
    if (v == nullptr) continue;
    if (auto it = cursors_.find(v->id()); it != cursors_.end()) {
      *iterator_id = v->id();
      return it->second;
    }
  }
  return nullptr;
}

std::map<std::string, std::string> ClusterCoordinator::SplitCursorState() const {
  std::map<std::string, std::string> state;
  MutexLock lock(&dynamic_mu_);
  for (const auto& [name, d] : dynamic_datasets_) {
    if (d.latest != nullptr) state[absl::StrCat(kSplitCursorStatePrefix, name)] = d.latest->SaveState();
  }
  return state;
}

absl::Status ClusterCoordinator::RestoreSplitCursors(const std::map<std::string, std::string>& state) {
  std::map<std::string, std::shared_ptr<SplitCursor>> restored;
  for (const auto& [key, value] : state) {
    if (!absl::StartsWith(key, kSplitCursorStatePrefix)) continue;
    const std::string name = key.substr(std::strlen(kSplitCursorStatePrefix));
    absl::StatusOr<std::unique_ptr<SplitCursor>> cursor = SplitCursor::FromState(value);
    if (!cursor.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("dataset '", name, "': ", cursor.status().message()));
    }
    restored[name] = std::move(*cursor);
  }
  MutexLock lock(&dynamic_mu_);
  for (auto& [name, cursor] : restored) restored_cursors_[name] = std::move(cursor);
  return absl::OkStatus();
}

absl::Status ClusterCoordinator::RollBackSplitCursors(const std::map<std::string, std::string>& state,
                                                      PsRecovery::Restored* restored) {
  std::map<std::string, std::shared_ptr<SplitCursor>> cuts;
  for (const auto& [key, value] : state) {
    if (!absl::StartsWith(key, kSplitCursorStatePrefix)) continue;
    const std::string name = key.substr(std::strlen(kSplitCursorStatePrefix));
    absl::StatusOr<std::unique_ptr<SplitCursor>> cursor = SplitCursor::FromState(value);
    if (!cursor.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the checkpoint's split cursor of dataset '", name, "': ", cursor.status().message()));
    }
    cuts[name] = std::move(*cursor);
  }
  MutexLock lock(&dynamic_mu_);
  for (const auto& [name, cut] : cuts) {
    auto d = dynamic_datasets_.find(name);
    if (d == dynamic_datasets_.end() || d->second.latest == nullptr) continue;
    if (cut->epoch() > d->second.latest->epoch()) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint's split cursor of dataset '", name,
                                                        "' is in epoch ", cut->epoch(), ", after epoch ",
                                                        d->second.latest->epoch(), " being read"));
    }
  }
  if (restored == nullptr) return absl::OkStatus();
  for (auto& [name, d] : dynamic_datasets_) {
    if (d.latest == nullptr) continue;  // nothing read yet: nothing to roll back
    auto found = cuts.find(name);
    if (found == cuts.end()) {
      restored->cursors_missing.push_back(name);
      continue;
    }
    std::shared_ptr<SplitCursor> cut = found->second;
    // The work redone: what was completed after the cut, in its epoch and in later ones.
    int64_t redone = 0;
    for (auto e = d.epochs.lower_bound(cut->epoch()); e != d.epochs.end(); ++e) {
      const int64_t before = e->first == cut->epoch() ? cut->batches_completed() : 0;
      redone += std::max<int64_t>(0, e->second->batches_completed() - before);
    }
    restored->batches_redone += redone;
    spdlog::warn(
        "dataset '{}': split cursor rolled back to the checkpoint's (epoch {}, {} batches done) from "
        "epoch {} ({} batches done): {} batch(es) are handed out again",
        name, cut->epoch(), cut->batches_completed(), d.latest->epoch(), d.latest->batches_completed(), redone);
    // The latest iterator reads on from the cut; later epochs start again from their beginning.
    d.epochs.erase(d.epochs.lower_bound(cut->epoch()), d.epochs.end());
    d.epochs[cut->epoch()] = cut;
    d.next_epoch = cut->epoch() + 1;
    d.latest = cut;
    cursors_[d.latest_iterator] = std::move(cut);
    // Batches are there to hand out again: the end of the data seen before is no longer true.
    end_of_data_ = false;
  }
  return absl::OkStatus();
}

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
  for (WorkerHandle* w : Members()) {
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
  for (WorkerHandle* w : Members()) w->DeleteResource(spec.id, options_.rpc_timeout);
  spdlog::warn("CreatePerWorkerResource('{}') failed: {}", factory, failure.ToString());
  return failure;
}

void ClusterCoordinator::WorkerFailed(WorkerHandle& worker, uint64_t incarnation, const absl::Status& reason) {
  if (PsMonitor* monitor = strategy_.process().ps_monitor(); monitor != nullptr) monitor->ForgetWorker(worker.index());
  if (worker.MarkDown(incarnation, reason)) {
    if (worker.draining()) {
      // It was leaving: its drain ends now, counted as a departure, not a failure.
      strategy_.process().status_board().AddEvent(
          "worker_lost_while_draining", absl::StrCat("worker ", worker.index(), ": ", reason.ToString()));
      return;
    }
    metrics_->worker_failures.Increment();
    UpdateWorkerGauge();
    metrics::StatusBoard& board = strategy_.process().status_board();
    board.AddEvent("worker_down", absl::StrCat("worker ", worker.index(), ": ", reason.ToString()));
    MutexLock lock(&member_state_mu_);
    // The monitor may have recovered the worker since MarkDown (and written "up"): then
    // "down" is no longer true and must not be the board's last word.
    if (!worker.up()) board.SetMember("worker", worker.index(), worker.address(), "down", 0);
  }
}

void ClusterCoordinator::MonitorLoop(WorkerHandle& worker) {
  absl::Duration backoff = absl::Milliseconds(50);
  metrics::StatusBoard& board = strategy_.process().status_board();
  bool admitted_before = false;  // a later admission is a recovery
  while (true) {
    if (worker.up()) {
      backoff = absl::Milliseconds(50);
      const uint64_t incarnation = worker.incarnation();
      std::vector<absl::Duration> ps_silence;
      absl::Status s = worker.Heartbeat(options_.heartbeat_timeout, &ps_silence);
      if (!s.ok()) WorkerFailed(worker, incarnation, s);
      // The worker's view of the PS goes to the chief's PS monitor (replicated shards), which
      // fails over a primary the workers cannot reach though the chief can.
      if (PsMonitor* monitor = strategy_.process().ps_monitor(); s.ok() && monitor != nullptr) {
        monitor->WorkerView(worker.index(), std::move(ps_silence));
      }
      // Wakes early when the worker is marked down by a failed call, to start recovering.
      worker.WaitWhileUp(options_.heartbeat_interval);
    } else if (worker.draining()) {
      // Leaving: not recovered. DrainWorker stops the handle, which ends this loop.
      if (!worker.WaitUntilUpFor(options_.max_recovery_backoff)) return;
    } else {
      std::vector<ResourceSpec> resources;
      {
        MutexLock lock(&resources_mu_);
        resources = resources_;
      }
      if (admitted_before) board.SetMember("worker", worker.index(), worker.address(), "recovering", 0);
      absl::Status s = worker.Recover(strategy_.process().directory(), resources, options_.rpc_timeout);
      if (s.ok()) {
        UpdateWorkerGauge();
        const int64_t rebuilt = worker.TakeResourcesRebuilt();
        metrics_->resources_rebuilt.Increment(static_cast<double>(rebuilt));
        {
          MutexLock lock(&member_state_mu_);
          board.SetMember("worker", worker.index(), worker.address(), "up", worker.incarnation());
        }
        if (admitted_before) {
          metrics_->worker_recoveries.Increment();
          board.AddEvent("worker_rebuilt", absl::StrCat("worker ", worker.index(), " admitted again as incarnation ",
                                                        absl::Hex(worker.incarnation()), ", ", rebuilt,
                                                        " resources rebuilt"));
        } else {
          board.AddEvent("worker_up", absl::StrCat("worker ", worker.index(), " admitted"));
        }
        admitted_before = true;
        continue;
      }
      if (admitted_before) board.SetMember("worker", worker.index(), worker.address(), "down", 0);
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
  while (!worker.draining() && worker.WaitUntilUp()) {
    std::shared_ptr<Closure> closure = queue_.Get(absl::InfiniteDuration());
    if (closure == nullptr) return;  // stopped
    if (!worker.BeginDispatch()) {
      // The worker began draining while this thread waited: the closure is another's.
      queue_.PutBack(closure);
      return;
    }
    RunClosure(worker, closure);
    worker.EndDispatch();
    UpdateQueueGauges();
  }
}

void ClusterCoordinator::RunClosure(WorkerHandle& worker, const std::shared_ptr<Closure>& closure) {
  const uint64_t incarnation = worker.incarnation();
  auto put_back = [&](const absl::Status& reason) {
    if (worker.stopping()) {  // abandoned by the destructor (the stopped queue cancels it) or a drain
      if (worker.draining()) worker.NoteRequeued();
      queue_.PutBack(closure);
      return;
    }
    if (worker.draining()) worker.NoteRequeued();
    WorkerFailed(worker, incarnation, reason);
    metrics_->retried.Increment();
    const uint64_t id = closure->id;
    queue_.PutBack(closure);
    // Cancelled instead of queued (an error is pending): its batch, if it had one, goes back.
    if (closure->output.done()) {
      uint64_t iterator_id;
      const auto& args = std::static_pointer_cast<const ClosureArgs>(closure->payload)->args;
      if (std::shared_ptr<SplitCursor> c = CursorFor(args, &iterator_id)) c->Release(id);
    }
  };
  if (incarnation == 0) {  // went down between WaitUntilUp and Get: nothing to report
    queue_.PutBack(closure);
    return;
  }
  if (absl::Status s = worker.SyncDirectory(strategy_.process().directory(), options_.rpc_timeout); !s.ok()) {
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
  // Dynamic sharding: the batch this closure reads (the same one when it runs again).
  uint64_t iterator_id = 0;
  const std::shared_ptr<SplitCursor> cursor = CursorFor(payload.args, &iterator_id);
  SplitBinding binding;
  if (cursor != nullptr) {
    absl::StatusOr<SplitBinding> bound = cursor->Bind(closure->id, worker.index());
    if (!bound.ok()) {
      // Every batch of the epoch is handed out: this closure reads nothing. Not an error that
      // cancels the others (they hold batches); Join reports the end once they are done.
      closure->output.SetFailed(bound.status());
      {
        MutexLock lock(&dynamic_mu_);
        end_of_data_ = true;
      }
      queue_.MarkFinished();
      return;
    }
    binding = *bound;
  }
  net::OutMessage request;
  auto body = request.InitRequestBody<wire::RunRequest>();
  if (cursor != nullptr) {
    auto split = body.initSplit();
    split.setResource(iterator_id);
    split.setEpoch(binding.epoch);
    split.setSplit(binding.split);
    split.setBegin(binding.begin);
    split.setEnd(binding.end);
    split.setBatch(binding.batch);
  }
  body.setFunction(closure->function);
  body.setClosureId(closure->id);
  body.setIncarnation(incarnation);
  if (options_.deduplicate_updates) {
    body.setCoordinator(closure_ids_.first_id());
    body.setWatermark(closure_ids_.Watermark());
  }
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
    if (cursor != nullptr) cursor->Release(closure->id);
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
  SplitOutcome split_outcome = SplitOutcome::kUnread;
  if (rpc.ok()) {
    rpc = net::CatchDecodeErrors([&]() -> absl::Status {
      auto r = response->ResponseBody<wire::RunResponse>();
      split_outcome = static_cast<SplitOutcome>(r.getSplit());
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

  if (cursor != nullptr && rpc.ok() &&
      (split_outcome == SplitOutcome::kPastEnd || split_outcome == SplitOutcome::kBeyondSource)) {
    // Its batch lies past its split's end, so it read nothing (whatever it returned): bind it
    // again, under a new id, so that the parameter servers' update window does not take the
    // updates it makes with its new batch for repeats of this attempt's.
    cursor->PastEnd(closure->id, split_outcome == SplitOutcome::kBeyondSource);
    closure_ids_.Assign(closure);
    queue_.PutBack(closure);
    return;
  }
  const ClosureOutcome outcome = ClassifyClosure(rpc, status, source);
  // A closure that runs again (its worker failed, or a PS is being repaired) keeps its batch;
  // one that failed or was cancelled gives it to a later closure.
  if (cursor != nullptr && outcome == ClosureOutcome::kSucceeded) {
    cursor->Complete(closure->id, split_outcome == SplitOutcome::kLast);
  }
  switch (outcome) {
    case ClosureOutcome::kSucceeded:
      if (ps_recovery_ != nullptr) ps_recovery_->NoteCompleted();
      closure->output.SetReady(std::move(values));
      metrics_->completed.Increment();
      metrics_->closure_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - payload.scheduled));
      queue_.MarkFinished();
      return;
    case ClosureOutcome::kWorkerFailure:
      return put_back(rpc);
    case ClosureOutcome::kStaleGradient: {
      // The PS applied nothing of the refused push and released its exactly-once claims: the
      // re-run (same id, same batch) applies it once, on fresh values. The worker is fine.
      metrics_->retried.Increment();
      const uint64_t id = closure->id;
      queue_.PutBack(closure);
      // Cancelled instead of queued (an error is pending): its batch goes back.
      if (cursor != nullptr && closure->output.done()) cursor->Release(id);
      return;
    }
    case ClosureOutcome::kCancelled:
      if (cursor != nullptr) cursor->Release(closure->id);
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
  if (outcome != ClosureOutcome::kFunctionError && ps_recovery_ != nullptr && ps_recovery_->OnPsFailure(status)) {
    // Dispatch is paused; the closure runs again once the PS are repaired.
    metrics_->retried.Increment();
    queue_.PutBack(closure);
    return;
  }
  spdlog::warn("closure '{}' failed on worker {}: {}", closure->function, worker.index(), status.ToString());
  if (cursor != nullptr) cursor->Release(closure->id);
  closure->output.SetFailed(status);
  metrics_->failed.Increment();
  queue_.MarkFailed(status);
}

}  // namespace asyncps
