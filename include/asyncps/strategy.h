#ifndef ASYNCPS_INCLUDE_ASYNCPS_STRATEGY_H_
#define ASYNCPS_INCLUDE_ASYNCPS_STRATEGY_H_

// Public API: placing variables on the parameter servers: asyncps::ParameterServerStrategy (built
// on the chief's asyncps::ChiefProcess, asyncps/chief.h), asyncps::ShardedVariable, partitioners.
// Contracts are on each declaration.

#include "coordinator/parameter_server_strategy.h"  // IWYU pragma: export
#include "coordinator/sharded_variable.h"  // IWYU pragma: export
#include "partitioners/partitioner.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_STRATEGY_H_
