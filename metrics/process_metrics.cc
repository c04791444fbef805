#include "metrics/process_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "metrics/thread_stacks.h"

namespace asyncps::metrics {

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
      m->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
          "listening_ports", listen_address, "num_threads", std::to_string(http.threads),
          "request_timeout_ms", std::to_string(http.request_timeout_ms)});
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "cannot serve /metrics on ", listen_address, ": ", e.what(),
          TlsAwareStacksInstalled() ? "" : " (pthread_attr_setstacksize is not the TLS-aware one; see metrics/thread_stacks.h)"));
    }
    m->exposer_->RegisterCollectable(m->registry_);
    auto ports = m->exposer_->GetListeningPorts();
    if (!ports.empty()) m->port_ = ports.front();
  }
  return m;
}

ProcessMetrics::~ProcessMetrics() {
  if (exposer_ == nullptr) return;
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
  exposer_.reset();
  stopped.store(true);
  waker.join();
}

std::string ProcessMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace asyncps::metrics
