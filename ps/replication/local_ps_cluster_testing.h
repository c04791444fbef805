#ifndef ASYNCPS_PS_REPLICATION_LOCAL_PS_CLUSTER_TESTING_H_
#define ASYNCPS_PS_REPLICATION_LOCAL_PS_CLUSTER_TESTING_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/checkpoint_service.h"
#include "ps/ps_service.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_store.h"
#include "ps/replication/replicated_ps.h"
#include "ps/replication/replicated_tables.h"
#include "ps/replication/shard_map.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

// Several parameter servers in one process (tests and benchmarks of replication): each its own
// event loop, RpcServer on 127.0.0.1 (ephemeral port), store, PsService and ReplicatedPs, wired
// as ps_server wires them; clients of any role by PS index.
class LocalPsCluster {
 public:
  static constexpr char kToken[] = "replication-test-token";

  // `base` supplies the replication options (ps_index, num_ps and connect are set here).
  // `with_tables`: every PS also serves embedding tables, replicated (ReplicatedTables). Each
  // PS's variables (every copy it holds) are capped at `max_variable_bytes`.
  explicit LocalPsCluster(int num_ps, ReplicatedPs::Options base = ReplicatedPs::Options(),
                          bool with_tables = false,
                          uint64_t max_variable_bytes = std::numeric_limits<uint64_t>::max()) {
    for (int i = 0; i < num_ps; ++i) {
      auto n = std::make_unique<Node>(max_variable_bytes);
      if (with_tables) {
        n->embeddings = std::make_unique<EmbeddingService>(n->embedding_store, EmbeddingService::Options());
        n->tables = std::make_unique<ReplicatedTables>(*n->embeddings);
      }
      n->service = std::make_unique<PsService>(n->store);
      net::RpcServer::Options so;
      so.role = "ps";
      so.task_index = i;
      so.token = kToken;
      n->server = std::make_unique<net::RpcServer>(n->loop, so);
      n->service->RegisterWith(n->server->methods());
      n->checkpoints = std::make_unique<CheckpointService>(n->store);
      n->checkpoints->RegisterWith(n->server->methods());
      ReplicatedPs::Options o = base;
      o.checkpoints = n->checkpoints.get();
      o.ps_index = i;
      o.num_ps = num_ps;
      Node* node = n.get();
      o.connect = [this, node, i](int32_t index) {
        net::RpcClient::Options co;
        co.address = "127.0.0.1:" + std::to_string(nodes_.at(index)->server->port());
        co.role = "ps";
        co.task_index = i;
        co.token = kToken;
        return std::make_unique<net::RpcClient>(node->peer_loop, co);
      };
      o.extension = n->tables.get();
      n->replicated = std::make_unique<ReplicatedPs>(*n->service, std::move(o));
      n->replicated->RegisterWith(n->server->methods());
      if (with_tables) n->tables->RegisterWith(n->server->methods(), *n->replicated);
      nodes_.push_back(std::move(n));
    }
    for (auto& n : nodes_) started_ = started_ && n->server->Start().ok();
  }

  ~LocalPsCluster() {
    clients_.clear();
    // Servers first: no handler runs once replication (and its streams) goes.
    for (auto& n : nodes_) n->server.reset();
    for (auto& n : nodes_) n->replicated.reset();
  }

  bool started() const { return started_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  ReplicatedPs& replicated(int ps) { return *nodes_.at(ps)->replicated; }
  int port(int ps) const { return nodes_.at(ps)->server->port(); }
  // The tables of PS `ps`'s copy of `group` (with_tables; a null store when no copy is held).
  EmbeddingService::Shard Tables(int ps, uint32_t group) {
    auto copy = replicated(ps).CopyOf(group);
    if (copy == nullptr || copy->state.extension == nullptr) return {};
    return ReplicatedTables::ShardOf(*copy->state.extension);
  }

  // A client of PS `ps` authenticated as `role` (one per pair, kept).
  net::RpcClient& Client(int ps, const std::string& role) {
    auto& c = clients_[{ps, role}];
    if (c == nullptr) {
      net::RpcClient::Options co;
      co.address = "127.0.0.1:" + std::to_string(port(ps));
      co.role = role;
      co.token = kToken;
      c = std::make_unique<net::RpcClient>(client_loop_, co);
    }
    return *c;
  }

  absl::StatusOr<net::InMessage> Call(int ps, const std::string& role, const std::string& method,
                                      net::OutMessage request) {
    return Client(ps, role).Call(method, std::move(request), absl::Seconds(60));
  }

  absl::Status SetMap(int ps, const ShardMap& map, const std::string& role = "chief") {
    net::OutMessage req;
    ShardMapToWire(map, req.InitRequestBody<wire::SetShardMapRequest>().initMap());
    return Call(ps, role, "ps.SetShardMap", std::move(req)).status();
  }

  absl::Status SetMapEverywhere(const ShardMap& map) {
    for (int i = 0; i < size(); ++i) {
      if (absl::Status s = SetMap(i, map); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  struct Node {
    explicit Node(uint64_t max_variable_bytes) : store(max_variable_bytes) {}
    net::EventLoop loop;
    net::EventLoop peer_loop;
    VariableStore store;
    EmbeddingStore embedding_store;
    std::unique_ptr<EmbeddingService> embeddings;
    std::unique_ptr<ReplicatedTables> tables;
    std::unique_ptr<PsService> service;
    std::unique_ptr<CheckpointService> checkpoints;
    std::unique_ptr<net::RpcServer> server;
    std::unique_ptr<ReplicatedPs> replicated;
  };
  std::vector<std::unique_ptr<Node>> nodes_;
  net::EventLoop client_loop_;
  std::map<std::pair<int, std::string>, std::unique_ptr<net::RpcClient>> clients_;
  bool started_ = true;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_REPLICATION_LOCAL_PS_CLUSTER_TESTING_H_
