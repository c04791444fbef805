#include "metrics/process_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include <CivetServer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "metrics/thread_stacks.h"

namespace asyncps::metrics {
namespace {

void Respond(mg_connection* conn, const ProcessMetrics::HttpResponse& r) {
  const char* reason = r.status == 200 ? "OK" : r.status == 404 ? "Not Found" : "Error";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
            "Connection: close\r\n\r\n",
            r.status, reason, r.content_type.c_str(), r.body.size());
  mg_write(conn, r.body.data(), r.body.size());
}

class FunctionHandler : public CivetHandler {
 public:
  explicit FunctionHandler(ProcessMetrics::HttpHandler fn) : fn_(std::move(fn)) {}
  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    // Civetweb threads are C code: nothing may escape into them.
    ProcessMetrics::HttpResponse response;
    try {
      response = fn_();
    } catch (const std::exception& e) {
      response = {500, "text/plain; charset=utf-8", std::string("internal error: ") + e.what()};
    }
    Respond(conn, response);
    return true;
  }

 private:
  const ProcessMetrics::HttpHandler fn_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessMetrics>> ProcessMetrics::Create(const std::string& role, int task_index,
                                                                       const ProcessOptions& options) {
  HttpOptions http;
  http.threads = static_cast<int>(options.metrics_threads);
  http.request_timeout_ms = static_cast<int>(options.metrics_request_timeout_ms);
  return Create(role, task_index,
                options.metrics_port < 0 ? "" : absl::StrCat("127.0.0.1:", options.metrics_port), http);
}

absl::StatusOr<std::unique_ptr<ProcessMetrics>> ProcessMetrics::Create(
    const std::string& role, int task_index, const std::string& listen_address, const HttpOptions& http) {
  std::unique_ptr<ProcessMetrics> m(new ProcessMetrics());
  m->role_ = role;
  m->task_ = std::to_string(task_index);
  m->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("asyncps_build_info")
      .Help("Always 1; labels say which build and role this process runs")
      .Register(*m->registry_)
      .Add({{"version", "0.1.0"}, {"role", m->role_}, {"task", m->task_}})
      .Set(1);
  if (!listen_address.empty()) {
    try {
      m->server_ = std::make_unique<CivetServer>(std::vector<std::string>{
          "listening_ports", listen_address, "num_threads", std::to_string(http.threads),
          "request_timeout_ms", std::to_string(http.request_timeout_ms)});
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "cannot serve /metrics on ", listen_address, ": ", e.what(),
          TlsAwareStacksInstalled() ? "" : " (pthread_attr_setstacksize is not the TLS-aware one; see metrics/thread_stacks.h)"));
    }
    ProcessMetrics* self = m.get();
    m->AddHandler("/metrics", [self] {
      return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", self->Serialize()};
    });
    auto ports = m->server_->getListeningPorts();
    if (!ports.empty()) m->port_ = ports.front();
  }
  return m;
}

ProcessMetrics::~ProcessMetrics() {
  if (server_ == nullptr) return;
  // civetweb's stop waits for its accept thread, which polls in 2 s quanta; a connection
  // wakes that poll so the process exits at once instead of up to 2 s later.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    while (!stopped.load()) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      (void)!connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      close(fd);
      // Retry pacing only: the first connect may land before the stop flag is set.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  server_.reset();
  stopped.store(true);
  waker.join();
}

void ProcessMetrics::AddHandler(const std::string& path, HttpHandler handler) {
  if (server_ == nullptr) return;
  auto h = std::make_unique<FunctionHandler>(std::move(handler));
  MutexLock lock(&handlers_mu_);
  server_->addHandler(path, h.get());
  handlers_.push_back(std::move(h));
}

std::string ProcessMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace asyncps::metrics
