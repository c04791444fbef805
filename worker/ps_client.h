#ifndef ASYNCPS_WORKER_PS_CLIENT_H_
#define ASYNCPS_WORKER_PS_CLIENT_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/bf16.h"
#include "core/block_pool.h"
#include "core/compression.h"
#include "core/tensor.h"
#include "ps/shard_initializer.h"
#include "core/optimizer_config.h"
#include "core/update_kind.h"
#include "ps/update_tag.h"
#include "worker/gradient_residuals.h"
#include "worker/ps_future.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace net {
class RpcClient;
}  // namespace net
class ShardMapCache;

// An update of a variable by name: dense over the whole value, or (with `ids`) of the rows
// with those global row ids (1-D i32/i64; duplicates allowed).
struct VariableUpdate {
  std::string name;
  UpdateKind kind = UpdateKind::kAssign;
  Tensor value;
  std::optional<Tensor> ids;
};

// A gradient for a variable's server-side optimizer: dense, or rows by global id.
struct GradientUpdate {
  std::string name;
  Tensor value;
  std::optional<Tensor> ids;
  // The form this gradient travels in (core/compression.h); unset: the client's
  // (PsClient::Options::compression). Applies to dense f32 gradients only: row gradients and
  // other dtypes always travel exactly.
  std::optional<Compression> compression = std::nullopt;
};

// The versions of variable shards (ps::Variable::version) as reads saw them: shard name (the
// variable's own name when it is not sharded) -> version on the PS holding it.
using ShardVersions = absl::flat_hash_map<std::string, int64_t>;

// Values read with their versions. `versions` lacks the shards of a PS that reports none (one
// built before versions existed): their gradients are pushed unchecked.
struct VersionedValues {
  std::vector<Tensor> values;
  ShardVersions versions;
};
struct VersionedRows {
  Tensor rows;
  ShardVersions versions;
};

// Reads and updates variables by name on whichever parameter servers hold their shards.
//
// Every operation sends at most one request per PS, carrying everything that PS holds for
// the operation, and the requests to different PS go out together: no PS waits on another.
// Sharded variables are split and reassembled here (dense values sliced by row range without
// copying; row ids routed to their shard). Inputs are validated against the placement before
// anything is sent, so a bad shape or id never reaches one shard and not another.
//
// Errors from a PS keep their code; a PS that cannot be reached gives Unavailable (or
// DeadlineExceeded) naming the PS. Use IsPsUnreachable to tell those apart. An answer that
// does not fit its request (another count, shape or dtype than the placement's) is Internal,
// one that cannot be decoded Internal or InvalidArgument: never a value. A placement naming
// a PS this client has no connection to is InvalidArgument, and nothing is sent.
//
// A PS that answers NotFound for a variable this client found in the directory has lost it:
// every name sent comes from the directory, and a variable enters the directory only after
// every PS holding a shard of it created it (variables are never deleted). So that answer
// means the PS restarted empty — a PS failure, not the caller's mistake — and is returned as
// Unavailable marked "PS state lost" (IsPsStateLost, LostPs), which is TensorFlow's contract
// for a PS failure and what automatic PS recovery keys on.
//
// Thread-safe. The RPC clients and the directory are not owned and must outlive this object.
class PsClient {
 public:
  struct Options {
    // Deadline of each operation, failovers ridden out included.
    absl::Duration timeout = absl::Seconds(60);
    // Replicated shards (ps_replicas >= 2): a placement's PS index is a shard group, and each
    // request goes to the group's primary in this map with its route, retried at the new
    // primary across a failover until `timeout` (worker/routed_call.h). Null (one copy per
    // shard): each request goes to the PS the placement names, as always. Not owned; must
    // outlive this client and its operations.
    ShardMapCache* shard_map = nullptr;
    // With `shard_map`: every untagged Update and PushGradients (the chief's own writes) is
    // given a tag of this client's own — its identity a random id like a coordinator's, one
    // closure id per call, the watermark the oldest call still in flight — so that, like a
    // closure's writes, it is resent across a failover and applied once (the replicated update
    // window). Off: such a write whose primary is lost is that call's Unavailable.
    bool tag_own_writes = false;
    // Reduced-precision transport (core/bf16.h): with kBf16, the f32 values this client reads
    // (Read*, and the values of PushGradientsAndRead*) are asked for in bf16 and widened here,
    // and the f32 gradients it pushes (PushGradients*, dense and by row) are sent in bf16 and
    // widened by the PS before it checks and applies them: half the bytes of each on the wire,
    // each value rounded to 8 significant bits (round to nearest even). Every request says
    // its precision, so a PS that predates bf16 refuses such a push (unknown dtype) and answers
    // such a read in f32 (taken as it is). Variables, optimizer state and checkpoints on the PS
    // stay f32; Update, Gather and CreateVariable always travel in f32.
    WirePrecision transport = WirePrecision::kF32;
    // Gradient compression (core/compression.h; the --compression process flag): the form
    // dense f32 gradients are pushed in (PushGradients*, the fused push-and-read included),
    // unless a GradientUpdate names its own. Lossy forms keep error feedback on this client
    // (residuals(); worker/gradient_residuals.h). Row gradients and non-f32 gradients are never
    // compressed. Tags and exactly-once are unchanged: the PS deduplicates a compressed push
    // as any other. A PS that predates compression refuses such a push (unknown dtype code).
    // kNone keeps `transport`'s form for gradients.
    Compression compression = {};
    // Quantized reads (the --pull_compression process flag): the form this client asks f32
    // values it reads in (Read*, and the values of PushGradientsAndRead*): none (as `transport`
    // says), bf16, or int8 (a scale per 256 values, ~1/4 of the bytes; each value within half
    // a step, its block's largest magnitude / 254, of the PS's). Decoded here to f32; the PS's
    // variables are never touched. A PS that predates int8 refuses such a read.
    Compression pull = {};
  };

  PsClient(std::vector<net::RpcClient*> ps, const VariableDirectory& directory, Options options);
  PsClient(std::vector<net::RpcClient*> ps, const VariableDirectory& directory)
      : PsClient(std::move(ps), directory, Options()) {}

  int num_ps() const { return static_cast<int>(ps_.size()); }
  // The connections this client calls, in PS order, and its per-call deadline: for clients of
  // the PS's other services (EmbeddingClient) that share them.
  const std::vector<net::RpcClient*>& connections() const { return ps_; }
  absl::Duration timeout() const { return options_.timeout; }
  // The shard map requests are routed by (null: one copy per shard).
  ShardMapCache* shard_map() const { return options_.shard_map; }

  // Error feedback of lossy gradient compression: per shard, what this client's applied pushes
  // did not send (Options::compression).
  const GradientResiduals& residuals() const { return *residuals_; }

  // Current values of `names`, in order (a sharded variable comes back whole).
  absl::StatusOr<std::vector<Tensor>> Read(const std::vector<std::string>& names);

  // With a tagged `tag` (a closure's call; see ps::UpdateDedup), every PS applies its part
  // at most once for that tag: sending the same call again (a closure's re-run) is answered
  // OK without applying anything twice. Without one, every call is applied.
  absl::Status Update(const std::vector<VariableUpdate>& updates, const ps::UpdateTag& tag = {});
  absl::Status PushGradients(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag = {});
  // Staleness (docs/staleness.md): each shard's gradient names the version `base` holds for it
  // (shards absent from `base` name none), so its PS can scale it (staleness-aware learning
  // rate) or refuse it (max_staleness: Aborted, IsStaleGradientError, nothing of that PS's part
  // applied). Read and Gather have versioned forms below that fill `base`.
  absl::Status PushGradients(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag,
                             const ShardVersions& base);

  // Read and Gather with the versions of what they read (one per shard read).
  absl::StatusOr<VersionedValues> ReadVersioned(const std::vector<std::string>& names);
  absl::StatusOr<VersionedRows> GatherVersioned(const std::string& name, const Tensor& ids);

  // Rows `ids` (global, duplicates allowed) of `name`, in id order: [len(ids), row dims...].
  absl::StatusOr<Tensor> Gather(const std::string& name, const Tensor& ids);

  // Non-blocking forms of the four above, with the same results and errors: each sends its
  // requests and returns at once, so one thread can keep many operations in flight (the next
  // pull while it computes; a pipeline of pushes). The blocking forms are these plus a wait.
  //
  // The callback forms call `done` exactly once: on the RPC loop thread when the answers
  // arrive (it must not block: no blocking PsClient call from there), or on the calling
  // thread before returning when the operation fails before anything is sent (unknown
  // variable, bad shape or id). The arguments are copied or referenced by the requests as
  // needed: the caller may drop them at once, but must not write into a tensor passed in until
  // the operation completes (requests share tensor buffers rather than copy them). Operations in flight when the connection to a
  // PS drops complete with Unavailable (IsPsUnreachable); when the RpcClient is destroyed,
  // with Cancelled. Operations still in flight when this PsClient is destroyed complete
  // normally (they do not use it once sent).
  void ReadAsync(const std::vector<std::string>& names, PsCallback<std::vector<Tensor>> done);
  void UpdateAsync(const std::vector<VariableUpdate>& updates, PsCallback<void> done,
                   const ps::UpdateTag& tag = {});
  void PushGradientsAsync(const std::vector<GradientUpdate>& gradients, PsCallback<void> done,
                          const ps::UpdateTag& tag = {});
  void GatherAsync(const std::string& name, const Tensor& ids, PsCallback<Tensor> done);
  void ReadVersionedAsync(const std::vector<std::string>& names, PsCallback<VersionedValues> done);
  void GatherVersionedAsync(const std::string& name, const Tensor& ids, PsCallback<VersionedRows> done);
  void PushGradientsAsync(const std::vector<GradientUpdate>& gradients, PsCallback<void> done,
                          const ps::UpdateTag& tag, const ShardVersions& base);

  // The future forms: the result is waited for with PsFuture::Get on any thread.
  PsFuture<std::vector<Tensor>> ReadAsync(const std::vector<std::string>& names);
  PsFuture<void> UpdateAsync(const std::vector<VariableUpdate>& updates, const ps::UpdateTag& tag = {});
  PsFuture<void> PushGradientsAsync(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag = {});
  PsFuture<Tensor> GatherAsync(const std::string& name, const Tensor& ids);
  PsFuture<VersionedValues> ReadVersionedAsync(const std::vector<std::string>& names);
  PsFuture<VersionedRows> GatherVersionedAsync(const std::string& name, const Tensor& ids);
  PsFuture<void> PushGradientsAsync(const std::vector<GradientUpdate>& gradients, const ps::UpdateTag& tag,
                                    const ShardVersions& base);

  // A push and the next pull in one round trip (issue 23): applies `gradients` exactly as
  // PushGradientsAsync(gradients, done, tag, base) does — the same requests, tagging, staleness
  // checks and errors — and each PS then answers the values of those of `read_after` it holds
  // (with their versions, as ReadVersionedAsync), read once its part of the push is applied
  // there (or found applied before: a retry answers the values too). One request per PS that
  // holds a gradient's shard or a read's shard. A refused push (stale, non-finite, unknown
  // variable) is an error and yields no values. A PS older than the fused answer is read
  // afresh with ps.Read after its push. Calls `pushed` (the push's own result) and then `done`
  // exactly once each, as the other callback forms call theirs.
  void PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                 const std::vector<std::string>& read_after, PsCallback<void> pushed,
                                 PsCallback<VersionedValues> done, const ps::UpdateTag& tag,
                                 const ShardVersions& base);
  PsFuture<VersionedValues> PushGradientsAndReadAsync(const std::vector<GradientUpdate>& gradients,
                                                      const std::vector<std::string>& read_after,
                                                      const ps::UpdateTag& tag = {},
                                                      const ShardVersions& base = {});

  // Creates every shard of `placement` on its PS (in parallel), each filled by `init`
  // evaluated for that shard's rows. Idempotent. With `wait_for_ready`, waits (up to the
  // timeout) for PS that are still starting.
  absl::Status CreateVariable(const VariablePlacement& placement, const ps::InitializerSpec& init,
                              const OptimizerConfig* optimizer, bool wait_for_ready);

  // OK when PS `ps` answers within `timeout`.
  absl::Status Health(int ps, absl::Duration timeout, bool wait_for_ready = false);

 private:
  // The tag an untagged write gets (Options::tag_own_writes) and what ends it: `done` wrapped
  // so that the call leaves the in-flight set when it completes. Unchanged when not tagging.
  struct OwnWrites;
  ps::UpdateTag TagOwnWrite(const ps::UpdateTag& tag, PsCallback<void>* done);
  // Whether f32 reads and gradient pushes travel in bf16 (Options::transport).
  bool bf16_transport() const { return options_.transport == WirePrecision::kBf16; }

  const std::vector<net::RpcClient*> ps_;
  const VariableDirectory& directory_;
  const Options options_;
  // Shared with the completions of calls in flight, which may outlive this client.
  const std::shared_ptr<OwnWrites> own_writes_;
  const std::shared_ptr<GradientResiduals> residuals_ = std::make_shared<GradientResiduals>();
  // The whole values sharded variables are read into: a training loop pulls the same sizes
  // every step, and a fresh block over glibc's mmap threshold costs its pages' zeroing.
  BlockPool whole_values_;
};

// True when `status` says a PS could not be reached (as opposed to the PS rejecting a request).
// Also true for a PS that lost its state (see IsPsStateLost).
bool IsPsUnreachable(const absl::Status& status);

// Unavailable naming PS `ps` (at `address`), marked as "this PS no longer holds variables it
// held" (it restarted empty); `detail` is what the PS said.
absl::Status PsStateLostError(int ps, const std::string& address, absl::string_view detail);
// True for a status made by PsStateLostError — also after it crossed from a worker to the
// coordinator and to the user (Join, Schedule, RemoteValue::Fetch).
bool IsPsStateLost(const absl::Status& status);
// The index of the PS that lost its state, or -1 when `status` is not such an error.
int LostPs(const absl::Status& status);
// Rebuilds the mark on an error that crossed the wire as code and message only (a worker
// reports a closure's error so): Unavailable with `message`, the PS index read back from the
// text PsStateLostError wrote (-1 when it is not there).
absl::Status PsStateLostFromMessage(absl::string_view message);

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_PS_CLIENT_H_
