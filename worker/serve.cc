#include "worker/serve.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/exit_code.h"
#include "core/logging.h"
#include "data_service/servers.h"
#include "net/server_process.h"
#include "ps/ps_server.h"
#include "worker/dataset_resources.h"
#include "worker/ps_client.h"
#include "worker/shard_map_cache.h"
#include "worker/worker_service.h"

namespace asyncps {
namespace {

int RunWorker(const ClusterSpec& cluster, const Program& program, const ProcessOptions& options) {
  // Enough handler threads for several closures in flight plus resource creation.
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/8);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  std::vector<std::unique_ptr<net::RpcClient>> ps_clients;
  std::vector<net::RpcClient*> ps_ptrs;
  for (const std::string& address : cluster.ps()) {
    ps_clients.push_back(std::make_unique<net::RpcClient>((*process)->loop(), (*process)->ClientOptions(address)));
    ps_ptrs.push_back(ps_clients.back().get());
  }
  VariableDirectory directory;
  // Replicated shards: requests go to each group's primary, learned from the PS' shard maps.
  std::unique_ptr<ShardMapCache> shard_map;
  PsClient::Options ps_options;
  ps_options.transport = options.transport;
  if (options.transport != WirePrecision::kF32) {
    spdlog::info("pulls and gradient pushes travel in {} (--transport)", std::string(WirePrecisionName(options.transport)));
  }
  ps_options.compression = options.compression;
  ps_options.pull = options.pull_compression;
  if (options.pull_compression.lossy()) {
    spdlog::info("f32 pulls travel as {} (--pull_compression)", CompressionName(options.pull_compression));
  }
  if (options.compression.lossy()) {
    spdlog::info("dense f32 gradients are pushed as {} with error feedback (--compression)",
                 CompressionName(options.compression));
  }
  if (options.ps_replicas >= 2) {
    ShardMapCache::Options cache_options;
    // A try its primary leaves unanswered starts watching for a failover well before the
    // chief can decide one (its heartbeat timeout), so it moves as soon as the map does.
    cache_options.watch_after = options.ps_heartbeat_timeout / 2;
    shard_map = std::make_unique<ShardMapCache>(ps_ptrs, cache_options);
    ps_options.shard_map = shard_map.get();
  }
  PsClient ps(ps_ptrs, directory, ps_options);
  WorkerMetrics metrics((*process)->process_metrics());
  WorkerService service(program, cluster.task_index(), cluster.num_workers(), ps, directory, &metrics);
  service.RegisterWith((*process)->server().methods());
  return (*process)->ServeUntilSignal();
}

// The data worker builds datasets the way a training worker does (Program::AddDataset's
// factory, through its dataset resource), so a program that lacks one gets the same error.
data_service::DatasetBuilder MakeDatasetBuilder(const Program& program) {
  return [&program](const std::string& name, const std::map<std::string, std::string>& args, int index, int count,
                    bool dynamic) -> absl::StatusOr<data::Dataset> {
    const ResourceFactory* factory = program.FindResource(DatasetResourceName(name));
    if (factory == nullptr) {
      return absl::NotFoundError(absl::StrCat("this program has no dataset '", name, "' (Program::AddDataset)"));
    }
    std::map<std::string, std::string> with_policy = args;
    with_policy[kShardingArg] = ShardingArgValue(dynamic ? ShardingPolicy::kDynamic : ShardingPolicy::kOff);
    absl::StatusOr<std::unique_ptr<Resource>> resource = (*factory)(ResourceContext(index, count, with_policy));
    if (!resource.ok()) return resource.status();
    return static_cast<DatasetResource&>(**resource).dataset();
  };
}

}  // namespace

int Serve(const ClusterSpec& cluster, const Program& program, const ProcessOptions& options) {
  BlockTerminationSignals();
  InitLogging(std::string(TaskTypeName(cluster.task_type())), cluster.task_index(), options.log_level);
  switch (cluster.task_type()) {
    case TaskType::kPs:
      return ps::RunParameterServer(cluster, options);
    case TaskType::kWorker:
      return RunWorker(cluster, program, options);
    case TaskType::kDispatcher:
      return data_service::RunDispatcher(cluster, options);
    case TaskType::kDataWorker:
      return data_service::RunDataWorker(cluster, options, MakeDatasetBuilder(program));
    case TaskType::kChief:
    case TaskType::kEvaluator:
      break;
  }
  spdlog::error("Serve() does not run {} tasks", cluster.TaskLabel());
  return kExitUsage;
}

}  // namespace asyncps
