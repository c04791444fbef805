#ifndef ASYNCPS_METRICS_RPC_METRICS_H_
#define ASYNCPS_METRICS_RPC_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/sync.h"
#include "metrics/process_metrics.h"

namespace prometheus {
class Counter;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace asyncps::metrics {

// RPC metric families of one process:
//   asyncps_rpc_server_requests_total{method,code}, asyncps_rpc_server_seconds{method},
//   asyncps_rpc_client_requests_total{method,code}, asyncps_rpc_client_seconds{method},
//   asyncps_net_received_bytes_total, asyncps_net_sent_bytes_total,
//   asyncps_net_socket_writes_total and asyncps_net_sent_frames_total (their ratio is how
//   many frames share a write system call: the coalescing actually achieved),
//   asyncps_rpc_server_rejected_total{reason} (connections closed and requests refused by a
//   server's limits, handshake or role checks; reasons are a fixed set of words).
// Children are cached per method so the hot path is one hash lookup under a mutex.
//
// Thread-safe. `metrics` must outlive this object.
class RpcMetrics {
 public:
  explicit RpcMetrics(ProcessMetrics& metrics);
  ~RpcMetrics();

  void RecordServerCall(absl::string_view method, int code, double seconds);
  void RecordClientCall(absl::string_view method, int code, double seconds);
  void AddBytesReceived(uint64_t bytes);
  // One write system call that put `bytes` on the wire and completed `frames` frames.
  void RecordWrite(uint64_t bytes, uint64_t frames);
  // `reason` must come from a fixed set (never from the peer's bytes).
  void RecordRejected(absl::string_view reason);
  // The current count for `reason` (tests, logs).
  double RejectedCount(absl::string_view reason);
  // The current write and frame counts (tests, benchmarks).
  double SocketWrites() const;
  double FramesSent() const;

 private:
  struct MethodChildren;
  MethodChildren& Children(bool server, absl::string_view method, int code);

  prometheus::Family<prometheus::Counter>* server_requests_;
  prometheus::Family<prometheus::Histogram>* server_seconds_;
  prometheus::Family<prometheus::Counter>* client_requests_;
  prometheus::Family<prometheus::Histogram>* client_seconds_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Counter* bytes_received_;
  prometheus::Counter* bytes_sent_;
  prometheus::Counter* socket_writes_;
  prometheus::Counter* frames_sent_;
  Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<MethodChildren>> children_ ABSL_GUARDED_BY(mu_);
};

// Latency buckets shared by every *_seconds histogram: 10 µs .. ~100 s, factor ~3.
const std::vector<double>& LatencyBuckets();

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_RPC_METRICS_H_
