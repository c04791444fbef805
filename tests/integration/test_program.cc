// asyncps_test_program: the worker program integration tests run. Every function here is a
// real workload a test schedules; "slow" ones do work in small slices and honour
// cancellation, so killing their worker mid-closure is a real mid-closure failure.
#include <cstdio>

#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "tests/integration/test_functions.h"
#include "worker/serve.h"

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "asyncps_test_program: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  return asyncps::Serve(*cluster, asyncps::testutil::MakeTestProgram(),
                        asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
}
