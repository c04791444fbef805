#include "ps/ps_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/exit_code.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "net/elastic_member.h"
#include "net/event_loop.h"
#include "net/server_process.h"
#include "ps/ps.capnp.h"
#include "ps/ps_metrics.h"
#include "ps/checkpoint_service.h"
#include "ps/embedding/embedding_metrics.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_store.h"
#include "ps/parallel_apply.h"
#include "ps/ps_service.h"
#include "ps/replication/replicated_ps.h"
#include "ps/replication/replicated_tables.h"
#include "ps/variable_store.h"

namespace asyncps::ps {
namespace {

// How long a PS leaving on SIGTERM gives the chief to move its copies to the other PS (a state
// transfer each, then one map change). Kubernetes' terminationGracePeriodSeconds must be
// longer (deploy/k8s/statefulsets.yaml).
constexpr absl::Duration kLeaveTimeout = absl::Seconds(60);

// Elastic PS (--elastic with --initial_ps): a PS registers with the chief (membership.JoinPs;
// a no-op for a member) and on SIGTERM asks to leave (membership.LeavePs), exiting 0 once
// it holds no copy (net::ServeAsMember).
int ServeElasticPs(net::ServerProcess& process, const ClusterSpec& cluster) {
  const int index = cluster.task_index();
  net::MemberCalls calls;
  calls.role = "ps";
  calls.leave_timeout = kLeaveTimeout;
  calls.join = [&cluster, index](net::RpcClient& chief) -> absl::StatusOr<net::MemberCalls::Registered> {
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::JoinPsRequest>();
    body.setIndex(index);
    body.setAddress(cluster.self_address());
    ASSIGN_OR_RETURN(net::InMessage answer, chief.Call("membership.JoinPs", std::move(request), absl::Seconds(10)));
    net::MemberCalls::Registered r;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      auto response = answer.ResponseBody<wire::JoinPsResponse>();
      r.already_member = response.getAlreadyMember();
      r.text = absl::StrCat(r.already_member ? "a member of the job already" : "joined the job", " (",
                            response.getMembers(), " PS)");
      return absl::OkStatus();
    }));
    return r;
  };
  calls.leave = [index](net::RpcClient& chief, absl::Duration timeout) -> absl::StatusOr<std::string> {
    net::OutMessage request;
    request.InitRequestBody<wire::LeavePsRequest>().setIndex(index);
    ASSIGN_OR_RETURN(net::InMessage answer, chief.Call("membership.LeavePs", std::move(request), timeout));
    int moved = 0;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      moved = answer.ResponseBody<wire::LeavePsResponse>().getGroupsMoved();
      return absl::OkStatus();
    }));
    return absl::StrCat("its ", moved, " group copies moved to the other PS");
  };
  return net::ServeAsMember(process, cluster, calls);
}

}  // namespace

int RunParameterServer(const ClusterSpec& cluster, const ProcessOptions& options) {
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/4);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  PsMetrics metrics((*process)->process_metrics());
  // The threads a large apply or finiteness check is split over, for every store and service
  // below (which hold it by pointer): declared first, so it outlives them.
  ApplyPool apply_pool;
  VariableStore store(options.ps_max_variable_bytes, &apply_pool);
  PsService::Options service_options;
  service_options.max_response_bytes = options.ps_max_response_bytes;
  service_options.allow_nonfinite_gradients = options.allow_nonfinite_gradients;
  service_options.inline_small_updates = options.ps_inline_small_updates;
  service_options.dedup_max_entries = static_cast<uint64_t>(options.ps_dedup_max_entries);
  service_options.metrics = &metrics;
  PsService service(store, service_options);
  service.RegisterWith((*process)->server().methods());
  CheckpointService checkpoints(store, CheckpointService::OptionsFromEnv());
  checkpoints.RegisterWith((*process)->server().methods());
  EmbeddingStore embedding_tables;
  EmbeddingMetrics embedding_metrics((*process)->process_metrics());
  EmbeddingService::Options embedding_options;
  embedding_options.max_response_bytes = options.ps_max_response_bytes;
  embedding_options.allow_nonfinite_gradients = options.allow_nonfinite_gradients;
  embedding_options.dedup_max_entries = static_cast<uint64_t>(options.ps_dedup_max_entries);
  embedding_options.ps_metrics = &metrics;
  embedding_options.metrics = &embedding_metrics;
  embedding_options.apply_pool = &apply_pool;
  EmbeddingService embeddings(embedding_tables, embedding_options);
  embeddings.RegisterWith((*process)->server().methods());
  // Under a shard map (ps_replicas >= 2, or elastic PS) the tables are part of every group
  // copy like its variables.
  ReplicatedTables replicated_tables(embeddings);
  // Replication serves the same methods over per-group copies once the chief installs a shard
  // map; until then (and always without one: ps_replicas = 1, no --initial_ps) every request
  // reaches `service` as above.
  ReplicatedPs::Options replication;
  replication.ps_index = cluster.task_index();
  replication.num_ps = cluster.num_ps();
  replication.replicas = static_cast<int>(options.ps_replicas);
  replication.dedup_max_entries = static_cast<uint64_t>(options.ps_dedup_max_entries);
  replication.metrics = &metrics;
  replication.checkpoints = &checkpoints;
  // A variable sent whole in a state transfer is one frame: under the frame limit.
  replication.transfer_whole_max_bytes =
      std::min<uint64_t>(replication.transfer_whole_max_bytes, static_cast<uint64_t>(options.rpc_max_frame_bytes) / 2);
  if (options.UsesShardMap()) replication.extension = &replicated_tables;
  net::ServerProcess& server_process = **process;
  const std::vector<std::string> peers = cluster.ps();
  net::EventLoop peer_loop;  // see ReplicatedPs::Options::connect
  replication.connect = [&server_process, &peer_loop, peers](int32_t index) {
    return std::make_unique<net::RpcClient>(peer_loop, server_process.ClientOptions(peers.at(index)));
  };
  ReplicatedPs replicated(service, std::move(replication));
  replicated.RegisterWith((*process)->server().methods());
  if (options.UsesShardMap()) replicated_tables.RegisterWith((*process)->server().methods(), replicated);
  spdlog::info("limits: {} variable bytes, {} response bytes, non-finite gradients {}, {} update-window keys",
               options.ps_max_variable_bytes, options.ps_max_response_bytes,
               options.allow_nonfinite_gradients ? "allowed" : "refused", options.ps_dedup_max_entries);
  if (options.elastic && options.initial_ps > 0 && !cluster.chief().empty()) return ServeElasticPs(**process, cluster);
  return (*process)->ServeUntilSignal();
}

}  // namespace asyncps::ps
