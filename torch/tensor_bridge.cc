#include "torch/tensor_bridge.h"

#include <dlfcn.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace asyncps::torch_bridge {
namespace {

absl::StatusOr<c10::ScalarType> ScalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return c10::ScalarType::Float;
    case DType::kF64:
      return c10::ScalarType::Double;
    case DType::kI32:
      return c10::ScalarType::Int;
    case DType::kI64:
      return c10::ScalarType::Long;
    case DType::kU8:
      return c10::ScalarType::Byte;
    case DType::kBool:
      return c10::ScalarType::Bool;
  }
  return absl::InvalidArgumentError(absl::StrCat("no torch dtype for dtype ", static_cast<int>(dtype)));
}

absl::StatusOr<DType> DTypeOfScalarType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DType::kF32;
    case c10::ScalarType::Double:
      return DType::kF64;
    case c10::ScalarType::Int:
      return DType::kI32;
    case c10::ScalarType::Long:
      return DType::kI64;
    case c10::ScalarType::Byte:
      return DType::kU8;
    case c10::ScalarType::Bool:
      return DType::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat("torch dtype ", c10::toString(type), " has no asyncps dtype"));
  }
}

}  // namespace

absl::StatusOr<at::Tensor> ToTorch(const Tensor& tensor) {
  try {
    absl::StatusOr<c10::ScalarType> type = ScalarTypeOf(tensor.dtype());
    if (!type.ok()) return type.status();
    const std::vector<int64_t> sizes(tensor.shape().begin(), tensor.shape().end());
    const auto options = at::TensorOptions().dtype(*type).device(at::kCPU);
    if (tensor.num_elements() == 0) return at::empty(sizes, options);
    // The deleter owns a handle on the bytes: they live until LibTorch frees the storage.
    Tensor keep = tensor;
    return ::torch::from_blob(const_cast<void*>(tensor.raw_data()), sizes, [keep](void*) {}, options);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("torch: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<Tensor> FromTorch(const at::Tensor& tensor) {
  try {
    if (!tensor.defined()) return absl::InvalidArgumentError("undefined torch tensor");
    if (!tensor.device().is_cpu() || tensor.layout() != at::kStrided) {
      return absl::InvalidArgumentError(absl::StrCat("torch tensor on ", tensor.device().str(),
                                                     " or not dense; only dense CPU tensors convert"));
    }
    absl::StatusOr<DType> dtype = DTypeOfScalarType(tensor.scalar_type());
    if (!dtype.ok()) return dtype.status();
    at::Tensor t = tensor.detach();
    if (!t.is_contiguous()) t = t.contiguous();
    Shape shape(t.sizes().begin(), t.sizes().end());
    if (t.numel() == 0) return Tensor(*dtype, std::move(shape));
    void* data = t.data_ptr();
    // The view keeps a reference on the torch storage.
    std::shared_ptr<const void> owner = std::make_shared<const at::Tensor>(std::move(t));
    return Tensor::View(*dtype, std::move(shape), std::move(owner), data);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("torch: ", e.what_without_backtrace()));
  }
}

void SetNumThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  // OpenBLAS (Debian's libopenblas0-pthread) runs its own thread pool, sized to the machine
  // and not governed by at::set_num_threads; its threads spin while they wait, which several
  // processes on two cores cannot afford. It is reached through libblas.so.3 when that is the
  // OpenBLAS alternative; with another BLAS the symbol is absent and nothing happens.
  using SetBlasThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(threads);
}

}  // namespace asyncps::torch_bridge
