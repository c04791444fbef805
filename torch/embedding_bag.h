#ifndef ASYNCPS_TORCH_EMBEDDING_BAG_H_
#define ASYNCPS_TORCH_EMBEDDING_BAG_H_

// torch::nn::EmbeddingBag over an embedding table on the parameter servers
// (ParameterServerStrategy::CreateEmbeddingTable): a model is written as usual, with the bag's
// output in the autograd graph, while the rows live on the PS keyed by int64 ids.
//
//   ASSIGN_OR_RETURN(torch::Tensor bags, bag.Forward(ctx, keys, offsets));   // one lookup per PS
//   torch::Tensor loss = cross_entropy(linear(bags), labels);
//   loss.backward();
//   RETURN_IF_ERROR(bag.PushGradients(ctx));   // one push per PS, only the rows the batch used
//
// Forward gathers the batch's distinct keys once (a key repeated across bags travels once) into
// a leaf tensor and combines them with torch's embedding_bag (sum or mean); backward leaves one
// gradient row per distinct key there, which PushGradients sends to the table's optimizer.
//
// LibTorch types are forward-declared: this header does not pull in <torch/torch.h>.
// LibTorch exceptions (c10::Error) are caught and come back as a Status.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/ps_future.h"

namespace at {
class Tensor;
}  // namespace at

namespace asyncps {
class ParameterServerStrategy;
class StepContext;
}  // namespace asyncps

namespace asyncps::torch_bridge {

class EmbeddingBag {
 public:
  enum class Combiner { kSum, kMean };

  // Bags over table `table` (rows of `dim` floats), combined by `combiner`.
  EmbeddingBag(std::string table, int64_t dim, Combiner combiner);
  ~EmbeddingBag();
  EmbeddingBag(const EmbeddingBag&) = delete;
  EmbeddingBag& operator=(const EmbeddingBag&) = delete;

  const std::string& table() const { return table_; }
  int64_t dim() const { return dim_; }

  // Worker, in a step: bag i of `keys` (i64 [total]) is keys[offsets[i] .. offsets[i + 1]) (the
  // last runs to the end; `offsets`, i64 [B], starts at 0 and never decreases, as
  // torch::nn::EmbeddingBag's); returns f32 [B, dim], the sum or mean of each bag's rows (an
  // empty bag: zeros), differentiable. The keys count towards the table's admission; a key
  // without a row contributes its initial value. Replaces the previous Forward's rows (one
  // Forward, backward, PushGradients per step). InvalidArgument for bad keys or offsets, or a
  // table whose rows are not `dim` wide; the lookup's errors otherwise.
  absl::StatusOr<at::Tensor> Forward(StepContext& ctx, const at::Tensor& keys,
                                     const at::Tensor& offsets);

  // Chief (evaluation): as Forward, without gradients, counting or inserting anything.
  absl::StatusOr<at::Tensor> Evaluate(const ParameterServerStrategy& strategy,
                                      const at::Tensor& keys, const at::Tensor& offsets) const;

  // Worker, after backward: pushes the gradient of every distinct key of the last Forward, one
  // request per PS, tagged like the step's other updates, and forgets those rows.
  // FailedPrecondition when there was no Forward since the last push, or backward left no
  // gradient in its rows.
  absl::Status PushGradients(StepContext& ctx);
  // The same without waiting for the PS's answer (the rows are forgotten at once).
  PsFuture<void> PushGradientsAsync(StepContext& ctx);

 private:
  struct Batch;  // the last Forward's distinct keys and leaf rows

  const std::string table_;
  const int64_t dim_;
  const Combiner combiner_;
  std::unique_ptr<Batch> batch_;
};

}  // namespace asyncps::torch_bridge

#endif  // ASYNCPS_TORCH_EMBEDDING_BAG_H_
