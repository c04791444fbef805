#ifndef ASYNCPS_TORCH_TENSOR_BRIDGE_H_
#define ASYNCPS_TORCH_TENSOR_BRIDGE_H_

// Tensor bytes between asyncps::Tensor and torch::Tensor without copying them.
//
// LibTorch types are only forward-declared here so that including this header costs nothing;
// callers that use the results include <torch/torch.h> themselves.

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace at {
class Tensor;
}  // namespace at

namespace asyncps::torch_bridge {

// A CPU torch tensor over `tensor`'s bytes (no copy). The torch tensor holds a handle on the
// bytes, so they stay alive as long as either side uses them; writes through one are seen by
// the other. Every DType maps (f32, f64, i32, i64, u8, bool).
absl::StatusOr<at::Tensor> ToTorch(const Tensor& tensor);

// An asyncps Tensor over `tensor`'s bytes: no copy when it is a dense, contiguous CPU tensor of
// a dtype asyncps has; a contiguous copy when it is strided; InvalidArgument for other devices
// or dtypes (f16, complex, ...). The result holds a reference on the torch storage. The autograd
// graph is not kept (the bytes are those of tensor.detach()).
absl::StatusOr<Tensor> FromTorch(const at::Tensor& tensor);

// Threads LibTorch uses for one op in this process (at::set_num_threads). Processes of a local
// cluster share the machine's cores: one thread per worker is the right default there.
void SetNumThreads(int threads);

}  // namespace asyncps::torch_bridge

#endif  // ASYNCPS_TORCH_TENSOR_BRIDGE_H_
