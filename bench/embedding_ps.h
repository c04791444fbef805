#ifndef ASYNCPS_BENCH_EMBEDDING_PS_H_
#define ASYNCPS_BENCH_EMBEDDING_PS_H_

// The in-process PS the embedding benches measure against: one RpcServer serving both the
// dense ps.* methods and the embedding tables, with an RpcClient to it, and the dense variable
// a table is compared with. embedding_bench runs one, embedding_scale_bench four.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/optimizer_config.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_store.h"
#include "ps/ps_service.h"
#include "ps/variable_store.h"

namespace asyncps::bench {

using Clock = std::chrono::steady_clock;

// Seconds since `begin`.
inline double Seconds(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// The median of `v` (the upper one of an even count); 0 when empty.
double Median(std::vector<double> v);

// One PS: its variables and tables, the services on them, the server (listening on an
// ephemeral port of 127.0.0.1, role "ps") and a client to it (role "worker"). Destroy the
// client before the server and both before the loops they were started on.
struct EmbeddingPs {
  ps::VariableStore store{~uint64_t{0}};
  std::unique_ptr<ps::PsService> dense;
  ps::EmbeddingStore tables;
  std::unique_ptr<ps::EmbeddingService> embeddings;
  std::unique_ptr<net::RpcServer> server;
  std::unique_ptr<net::RpcClient> client;
};

// Starts PS `task_index` with the given service options; the server runs on `server_loop`, the
// client on `client_loop` (they may be the same loop). Errors: the server did not start.
absl::StatusOr<std::unique_ptr<EmbeddingPs>> StartEmbeddingPs(net::EventLoop& server_loop, net::EventLoop& client_loop,
                                                              int task_index, const std::string& token,
                                                              ps::PsService::Options dense_options = {},
                                                              ps::EmbeddingService::Options embedding_options = {});

// Creates the dense f32 [rows, dim] variable `name` on the PS behind `client`, uniform in
// [-0.05, 0.05], trained by `optimizer` (nullptr: none). The call's error.
absl::Status CreateUniformDenseVariable(net::RpcClient& client, const std::string& name, int64_t rows, int64_t dim,
                                        const OptimizerConfig* optimizer, absl::Duration timeout);

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_EMBEDDING_PS_H_
