// asyncps_ps: a generic parameter server. Any binary can also play the ps role through
// asyncps::Serve; this one needs no user program.
#include <spdlog/spdlog.h>

#include "core/cluster_spec.h"
#include "core/exit_code.h"
#include "core/logging.h"
#include "core/process_options.h"
#include "ps/ps_server.h"

int main(int argc, char** argv) {
  asyncps::BlockTerminationSignals();
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  const auto options = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  if (!cluster.ok()) {
    asyncps::InitLogging("ps", 0, options.log_level);
    spdlog::error("{}", cluster.status().ToString());
    return asyncps::kExitUsage;
  }
  asyncps::InitLogging("ps", cluster->task_index(), options.log_level);
  if (cluster->task_type() != asyncps::TaskType::kPs) {
    spdlog::error("asyncps_ps runs only as a ps task, not {}", cluster->TaskLabel());
    return asyncps::kExitUsage;
  }
  return asyncps::ps::RunParameterServer(*cluster, options);
}
