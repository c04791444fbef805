// scaling_worker: the worker (and PS-less) processes scaling_bench starts; serves the step
// functions of bench/scaling_program.h.
#include <cstdio>

#include "bench/scaling_program.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "worker/serve.h"

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "scaling_worker: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  return asyncps::Serve(*cluster, asyncps::bench::MakeScalingProgram(),
                        asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
}
