#include "ps/replication/backup_stream.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "ps/ps_metrics.h"
#include "ps/ps_wire.h"
#include "ps/replication/shard_map.h"

namespace asyncps::ps {
namespace {

// One variable of a snapshot: its state at the snapshot's sequence.
struct SnapshotVariable {
  std::shared_ptr<Variable> variable;
  Variable::State state;
};

// Rows of `t` [begin, end) (a scalar is one row).
Tensor Rows(const Tensor& t, int64_t begin, int64_t end) {
  if (t.shape().empty()) return t;
  absl::StatusOr<Tensor> slice = t.Slice(begin, end);
  return slice.ok() ? *std::move(slice) : t;
}

uint64_t NextTransferId() {
  static std::atomic<uint64_t> counter{0};
  return ProcessIncarnation() ^ (counter.fetch_add(1) + 1);
}

}  // namespace

BackupStream::BackupStream(GroupCopy& copy, int32_t target, std::unique_ptr<net::RpcClient> client,
                           bool counted_in_map, bool transfer, uint64_t start_after, Options options)
    : copy_(copy),
      target_(target),
      client_(std::move(client)),
      transfer_(transfer),
      options_(options),
      link_(std::make_shared<Link>(this)) {
  counted = counted_in_map;
  in_sync = !transfer;
  acked = start_after;
  {
    MutexLock lock(&queue_mu_);
    next_ = start_after + 1;
  }
  thread_ = std::thread([this] { Run(); });
}

BackupStream::~BackupStream() {
  {
    MutexLock lock(&queue_mu_);
    stop_ = true;
  }
  {
    // No async reply reaches this stream past here (one being handled is waited for).
    MutexLock lock(&link_->mu);
    link_->stream = nullptr;
  }
  client_->Disconnect();  // a call in flight fails at once
  thread_.join();
}

void BackupStream::Enqueue(uint64_t sequence, std::shared_ptr<const LoggedWrite> write, uint64_t generation) {
  {
    MutexLock lock(&queue_mu_);
    // Writes come in order under the write lock: `sequence` is next_ + queue_.size().
    (void)sequence;
    queue_.push_back(std::move(write));
  }
  MaybeSendAsync(generation);
}

void BackupStream::BuildBatchLocked(uint64_t generation, net::OutMessage& request, uint64_t* first, size_t* count,
                                    uint64_t* bytes) {
  *first = next_;
  *count = 0;
  *bytes = 0;
  for (const auto& w : queue_) {
    if (*count > 0 && *bytes + w->bytes() > options_.max_batch_bytes) break;
    *bytes += w->bytes();
    ++*count;
  }
  auto body = request.InitRequestBody<wire::ReplicateRequest>();
  body.setGroup(copy_.group);
  body.setGeneration(generation);
  body.setFirstSequence(*first);
  body.setFromPs(options_.from_ps);
  auto entries = body.initEntries(static_cast<unsigned>(*count));
  for (unsigned i = 0; i < *count; ++i) queue_[i]->AppendTo(entries[i], request);
}

void BackupStream::MaybeSendAsync(uint64_t generation) {
  net::OutMessage request;
  uint64_t first = 0;
  size_t count = 0;
  uint64_t bytes = 0;
  {
    MutexLock lock(&queue_mu_);
    if (stop_ || !async_ || sending_ || queue_.empty()) return;
    sending_ = true;
    BuildBatchLocked(generation, request, &first, &count, &bytes);
  }
  // CallAsync never runs its callback on this thread (it may hold the copy's locks).
  client_->CallAsync("ps.Replicate", std::move(request), options_.call_timeout,
                     [link = link_, first, count, bytes](absl::StatusOr<net::InMessage> reply) {
                       MutexLock lock(&link->mu);
                       if (link->stream != nullptr) link->stream->OnAsyncReply(first, count, bytes, std::move(reply));
                     });
}

void BackupStream::OnAsyncReply(uint64_t first, size_t count, uint64_t bytes, absl::StatusOr<net::InMessage> reply) {
  absl::StatusOr<size_t> acknowledged = reply.ok() ? Acknowledged(first, count, *reply) : reply.status();
  if (!acknowledged.ok()) {
    MutexLock lock(&queue_mu_);
    sending_ = false;
    async_ = false;  // the stream's thread retries (the same batch) or gives up
    async_error_ = acknowledged.status();
    return;
  }
  // Popped before the next batch may go: a batch built in between would start at the
  // entries acknowledged here and pop them again.
  Acknowledge(first, *acknowledged, bytes);
  {
    MutexLock lock(&queue_mu_);
    sending_ = false;
  }
  uint64_t generation;
  {
    MutexLock lock(&copy_.mu);
    generation = copy_.generation;
  }
  MaybeSendAsync(generation);  // what was queued meanwhile
}

absl::Status BackupStream::CompareSkips(uint64_t first, size_t count, const net::InMessage& reply) {
  auto body = reply.ResponseBody<wire::ReplicateResponse>();
  const uint64_t from = body.getSkippedFrom();
  auto skipped = body.getSkipped();
  for (unsigned i = 0; i < skipped.size(); ++i) {
    const uint64_t sequence = from + i;
    const uint32_t copy_skipped = skipped[i];
    if (copy_skipped == LoggedWrite::kSkipsNotCounted || sequence < first || sequence >= first + count) continue;
    std::shared_ptr<const LoggedWrite> write;
    {
      MutexLock lock(&queue_mu_);
      if (sequence - first >= queue_.size()) break;
      write = queue_[sequence - first];
    }
    if (write->outcome() == 0) {
      // The primary applies it under the write lock it was queued under: done once that is free.
      MutexLock wait(&copy_.write_mu);
    }
    if (write->outcome() != 1 || write->skipped() == LoggedWrite::kSkipsNotCounted) continue;
    if (write->skipped() != copy_skipped) {
      return absl::FailedPreconditionError(absl::StrCat(
          "group ", copy_.group, ": ps ", target_, "'s window of applied updates skipped ", copy_skipped,
          " update(s) of write ", sequence, " (", write->method(), ") as already applied, the primary's ",
          write->skipped(), ": the copies diverged"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> BackupStream::Acknowledged(uint64_t first, size_t count, const net::InMessage& reply) {
  RETURN_IF_ERROR(CompareSkips(first, count, reply));
  const uint64_t applied = reply.ResponseBody<wire::ReplicateResponse>().getAppliedSequence();
  const uint64_t last = first + count - 1;
  if (applied == last) return count;
  // Short of the batch: the copy refused the write after `applied` (a ForwardsBeforeApply
  // write), without effect, and stopped there.
  const uint64_t refused = applied + 1;
  if (refused < first || refused > last) {
    return absl::InternalError(absl::StrCat("ps ", target_, " acknowledged sequence ", applied, " for a batch of ",
                                            first, "..", last));
  }
  std::shared_ptr<const LoggedWrite> write;
  {
    MutexLock lock(&queue_mu_);
    if (refused - first >= queue_.size()) return absl::InternalError("acknowledged write no longer queued");
    write = queue_[refused - first];
  }
  if (write->outcome() == 0) {
    // The primary applies it under the write lock it was queued under: done once that is free.
    MutexLock wait(&copy_.write_mu);
  }
  if (write->outcome() != 2) {
    return absl::FailedPreconditionError(absl::StrCat("group ", copy_.group, ": ps ", target_, " refused write ",
                                                      refused, " (", write->method(),
                                                      ") that the primary applied: the copies diverged"));
  }
  return static_cast<size_t>(refused - first + 1);
}

void BackupStream::Acknowledge(uint64_t first, size_t count, uint64_t bytes) {
  {
    MutexLock lock(&queue_mu_);
    for (size_t i = 0; i < count; ++i) queue_.pop_front();
    next_ = first + count;
  }
  if (options_.metrics != nullptr) options_.metrics->RecordReplicated(count, bytes);
  {
    MutexLock lock(&copy_.mu);
    acked = first + count - 1;
  }
  copy_.AnswerDue();  // the writers every counted copy has now acknowledged
}

bool BackupStream::WaitStop(absl::Duration d) {
  MutexLock lock(&queue_mu_);
  return queue_mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
}

void BackupStream::Run() {
  if (transfer_) {
    for (;;) {
      absl::Status s = Transfer();
      if (s.ok()) break;
      {
        MutexLock lock(&queue_mu_);
        if (stop_) return;
      }
      if (IsStaleShardMap(s)) {
        {
          MutexLock lock(&copy_.mu);
          copy_.role = CopyRole::kFenced;
          copy_.why_not_serving = std::string(s.message());
        }
        copy_.AnswerDue();  // the waiting writers learn of the fence
        return;
      }
      spdlog::warn("state transfer of group {} to ps {} failed, starting over: {}", copy_.group, target_,
                   s.ToString());
      if (WaitStop(absl::Milliseconds(200))) return;
    }
  }
  for (;;) {
    CheckInSync();
    bool synced;
    uint64_t generation;
    {
      MutexLock lock(&copy_.mu);
      synced = in_sync;
      generation = copy_.generation;
    }
    absl::Status s;
    if (synced) {
      // The fast path sends from here on, until a batch fails.
      {
        MutexLock lock(&queue_mu_);
        async_ = true;
        async_error_ = absl::OkStatus();
      }
      MaybeSendAsync(generation);  // what was queued before
      MutexLock lock(&queue_mu_);
      auto handed_back = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) { return stop_ || !async_; };
      queue_mu_.Await(absl::Condition(&handed_back));
      if (stop_) return;
      s = async_error_;
    } else {
      {
        MutexLock lock(&queue_mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) { return stop_ || !queue_.empty(); };
        queue_mu_.Await(absl::Condition(&ready));
        if (stop_) return;
      }
      s = SendBatch();
      if (s.ok()) continue;
    }
    {
      MutexLock lock(&queue_mu_);
      if (stop_) return;
    }
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      // The copy may come back (or the chief removes it): the same batch is sent again.
      if (WaitStop(absl::Milliseconds(50))) return;
      continue;
    }
    {
      MutexLock lock(&copy_.mu);
      if (IsStaleShardMap(s)) {
        spdlog::warn("group {}: ps {} holds a newer shard map; this copy is fenced: {}", copy_.group, target_,
                     s.ToString());
        if (options_.metrics != nullptr) options_.metrics->RecordStaleGeneration();
        copy_.role = CopyRole::kFenced;
        copy_.why_not_serving = std::string(s.message());
      } else {
        spdlog::error("group {}: ps {} refused the replication stream, stopping it: {}", copy_.group, target_,
                      s.ToString());
      }
      broken = true;
      error = s.ToString();
    }
    copy_.AnswerDue();  // the waiting writers learn of a fence
    return;
  }
}

absl::Status BackupStream::SendBatch() {
  net::OutMessage request;
  uint64_t first = 0;
  size_t count = 0;
  uint64_t bytes = 0;
  uint64_t generation;
  {
    MutexLock lock(&copy_.mu);
    generation = copy_.generation;
  }
  {
    MutexLock lock(&queue_mu_);
    BuildBatchLocked(generation, request, &first, &count, &bytes);
  }
  auto reply = client_->Call("ps.Replicate", std::move(request), options_.call_timeout);
  if (!reply.ok()) return reply.status();
  ASSIGN_OR_RETURN(const size_t acknowledged, Acknowledged(first, count, *reply));
  Acknowledge(first, acknowledged, bytes);
  return absl::OkStatus();
}

void BackupStream::CheckInSync() {
  {
    MutexLock lock(&copy_.mu);
    if (in_sync) return;
  }
  // Under the write lock no write can be applied between the comparison and the flag: from
  // here on every write waits for this copy too.
  MutexLock write(&copy_.write_mu);
  MutexLock lock(&copy_.mu);
  if (acked == copy_.sequence) {
    in_sync = true;
    counted = true;
    spdlog::info("group {}: ps {} is in sync at sequence {}", copy_.group, target_, acked);
  }
}

absl::Status BackupStream::Transfer() {
  std::vector<SnapshotVariable> snapshot;
  std::vector<UpdateDedup::ExportedSpace> dedup;
  std::unique_ptr<CopyExtensionSnapshot> extension;  // the tables beside the variables
  uint64_t sequence = 0;
  uint64_t generation = 0;
  {
    MutexLock write(&copy_.write_mu);
    // Large values and slots are shared copy-on-write, not copied: the group's writes wait for this.
    for (auto& v : copy_.state.store->List()) snapshot.push_back({v, v->SharedState()});
    dedup = copy_.state.dedup->Export();
    if (options_.extension != nullptr && copy_.state.extension != nullptr) {
      extension = options_.extension->Snapshot(*copy_.state.extension);
    }
    MutexLock lock(&copy_.mu);
    sequence = copy_.sequence;
    generation = copy_.generation;
    acked = sequence;
    in_sync = false;
    MutexLock queue(&queue_mu_);
    queue_.clear();
    next_ = sequence + 1;
  }
  std::sort(snapshot.begin(), snapshot.end(),
            [](const SnapshotVariable& a, const SnapshotVariable& b) { return a.variable->name() < b.variable->name(); });
  uint64_t total = 0;
  for (const auto& s : snapshot) total += s.state.value.num_bytes() * (1 + s.state.slots.size());
  if (extension != nullptr) total += extension->bytes();
  {
    MutexLock lock(&copy_.mu);
    bytes_copied = 0;
    bytes_total = total;
  }
  const uint64_t transfer = NextTransferId();
  spdlog::info("group {}: state transfer {} to ps {}: {} variables, {} bytes at sequence {}", copy_.group, transfer,
               target_, snapshot.size(), total, sequence);

  // Pieces of variables (row ranges), packed into chunks of about transfer_chunk_bytes. A
  // variable larger than a chunk and at most transfer_whole_max_bytes goes whole, alone in a
  // chunk: the copy then takes the received arrays as its own instead of copying pieces in.
  struct Piece {
    SnapshotVariable* var;
    int64_t begin, end;
  };
  std::vector<std::vector<Piece>> chunks(1);
  uint64_t chunk_bytes = 0;
  for (auto& s : snapshot) {
    const int64_t rows = s.variable->rows();
    const uint64_t var_bytes = s.state.value.num_bytes() * (1 + s.state.slots.size());
    if (var_bytes > options_.transfer_chunk_bytes && var_bytes <= options_.transfer_whole_max_bytes) {
      if (!chunks.back().empty()) chunks.emplace_back();
      chunks.back().push_back({&s, 0, rows});
      chunks.emplace_back();
      chunk_bytes = 0;
      continue;
    }
    const uint64_t row_bytes =
        std::max<uint64_t>(1, s.state.value.num_bytes() * (1 + s.state.slots.size()) / std::max<int64_t>(1, rows));
    int64_t begin = 0;
    do {
      const uint64_t room = options_.transfer_chunk_bytes > chunk_bytes ? options_.transfer_chunk_bytes - chunk_bytes : 0;
      int64_t n = std::max<int64_t>(1, static_cast<int64_t>(room / row_bytes));
      if (s.variable->shape().empty()) n = 1;
      const int64_t end = std::min(rows, begin + n);
      chunks.back().push_back({&s, begin, end});
      chunk_bytes += static_cast<uint64_t>(end - begin) * row_bytes;
      begin = end;
      if (chunk_bytes >= options_.transfer_chunk_bytes) {
        chunks.emplace_back();
        chunk_bytes = 0;
      }
    } while (begin < rows);
  }
  if (chunks.size() > 1 && chunks.back().empty()) chunks.pop_back();
  // The extension's chunks follow the variables' ones.
  const size_t extension_chunks = extension != nullptr ? extension->Chunks(options_.transfer_chunk_bytes) : 0;
  const size_t total_chunks = chunks.size() + extension_chunks;

  for (size_t c = 0; c < total_chunks; ++c) {
    {
      MutexLock lock(&queue_mu_);
      if (stop_) return absl::CancelledError("stream stopped");
    }
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::InstallStateRequest>();
    body.setGroup(copy_.group);
    body.setGeneration(generation);
    body.setTransfer(transfer);
    body.setChunk(static_cast<uint32_t>(c));
    body.setSequence(sequence);
    body.setBytesTotal(total);
    body.setFromPs(options_.from_ps);
    const bool last = c + 1 == total_chunks;
    body.setLast(last);
    uint64_t sent = 0;
    if (c >= chunks.size()) {
      sent += extension->WriteChunk(c - chunks.size(), body.initExtension(), request);
    }
    const size_t pieces = c < chunks.size() ? chunks[c].size() : 0;
    auto vars = body.initVariables(static_cast<unsigned>(pieces));
    for (unsigned i = 0; i < pieces; ++i) {
      const Piece& p = chunks[c][i];
      const Variable& v = *p.var->variable;
      auto out = vars[i];
      out.setName(v.name());
      out.setDtype(static_cast<uint8_t>(v.dtype()));
      net::SetShape(out.initShape(static_cast<unsigned>(v.shape().size())), v.shape());
      OptimizerToWire(v.optimizer_config(), out.initOptimizer());
      out.setIterations(p.var->state.iterations);
      out.setRestores(v.restores());
      out.setRowBegin(p.begin);
      Tensor value = Rows(p.var->state.value, p.begin, p.end);
      sent += value.num_bytes();
      request.AddTensor(value, out.initValue());
      auto slots = out.initSlots(static_cast<unsigned>(p.var->state.slots.size()));
      for (unsigned j = 0; j < p.var->state.slots.size(); ++j) {
        Tensor slot = Rows(p.var->state.slots[j], p.begin, p.end);
        sent += slot.num_bytes();
        request.AddTensor(slot, slots[j]);
      }
    }
    if (last) {
      auto spaces = body.initDedup(static_cast<unsigned>(dedup.size()));
      for (unsigned i = 0; i < dedup.size(); ++i) {
        spaces[i].setCoordinator(dedup[i].coordinator);
        spaces[i].setWatermark(dedup[i].watermark);
        const unsigned n = static_cast<unsigned>(dedup[i].keys.size());
        auto closures = spaces[i].initClosures(n);
        auto sequences = spaces[i].initSequences(n);
        auto variables = spaces[i].initVariables(n);
        for (unsigned k = 0; k < n; ++k) {
          closures.set(k, dedup[i].keys[k].closure);
          sequences.set(k, dedup[i].keys[k].sequence);
          variables.set(k, dedup[i].keys[k].variable);
        }
      }
    }
    auto reply = client_->Call("ps.InstallState", std::move(request), options_.call_timeout);
    if (!reply.ok()) return reply.status();
    if (c < chunks.size()) {
      // A variable whose last rows the copy holds is let go: while its snapshot shares the
      // variable's storage, the variable's next write copies it first.
      for (const Piece& p : chunks[c]) {
        if (p.end == p.var->variable->rows()) p.var->state = Variable::State();
      }
    }
    if (options_.metrics != nullptr) options_.metrics->AddStateTransferBytes(sent);
    MutexLock lock(&copy_.mu);
    bytes_copied += sent;
  }
  if (options_.metrics != nullptr) options_.metrics->RecordStateTransfer();
  spdlog::info("group {}: state transfer {} to ps {} done ({} bytes)", copy_.group, transfer, target_, total);
  return absl::OkStatus();
}

}  // namespace asyncps::ps
