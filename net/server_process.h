#ifndef ASYNCPS_NET_SERVER_PROCESS_H_
#define ASYNCPS_NET_SERVER_PROCESS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/cluster_spec.h"
#include "core/process_options.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"

namespace asyncps::net {

// What every serving process (ps, worker) sets up around its service, in one place: the
// /metrics endpoint, RPC metrics, the I/O loop, and an RpcServer listening on this task's
// address from the cluster spec with the cluster token.
//
// Usage: Create, register handlers on server(), then ServeUntilSignal().
// Owned by main; not thread-safe itself (the objects it hands out are).
class ServerProcess {
 public:
  // Errors: the task's address is malformed, or /metrics cannot be served.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Create(const ClusterSpec& cluster,
                                                               const ProcessOptions& options,
                                                               int handler_threads);
  ~ServerProcess();

  EventLoop& loop() { return *loop_; }
  RpcServer& server() { return *server_; }
  metrics::RpcMetrics& rpc_metrics() { return *rpc_metrics_; }
  // The process's registry, for a service's own metric families.
  metrics::ProcessMetrics& process_metrics() { return *metrics_; }

  // Options for a client of another task of this cluster (same token, same metrics).
  RpcClient::Options ClientOptions(const std::string& address) const;

  // Starts serving, logs "<role> <index> ready on <address>", blocks until SIGINT or SIGTERM
  // (blocked earlier with BlockTerminationSignals), then shuts the server down. Returns the
  // process exit code.
  int ServeUntilSignal();

 private:
  ServerProcess() = default;

  ClusterSpec cluster_;
  ProcessOptions options_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_;
  std::unique_ptr<metrics::RpcMetrics> rpc_metrics_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<RpcServer> server_;
};

}  // namespace asyncps::net

#endif  // ASYNCPS_NET_SERVER_PROCESS_H_
