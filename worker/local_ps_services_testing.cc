#include "worker/local_ps_services_testing.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace asyncps {

VariablePlacement PlainPlacement(const std::string& name, const Shape& shape, int ps) {
  VariablePlacement p;
  p.name = name;
  p.dtype = DType::kF32;
  p.shape = shape;
  p.shards.push_back({name, ps, 0, shape.empty() ? 1 : shape[0]});
  return p;
}

absl::StatusOr<std::unique_ptr<LocalPsServices>> LocalPsServices::Start(int num_ps, const std::string& token,
                                                                        const Customize& customize) {
  std::unique_ptr<LocalPsServices> out(new LocalPsServices());
  std::vector<net::RpcClient*> clients;
  for (int i = 0; i < num_ps; ++i) {
    out->stores_.push_back(std::make_unique<ps::VariableStore>());
    out->services_.push_back(std::make_unique<ps::PsService>(*out->stores_.back(), ps::PsService::Options()));
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.task_index = i;
    server_options.token = token;
    out->servers_.push_back(std::make_unique<net::RpcServer>(out->server_loop_, server_options));
    net::RpcServer& server = *out->servers_.back();
    out->services_.back()->RegisterWith(server.methods());
    if (customize) customize(i, *out->services_.back(), server.methods());
    if (absl::Status s = server.Start(); !s.ok()) return s;
    net::RpcClient::Options client_options;
    client_options.address = absl::StrCat("127.0.0.1:", server.port());
    client_options.role = "worker";
    client_options.token = token;
    out->rpc_clients_.push_back(std::make_unique<net::RpcClient>(out->client_loop_, client_options));
    clients.push_back(out->rpc_clients_.back().get());
  }
  out->client_ = std::make_unique<PsClient>(std::move(clients), out->directory_);
  return out;
}

LocalPsServices::~LocalPsServices() {
  client_.reset();
  rpc_clients_.clear();
  servers_.clear();
}

absl::Status LocalPsServices::Create(const VariablePlacement& placement, const OptimizerConfig& optimizer) {
  if (absl::Status s = client_->CreateVariable(placement, ps::InitializerSpec(), &optimizer, false); !s.ok()) {
    return s;
  }
  directory_.Add(placement);
  return absl::OkStatus();
}

}  // namespace asyncps
