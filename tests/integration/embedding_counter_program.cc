// The worker program of embedding_exactly_once_test (tests/integration/embedding_counter.h).
#include <cstdio>

#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "tests/integration/embedding_counter.h"
#include "worker/serve.h"

int main(int argc, char** argv) {
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "embedding_counter_program: %s\n", cluster.status().ToString().c_str());
    return 2;
  }
  return asyncps::Serve(*cluster, asyncps::testutil::MakeEmbeddingCounterProgram(),
                        asyncps::ProcessOptions::FromEnvAndFlags(argc, argv));
}
