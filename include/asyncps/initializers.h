#ifndef ASYNCPS_INCLUDE_ASYNCPS_INITIALIZERS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_INITIALIZERS_H_

// Public API: how a new variable is filled (asyncps::VariableInit, asyncps::init::Zeros,
// GlorotUniform, ...; evaluated on the parameter servers). Contracts are on each declaration.

#include "coordinator/initializers.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_INITIALIZERS_H_
