#include "torch/embedding_bag.h"

#include <torch/torch.h>

#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/status_macros.h"
#include "torch/tensor_bridge.h"
#include "worker/step_context.h"

namespace asyncps::torch_bridge {

struct EmbeddingBag::Batch {
  Tensor keys;           // i64 [U], distinct (what the lookup and the push send)
  ::torch::Tensor rows;  // f32 [U, dim], a leaf that requires grad
};

namespace {

template <typename Fn>
auto CatchTorch(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("torch: ", e.what_without_backtrace()));
  }
}

absl::Status CheckBags(const std::string& table, const ::torch::Tensor& keys,
                       const ::torch::Tensor& offsets) {
  if (keys.scalar_type() != ::torch::kLong || keys.dim() != 1 ||
      offsets.scalar_type() != ::torch::kLong || offsets.dim() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingBag '", table, "': keys and offsets must be 1-D int64 tensors"));
  }
  if (offsets.numel() > 0) {
    const ::torch::Tensor o = offsets.contiguous();
    const int64_t* p = o.data_ptr<int64_t>();
    bool ok = p[0] == 0;
    for (int64_t i = 1; ok && i < o.numel(); ++i) ok = p[i] >= p[i - 1];
    if (!ok || p[o.numel() - 1] > keys.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "EmbeddingBag '", table, "': offsets must start at 0, never decrease and stay within ",
          keys.numel(), " keys"));
    }
  }
  return absl::OkStatus();
}

struct Distinct {
  ::torch::Tensor keys;     // [U]
  ::torch::Tensor inverse;  // [total]: index into keys
};

Distinct Unique(const ::torch::Tensor& keys) {
  auto [unique, inverse] = ::torch::_unique(keys, /*sorted=*/false, /*return_inverse=*/true);
  return {unique.contiguous(), inverse};
}

::torch::Tensor Combine(const ::torch::Tensor& rows, const Distinct& d,
                        const ::torch::Tensor& offsets, EmbeddingBag::Combiner combiner) {
  namespace F = ::torch::nn::functional;
  return F::embedding_bag(d.inverse, rows,
                          F::EmbeddingBagFuncOptions().offsets(offsets).mode(
                              combiner == EmbeddingBag::Combiner::kSum
                                  ? ::torch::nn::EmbeddingBagMode(::torch::kSum)
                                  : ::torch::nn::EmbeddingBagMode(::torch::kMean)));
}

absl::Status CheckRows(const std::string& table, const Tensor& rows, int64_t dim) {
  if (rows.rank() != 2 || (rows.dim(0) > 0 && rows.dim(1) != dim)) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingBag '", table, "' expects rows of ",
                                                   dim, " floats; the table answered ",
                                                   ShapeString(rows.shape())));
  }
  return absl::OkStatus();
}

}  // namespace

EmbeddingBag::EmbeddingBag(std::string table, int64_t dim, Combiner combiner)
    : table_(std::move(table)), dim_(dim), combiner_(combiner) {}

EmbeddingBag::~EmbeddingBag() = default;

absl::StatusOr<at::Tensor> EmbeddingBag::Forward(StepContext& ctx, const at::Tensor& keys,
                                                 const at::Tensor& offsets) {
  batch_.reset();
  RETURN_IF_ERROR(CheckBags(table_, keys, offsets));
  return CatchTorch([&]() -> absl::StatusOr<at::Tensor> {
    Distinct d = Unique(keys);
    ASSIGN_OR_RETURN(Tensor distinct, FromTorch(d.keys));
    ASSIGN_OR_RETURN(Tensor looked_up, ctx.LookupEmbeddings(table_, distinct));
    RETURN_IF_ERROR(CheckRows(table_, looked_up, dim_));
    ASSIGN_OR_RETURN(::torch::Tensor rows, ToTorch(looked_up));
    if (rows.size(0) == 0) rows = ::torch::zeros({0, dim_});
    rows.requires_grad_(true);
    batch_ = std::make_unique<Batch>(Batch{std::move(distinct), rows});
    return Combine(rows, d, offsets, combiner_);
  });
}

absl::StatusOr<at::Tensor> EmbeddingBag::Evaluate(const ParameterServerStrategy& strategy,
                                                  const at::Tensor& keys,
                                                  const at::Tensor& offsets) const {
  RETURN_IF_ERROR(CheckBags(table_, keys, offsets));
  return CatchTorch([&]() -> absl::StatusOr<at::Tensor> {
    ::torch::NoGradGuard no_grad;
    Distinct d = Unique(keys);
    ASSIGN_OR_RETURN(Tensor distinct, FromTorch(d.keys));
    ASSIGN_OR_RETURN(Tensor looked_up, strategy.LookupEmbeddings(table_, distinct));
    RETURN_IF_ERROR(CheckRows(table_, looked_up, dim_));
    ASSIGN_OR_RETURN(::torch::Tensor rows, ToTorch(looked_up));
    if (rows.size(0) == 0) rows = ::torch::zeros({0, dim_});
    return Combine(rows, d, offsets, combiner_);
  });
}

PsFuture<void> EmbeddingBag::PushGradientsAsync(StepContext& ctx) {
  std::unique_ptr<Batch> batch = std::move(batch_);
  if (batch == nullptr) {
    return PsFuture<void>::Ready(absl::FailedPreconditionError(absl::StrCat(
        "EmbeddingBag '", table_, "': PushGradients without a Forward since the last push")));
  }
  absl::StatusOr<Tensor> grad = CatchTorch([&]() -> absl::StatusOr<Tensor> {
    const ::torch::Tensor& g = batch->rows.grad();
    if (!g.defined()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "EmbeddingBag '", table_, "': no gradient in its rows (call backward() first)"));
    }
    return FromTorch(g.contiguous());
  });
  if (!grad.ok()) return PsFuture<void>::Ready(grad.status());
  return ctx.PushEmbeddingGradientsAsync(table_, batch->keys, *grad);
}

absl::Status EmbeddingBag::PushGradients(StepContext& ctx) { return PushGradientsAsync(ctx).Get(); }

}  // namespace asyncps::torch_bridge
