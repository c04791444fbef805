#include "coordinator/chief_process.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/ps_monitor.h"
#include "data_service/servers.h"
#include "data_service/status_watch.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "metrics/status_board.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "worker/shard_map_cache.h"

namespace asyncps {

absl::StatusOr<std::unique_ptr<ChiefProcess>> ChiefProcess::Create(const ClusterSpec& cluster, Options options) {
  if (!cluster.is_chief()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the chief's process needs the chief's cluster spec, not ", cluster.TaskLabel()));
  }
  std::unique_ptr<ChiefProcess> p(new ChiefProcess(cluster, std::move(options)));
  const ProcessOptions& process = p->options_.process;
  auto m = metrics::ProcessMetrics::Create("chief", cluster.task_index(), process);
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat("chief metrics endpoint (--metrics_port=",
                                                        process.metrics_port, "): ", m.status().message()));
  }
  p->metrics_ = std::move(*m);
  p->rpc_metrics_ = std::make_unique<metrics::RpcMetrics>(*p->metrics_);
  p->status_board_ = std::make_unique<metrics::StatusBoard>(*p->metrics_);
  p->checkpoint_metrics_ = std::make_unique<CheckpointMetrics>(*p->metrics_);
  // Replicated shards or elastic PS: the chief owns a shard map and watches the PS.
  const bool replicated = process.UsesShardMap();
  const int members = process.InitialPsMembers(cluster.num_ps());
  for (int i = 0; i < cluster.num_ps(); ++i) {
    // Without replicas the chief does not watch parameter servers between calls (Prometheus's
    // `up` does); with them the PsMonitor does. Elastic PS slots past the first members are
    // standing by for a PS to join.
    p->status_board_->SetMember("ps", i, cluster.ps()[static_cast<size_t>(i)],
                                !replicated ? "unwatched" : i < members ? "starting" : "standby", 0);
  }
  p->status_board_->Serve();
  if (p->metrics_->port() > 0) {
    spdlog::info("chief metrics on port {}; status page on http://127.0.0.1:{}/status", p->metrics_->port(),
                 p->metrics_->port());
  }
  p->loop_ = std::make_unique<net::EventLoop>();
  std::vector<net::RpcClient*> ptrs;
  for (const std::string& address : cluster.ps()) {
    p->ps_clients_.push_back(p->Connect(address));
    ptrs.push_back(p->ps_clients_.back().get());
  }
  PsClient::Options client_options{p->options_.rpc_timeout};
  if (replicated) {
    ShardMapCache::Options cache_options;
    cache_options.watch_after = process.ps_heartbeat_timeout / 2;  // as a worker's (worker/serve.cc)
    p->shard_map_ = std::make_unique<ShardMapCache>(ptrs, cache_options);
    client_options.shard_map = p->shard_map_.get();
    // The chief's own writes (variables assigned, updated outside closures) ride out a
    // failover like closures' writes, applied once.
    client_options.tag_own_writes = true;
  }
  p->ps_client_ = std::make_unique<PsClient>(ptrs, p->directory_, client_options);
  if (replicated) {
    PsMonitor::Options monitor;
    monitor.replicas = static_cast<int>(process.ps_replicas);
    monitor.initial_members = members;
    monitor.heartbeat_timeout = process.ps_heartbeat_timeout;
    monitor.lost_after = process.ps_lost_after;
    monitor.start_timeout = p->options_.rpc_timeout;
    // The monitor's heartbeats on connections and a loop of their own: on the chief's they
    // would wait behind its writes to the PS and every worker's closures, and a busy chief
    // would declare live PS lost (seen under load 8-20: 1.85-3.35 s without an answer).
    p->monitor_loop_ = std::make_unique<net::EventLoop>();
    std::vector<net::RpcClient*> monitor_ptrs;
    for (const std::string& address : cluster.ps()) {
      p->monitor_clients_.push_back(p->ConnectOn(*p->monitor_loop_, address));
      monitor_ptrs.push_back(p->monitor_clients_.back().get());
    }
    p->ps_monitor_ = std::make_unique<PsMonitor>(monitor_ptrs, cluster.ps(), *p->shard_map_, *p->metrics_,
                                                 *p->status_board_, monitor);
    if (absl::Status started = p->ps_monitor_->Start(); !started.ok()) return started;
  }
  if (cluster.dispatcher_in_chief()) {
    auto dispatcher =
        data_service::InChiefDispatcher::Start(cluster, process, *p->loop_, *p->metrics_, p->rpc_metrics_.get());
    if (!dispatcher.ok()) return dispatcher.status();
    p->dispatcher_ = std::move(*dispatcher);
  }
  if (!cluster.data_service_dispatcher().empty()) {
    p->data_service_client_ = p->Connect(cluster.data_service_dispatcher());
    p->data_service_watch_ = std::make_unique<data_service::StatusWatch>(
        *p->data_service_client_, cluster.data_service_dispatcher(), *p->status_board_);
  }
  return p;
}

ChiefProcess::ChiefProcess(const ClusterSpec& cluster, Options options)
    : cluster_(cluster), options_(std::move(options)) {}

ChiefProcess::~ChiefProcess() {
  data_service_watch_.reset();
  data_service_client_.reset();
  dispatcher_.reset();
  ps_monitor_.reset();
  monitor_clients_.clear();  // before the loop they run on
  monitor_loop_.reset();
  ps_client_.reset();
  shard_map_.reset();
  ps_clients_.clear();  // before the loop they run on
  loop_.reset();
}

net::RpcClient& ChiefProcess::ps_rpc(int i) { return *ps_clients_[static_cast<size_t>(i)]; }

std::vector<net::RpcClient*> ChiefProcess::ps_rpcs() {
  std::vector<net::RpcClient*> out;
  for (auto& c : ps_clients_) out.push_back(c.get());
  return out;
}

std::unique_ptr<net::RpcClient> ChiefProcess::Connect(const std::string& address) {
  return ConnectOn(*loop_, address);
}

std::unique_ptr<net::RpcClient> ChiefProcess::ConnectOn(net::EventLoop& loop, const std::string& address) {
  net::RpcClient::Options o;
  o.address = address;
  o.role = "chief";
  o.task_index = cluster_.task_index();
  o.token = options_.process.cluster_token;
  o.metrics = rpc_metrics_.get();
  return std::make_unique<net::RpcClient>(loop, o);
}

absl::Status ChiefProcess::ReportScalar(const std::string& name, int64_t step, double value) {
  return status_board_->ReportScalar(name, step, value);
}

}  // namespace asyncps
