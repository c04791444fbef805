#ifndef ASYNCPS_WORKER_STEP_CONTEXT_H_
#define ASYNCPS_WORKER_STEP_CONTEXT_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "ps/update_tag.h"
#include "worker/embedding_client.h"
#include "worker/program.h"
#include "worker/ps_client.h"

namespace asyncps {

// What a step function sees while it runs on a worker: its arguments (tensors, or this
// worker's own per-worker resources), and the variables on the parameter servers.
//
// Every variable operation goes to the PS that hold the variable's shards, one request per
// PS, all PS in parallel. A PS that cannot be reached makes the operation return
// Unavailable; the worker reports that to the coordinator as a PS failure, not as the
// function's own error.
//
// Used by one step function on one thread.
class StepContext {
 public:
  // A closure argument as bound on this worker: a tensor, or this worker's own instance of a
  // per-worker resource.
  using BoundArg = std::variant<Tensor, std::shared_ptr<Resource>>;

  StepContext(int worker_index, std::vector<BoundArg> args, PsClient& ps,
              std::shared_ptr<const std::atomic<bool>> cancelled)
      : worker_index_(worker_index), args_(std::move(args)), ps_(ps), cancelled_(std::move(cancelled)) {}

  int worker_index() const { return worker_index_; }
  size_t num_args() const { return args_.size(); }

  // Tensor argument `i`; InvalidArgument when out of range or a resource.
  absl::StatusOr<Tensor> arg(size_t i) const;

  // Per-worker resource argument `i` as a T; InvalidArgument when out of range, not a
  // resource, or not a T. The pointer stays valid for the whole step.
  template <typename T>
  absl::StatusOr<T*> resource(size_t i) const {
    if (i >= args_.size() || !std::holds_alternative<std::shared_ptr<Resource>>(args_[i])) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", i, " is not a per-worker resource"));
    }
    T* r = dynamic_cast<T*>(std::get<std::shared_ptr<Resource>>(args_[i]).get());
    if (r == nullptr) return absl::InvalidArgumentError(absl::StrCat("argument ", i, " has another type"));
    return r;
  }

  // The next element of per-worker iterator argument `i` (an iterator from
  // PerWorkerDataset::MakeIterator): absl::OutOfRangeError at the end of the data
  // (data::IsEndOfData), InvalidArgument when argument `i` is not an iterator.
  absl::StatusOr<data::Element> Next(size_t i);

  absl::StatusOr<Tensor> Read(const std::string& name);
  // Several variables in one request per PS.
  absl::StatusOr<std::vector<Tensor>> ReadMany(const std::vector<std::string>& names);
  absl::Status Assign(const std::string& name, const Tensor& value);
  absl::Status AssignAdd(const std::string& name, const Tensor& value);
  absl::Status AssignSub(const std::string& name, const Tensor& value);
  // Several updates (any variables, dense or by row) in one request per PS.
  absl::Status Update(const std::vector<VariableUpdate>& updates);
  // Rows of a (sharded) variable by global id: an embedding lookup.
  absl::StatusOr<Tensor> Gather(const std::string& name, const Tensor& ids);
  absl::Status Scatter(UpdateKind kind, const std::string& name, const Tensor& ids, const Tensor& values);
  // Gradients applied by each variable's optimizer on its PS; one request per PS. Each shard's
  // gradient names the version this step read of it (versions()), so its PS can scale or
  // refuse it by staleness (docs/staleness.md); a refusal is Aborted (IsStaleGradientError)
  // and, returned by the function, makes the coordinator run the closure again.
  absl::Status PushGradients(const std::vector<GradientUpdate>& gradients);

  // Staleness: the versions of the variable shards this step read (Read, ReadMany, Gather and
  // their async forms, once their answer is in), the oldest one where a shard was read more
  // than once, plus those passed to NoteVersions. Pushes attach them.
  ShardVersions versions() const;
  // Adds versions of values this step computes with that another step read (e.g. a pull one
  // step started for the next, torch_bridge::FinishPull); the oldest per shard is kept.
  void NoteVersions(const ShardVersions& versions);
  // ReadManyAsync with the versions, which are NOT recorded in this context: for a read whose
  // values another step will use (it calls NoteVersions).
  PsFuture<VersionedValues> ReadManyVersionedAsync(const std::vector<std::string>& names);

  // Non-blocking forms (see PsClient::ReadAsync): send now, wait with PsFuture::Get later,
  // e.g. to pull the next step's variables while this step computes. A failure is counted
  // in ps_unreachable()/ps_state_lost() when it arrives. Once the closure is cancelled they
  // return a future that is ready with Cancelled. A future may outlive this context.
  PsFuture<std::vector<Tensor>> ReadManyAsync(const std::vector<std::string>& names);
  PsFuture<void> UpdateAsync(const std::vector<VariableUpdate>& updates);
  PsFuture<Tensor> GatherAsync(const std::string& name, const Tensor& ids);
  PsFuture<void> PushGradientsAsync(const std::vector<GradientUpdate>& gradients);
  // PushGradientsAsync and ReadManyVersionedAsync(read_after) in one request per PS
  // (PsClient::PushGradientsAndReadAsync): `pushed` is PushGradientsAsync's result (the same
  // tag and base versions: numbered as one update call of the step); `values` holds the
  // variables as each PS held them once it applied its part of the push, with their versions,
  // which are NOT recorded in this context (for the step that computes with them: NoteVersions).
  struct PushAndRead {
    PsFuture<void> pushed;
    PsFuture<VersionedValues> values;
  };
  PushAndRead PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                        const std::vector<std::string>& read_after);

  // Embedding tables (ParameterServerStrategy::CreateEmbeddingTable; EmbeddingClient says how
  // keys travel). LookupEmbeddings: rows of `keys` (i64 [n], duplicates allowed) as f32
  // [n, dim]; the keys count towards the table's admission, and a key without a row reads its
  // initial value (nothing is inserted). PushEmbeddingGradients: `gradients` (f32 [n, dim]) for
  // `keys`, a repeated key's rows summed, applied by the table's optimizer; numbered and
  // deduplicated like every other update of the step (TagUpdates), so a closure's re-run
  // applies it once. An unknown table is NotFound; a PS that cannot be reached Unavailable,
  // counted in ps_unreachable().
  absl::StatusOr<Tensor> LookupEmbeddings(const std::string& table, const Tensor& keys);
  absl::Status PushEmbeddingGradients(const std::string& table, const Tensor& keys, const Tensor& gradients);
  PsFuture<Tensor> LookupEmbeddingsAsync(const std::string& table, const Tensor& keys);
  PsFuture<void> PushEmbeddingGradientsAsync(const std::string& table, const Tensor& keys, const Tensor& gradients);

  // Exactly once: from now on every update and gradient push of this step carries `closure`
  // (its coordinator, closure id and watermark) and the call's sequence number — 1 for the
  // step's first Update/Assign*/Scatter/PushGradients call, 2 for the next — so each PS
  // applies it at most once however often the closure runs (ps/update_dedup.h). A step that
  // makes the same calls in the same order on every attempt (deterministic) therefore changes
  // the variables exactly once. Called by the worker before the function runs.
  void TagUpdates(const ps::UpdateTag& closure) { closure_ = closure; }

  // True once the coordinator cancelled this closure: long functions should check it and
  // return early. Variable operations fail with Cancelled from then on.
  bool cancelled() const { return cancelled_->load(std::memory_order_relaxed); }

  // True when some variable operation failed because a PS was unreachable.
  bool ps_unreachable() const { return failures_->unreachable.load(std::memory_order_acquire); }
  // True when some variable operation failed because a PS lost variables it held (it
  // restarted empty; see IsPsStateLost).
  bool ps_state_lost() const { return failures_->state_lost.load(std::memory_order_acquire); }

  // Time this step spent inside Next, and the examples (rows of each element's first
  // component) it took: the worker's input metrics.
  absl::Duration input_wait() const { return input_wait_; }
  int64_t examples() const { return examples_; }

  // Adds `time` to what this step spent in `phase`: how the function's own time divides (e.g.
  // "pull", "compute", "push"), exported by the worker as
  // asyncps_worker_step_phase_seconds_total{function,phase} when the step ends. `phase` must
  // be one of a small fixed set of the function's own words (a metric label), never data.
  void AddPhaseTime(absl::string_view phase, absl::Duration time);
  // The phases in the order first added, each with its total.
  const std::vector<std::pair<std::string, absl::Duration>>& phase_times() const { return phase_times_; }

 private:
  // Set by operations' results, which asynchronous ones deliver on the RPC loop thread
  // (possibly after this context is gone: hence shared).
  struct Failures {
    std::atomic<bool> unreachable{false};
    std::atomic<bool> state_lost{false};
    void Track(const absl::Status& status);
  };
  // The versions reads saw; shared because asynchronous reads deliver them on the RPC loop
  // thread.
  struct Pulled {
    mutable Mutex mu;
    ShardVersions versions ABSL_GUARDED_BY(mu);
    void Note(const ShardVersions& v);
  };
  // Starts `op` with a callback that records a failure in `failures_`, unless cancelled.
  template <typename T, typename Op>
  PsFuture<T> TrackedAsync(Op op);

  absl::Status Track(absl::Status status);
  template <typename T>
  absl::StatusOr<T> Track(absl::StatusOr<T> result) {
    if (!result.ok()) Track(result.status()).IgnoreError();
    return result;
  }
  absl::Status CheckCancelled() const;
  // The tag of the step's next update call (untagged unless TagUpdates was called).
  ps::UpdateTag NextTag();

  int worker_index_;
  std::vector<BoundArg> args_;
  PsClient& ps_;
  std::shared_ptr<const std::atomic<bool>> cancelled_;
  EmbeddingClient embeddings_{ps_.connections(), ps_.timeout(), ps_.shard_map()};
  const std::shared_ptr<Failures> failures_ = std::make_shared<Failures>();
  const std::shared_ptr<Pulled> pulled_ = std::make_shared<Pulled>();
  ps::UpdateTag closure_;  // sequence: the calls made so far
  absl::Duration input_wait_;
  int64_t examples_ = 0;
  std::vector<std::pair<std::string, absl::Duration>> phase_times_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_STEP_CONTEXT_H_
