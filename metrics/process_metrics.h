#ifndef ASYNCPS_METRICS_PROCESS_METRICS_H_
#define ASYNCPS_METRICS_PROCESS_METRICS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/process_options.h"
#include "core/sync.h"

class CivetHandler;
class CivetServer;

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace asyncps::metrics {

// The one Prometheus registry of a process and, optionally, the HTTP endpoint serving it at
// /metrics. Created once in main and passed by reference to everything that records metrics
// (no global registry). Every metric family carries the process's `role` and `task` labels.
//
// Thread-safe: families and their children may be created and updated from any thread.
class ProcessMetrics {
 public:
  // The HTTP server's resources. An idle connection holds a worker thread until
  // request_timeout_ms passes, so these bound how long idle or slow connections can keep
  // /metrics from answering (civetweb's num_threads and request_timeout_ms).
  struct HttpOptions {
    int threads = 16;
    int request_timeout_ms = 500;
  };

  // `listen_address` like "127.0.0.1:9100" or "127.0.0.1:0" (pick a free port); empty = no
  // HTTP endpoint (metrics are still recorded). Registers asyncps_build_info.
  // Errors: Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role,
                                                                int task_index,
                                                                const std::string& listen_address,
                                                                const HttpOptions& http);
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role,
                                                                int task_index,
                                                                const std::string& listen_address) {
    return Create(role, task_index, listen_address, HttpOptions());
  }
  // The endpoint a process's options ask for: 127.0.0.1:--metrics_port (none when negative;
  // 0 picks a free port), with --metrics_threads and --metrics_request_timeout_ms.
  static absl::StatusOr<std::unique_ptr<ProcessMetrics>> Create(const std::string& role, int task_index,
                                                                const ProcessOptions& options);
  ~ProcessMetrics();

  // A page served beside /metrics on the same HTTP server (GET only).
  struct HttpResponse {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using HttpHandler = std::function<HttpResponse()>;

  // Serves GET `path` (an exact path such as "/status.json") with `handler`, called on one of
  // the HTTP server's threads for each request; it must be thread-safe and must not block for
  // long. A no-op when there is no endpoint. Replaces an earlier handler for the same path.
  void AddHandler(const std::string& path, HttpHandler handler);

  // The port /metrics is served on; 0 when there is no endpoint.
  int port() const { return port_; }
  prometheus::Registry& registry() { return *registry_; }
  const std::string& role() const { return role_; }
  const std::string& task() const { return task_; }

  // Text exposition of the current values (what GET /metrics returns); for tests and logs.
  std::string Serialize() const;

 private:
  ProcessMetrics() = default;
  std::string role_;
  std::string task_;
  int port_ = 0;
  std::shared_ptr<prometheus::Registry> registry_;
  // Handlers outlive the server (members are destroyed in reverse order); they are only
  // added, so requests in flight never see one freed.
  Mutex handlers_mu_;
  std::vector<std::unique_ptr<CivetHandler>> handlers_ ABSL_GUARDED_BY(handlers_mu_);
  std::unique_ptr<CivetServer> server_;
};

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_PROCESS_METRICS_H_
