#include "bench/embedding_ps.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "net/message.h"
#include "ps/ps.capnp.h"
#include "ps/ps_wire.h"
#include "ps/shard_initializer.h"

namespace asyncps::bench {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::StatusOr<std::unique_ptr<EmbeddingPs>> StartEmbeddingPs(net::EventLoop& server_loop, net::EventLoop& client_loop,
                                                              int task_index, const std::string& token,
                                                              ps::PsService::Options dense_options,
                                                              ps::EmbeddingService::Options embedding_options) {
  auto node = std::make_unique<EmbeddingPs>();
  node->dense = std::make_unique<ps::PsService>(node->store, dense_options);
  node->embeddings = std::make_unique<ps::EmbeddingService>(node->tables, embedding_options);
  net::RpcServer::Options so;
  so.role = "ps";
  so.task_index = task_index;
  so.token = token;
  node->server = std::make_unique<net::RpcServer>(server_loop, so);
  node->dense->RegisterWith(node->server->methods());
  node->embeddings->RegisterWith(node->server->methods());
  if (absl::Status s = node->server->Start(); !s.ok()) return s;
  net::RpcClient::Options co;
  co.address = absl::StrCat("127.0.0.1:", node->server->port());
  co.role = "worker";
  co.token = token;
  node->client = std::make_unique<net::RpcClient>(client_loop, co);
  return node;
}

absl::Status CreateUniformDenseVariable(net::RpcClient& client, const std::string& name, int64_t rows, int64_t dim,
                                        const OptimizerConfig* optimizer, absl::Duration timeout) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::CreateVariableRequest>();
  body.setName(name);
  body.setDtype(static_cast<uint8_t>(DType::kF32));
  net::SetShape(body.initShape(2), {rows, dim});
  ps::InitializerSpec init;
  init.kind = "uniform";
  init.minval = -0.05;
  init.maxval = 0.05;
  init.full_shape = {rows, dim};
  ps::InitializerToWire(init, req, body.initInitializer());
  ps::OptimizerToWire(optimizer, body.initOptimizer());
  return client.Call("ps.CreateVariable", std::move(req), timeout).status();
}

}  // namespace asyncps::bench
