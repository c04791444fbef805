#include "coordinator/worker_handle.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "worker/worker.capnp.h"
#include "worker/worker_service.h"

namespace asyncps {

// One Call's rendezvous between the waiting thread, the loop thread that completes the RPC,
// and Stop. Shared, because the RPC may complete after the waiter gave up (it was aborted).
struct WorkerHandle::PendingCall {
  Mutex mu;
  std::optional<absl::StatusOr<net::InMessage>> result ABSL_GUARDED_BY(mu);
  bool aborted ABSL_GUARDED_BY(mu) = false;

  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return result.has_value() || aborted; }
};

WorkerHandle::WorkerHandle(int index, std::unique_ptr<net::RpcClient> client)
    : index_(index), client_(std::move(client)) {}

absl::StatusOr<net::InMessage> WorkerHandle::Call(const std::string& method, net::OutMessage request,
                                                  absl::Duration timeout) {
  auto call = std::make_shared<PendingCall>();
  {
    MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("coordinator is shutting down");
    pending_.insert(call);
  }
  client_->CallAsync(method, std::move(request), timeout, [call](absl::StatusOr<net::InMessage> result) {
    MutexLock lock(&call->mu);
    call->result.emplace(std::move(result));
  });
  absl::StatusOr<net::InMessage> out = absl::CancelledError(
      absl::StrCat(method, " to worker ", index_, " abandoned: coordinator is shutting down"));
  {
    MutexLock lock(&call->mu);
    call->mu.Await(absl::Condition(call.get(), &PendingCall::Finished));
    if (call->result.has_value()) out = std::move(*call->result);
  }
  MutexLock lock(&mu_);
  pending_.erase(call);
  return out;
}

bool WorkerHandle::up() const {
  MutexLock lock(&mu_);
  return up_;
}

uint64_t WorkerHandle::incarnation() const {
  MutexLock lock(&mu_);
  return up_ ? incarnation_ : 0;
}

bool WorkerHandle::WaitUntilUp() const {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](const WorkerHandle* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->up_ || w->stopping_; }, this));
  return !stopping_;
}

void WorkerHandle::WaitWhileUp(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](const WorkerHandle* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                             return !w->up_ || w->stopping_;
                           },
                           this),
                       timeout);
}

bool WorkerHandle::WaitUntilUpFor(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](const WorkerHandle* w) ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->up_ || w->stopping_; },
                           this),
                       timeout);
  return !stopping_;
}

bool WorkerHandle::stopping() const {
  MutexLock lock(&mu_);
  return stopping_;
}

bool WorkerHandle::MarkDown(uint64_t incarnation, const absl::Status& reason) {
  MutexLock lock(&mu_);
  if (!up_ || stopping_ || (incarnation != 0 && incarnation != incarnation_)) return false;
  up_ = false;
  spdlog::warn("worker {} ({}) is down: {}", index_, client_->address(), reason.ToString());
  // Still under mu_: Recover cannot mark the worker up (and so no closure can be sent) until
  // the old connection is closed. A closure sent over it could run and lose its answer, and
  // then run again. Safe and bounded: see the comment on mu_.
  client_->Disconnect();
  return true;
}

absl::Status WorkerHandle::Heartbeat(absl::Duration timeout, std::vector<absl::Duration>* ps_silence) {
  const uint64_t expected = incarnation();
  ASSIGN_OR_RETURN(net::InMessage response, Call("worker.Heartbeat", net::OutMessage(), timeout));
  uint64_t incarnation = 0;
  std::vector<absl::Duration> silence;
  RETURN_IF_ERROR(net::CatchDecodeErrors([&] {
    auto body = response.ResponseBody<wire::HeartbeatResponse>();
    incarnation = body.getIncarnation();
    for (int64_t micros : body.getPsSilenceMicros()) silence.push_back(absl::Microseconds(micros));
    return absl::OkStatus();
  }));
  if (ps_silence != nullptr) *ps_silence = std::move(silence);
  if (expected != 0 && incarnation != expected) {
    return absl::UnavailableError(absl::StrCat("worker restarted (incarnation ", incarnation, ")"));
  }
  return absl::OkStatus();
}

absl::Status WorkerHandle::SendDirectory(const VariableDirectory& directory, absl::Duration timeout) {
  const uint64_t version = directory.version();
  const auto placements = directory.All();
  net::OutMessage request;
  auto body = request.InitRequestBody<wire::SetDirectoryRequest>();
  body.setVersion(version);
  auto list = body.initVariables(static_cast<unsigned>(placements.size()));
  for (unsigned i = 0; i < placements.size(); ++i) {
    const VariablePlacement& p = *placements[i];
    list[i].setName(p.name);
    list[i].setDtype(static_cast<uint8_t>(p.dtype));
    net::SetShape(list[i].initShape(static_cast<unsigned>(p.shape.size())), p.shape);
    auto shards = list[i].initShards(static_cast<unsigned>(p.shards.size()));
    for (unsigned s = 0; s < p.shards.size(); ++s) {
      shards[s].setName(p.shards[s].name);
      shards[s].setPs(p.shards[s].ps);
      shards[s].setRowBegin(p.shards[s].row_begin);
      shards[s].setRowEnd(p.shards[s].row_end);
    }
  }
  RETURN_IF_ERROR(Call("worker.SetDirectory", std::move(request), timeout).status());
  MutexLock lock(&mu_);
  directory_version_ = version;
  return absl::OkStatus();
}

absl::Status WorkerHandle::SendResource(const ResourceSpec& spec, absl::Duration timeout) {
  net::OutMessage request;
  auto body = request.InitRequestBody<wire::CreateResourceRequest>();
  body.setId(spec.id);
  body.setFactory(spec.factory);
  auto args = body.initArgs(static_cast<unsigned>(spec.args.size()));
  unsigned i = 0;
  for (const auto& [name, value] : spec.args) {
    args[i].setName(name);
    args[i].setValue(value);
    ++i;
  }
  RETURN_IF_ERROR(Call("worker.CreateResource", std::move(request), timeout).status());
  MutexLock lock(&mu_);
  resources_.insert(spec.id);
  return absl::OkStatus();
}

absl::Status WorkerHandle::Recover(const VariableDirectory& directory, const std::vector<ResourceSpec>& resources,
                                   absl::Duration timeout) {
  MutexLock setup(&setup_mu_);
  ASSIGN_OR_RETURN(net::InMessage response, Call("worker.Heartbeat", net::OutMessage(), timeout));
  uint64_t incarnation = 0;
  uint64_t version = 0;
  absl::flat_hash_set<uint64_t> present;
  RETURN_IF_ERROR(net::CatchDecodeErrors([&] {
    auto hb = response.ResponseBody<wire::HeartbeatResponse>();
    incarnation = hb.getIncarnation();
    version = hb.getDirectoryVersion();
    for (uint64_t id : hb.getResources()) present.insert(id);
    return absl::OkStatus();
  }));
  bool restarted;
  {
    MutexLock lock(&mu_);
    restarted = incarnation_ != 0 && incarnation != incarnation_;
    incarnation_ = incarnation;
    directory_version_ = version;
    resources_ = present;
    failed_resources_.clear();
  }
  if (version != directory.version() || directory.version() == 0) {
    RETURN_IF_ERROR(SendDirectory(directory, timeout));
  }
  // Rebuild what this incarnation lacks before it may run a closure.
  int rebuilt = 0;
  for (const ResourceSpec& spec : resources) {
    if (present.contains(spec.id)) continue;
    absl::Status s = SendResource(spec, timeout);
    if (IsResourceFactoryError(s)) {
      // The user's error, not the worker's: admit the worker anyway; the closures that use
      // this resource here fail with this error (as TensorFlow raises an input error).
      spdlog::warn("worker {}: {}; closures using it there will fail with this error", index_, s.ToString());
      MutexLock lock(&mu_);
      failed_resources_[spec.id] = s;
      continue;
    }
    RETURN_IF_ERROR(s);
    ++rebuilt;
  }
  {
    MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("stopping");
    up_ = true;
  }
  if (restarted) {
    {
      MutexLock lock(&mu_);
      resources_rebuilt_ += rebuilt;
    }
    spdlog::info("worker {} ({}) is back as a new incarnation; rebuilt {} per-worker resource(s)", index_,
                 client_->address(), rebuilt);
  } else {
    spdlog::info("worker {} ({}) is up ({} per-worker resource(s) created)", index_, client_->address(), rebuilt);
  }
  return absl::OkStatus();
}

int64_t WorkerHandle::TakeResourcesRebuilt() {
  MutexLock lock(&mu_);
  return std::exchange(resources_rebuilt_, 0);
}

absl::Status WorkerHandle::CreateResourceIfUp(const ResourceSpec& spec, absl::Duration timeout) {
  MutexLock setup(&setup_mu_);
  {
    MutexLock lock(&mu_);
    if (!up_ || resources_.contains(spec.id)) return absl::OkStatus();
  }
  return SendResource(spec, timeout);
}

void WorkerHandle::DeleteResource(uint64_t id, absl::Duration timeout) {
  MutexLock setup(&setup_mu_);
  bool send;
  {
    MutexLock lock(&mu_);
    send = up_ && resources_.contains(id);
    resources_.erase(id);
    failed_resources_.erase(id);
  }
  if (!send) return;
  net::OutMessage request;
  request.InitRequestBody<wire::DeleteResourceRequest>().setId(id);
  if (absl::Status s = Call("worker.DeleteResource", std::move(request), timeout).status(); !s.ok()) {
    spdlog::warn("could not delete per-worker resource {} on worker {}: {}", id, index_, s.ToString());
  }
}

absl::Status WorkerHandle::ResourceFailure(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = failed_resources_.find(id);
  return it == failed_resources_.end() ? absl::OkStatus() : it->second;
}

absl::Status WorkerHandle::SyncDirectory(const VariableDirectory& directory, absl::Duration timeout) {
  {
    MutexLock lock(&mu_);
    if (directory_version_ == directory.version()) return absl::OkStatus();
  }
  MutexLock setup(&setup_mu_);
  {
    MutexLock lock(&mu_);
    if (directory_version_ == directory.version()) return absl::OkStatus();
  }
  return SendDirectory(directory, timeout);
}

void WorkerHandle::AddRunning(uint64_t closure_id) {
  MutexLock lock(&mu_);
  running_.insert(closure_id);
}

void WorkerHandle::RemoveRunning(uint64_t closure_id) {
  MutexLock lock(&mu_);
  running_.erase(closure_id);
}

void WorkerHandle::CancelRunning() {
  net::OutMessage request;
  {
    MutexLock lock(&mu_);
    if (running_.empty()) return;
    auto ids = request.InitRequestBody<wire::CancelRequest>().initClosureIds(static_cast<unsigned>(running_.size()));
    unsigned i = 0;
    for (uint64_t id : running_) ids.set(i++, id);
  }
  client_->CallAsync("worker.Cancel", std::move(request), absl::Seconds(10), [](absl::StatusOr<net::InMessage>) {});
}

bool WorkerHandle::BeginDispatch() {
  MutexLock lock(&mu_);
  if (draining_) return false;
  ++dispatching_;
  return true;
}

void WorkerHandle::EndDispatch() {
  MutexLock lock(&mu_);
  --dispatching_;
}

bool WorkerHandle::StartDraining() {
  MutexLock lock(&mu_);
  return !std::exchange(draining_, true);
}

bool WorkerHandle::draining() const {
  MutexLock lock(&mu_);
  return draining_;
}

bool WorkerHandle::WaitUntilIdle(absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(
                                  +[](const WorkerHandle* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                    return w->dispatching_ == 0;
                                  },
                                  this),
                              timeout);
}

void WorkerHandle::NoteRequeued() {
  MutexLock lock(&mu_);
  ++requeued_;
}

int WorkerHandle::requeued() const {
  MutexLock lock(&mu_);
  return requeued_;
}

void WorkerHandle::Stop() {
  MutexLock lock(&mu_);
  stopping_ = true;
  for (const std::shared_ptr<PendingCall>& call : pending_) {
    MutexLock call_lock(&call->mu);
    call->aborted = true;
  }
}

}  // namespace asyncps
