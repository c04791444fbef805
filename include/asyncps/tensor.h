#ifndef ASYNCPS_INCLUDE_ASYNCPS_TENSOR_H_
#define ASYNCPS_INCLUDE_ASYNCPS_TENSOR_H_

// Public API: asyncps::Tensor, Shape, DType. Contracts are on each declaration.

#include "core/tensor.h"  // IWYU pragma: export
#include "core/dtype.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_TENSOR_H_
