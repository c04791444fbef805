#include "ps/replication/replicated_ps.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "net/envelope.capnp.h"
#include "ps/ps_wire.h"
#include "ps/replication/backup_stream.h"
#include "ps/replication/logged_write.h"

namespace asyncps::ps {
namespace {

bool Contains(const std::vector<int32_t>& list, int32_t ps) {
  return std::find(list.begin(), list.end(), ps) != list.end();
}

capnp::AnyPointer::Reader RequestBodyPointer(const net::InMessage& request) {
  return request.envelope().getRequest().getBody();
}

// What identifies a stream entry for a resend: its method and body (tensor references
// included: a resend starts at the same sequence, so they number the same payloads).
uint64_t EntryDigest(wire::ReplicatedEntry::Reader entry) {
  capnp::MallocMessageBuilder copy;
  copy.getRoot<capnp::AnyPointer>().set(entry.getBody());
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(copy);
  const kj::ArrayPtr<const kj::byte> bytes = flat.asBytes();
  return absl::HashOf(std::string_view(entry.getMethod().cStr()),
                      std::string_view(reinterpret_cast<const char*>(bytes.begin()), bytes.size()));
}

// How many updates of a ps.Update or ps.PushGradients its apply skipped as already applied (the
// alreadyApplied it wrote into `response`); LoggedWrite::kSkipsNotCounted for another write, or
// when the apply wrote no answer.
uint32_t SkippedIn(absl::string_view method, net::OutMessage* response) {
  if (response == nullptr || (method != "ps.Update" && method != "ps.PushGradients")) {
    return LoggedWrite::kSkipsNotCounted;
  }
  auto envelope = response->envelope().asReader();
  if (!envelope.isResponse() || !envelope.getResponse().hasBody()) return LoggedWrite::kSkipsNotCounted;
  return envelope.getResponse().getBody().getAs<wire::UpdateResponse>().getAlreadyApplied();
}

// A tensor whose bytes are left unwritten (the caller writes every one).
Tensor UninitializedTensor(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  std::shared_ptr<void> block = AllocateAlignedUninitialized(bytes);
  void* data = block.get();
  return Tensor::View(dtype, shape, std::move(block), data);
}

}  // namespace

ReplicatedPs::ReplicatedPs(PsService& service, Options options)
    : service_(service),
      options_(std::move(options)),
      create_check_(capnp::Schema::from<wire::CreateVariableRequest>()),
      update_check_(capnp::Schema::from<wire::UpdateRequest>()),
      push_check_(capnp::Schema::from<wire::PushGradientsRequest>()),
      restore_check_(capnp::Schema::from<wire::RestoreCheckpointRequest>()) {
  if (options_.extension != nullptr) default_extension_ = options_.extension->DefaultState();
  // Until a map arrives, the PS's own group is its default store, served as PsService serves it.
  auto own = std::make_shared<GroupCopy>(static_cast<uint32_t>(options_.ps_index), DefaultState());
  {
    MutexLock lock(&own->mu);
    own->role = CopyRole::kPrimary;
    own->primary = options_.ps_index;
  }
  {
    MutexLock lock(&mu_);
    copies_[own->group] = std::move(own);
  }
  reaper_ = std::thread([this] { Reap(); });
}

void ReplicatedPs::Reap() {
  // Deadlines are checked this often: a write not acknowledged in time is answered at most
  // this late.
  constexpr absl::Duration kReapPeriod = absl::Milliseconds(20);
  for (;;) {
    {
      MutexLock lock(&reap_mu_);
      if (reap_mu_.AwaitWithTimeout(absl::Condition(&stopping_), kReapPeriod)) return;
    }
    std::vector<std::shared_ptr<GroupCopy>> copies;
    {
      MutexLock lock(&mu_);
      for (auto& [group, copy] : copies_) copies.push_back(copy);
    }
    for (auto& copy : copies) copy->AnswerDue();
  }
}

ReplicatedPs::~ReplicatedPs() {
  {
    MutexLock lock(&reap_mu_);
    stopping_ = true;
  }
  reaper_.join();
  // Streams (and their threads) stop before the service they apply through goes.
  absl::flat_hash_map<uint32_t, std::shared_ptr<GroupCopy>> copies;
  {
    MutexLock lock(&mu_);
    copies.swap(copies_);
  }
  copies.clear();
}

std::shared_ptr<GroupCopy> ReplicatedPs::NewCopy(uint32_t group) const {
  UpdateDedup::Options dedup;
  dedup.max_entries = options_.dedup_max_entries;
  dedup.metrics = options_.metrics;
  // Every copy's variables count against the PS's one cap (its default store's).
  return std::make_shared<GroupCopy>(group, service_.default_state().store, dedup,
                                     options_.extension != nullptr ? options_.extension->NewState(group) : nullptr);
}

PsService::ShardState ReplicatedPs::DefaultState() const {
  PsService::ShardState s = service_.default_state();
  s.extension = default_extension_.get();
  return s;
}

void ReplicatedPs::RoutedWriteThen(const net::RequestContext& context, const char* method,
                                   const net::InMessage& request, bool has_route, wire::Route::Reader route,
                                   const StateFn& apply, GroupCopy::AnswerFn done) {
  WriteThen(context, method, request, has_route, route, apply, std::move(done));
}

absl::Status ReplicatedPs::RoutedRead(bool has_route, wire::Route::Reader route, const char* method,
                                      const StateFn& read) {
  return ReadAt(has_route, route, method, read);
}

std::shared_ptr<GroupCopy> ReplicatedPs::CopyOf(uint32_t group) const {
  MutexLock lock(&mu_);
  auto it = copies_.find(group);
  return it == copies_.end() ? nullptr : it->second;
}

ShardMap ReplicatedPs::map() const {
  MutexLock lock(&mu_);
  return map_;
}

template <typename Request, typename ApplyFn>
void ReplicatedPs::RegisterWrite(net::MethodTable& server, const char* method, net::PeerRoles callers,
                                 net::Dispatch dispatch, ApplyFn apply) {
  server.RegisterDeferred<Request>(
      method, std::move(callers),
      [this, method, apply](const net::RequestContext& ctx, const net::InMessage& req, net::DeferredResponse answer) {
        auto body = req.RequestBody<Request>();
        // The response body is filled by the apply, and sent with the acknowledgement.
        auto response = std::make_shared<net::OutMessage>();
        WriteThen(
            ctx, method, req, body.hasRoute(), body.getRoute(),
            [&](PsService::ShardState s) { return apply(s, req, body, response.get()); },
            [answer = std::move(answer), response](const absl::Status& status) {
              answer.Send(status, std::move(*response));
            },
            response.get());
      },
      dispatch);
}

void ReplicatedPs::RegisterWith(net::MethodTable& server) {
  net::Dispatch updates =
      service_.options().inline_small_updates ? net::Dispatch::kInlineIfSmall : net::Dispatch::kAdaptive;
  RegisterWrite<wire::CreateVariableRequest>(
      server, "ps.CreateVariable", net::PsCallers(), net::Dispatch::kPool,
      [this](PsService::ShardState s, const net::InMessage& req, wire::CreateVariableRequest::Reader body,
             net::OutMessage* resp) { return service_.CreateVariableIn(s, req, body, resp); });
  RegisterWrite<wire::UpdateRequest>(server, "ps.Update", net::PsCallers(), updates,
                                     [this](PsService::ShardState s, const net::InMessage& req,
                                            wire::UpdateRequest::Reader body, net::OutMessage* resp) {
                                       return service_.UpdateIn(s, req, body, resp);
                                     });
  RegisterWrite<wire::PushGradientsRequest>(server, "ps.PushGradients", net::PsCallers(), updates,
                                            [this](PsService::ShardState s, const net::InMessage& req,
                                                   wire::PushGradientsRequest::Reader body, net::OutMessage* resp) {
                                              // The copy answering the client answers readAfter too
                                              // (after the write; backups replay it without).
                                              return service_.PushGradientsIn(s, req, body, resp,
                                                                              /*answer_read_after=*/true);
                                            });
  server.Register<wire::ReadRequest>(
      "ps.Read", net::PsReaders(), [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        auto body = req.RequestBody<wire::ReadRequest>();
        return ReadAt(body.hasRoute(), body.getRoute(), "ps.Read",
                      [&](PsService::ShardState s) { return service_.ReadIn(s, body, resp); });
      });
  server.Register<wire::GatherRequest>(
      "ps.Gather", net::PsReaders(),
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        auto body = req.RequestBody<wire::GatherRequest>();
        return ReadAt(body.hasRoute(), body.getRoute(), "ps.Gather",
                      [&](PsService::ShardState s) { return service_.GatherIn(s, req, body, resp); });
      },
      PsService::kGatherDispatch);
  server.Register<wire::Empty>(
      "ps.ListVariables", net::PsReaders(),
      [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
        return ReadAt(false, wire::Route::Reader(), "ps.ListVariables",
                      [&](PsService::ShardState s) { return service_.ListVariablesIn(s, resp); });
      });
  if (options_.checkpoints != nullptr) {
    CheckpointService& checkpoints = *options_.checkpoints;
    server.Register<wire::SaveCheckpointRequest>(
        "ps.SaveCheckpoint", net::ChiefOnly(),
        [this, &checkpoints](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
          auto body = req.RequestBody<wire::SaveCheckpointRequest>();
          return ReadAt(body.hasRoute(), body.getRoute(), "ps.SaveCheckpoint", [&](PsService::ShardState s) {
            return checkpoints.SaveIn(*s.store, body, resp);
          });
        });
    RegisterWrite<wire::RestoreCheckpointRequest>(
        server, "ps.RestoreCheckpoint", net::ChiefOnly(), net::Dispatch::kPool,
        [&checkpoints](PsService::ShardState s, const net::InMessage&, wire::RestoreCheckpointRequest::Reader body,
                       net::OutMessage*) { return checkpoints.RestoreIn(*s.store, body, s.dedup); });
  }
  server.Register<wire::SetShardMapRequest>(
      "ps.SetShardMap", net::ChiefOnly(),
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage*) { return SetShardMap(req); });
  server.Register<wire::Empty>("ps.GetShardMap", net::PeerRoles{"chief", "worker", "evaluator", "ps"},
                               [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
                                 return GetShardMap(resp);
                               });
  // The chief's heartbeat: answered on the I/O thread, so it never queues behind pooled
  // writes, restores or transfers (a PS whose pool is busy is alive). It takes only the short
  // state locks (mu_, each copy's mu), which no write holds across an apply or a call.
  server.Register<wire::Empty>(
      "ps.ReplicaStatus", net::ChiefOnly(),
      [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) { return ReplicaStatus(resp); },
      net::Dispatch::kInline);
  server.Register<wire::ReplicateRequest>(
      "ps.Replicate", net::PeerRoles{"ps"},
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        return Replicate(req, resp);
      },
      // A small batch (tiny writes) is applied on the I/O thread: the write's round trip
      // then skips the pool hand-off here, as the write itself skips it at the primary.
      net::Dispatch::kAdaptive);
  server.Register<wire::InstallStateRequest>(
      "ps.InstallState", net::PeerRoles{"ps"},
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage*) { return InstallState(req); });
}

// ---- Routing and fencing -------------------------------------------------------------------

absl::Status ReplicatedPs::CheckServing(const GroupCopy& copy, uint64_t generation, const char* method,
                                        bool restore_write) const {
  if (copy.role == CopyRole::kRestoring && (generation == 0 || generation == copy.generation)) {
    if (restore_write) return absl::OkStatus();
    return RestorePendingError(copy.group, options_.ps_index, method);
  }
  if (copy.role == CopyRole::kPrimary && (generation == 0 || generation == copy.generation)) {
    return absl::OkStatus();
  }
  if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
  absl::Status s = StaleShardMapError(copy.group, generation, copy.generation, copy.primary);
  if (copy.role != CopyRole::kPrimary) {
    s = absl::FailedPreconditionError(absl::StrCat(s.message(), "; ps ", options_.ps_index, " holds a ",
                                                   CopyRoleName(copy.role), " copy of group ", copy.group));
  }
  spdlog::warn("refused: {}", s.ToString());
  return s;
}

absl::StatusOr<ReplicatedPs::Routed> ReplicatedPs::Route(bool has_route, wire::Route::Reader route,
                                                         const char* method) {
  const bool routed = has_route && route.getGeneration() != 0;
  const uint32_t group = routed ? route.getGroup() : static_cast<uint32_t>(options_.ps_index);
  MutexLock lock(&mu_);
  if (map_.generation == 0) {
    if (routed) {
      // A client holds a map this PS never received (it restarted): its copy is gone.
      if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
      return absl::Status(StaleShardMapError(group, route.getGeneration(), 0, -1).code(),
                          absl::StrCat(StaleShardMapError(group, route.getGeneration(), 0, -1).message(),
                                       "; ps ", options_.ps_index, " holds no shard map (", method, ")"));
    }
    return Routed{};
  }
  auto it = copies_.find(group);
  if (it == copies_.end()) {
    if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
    const GroupEntry* e = map_.Find(group);
    return absl::FailedPreconditionError(absl::StrCat(
        StaleShardMapError(group, routed ? route.getGeneration() : 0, e ? e->generation : 0, e ? e->primary : -1)
            .message(),
        "; ps ", options_.ps_index, " holds no copy of group ", group));
  }
  return Routed{it->second, routed ? route.getGeneration() : 0};
}

absl::Status ReplicatedPs::ReadAt(bool has_route, wire::Route::Reader route, const char* method,
                                  const ReadFn& read) {
  ASSIGN_OR_RETURN(Routed r, Route(has_route, route, method));
  if (r.copy == nullptr) return read(DefaultState());
  {
    MutexLock lock(&r.copy->mu);
    RETURN_IF_ERROR(CheckServing(*r.copy, r.generation, method, /*restore_write=*/false));
  }
  return read(r.copy->state);
}

void ReplicatedPs::WriteThen(const net::RequestContext& context, const char* method, const net::InMessage& request,
                             bool has_route, wire::Route::Reader route, const WriteFn& apply,
                             GroupCopy::AnswerFn done, net::OutMessage* response) {
  absl::StatusOr<Routed> r = Route(has_route, route, method);
  if (!r.ok()) return done(r.status());
  if (r->copy == nullptr) return done(apply(DefaultState()));
  GroupCopy& copy = *r->copy;
  // Applied and queued under the locks; a refusal is answered after them.
  const absl::Status refused = [&]() -> absl::Status {
    MutexLock write(&copy.write_mu);
    {
      // What restores a group that lost every copy: the chief's restores and creations, of
      // variables and of embedding tables.
      const bool restore_write =
          context.peer.role == "chief" &&
          (std::strcmp(method, "ps.RestoreCheckpoint") == 0 || std::strcmp(method, "ps.CreateVariable") == 0 ||
           std::strcmp(method, "ps.RestoreEmbeddingTables") == 0 ||
           std::strcmp(method, "ps.CreateEmbeddingTable") == 0);
      MutexLock lock(&copy.mu);
      RETURN_IF_ERROR(CheckServing(copy, r->generation, method, restore_write));
    }
    const absl::Time deadline = std::min(context.deadline, absl::Now() + options_.write_timeout);
    if (ForwardsBeforeApply(method)) {
      // Forwarded first, so the backups apply it while this copy does (see
      // ForwardsBeforeApply); answered, with this copy's result, once every counted backup
      // acknowledged it.
      ASSIGN_OR_RETURN(std::shared_ptr<const LoggedWrite> logged,
                       LoggedWrite::Make(method, request, RequestBodyPointer(request), options_.extension));
      uint64_t sequence;
      {
        MutexLock lock(&copy.mu);
        sequence = ++copy.sequence;
        for (auto& s : copy.streams) s->Enqueue(sequence, logged, copy.generation);
      }
      absl::Status applied = apply(copy.state);
      logged->set_outcome(applied.ok(), SkippedIn(method, response));
      MutexLock lock(&copy.mu);
      copy.answers.push_back({sequence, deadline, method, std::move(done), std::move(applied)});
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(apply(copy.state));
    absl::StatusOr<std::shared_ptr<const LoggedWrite>> logged =
        LoggedWrite::Make(method, request, RequestBodyPointer(request), options_.extension);
    if (logged.ok()) (*logged)->set_outcome(true);
    MutexLock lock(&copy.mu);
    const uint64_t sequence = ++copy.sequence;
    if (!logged.ok()) {
      // Applied here but not forwardable (cannot happen for a request the handler accepted):
      // the copies have diverged, so the other copies must be rebuilt.
      spdlog::error("group {}: write {} applied but not replicated: {}", copy.group, sequence,
                    logged.status().ToString());
      for (auto& s : copy.streams) {
        s->broken = true;
        s->error = logged.status().ToString();
      }
      return absl::InternalError(absl::StrCat("write applied but not replicated: ", logged.status().message()));
    }
    for (auto& s : copy.streams) s->Enqueue(sequence, *logged, copy.generation);
    // Queued in sequence order (under write_mu): answered once every counted stream has it.
    copy.answers.push_back({sequence, deadline, method, std::move(done), absl::OkStatus()});
    return absl::OkStatus();
  }();
  if (!refused.ok()) return done(refused);
  // Due at once when no stream counts (k = 1 with a map, or a backup not yet counted).
  copy.AnswerDue();
}

// ---- Shard map -------------------------------------------------------------------------------

absl::Status ReplicatedPs::SetShardMap(const net::InMessage& request) {
  ASSIGN_OR_RETURN(ShardMap map, ShardMapFromWire(request.RequestBody<wire::SetShardMapRequest>().getMap(),
                                                  options_.num_ps));
  MutexLock install(&install_mu_);
  std::vector<std::shared_ptr<GroupCopy>> dropped;
  std::vector<std::unique_ptr<BackupStream>> retired;
  // This PS restarted empty: its first map is not the one every PS starts with (the chief
  // pushes generation 1 to every PS before any variable exists, and raises it at every
  // change). Until the chief has seen the restart it may still name this PS primary or backup
  // of groups whose writes are elsewhere: none of its copies may serve or count (its own
  // group's default copy would serve empty, and its stream would break the group's backups).
  bool restarted;
  {
    MutexLock lock(&mu_);
    if (map.generation < map_.generation) {
      return absl::FailedPreconditionError(absl::StrCat("shard map generation ", map.generation,
                                                        " is older than the one held (", map_.generation, ")"));
    }
    if (map == map_) return absl::OkStatus();
    restarted = map_.generation == 0 && map.generation > 1;
  }
  spdlog::info("ps {}: shard map {}", options_.ps_index, map.DebugString());
  absl::flat_hash_map<uint32_t, std::shared_ptr<GroupCopy>> copies;
  {
    MutexLock lock(&mu_);
    copies = copies_;
  }
  absl::flat_hash_map<uint32_t, std::shared_ptr<GroupCopy>> next;
  const int32_t self = options_.ps_index;
  for (const GroupEntry& e : map.groups) {
    if (!e.Holds(self)) continue;
    std::shared_ptr<GroupCopy> copy = copies.contains(e.group) && !restarted ? copies[e.group] : nullptr;
    const bool rebuilding = Contains(e.rebuilding, self);
    if (copy != nullptr && rebuilding) {
      // Keep a copy that is already receiving (or has received) its transfer; any other copy
      // starts over empty.
      MutexLock lock(&copy->mu);
      if (copy->role != CopyRole::kRebuilding) copy = nullptr;
    }
    // The primary of a group that lost every copy starts empty and takes the chief's restore;
    // whatever an earlier copy here held is not the group's state (a copy being restored
    // already is kept).
    const bool restoring = e.primary == self && e.restore_pending;
    if (copy != nullptr && restoring) {
      MutexLock lock(&copy->mu);
      if (copy->role != CopyRole::kRestoring) copy = nullptr;
    }
    if (copy == nullptr) {
      copy = NewCopy(e.group);
      MutexLock lock(&copy->mu);
      // A new backup starts empty at sequence 0, which is right only when the primary has
      // applied nothing yet (a map installed before any variable): otherwise the first
      // ps.Replicate shows a gap and the copy is rebuilt.
      if (restoring) {
        copy->role = CopyRole::kRestoring;
      } else if (restarted && !rebuilding) {
        copy->role = CopyRole::kNeedsRebuild;
        copy->why_not_serving = "this PS restarted empty";
      } else if (e.primary == self && map.generation == 1) {
        // The chief's first map, pushed before any variable exists: an empty copy is the
        // group's whole state (a group placed on a PS other than its own index: elastic PS).
        copy->role = CopyRole::kPrimary;
      } else if (e.primary == self) {
        copy->role = CopyRole::kNeedsRebuild;
        copy->why_not_serving = "made primary without a copy of the group";
      } else {
        copy->role = rebuilding ? CopyRole::kRebuilding : CopyRole::kBackup;
      }
    }
    {
      MutexLock write(&copy->write_mu);
      {
        MutexLock lock(&copy->mu);
        copy->generation = e.generation;
        copy->primary = e.primary;
        if (e.primary == self) {
          // A backup promoted, or the primary confirmed; a copy without the group's state never serves.
          if (copy->role == CopyRole::kBackup || copy->role == CopyRole::kPrimary || copy->role == CopyRole::kFenced) {
            copy->role = CopyRole::kPrimary;
          } else if (copy->role == CopyRole::kRebuilding && copy->receive_complete && !restoring) {
            // A rebuilt copy promoted before this PS installed the map that listed it as a
            // backup (maps arrive in any order; the older one is then refused). The chief
            // lists a copy as a backup only once its primary reported it in sync, and from
            // then on every write waited for it: it holds every acknowledged write, as a
            // backup does. (Left rebuilding, its group would have no serving primary.)
            copy->role = CopyRole::kPrimary;
          } else if (copy->role == CopyRole::kRestoring && !e.restore_pending) {
            copy->role = CopyRole::kPrimary;  // the chief restored it
          }
        } else if (Contains(e.backups, self)) {
          if (copy->role == CopyRole::kPrimary || copy->role == CopyRole::kFenced || copy->role == CopyRole::kRestoring) {
            // A demoted primary may hold writes no backup acknowledged: it must be rebuilt.
            copy->role = CopyRole::kNeedsRebuild;
            copy->why_not_serving = "demoted primary";
          } else if (copy->role == CopyRole::kRebuilding && copy->receive_complete) {
            copy->role = CopyRole::kBackup;
          }
        }
      }
      if (e.primary == self) {
        ReconcileStreams(*copy, e, &retired);
      } else {
        MutexLock lock(&copy->mu);
        for (auto& s : copy->streams) retired.push_back(std::move(s));
        copy->streams.clear();
      }
    }
    PublishCopyMetrics(*copy);
    copy->AnswerDue();  // a copy no longer primary, or a stream no longer counted
    next[e.group] = std::move(copy);
  }
  for (auto& [group, copy] : copies) {
    if (!next.contains(group)) dropped.push_back(copy);
  }
  const uint64_t map_generation_for_answers = map.generation;
  const ShardMap map_for_answers = map;
  {
    MutexLock lock(&mu_);
    map_ = std::move(map);
    copies_ = std::move(next);
  }
  retired.clear();  // joins their threads, outside every lock
  for (auto& copy : dropped) {
    // Its waiting writers were taken at the copy's generation: the refusal names that one.
    uint64_t taken_at;
    {
      MutexLock lock(&copy->mu);
      taken_at = copy->generation;
    }
    const GroupEntry* now = map_for_answers.Find(copy->group);
    copy->AnswerAll(StaleShardMapError(copy->group, taken_at, now != nullptr ? now->generation : map_generation_for_answers,
                                       now != nullptr ? now->primary : -1));
  }
  dropped.clear();
  return absl::OkStatus();
}

void ReplicatedPs::ReconcileStreams(GroupCopy& copy, const GroupEntry& entry,
                                    std::vector<std::unique_ptr<BackupStream>>* retired) {
  MutexLock lock(&copy.mu);
  std::vector<std::unique_ptr<BackupStream>> keep;
  for (auto& s : copy.streams) {
    const bool backup = Contains(entry.backups, s->target());
    const bool rebuilding = Contains(entry.rebuilding, s->target());
    // A copy listed rebuilding gets a state transfer: a stream that was a backup's (the chief
    // moved it from the backups, or this PS missed the map that dropped it) starts over.
    if ((backup || (rebuilding && s->transfers())) && !s->broken) {
      s->counted = backup || s->in_sync;
      keep.push_back(std::move(s));
    } else {
      retired->push_back(std::move(s));
    }
  }
  copy.streams = std::move(keep);
  BackupStream::Options o;
  o.from_ps = options_.ps_index;
  o.max_batch_bytes = options_.max_batch_bytes;
  o.transfer_chunk_bytes = options_.transfer_chunk_bytes;
  o.transfer_whole_max_bytes = options_.transfer_whole_max_bytes;
  o.metrics = options_.metrics;
  o.extension = options_.extension;
  auto streams_to = [&copy](int32_t ps) ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy.mu) {
    for (auto& s : copy.streams) {
      if (s->target() == ps) return true;
    }
    return false;
  };
  for (const auto* list : {&entry.backups, &entry.rebuilding}) {
    const bool transfer = list == &entry.rebuilding;
    for (int32_t ps : *list) {
      if (ps == options_.ps_index || streams_to(ps)) continue;
      copy.streams.push_back(std::make_unique<BackupStream>(copy, ps, options_.connect(ps), /*counted=*/!transfer,
                                                            transfer, copy.sequence, o));
    }
  }
}

absl::Status ReplicatedPs::GetShardMap(net::OutMessage* response) {
  auto out = response->InitResponseBody<wire::GetShardMapResponse>();
  ShardMapToWire(map(), out.initMap());
  out.setPsIndex(options_.ps_index);
  out.setIncarnation(ProcessIncarnation());
  return absl::OkStatus();
}

absl::Status ReplicatedPs::ReplicaStatus(net::OutMessage* response) {
  std::vector<std::shared_ptr<GroupCopy>> copies;
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    generation = map_.generation;
    for (auto& [group, copy] : copies_) copies.push_back(copy);
  }
  std::sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) { return a->group < b->group; });
  auto out = response->InitResponseBody<wire::ReplicaStatusResponse>();
  out.setPsIndex(options_.ps_index);
  out.setIncarnation(ProcessIncarnation());
  out.setMapGeneration(generation);
  auto list = out.initCopies(static_cast<unsigned>(copies.size()));
  for (unsigned i = 0; i < copies.size(); ++i) {
    GroupCopy& copy = *copies[i];
    MutexLock lock(&copy.mu);
    auto c = list[i];
    c.setGroup(copy.group);
    c.setGeneration(copy.generation);
    c.setRole(CopyRoleToWire(copy.role));
    c.setAppliedSequence(copy.sequence);
    c.setTransferBytesCopied(copy.receive_bytes_copied);
    c.setTransferBytesTotal(copy.receive_bytes_total);
    c.setStateBytes(copy.state.store != nullptr ? copy.state.store->bytes() : 0);
    auto backups = c.initBackups(static_cast<unsigned>(copy.streams.size()));
    for (unsigned j = 0; j < copy.streams.size(); ++j) {
      const BackupStream& s = *copy.streams[j];
      backups[j].setPs(s.target());
      backups[j].setInSync(s.in_sync && !s.broken);
      backups[j].setAckedSequence(s.acked);
      backups[j].setLag(copy.sequence - std::min(copy.sequence, s.acked));
      backups[j].setTransferBytesCopied(s.bytes_copied);
      backups[j].setTransferBytesTotal(s.bytes_total);
      backups[j].setNeedsRebuild(s.broken);
      if (options_.metrics != nullptr) {
        options_.metrics->SetReplicationLag(copy.group, s.target(), copy.sequence - std::min(copy.sequence, s.acked));
      }
    }
  }
  return absl::OkStatus();
}

void ReplicatedPs::PublishCopyMetrics(const GroupCopy& copy) {
  if (options_.metrics == nullptr) return;
  MutexLock lock(&copy.mu);
  options_.metrics->SetGroupCopy(copy.group, CopyRoleName(copy.role), copy.generation);
}

// ---- Backup side ---------------------------------------------------------------------------

absl::Status ReplicatedPs::NeedsRebuild(GroupCopy& copy, const std::string& why) {
  {
    MutexLock lock(&copy.mu);
    copy.role = CopyRole::kNeedsRebuild;
    copy.why_not_serving = why;
  }
  PublishCopyMetrics(copy);
  copy.AnswerDue();
  spdlog::error("ps {}: group {} copy needs a rebuild: {}", options_.ps_index, copy.group, why);
  return absl::FailedPreconditionError(why);
}

absl::StatusOr<std::shared_ptr<GroupCopy>> ReplicatedPs::StreamTarget(uint32_t group, uint64_t generation,
                                                                      int32_t from, const char* method) {
  std::shared_ptr<GroupCopy> copy;
  uint64_t map_generation;
  {
    MutexLock lock(&mu_);
    map_generation = map_.generation;
    auto it = copies_.find(group);
    if (it != copies_.end()) copy = it->second;
  }
  if (copy == nullptr) {
    if (generation > map_generation) {
      return absl::UnavailableError(absl::StrCat(method, ": ps ", options_.ps_index, " has not installed shard map ",
                                                 generation, " yet (it holds ", map_generation, ")"));
    }
    if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
    return absl::FailedPreconditionError(absl::StrCat(StaleShardMapError(group, generation, map_generation, -1).message(),
                                                      "; ps ", options_.ps_index, " holds no copy of group ", group));
  }
  MutexLock lock(&copy->mu);
  if (generation < copy->generation && copy->primary == from) {
    return absl::UnavailableError(absl::StrCat(method, ": ps ", from, " is the primary of group ", group,
                                               " at generation ", copy->generation, " but sent ", generation,
                                               " (its map is not installed yet)"));
  }
  if (generation < copy->generation) {
    if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
    return StaleShardMapError(group, generation, copy->generation, copy->primary);
  }
  if (generation > copy->generation) {
    return absl::UnavailableError(absl::StrCat(method, ": ps ", options_.ps_index, " holds group ", group,
                                               " at generation ", copy->generation, ", not yet ", generation));
  }
  return copy;
}

absl::Status ReplicatedPs::Replicate(const net::InMessage& request, net::OutMessage* response) {
  auto req = request.RequestBody<wire::ReplicateRequest>();
  ASSIGN_OR_RETURN(std::shared_ptr<GroupCopy> copy,
                   StreamTarget(req.getGroup(), req.getGeneration(), req.getFromPs(), "ps.Replicate"));
  MutexLock write(&copy->write_mu);
  uint64_t applied;
  {
    MutexLock lock(&copy->mu);
    const bool receiving = copy->role == CopyRole::kRebuilding && copy->receive_complete;
    if (copy->role != CopyRole::kBackup && !receiving) {
      return absl::FailedPreconditionError(absl::StrCat("ps.Replicate: ps ", options_.ps_index, "'s copy of group ",
                                                        copy->group, " is ", CopyRoleName(copy->role),
                                                        copy->why_not_serving.empty() ? "" : ": ",
                                                        copy->why_not_serving));
    }
    applied = copy->sequence;
  }
  const uint64_t first = req.getFirstSequence();
  auto entries = req.getEntries();
  // A batch resent after its reply was lost (the primary keeps a batch until it is
  // acknowledged) starts at or below what is applied here: the entries applied already are
  // skipped once they match what was applied at their sequence (same primary, same
  // generation: one sequence names one write), and the rest applied.
  uint64_t repeated = 0;
  if (first <= applied) {
    repeated = std::min<uint64_t>(applied - first + 1, entries.size());
    for (uint64_t i = 0; i < repeated; ++i) {
      const uint64_t sequence = first + i;
      const std::optional<uint64_t> recent = copy->RecentDigest(sequence);
      if (!recent.has_value() || *recent != EntryDigest(entries[static_cast<unsigned>(i)])) {
        return NeedsRebuild(*copy, absl::StrCat("ps.Replicate of group ", copy->group, " from ps ", req.getFromPs(),
                                                " starts at sequence ", first, " but ", applied,
                                                " is the last applied (out of order: sequence ", sequence, " was applied ",
                                                recent.has_value() ? "as another write" : "too long ago to compare",
                                                "); nothing applied"));
      }
    }
  } else if (first != applied + 1) {
    return NeedsRebuild(*copy, absl::StrCat("ps.Replicate of group ", copy->group, " from ps ", req.getFromPs(),
                                            " starts at sequence ", first, " but ", applied,
                                            " is the last applied (a gap); nothing applied"));
  }
  uint64_t n = 0;
  bool refused = false;  // the batch ended at a ForwardsBeforeApply write refused here
  std::vector<uint32_t> skipped;  // per entry applied by this call (ReplicateResponse.skipped)
  for (unsigned i = static_cast<unsigned>(repeated); i < entries.size(); ++i) {
    auto entry = entries[i];
    uint32_t entry_skipped = LoggedWrite::kSkipsNotCounted;
    absl::Status s = ApplyEntry(*copy, request, entry, &entry_skipped);
    skipped.push_back(s.ok() ? entry_skipped : LoggedWrite::kSkipsNotCounted);
    if (!s.ok() && ForwardsBeforeApply(entry.getMethod().cStr())) {
      // The primary forwarded it before applying it, and refuses it too unless the copies
      // diverged (ForwardsBeforeApply): taken as applied without effect, and the batch ends
      // here, acknowledged one short of it, which tells the primary to compare (the rest is
      // sent again).
      spdlog::debug("group {}: sequence {} refused here as at the primary: {}", copy->group, applied + n + 1,
                    s.ToString());
      ++n;
      copy->recent_digests.emplace_back(applied + n, EntryDigest(entry));
      if (copy->recent_digests.size() > GroupCopy::kRecentDigests) copy->recent_digests.pop_front();
      refused = true;
      break;
    }
    if (!s.ok()) {
      {
        MutexLock lock(&copy->mu);
        copy->sequence = applied + n;
      }
      return NeedsRebuild(*copy, absl::StrCat("ps.Replicate of group ", copy->group, ": sequence ", applied + n + 1,
                                              " failed to apply: ", s.message()));
    }
    ++n;
    copy->recent_digests.emplace_back(applied + n, EntryDigest(entry));
    if (copy->recent_digests.size() > GroupCopy::kRecentDigests) copy->recent_digests.pop_front();
  }
  MutexLock lock(&copy->mu);
  copy->sequence = applied + n;
  auto out = response->InitResponseBody<wire::ReplicateResponse>();
  out.setAppliedSequence(copy->sequence - (refused ? 1 : 0));
  out.setSkippedFrom(applied + 1);
  auto list = out.initSkipped(static_cast<unsigned>(skipped.size()));
  for (unsigned i = 0; i < skipped.size(); ++i) list.set(i, skipped[i]);
  return absl::OkStatus();
}

absl::Status ReplicatedPs::ApplyEntry(GroupCopy& copy, const net::InMessage& frame,
                                      wire::ReplicatedEntry::Reader entry, uint32_t* skipped) {
  const std::string method = entry.getMethod().cStr();
  auto body = entry.getBody();
  net::OutMessage scratch;
  if (method == "ps.Update") {
    RETURN_IF_ERROR(update_check_.Check(body));
    RETURN_IF_ERROR(service_.UpdateIn(copy.state, frame, body.getAs<wire::UpdateRequest>(), &scratch));
    *skipped = SkippedIn(method, &scratch);
    return absl::OkStatus();
  }
  if (method == "ps.PushGradients") {
    RETURN_IF_ERROR(push_check_.Check(body));
    RETURN_IF_ERROR(
        service_.PushGradientsIn(copy.state, frame, body.getAs<wire::PushGradientsRequest>(), &scratch));
    *skipped = SkippedIn(method, &scratch);
    return absl::OkStatus();
  }
  if (method == "ps.CreateVariable") {
    RETURN_IF_ERROR(create_check_.Check(body));
    return service_.CreateVariableIn(copy.state, frame, body.getAs<wire::CreateVariableRequest>(), &scratch);
  }
  if (method == "ps.RestoreCheckpoint" && options_.checkpoints != nullptr) {
    RETURN_IF_ERROR(restore_check_.Check(body));
    return options_.checkpoints->RestoreIn(*copy.state.store, body.getAs<wire::RestoreCheckpointRequest>(),
                                           copy.state.dedup);
  }
  if (options_.extension != nullptr && options_.extension->IsWrite(method) && copy.state.extension != nullptr) {
    return options_.extension->ApplyReplicated(*copy.state.extension, method, frame, body);
  }
  return absl::InvalidArgumentError(absl::StrCat("'", method, "' is not a replicated write"));
}

absl::Status ReplicatedPs::InstallState(const net::InMessage& request) {
  auto req = request.RequestBody<wire::InstallStateRequest>();
  ASSIGN_OR_RETURN(std::shared_ptr<GroupCopy> copy,
                   StreamTarget(req.getGroup(), req.getGeneration(), req.getFromPs(), "ps.InstallState"));
  {
    MutexLock lock(&copy->mu);
    if (copy->role != CopyRole::kRebuilding && copy->role != CopyRole::kNeedsRebuild) {
      return absl::FailedPreconditionError(absl::StrCat("ps.InstallState: ps ", options_.ps_index, "'s copy of group ",
                                                        copy->group, " is ", CopyRoleName(copy->role),
                                                        ", not rebuilding"));
    }
  }
  if (req.getChunk() == 0) {
    // A transfer starts over on a new, empty copy.
    auto fresh = NewCopy(copy->group);
    {
      MutexLock a(&copy->mu);
      MutexLock b(&fresh->mu);
      fresh->role = CopyRole::kRebuilding;
      fresh->generation = copy->generation;
      fresh->primary = copy->primary;
    }
    MutexLock lock(&mu_);
    auto it = copies_.find(copy->group);
    if (it == copies_.end() || it->second != copy) return absl::AbortedError("the shard map changed meanwhile");
    it->second = fresh;
    copy = fresh;
  }
  MutexLock write(&copy->write_mu);
  return InstallChunk(*copy, request, req);
}

absl::Status ReplicatedPs::InstallChunk(GroupCopy& copy, const net::InMessage& frame,
                                        wire::InstallStateRequest::Reader req) {
  GroupCopy::Receive& r = copy.receive;
  if (req.getChunk() == 0) {
    r = GroupCopy::Receive();
    r.transfer = req.getTransfer();
    r.bytes_total = req.getBytesTotal();
  } else if (req.getTransfer() != r.transfer || req.getChunk() != r.next_chunk || r.complete) {
    return NeedsRebuild(copy, absl::StrCat("ps.InstallState of group ", copy.group, ": chunk ", req.getChunk(),
                                           " of transfer ", req.getTransfer(), " does not follow chunk ",
                                           r.next_chunk == 0 ? 0 : r.next_chunk - 1, " of transfer ", r.transfer));
  }
  {
    MutexLock lock(&copy.mu);
    if (copy.role != CopyRole::kRebuilding) {
      return absl::FailedPreconditionError(absl::StrCat("group ", copy.group, " copy is ", CopyRoleName(copy.role)));
    }
  }
  for (auto v : req.getVariables()) {
    const std::string name = v.getName().cStr();
    ASSIGN_OR_RETURN(DType dtype, DTypeFromWire(v.getDtype()));
    const Shape shape = net::GetShape(v.getShape());
    RETURN_IF_ERROR(ValidateShape(shape, dtype));
    ASSIGN_OR_RETURN(Tensor value, frame.TensorAt(v.getValue()));
    PendingVariable& p = r.pending[name];
    const int64_t rows = shape.empty() ? 1 : shape[0];
    const int64_t piece_rows = shape.empty() ? 1 : (value.shape().empty() ? 1 : value.shape()[0]);
    // A variable that arrives whole and alone in its frame (how BackupStream sends a large
    // one): the frame's arrays become the variable's own, so its bytes are written once, by
    // the socket read. Its value and slots must be distinct payloads (they are written apart).
    std::vector<Tensor> whole_slots;
    bool whole = v.getRowBegin() == 0 && req.getVariables().size() == 1 && value.shape() == shape &&
                 value.dtype() == dtype;
    for (unsigned j = 0; whole && j < v.getSlots().size(); ++j) {
      absl::StatusOr<Tensor> slot = frame.TensorAt(v.getSlots()[j]);
      whole = slot.ok() && slot->dtype() == DType::kF32 && slot->shape() == shape;
      for (unsigned k = 0; whole && k <= j; ++k) {
        const uint32_t other = k == j ? v.getValue().getPayload() : v.getSlots()[k].getPayload();
        whole = v.getSlots()[j].getPayload() != other;
      }
      if (whole) whole_slots.push_back(*std::move(slot));
    }
    if (v.getRowBegin() == 0) {
      p = PendingVariable();
      p.name = name;
      p.dtype = dtype;
      p.shape = shape;
      ASSIGN_OR_RETURN(p.optimizer, OptimizerFromWire(v.getOptimizer()));
      if (whole) {
        p.state.value = value;
        p.state.slots = std::move(whole_slots);
      } else {
        // Uninitialised: the pieces overwrite every byte before the variable exists (one cut
        // off midway is never inserted), so zero-filling would only add a pass over fresh pages.
        p.state.value = UninitializedTensor(dtype, shape);
        for (unsigned j = 0; j < v.getSlots().size(); ++j) {
          p.state.slots.push_back(UninitializedTensor(DType::kF32, shape));
        }
      }
      p.state.iterations = v.getIterations();
      p.restores = v.getRestores();
    }
    if (p.name != name || v.getRowBegin() != p.rows_filled || p.state.slots.size() != v.getSlots().size() ||
        value.dtype() != dtype) {
      return NeedsRebuild(copy, absl::StrCat("ps.InstallState of group ", copy.group, ": variable '", name,
                                             "' rows arrive out of order"));
    }
    const size_t row_bytes = p.state.value.num_bytes() / static_cast<size_t>(std::max<int64_t>(1, rows));
    if (p.rows_filled + piece_rows > rows || value.num_bytes() != row_bytes * static_cast<size_t>(piece_rows)) {
      return NeedsRebuild(copy, absl::StrCat("ps.InstallState: variable '", name, "' piece does not fit"));
    }
    const size_t offset = static_cast<size_t>(p.rows_filled) * row_bytes;
    if (!whole) std::memcpy(static_cast<char*>(p.state.value.raw_data()) + offset, value.raw_data(), value.num_bytes());
    for (unsigned j = 0; j < v.getSlots().size(); ++j) {
      ASSIGN_OR_RETURN(Tensor slot, frame.TensorAt(v.getSlots()[j]));
      if (slot.num_bytes() != value.num_bytes() * 4 / DTypeSize(dtype)) {
        return NeedsRebuild(copy, absl::StrCat("ps.InstallState: slot of '", name, "' does not fit"));
      }
      if (!whole) {
        std::memcpy(static_cast<char*>(p.state.slots[j].raw_data()) + offset / DTypeSize(dtype) * 4, slot.raw_data(),
                    slot.num_bytes());
      }
      r.bytes_copied += slot.num_bytes();
    }
    r.bytes_copied += value.num_bytes();
    p.rows_filled += piece_rows;
    if (p.rows_filled == rows) {
      // The received arrays become the variable's own: no second zero-filled set to copy into.
      ASSIGN_OR_RETURN(auto variable, Variable::CreateFromState(name, std::move(p.state), p.optimizer.get(),
                                                                          copy.state.store->apply_pool()));
      variable->set_restores(p.restores);
      RETURN_IF_ERROR(copy.state.store->Insert(std::move(variable)).status());
      r.pending.erase(name);
    }
  }
  r.next_chunk = req.getChunk() + 1;
  if (req.getLast()) {
    if (!r.pending.empty()) {
      return NeedsRebuild(copy, absl::StrCat("ps.InstallState of group ", copy.group, ": ", r.pending.size(),
                                             " variables incomplete at the last chunk"));
    }
    std::vector<UpdateDedup::ExportedSpace> spaces;
    for (auto d : req.getDedup()) {
      UpdateDedup::ExportedSpace e;
      e.coordinator = d.getCoordinator();
      e.watermark = d.getWatermark();
      const unsigned n = d.getClosures().size();
      if (d.getSequences().size() != n || d.getVariables().size() != n) {
        return NeedsRebuild(copy, "ps.InstallState: malformed update window");
      }
      for (unsigned k = 0; k < n; ++k) e.keys.push_back({d.getClosures()[k], d.getSequences()[k], d.getVariables()[k]});
      spaces.push_back(std::move(e));
    }
    copy.state.dedup->Import(spaces);
  }
  if (req.hasExtension() || (req.getLast() && options_.extension != nullptr)) {
    if (options_.extension == nullptr || copy.state.extension == nullptr) {
      return NeedsRebuild(copy, "ps.InstallState carries extension state this PS does not hold");
    }
    absl::Status s = options_.extension->Install(*copy.state.extension, frame, req.getExtension(), req.getLast());
    if (!s.ok()) {
      return NeedsRebuild(copy, absl::StrCat("ps.InstallState of group ", copy.group, ": ", s.message()));
    }
  }
  if (req.getLast()) r.complete = true;
  MutexLock lock(&copy.mu);
  copy.receive_bytes_copied = r.bytes_copied;
  copy.receive_bytes_total = r.bytes_total;
  if (r.complete) {
    copy.receive_complete = true;
    copy.sequence = req.getSequence();
    spdlog::info("ps {}: group {} state received ({} bytes) at sequence {}", options_.ps_index, copy.group,
                 r.bytes_copied, copy.sequence);
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
