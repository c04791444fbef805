#include "core/sync.h"
#include "metrics/rpc_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"

namespace asyncps::metrics {

struct RpcMetrics::MethodChildren {
  prometheus::Counter* requests;
  prometheus::Histogram* seconds;
};

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> buckets = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2,
                                              0.1,  0.3,  1,    3,    10,   30,   100};
  return buckets;
}

RpcMetrics::RpcMetrics(ProcessMetrics& metrics) {
  auto& registry = metrics.registry();
  const std::map<std::string, std::string> labels = {{"role", metrics.role()},
                                                     {"task", metrics.task()}};
  server_requests_ = &prometheus::BuildCounter()
                          .Name("asyncps_rpc_server_requests_total")
                          .Help("RPC requests served, by method and status code")
                          .Labels(labels)
                          .Register(registry);
  server_seconds_ = &prometheus::BuildHistogram()
                         .Name("asyncps_rpc_server_seconds")
                         .Help("Time from request received to response queued")
                         .Labels(labels)
                         .Register(registry);
  client_requests_ = &prometheus::BuildCounter()
                          .Name("asyncps_rpc_client_requests_total")
                          .Help("RPC calls made, by method and status code")
                          .Labels(labels)
                          .Register(registry);
  client_seconds_ = &prometheus::BuildHistogram()
                         .Name("asyncps_rpc_client_seconds")
                         .Help("Round-trip time of RPC calls as seen by the caller")
                         .Labels(labels)
                         .Register(registry);
  rejected_ = &prometheus::BuildCounter()
                   .Name("asyncps_rpc_server_rejected_total")
                   .Help("Connections closed and requests refused for bad input, a failed "
                         "handshake, a wrong role or a server limit, by reason")
                   .Labels(labels)
                   .Register(registry);
  bytes_received_ = &prometheus::BuildCounter()
                         .Name("asyncps_net_received_bytes_total")
                         .Help("Bytes read from RPC connections")
                         .Labels(labels)
                         .Register(registry)
                         .Add({});
  bytes_sent_ = &prometheus::BuildCounter()
                     .Name("asyncps_net_sent_bytes_total")
                     .Help("Bytes written to RPC connections")
                     .Labels(labels)
                     .Register(registry)
                     .Add({});
  socket_writes_ = &prometheus::BuildCounter()
                        .Name("asyncps_net_socket_writes_total")
                        .Help("Write system calls on RPC connections (frames sent per write: coalescing)")
                        .Labels(labels)
                        .Register(registry)
                        .Add({});
  frames_sent_ = &prometheus::BuildCounter()
                      .Name("asyncps_net_sent_frames_total")
                      .Help("Frames written to RPC connections")
                      .Labels(labels)
                      .Register(registry)
                      .Add({});
}

RpcMetrics::~RpcMetrics() = default;

RpcMetrics::MethodChildren& RpcMetrics::Children(bool server, absl::string_view method, int code) {
  const std::string key = absl::StrCat(server ? "s" : "c", code, "/", method);
  MutexLock lock(&mu_);
  auto& slot = children_[key];
  if (slot == nullptr) {
    auto* requests = server ? server_requests_ : client_requests_;
    auto* seconds = server ? server_seconds_ : client_seconds_;
    slot = std::make_unique<MethodChildren>(MethodChildren{
        &requests->Add({{"method", std::string(method)}, {"code", std::to_string(code)}}),
        &seconds->Add({{"method", std::string(method)}}, LatencyBuckets())});
  }
  return *slot;
}

void RpcMetrics::RecordServerCall(absl::string_view method, int code, double seconds) {
  MethodChildren& c = Children(true, method, code);
  c.requests->Increment();
  c.seconds->Observe(seconds);
}

void RpcMetrics::RecordClientCall(absl::string_view method, int code, double seconds) {
  MethodChildren& c = Children(false, method, code);
  c.requests->Increment();
  c.seconds->Observe(seconds);
}

void RpcMetrics::AddBytesReceived(uint64_t bytes) { bytes_received_->Increment(static_cast<double>(bytes)); }
void RpcMetrics::RecordWrite(uint64_t bytes, uint64_t frames) {
  bytes_sent_->Increment(static_cast<double>(bytes));
  socket_writes_->Increment();
  if (frames > 0) frames_sent_->Increment(static_cast<double>(frames));
}

double RpcMetrics::SocketWrites() const { return socket_writes_->Value(); }
double RpcMetrics::FramesSent() const { return frames_sent_->Value(); }

void RpcMetrics::RecordRejected(absl::string_view reason) {
  rejected_->Add({{"reason", std::string(reason)}}).Increment();
}

double RpcMetrics::RejectedCount(absl::string_view reason) {
  return rejected_->Add({{"reason", std::string(reason)}}).Value();
}

}  // namespace asyncps::metrics
