#ifndef ASYNCPS_INCLUDE_ASYNCPS_TORCH_H_
#define ASYNCPS_INCLUDE_ASYNCPS_TORCH_H_

// Public API (only when asyncps was built with LibTorch; not part of asyncps.h): moving
// LibTorch module parameters and tensors to and from the parameter servers. Contracts are on
// each declaration.

#include "torch/checkpoint_loader.h"  // IWYU pragma: export
#include "torch/embedding_bag.h"  // IWYU pragma: export
#include "torch/module_variables.h"  // IWYU pragma: export
#include "torch/tensor_bridge.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_TORCH_H_
