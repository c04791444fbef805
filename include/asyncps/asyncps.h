#ifndef ASYNCPS_INCLUDE_ASYNCPS_ASYNCPS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_ASYNCPS_H_

// The front door: everything a training program needs, and nothing heavy. Nothing reachable
// from here includes Asio, generated Cap'n Proto headers, Eigen or spdlog (scripts/
// check_public_headers.sh fails CI otherwise).

#include "asyncps/chief.h"         // IWYU pragma: export
#include "asyncps/cluster_spec.h"  // IWYU pragma: export
#include "asyncps/coordinator.h"   // IWYU pragma: export
#include "asyncps/data_service.h"  // IWYU pragma: export
#include "asyncps/datasets.h"      // IWYU pragma: export
#include "asyncps/initializers.h"  // IWYU pragma: export
#include "asyncps/optimizers.h"    // IWYU pragma: export
#include "asyncps/program.h"       // IWYU pragma: export
#include "asyncps/serve.h"         // IWYU pragma: export
#include "asyncps/status.h"        // IWYU pragma: export
#include "asyncps/step_context.h"  // IWYU pragma: export
#include "asyncps/strategy.h"      // IWYU pragma: export
#include "asyncps/sync.h"          // IWYU pragma: export
#include "asyncps/tensor.h"        // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_ASYNCPS_H_
