#include "metrics/process_metrics.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "metrics/process_collector.h"

namespace asyncps::metrics {
namespace {

// "1.2.3.4:80" or "[::1]:80" -> address and port.
absl::Status SplitHostPort(const std::string& listen_address, std::string* address, int* port) {
  const size_t colon = listen_address.rfind(':');
  bool ok = colon != std::string::npos && absl::SimpleAtoi(listen_address.substr(colon + 1), port);
  if (ok) {
    *address = listen_address.substr(0, colon);
    if (address->size() >= 2 && address->front() == '[' && address->back() == ']') {
      *address = address->substr(1, address->size() - 2);
    } else if (address->find(':') != std::string::npos) {
      ok = false;  // an IPv6 address needs its brackets to tell it from the port
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", listen_address, "' is not ADDRESS:PORT (like 127.0.0.1:9100 or [::]:9100)"));
  }
  return absl::OkStatus();
}

std::string ListenAddress(const std::string& address, int port) {
  return address.find(':') == std::string::npos ? absl::StrCat(address, ":", port)
                                                : absl::StrCat("[", address, "]:", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessMetrics>> ProcessMetrics::Create(
    const std::string& role, int task_index, const ProcessOptions& options) {
  HttpOptions http;
  http.max_connections = static_cast<int>(options.metrics_max_connections);
  http.request_timeout_ms = static_cast<int>(options.metrics_request_timeout_ms);
  return Create(role, task_index,
                options.metrics_port < 0
                    ? ""
                    : ListenAddress(options.metrics_bind_address, options.metrics_port),
                http);
}

absl::StatusOr<std::unique_ptr<ProcessMetrics>> ProcessMetrics::Create(
    const std::string& role, int task_index, const std::string& listen_address,
    const HttpOptions& http) {
  std::unique_ptr<ProcessMetrics> m(new ProcessMetrics());
  m->role_ = role;
  m->task_ = std::to_string(task_index);
  m->registry_ = std::make_shared<prometheus::Registry>();
  m->process_collector_ = std::make_unique<ProcessCollector>();
  prometheus::BuildGauge()
      .Name("asyncps_build_info")
      .Help("Always 1; labels say which build and role this process runs")
      .Register(*m->registry_)
      .Add({{"version", "0.1.0"}, {"role", m->role_}, {"task", m->task_}})
      .Set(1);
  if (!listen_address.empty()) {
    std::string address;
    int port = 0;
    if (absl::Status s = SplitHostPort(listen_address, &address, &port); !s.ok()) return s;
    HttpServer::Options options;
    options.max_connections = http.max_connections;
    options.request_timeout = absl::Milliseconds(http.request_timeout_ms);
    auto server = HttpServer::Start(address, port, options);
    if (!server.ok()) {
      return absl::Status(server.status().code(),
                          absl::StrCat("/metrics: ", server.status().message()));
    }
    m->server_ = std::move(*server);
    ProcessMetrics* self = m.get();
    m->AddHandler("/metrics", [self] {
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", self->Serialize()};
    });
  }
  return m;
}

ProcessMetrics::~ProcessMetrics() = default;

void ProcessMetrics::AddHandler(const std::string& path, HttpHandler handler) {
  if (server_ != nullptr) server_->AddHandler(path, std::move(handler));
}

std::string ProcessMetrics::Serialize() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<prometheus::MetricFamily> process = process_collector_->Collect();
  families.insert(families.end(), std::make_move_iterator(process.begin()),
                  std::make_move_iterator(process.end()));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace asyncps::metrics
