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
#include "data_service/servers.h"
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
// How often a registered worker registers again (see ServeElastic).
constexpr absl::Duration kReregisterEvery = absl::Seconds(5);

// --elastic: serves like ServeUntilSignal, and also registers with the chief (membership.Join,
// retried while the chief is unreachable: it may not be serving yet; repeated every
// kReregisterEvery, a no-op for a member, so that a restarted chief re-admits it) and, on SIGTERM/SIGINT,
// asks the chief to drain it (membership.Leave) before exiting 0. A refused registration (a
// wrong token, an index that is taken) is logged and ends the process with its exit code.
int ServeElastic(net::ServerProcess& process, const ClusterSpec& cluster) {
  if (absl::Status s = process.server().Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return ExitCodeForStatus(s);
  }
  const int index = cluster.task_index();
  spdlog::info("worker {} ready on {} (elastic: registering with the chief at {})", index, cluster.self_address(),
               cluster.chief());
  net::RpcClient chief(process.loop(), process.ClientOptions(cluster.chief()));
  Mutex mu;
  bool stop = false;
  bool registered = false;
  std::atomic<int> refused_code{-1};
  std::thread registration([&] {
    absl::Duration backoff = absl::Milliseconds(100);
    while (true) {
      net::OutMessage request;
      auto body = request.InitRequestBody<wire::JoinRequest>();
      body.setIndex(index);
      body.setAddress(cluster.self_address());
      absl::StatusOr<net::InMessage> answer = chief.Call("membership.Join", std::move(request), absl::Seconds(10));
      absl::Status s = answer.status();
      bool already_member = false;
      int members = 0;
      if (s.ok()) {
        s = net::CatchDecodeErrors([&]() -> absl::Status {
          auto r = answer->ResponseBody<wire::JoinResponse>();
          already_member = r.getAlreadyMember();
          members = r.getMembers();
          return absl::OkStatus();
        });
      }
      MutexLock lock(&mu);
      auto stopped = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop; };
      if (s.ok()) {
        if (!registered || !already_member) {
          spdlog::info("worker {}: {} ({} workers)", index,
                       already_member ? "a member of the job already" : "joined the job", members);
        }
        registered = true;
        // Registered again now and then (a no-op for a member): a chief restarted from its
        // checkpoint knows only the starting workers, and re-admits this one.
        if (mu.AwaitWithTimeout(absl::Condition(&stopped), kReregisterEvery)) return;
        backoff = absl::Milliseconds(100);
        continue;
      }
      if (s.code() != absl::StatusCode::kUnavailable && s.code() != absl::StatusCode::kDeadlineExceeded) {
        spdlog::error("worker {}: the chief refused its registration: {}", index, s.ToString());
        refused_code = ExitCodeForStatus(s) == 0 ? kExitFailure : ExitCodeForStatus(s);
        kill(getpid(), SIGTERM);  // wakes the wait below
        return;
      }
      // The chief is not serving membership yet (starting up, or restarting): try again, not a
      // failure.
      if (mu.AwaitWithTimeout(absl::Condition(&stopped), backoff)) return;
      backoff = std::min(backoff * 2, absl::Seconds(2));
    }
  });
  const int signal = WaitForTerminationSignal();
  bool was_registered = false;
  {
    MutexLock lock(&mu);
    stop = true;
    was_registered = registered;
  }
  registration.join();
  if (refused_code >= 0) {
    process.server().Shutdown();
    return refused_code;
  }
  int code = ExitCodeForSignal(signal);
  if (was_registered) {
    spdlog::info("signal {}: asking the chief to drain worker {}", signal, index);
    net::OutMessage request;
    request.InitRequestBody<wire::LeaveRequest>().setIndex(index);
    absl::StatusOr<net::InMessage> answer = chief.Call("membership.Leave", std::move(request), kLeaveTimeout);
    absl::Status s = answer.status();
    int requeued = 0;
    if (s.ok()) {
      s = net::CatchDecodeErrors([&]() -> absl::Status {
        requeued = answer->ResponseBody<wire::LeaveResponse>().getRequeued();
        return absl::OkStatus();
      });
    }
    if (s.ok()) {
      spdlog::info("worker {} left the job: drained, {} closure(s) went back to the queue", index, requeued);
      code = kExitOk;  // a departure, not a failure: nothing restarts it
    } else if (absl::IsUnavailable(s)) {
      spdlog::info("worker {}: the chief is gone ({}); shutting down", index, s.ToString());
    } else {
      spdlog::warn("worker {}: not drained ({}); shutting down", index, s.ToString());
    }
  }
  process.server().Shutdown();
  return code;
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
