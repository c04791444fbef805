#ifndef ASYNCPS_INCLUDE_ASYNCPS_SERVE_H_
#define ASYNCPS_INCLUDE_ASYNCPS_SERVE_H_

// Public API: running a worker or PS process from main (asyncps::Serve and friends).
// Contracts are on each declaration.

#include "worker/serve.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_SERVE_H_
