#ifndef ASYNCPS_INCLUDE_ASYNCPS_OPTIMIZERS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_OPTIMIZERS_H_

// Public API: server-side optimizers (asyncps::OptimizerKind, asyncps::OptimizerConfig,
// asyncps::opt::SGD, Adam, ...). Contracts are on each declaration.

#include "core/optimizer_config.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_OPTIMIZERS_H_
