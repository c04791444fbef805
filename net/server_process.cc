#include "net/server_process.h"

#include <spdlog/spdlog.h>

#include "core/exit_code.h"

namespace asyncps::net {

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Create(const ClusterSpec& cluster,
                                                                     const ProcessOptions& options,
                                                                     int handler_threads) {
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  p->cluster_ = cluster;
  p->options_ = options;
  std::string host;
  int port = 0;
  if (absl::Status s = ParseHostPort(cluster.self_address(), &host, &port); !s.ok()) return s;
  const std::string role(TaskTypeName(cluster.task_type()));
  auto metrics = metrics::ProcessMetrics::Create(role, cluster.task_index(), options);
  if (!metrics.ok()) return metrics.status();
  p->metrics_ = std::move(*metrics);
  p->rpc_metrics_ = std::make_unique<metrics::RpcMetrics>(*p->metrics_);
  p->loop_ = std::make_unique<EventLoop>();
  RpcServer::Options server_options;
  server_options.host = host;
  server_options.port = port;
  server_options.role = role;
  server_options.task_index = cluster.task_index();
  server_options.token = options.cluster_token;
  server_options.handler_threads = handler_threads;
  server_options.metrics = p->rpc_metrics_.get();
  server_options.max_connections = static_cast<int>(options.rpc_max_connections);
  server_options.handshake_timeout = absl::Milliseconds(options.rpc_handshake_timeout_ms);
  server_options.handshake_limits = HandshakeFrameLimits(static_cast<uint64_t>(options.rpc_handshake_max_bytes));
  server_options.idle_timeout =
      options.rpc_idle_timeout_s == 0 ? absl::InfiniteDuration() : absl::Seconds(options.rpc_idle_timeout_s);
  server_options.limits.max_payload_bytes = static_cast<uint64_t>(options.rpc_max_frame_bytes);
  p->server_ = std::make_unique<RpcServer>(*p->loop_, server_options);
  return p;
}

ServerProcess::~ServerProcess() {
  server_.reset();  // before the loop it runs on
  loop_.reset();
}

RpcClient::Options ServerProcess::ClientOptions(const std::string& address) const {
  RpcClient::Options o;
  o.address = address;
  o.role = std::string(TaskTypeName(cluster_.task_type()));
  o.task_index = cluster_.task_index();
  o.token = options_.cluster_token;
  o.metrics = rpc_metrics_.get();
  return o;
}

int ServerProcess::ServeUntilSignal() {
  if (absl::Status s = server_->Start(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return ExitCodeForStatus(s);
  }
  const std::string role = cluster_.task_type() == TaskType::kPs ? "parameter server"
                                                                  : std::string(TaskTypeName(cluster_.task_type()));
  spdlog::info("{} {} ready on {} (metrics on port {})", role, cluster_.task_index(), cluster_.self_address(),
               metrics_->port());
  const int signal = WaitForTerminationSignal();
  spdlog::info("signal {}: shutting down", signal);
  server_->Shutdown();
  // 128 + signal, as if the signal had killed the process: under Kubeflow's ExitCode restart
  // policy a preempted (SIGTERM'd) ps or worker is restarted, not counted as finished.
  return ExitCodeForSignal(signal);
}

}  // namespace asyncps::net
