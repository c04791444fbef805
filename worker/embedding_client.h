#ifndef ASYNCPS_WORKER_EMBEDDING_CLIENT_H_
#define ASYNCPS_WORKER_EMBEDDING_CLIENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "ps/embedding/embedding_config.h"
#include "ps/update_tag.h"
#include "worker/ps_future.h"

namespace asyncps {
namespace net {
class RpcClient;
}  // namespace net
class ShardMapCache;

// Looks up and updates rows of hash-keyed embedding tables (ps/embedding/) on whichever
// parameter servers own their keys.
//
// A table lives on every PS; each key belongs to the PS ps::PsForKey(key, num_ps) names. Every
// call deduplicates its keys (a batch's repeated n-grams cost one row on the wire), sends one
// request per PS that owns some of them, all PS in parallel, and scatters the answers back into
// the caller's key order. Lookups never insert a row: a key without one reads its initial value
// (a pure function of key and seed). A push sums the gradients of a repeated key and sends one
// row per key; the PS applies it through the table's optimizer, creating the row of an admitted
// key and dropping the gradient of a key not admitted yet.
//
// A PS that answers "no embedding table" for a table another PS holds (it restarted empty)
// gives PsStateLostError (worker/ps_client.h), which the coordinator's PS recovery acts on; a
// table no PS holds stays NotFound (with one PS the two cannot be told apart: NotFound).
// Other errors from a PS keep their code and name the PS (a table the PS does not know: NotFound;
// bad shapes: InvalidArgument); a PS that cannot be reached gives Unavailable or
// DeadlineExceeded naming it (IsPsUnreachable). Inputs are validated before anything is sent,
// so a bad key tensor or gradient never reaches one PS and not another. An answer that does not
// fit its request (another row count, dtype, or a dim that differs between PS) is Internal.
//
// Thread-safe. The RPC clients are not owned and must outlive this object; it holds nothing
// else, so it is cheap to make per use.
class EmbeddingClient {
 public:
  // `ps[i]` is the connection to PS i: the order PsForKey routes by, the cluster's PS order.
  // With `shard_map` (replicated shards, ps_replicas >= 2; not owned, outlives the client and
  // its calls) the keys PsForKey gives PS g are shard group g's, and each request goes to the
  // group's primary with its route, riding out failovers as PsClient's do (worker/routed_call.h).
  EmbeddingClient(std::vector<net::RpcClient*> ps, absl::Duration timeout, ShardMapCache* shard_map = nullptr);

  int num_ps() const { return static_cast<int>(ps_.size()); }

  // Creates `config`'s table on every PS (in parallel). Idempotent for the same config;
  // AlreadyExists (from the PS) for the same name with another config; the PS's
  // InvalidArgument for a bad config. With `wait_for_ready`, waits (up to the timeout) for PS
  // that are still starting.
  absl::Status CreateTable(const ps::EmbeddingTableConfig& config, bool wait_for_ready);

  // Rows of `keys` (i64 [n], duplicates allowed) of `table`: f32 [n, dim], row i for keys[i].
  // `train`: the keys count towards the table's admission (training steps); false for
  // evaluation, which then changes nothing on the PS. n == 0 gives f32 [0, 0] without a call.
  absl::StatusOr<Tensor> Lookup(const std::string& table, const Tensor& keys, bool train);

  // Applies `gradients` (f32 [n, dim]) for `keys` (i64 [n], duplicates allowed: their rows are
  // summed) through `table`'s optimizer. With a tagged `tag` every PS applies its part at most
  // once for that tag (a closure's re-run is answered OK without applying twice).
  absl::Status Push(const std::string& table, const Tensor& keys, const Tensor& gradients,
                    const ps::UpdateTag& tag = {});

  // Non-blocking forms: `done` is called exactly once, on the RPC loop thread when the answers
  // arrive (it must not block), or on the calling thread before returning when the inputs are
  // bad. The tensors passed in may be dropped at once but not written to until `done`.
  void LookupAsync(const std::string& table, const Tensor& keys, bool train,
                   PsCallback<Tensor> done);
  void PushAsync(const std::string& table, const Tensor& keys, const Tensor& gradients,
                 PsCallback<void> done, const ps::UpdateTag& tag = {});
  PsFuture<Tensor> LookupAsync(const std::string& table, const Tensor& keys, bool train);
  PsFuture<void> PushAsync(const std::string& table, const Tensor& keys, const Tensor& gradients,
                           const ps::UpdateTag& tag = {});

 private:
  const std::vector<net::RpcClient*> ps_;
  const absl::Duration timeout_;
  ShardMapCache* const shard_map_;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_EMBEDDING_CLIENT_H_
