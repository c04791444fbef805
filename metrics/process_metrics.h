#ifndef ASYNCPS_METRICS_PROCESS_METRICS_H_
#define ASYNCPS_METRICS_PROCESS_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/process_options.h"
#include "metrics/http_server.h"

namespace prometheus {
class Collectable;
class Registry;
}  // namespace prometheus

namespace asyncps::metrics {

// The one Prometheus registry of a process and, optionally, the HTTP endpoint serving it at
// /metrics (metrics/http_server.h). Created once in main and passed by reference to everything
// that records metrics (no global registry). Every asyncps_* family carries the process's
// `role` and `task` labels; beside them /metrics has the standard process_* series
// (metrics/process_collector.h), unlabelled as every Prometheus client library exports them.
//
// Thread-safe: families and their children may be created and updated from any thread.
class ProcessMetrics {
 public:
  // The HTTP server's bounds (see HttpServer): open connections, and how long a connection
  // may take to deliver its request and again to take its answer.
  struct HttpOptions {
    int max_connections = 16;
    int request_timeout_ms = 500;
  };

  // `listen_address` like "127.0.0.1:9100", "0.0.0.0:0" (0 picks a free port) or "[::]:9100";
  // empty = no HTTP endpoint (metrics are still recorded). Registers asyncps_build_info.
  // Errors: InvalidArgument for an address that is not IP:PORT; Unavailable when it cannot be
  // bound.
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role,
                                                                int task_index,
                                                                const std::string& listen_address,
                                                                const HttpOptions& http);
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role,
                                                                int task_index,
                                                                const std::string& listen_address) {
    return Create(role, task_index, listen_address, HttpOptions());
  }
  // The endpoint a process's options ask for: --metrics_bind_address:--metrics_port (none
  // when the port is negative; 0 picks a free one), with --metrics_max_connections and
  // --metrics_request_timeout_ms.
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role,
                                                                int task_index,
                                                                const ProcessOptions& options);
  // Stops the HTTP server (its thread joined, no handler running) before anything is freed.
  ~ProcessMetrics();

  // A page served beside /metrics on the same HTTP server (GET only).
  using HttpResponse = metrics::HttpResponse;
  using HttpHandler = HttpServer::Handler;

  // Serves GET `path` (an exact path such as "/status.json") with `handler`, called on the
  // HTTP server's thread for each request; it must be thread-safe (it runs beside the caller's
  // threads) and must not block for long. A no-op when there is no endpoint. Replaces an
  // earlier handler for the same path. What `handler` uses must outlive this object.
  void AddHandler(const std::string& path, HttpHandler handler);

  // The port /metrics is served on; 0 when there is no endpoint.
  int port() const { return server_ == nullptr ? 0 : server_->port(); }
  // The address the endpoint is bound to ("127.0.0.1", "0.0.0.0", "::"); "" when there is none.
  std::string bound_address() const { return server_ == nullptr ? "" : server_->bound_address(); }
  prometheus::Registry& registry() { return *registry_; }
  const std::string& role() const { return role_; }
  const std::string& task() const { return task_; }

  // Text exposition of the current values (what GET /metrics returns); for tests and logs.
  std::string Serialize() const;

 private:
  ProcessMetrics() = default;
  std::string role_;
  std::string task_;
  std::shared_ptr<prometheus::Registry> registry_;
  // The process_* series, collected at each scrape.
  std::unique_ptr<prometheus::Collectable> process_collector_;
  // Last member: destroyed (its thread joined) before the registry its /metrics reads.
  std::unique_ptr<HttpServer> server_;
};

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_PROCESS_METRICS_H_
