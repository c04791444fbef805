#include "worker/serve.h"

#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/sync.h"
#include "core/exit_code.h"
#include "core/logging.h"
#include "core/status_macros.h"
#include "data_service/servers.h"
#include "net/elastic_member.h"
#include "net/server_process.h"
#include "ps/ps_server.h"
#include "worker/dataset_resources.h"
#include "worker/ps_client.h"
#include "worker/shard_map_cache.h"
#include "worker/worker.capnp.h"
#include "worker/worker_service.h"

namespace asyncps {
namespace {

// How long a worker leaving on SIGTERM gives the chief to drain it (its closures finish, or go
// back to the queue shortly before this runs out). Kubernetes' terminationGracePeriodSeconds
// must be longer (deploy/k8s/statefulsets.yaml).
constexpr absl::Duration kLeaveTimeout = absl::Seconds(25);

// --elastic: a worker registers with the chief (membership.Join; a no-op for a member, so a
// restarted chief re-admits it) and on SIGTERM asks to be drained (membership.Leave)
// (net::ServeAsMember).
int ServeElastic(net::ServerProcess& process, const ClusterSpec& cluster) {
  const int index = cluster.task_index();
  net::MemberCalls calls;
  calls.role = "worker";
  calls.leave_timeout = kLeaveTimeout;
  calls.join = [&cluster, index](net::RpcClient& chief) -> absl::StatusOr<net::MemberCalls::Registered> {
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::JoinRequest>();
    body.setIndex(index);
    body.setAddress(cluster.self_address());
    ASSIGN_OR_RETURN(net::InMessage answer, chief.Call("membership.Join", std::move(request), absl::Seconds(10)));
    net::MemberCalls::Registered r;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      auto response = answer.ResponseBody<wire::JoinResponse>();
      r.already_member = response.getAlreadyMember();
      r.text = absl::StrCat(r.already_member ? "a member of the job already" : "joined the job", " (",
                            response.getMembers(), " workers)");
      return absl::OkStatus();
    }));
    return r;
  };
  calls.leave = [index](net::RpcClient& chief, absl::Duration timeout) -> absl::StatusOr<std::string> {
    net::OutMessage request;
    request.InitRequestBody<wire::LeaveRequest>().setIndex(index);
    ASSIGN_OR_RETURN(net::InMessage answer, chief.Call("membership.Leave", std::move(request), timeout));
    int requeued = 0;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      requeued = answer.ResponseBody<wire::LeaveResponse>().getRequeued();
      return absl::OkStatus();
    }));
    return absl::StrCat("drained, ", requeued, " closure(s) went back to the queue");
  };
  return net::ServeAsMember(process, cluster, calls);
}

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
  if (options.UsesShardMap()) {
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
  if (options.elastic && !cluster.chief().empty()) return ServeElastic(**process, cluster);
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
