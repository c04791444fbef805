#include "coordinator/parameter_server_strategy.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "coordinator/coordinator_metrics.h"
#include "metrics/process_metrics.h"
#include "metrics/rpc_metrics.h"
#include "metrics/status_board.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "partitioners/div_partition.h"

namespace asyncps {

ParameterServerStrategy::ParameterServerStrategy(const ClusterSpec& cluster,
                                                 std::shared_ptr<const Partitioner> partitioner)
    : ParameterServerStrategy(cluster, std::move(partitioner), Options()) {}

ParameterServerStrategy::ParameterServerStrategy(const ClusterSpec& cluster,
                                                 std::shared_ptr<const Partitioner> partitioner,
                                                 Options options)
    : cluster_(cluster), partitioner_(std::move(partitioner)), options_(std::move(options)) {
  const int port = options_.process.metrics_port;
  auto m = metrics::ProcessMetrics::Create("chief", cluster_.task_index(),
                                           port < 0 ? "" : "127.0.0.1:" + std::to_string(port));
  if (!m.ok()) {
    spdlog::warn("metrics endpoint disabled: {}", m.status().ToString());
    m = metrics::ProcessMetrics::Create("chief", cluster_.task_index(), "");
  }
  metrics_ = std::move(*m);
  if (metrics_->port() > 0) spdlog::info("coordinator metrics on port {}", metrics_->port());
  rpc_metrics_ = std::make_unique<metrics::RpcMetrics>(*metrics_);
  status_board_ = std::make_unique<metrics::StatusBoard>(*metrics_);
  checkpoint_metrics_ = std::make_unique<CheckpointMetrics>(*metrics_);
  for (int i = 0; i < cluster_.num_ps(); ++i) {
    // The chief does not watch parameter servers between calls (Prometheus's `up` does).
    status_board_->SetMember("ps", i, cluster_.ps()[i], "unwatched", 0);
  }
  status_board_->Serve();
  if (metrics_->port() > 0) spdlog::info("status page on http://127.0.0.1:{}/status", metrics_->port());
  loop_ = std::make_unique<net::EventLoop>();
  std::vector<net::RpcClient*> ptrs;
  for (const std::string& address : cluster_.ps()) {
    net::RpcClient::Options o;
    o.address = address;
    o.role = "chief";
    o.task_index = cluster_.task_index();
    o.token = options_.process.cluster_token;
    o.metrics = rpc_metrics_.get();
    ps_clients_.push_back(std::make_unique<net::RpcClient>(*loop_, o));
    ptrs.push_back(ps_clients_.back().get());
  }
  ps_client_ = std::make_unique<PsClient>(ptrs, directory_, PsClient::Options{options_.rpc_timeout});
}

absl::Status ParameterServerStrategy::ReportScalar(const std::string& name, int64_t step, double value) {
  return status_board_->ReportScalar(name, step, value);
}

ParameterServerStrategy::~ParameterServerStrategy() {
  ps_client_.reset();
  ps_clients_.clear();  // before the loop they run on
  loop_.reset();
}

absl::StatusOr<VariablePlacement> ParameterServerStrategy::Place(const std::string& name,
                                                                 const VariableInit& init) {
  VariablePlacement p;
  p.name = name;
  p.dtype = init.dtype;
  p.shape = init.shape;
  int shards = 1;
  if (partitioner_ != nullptr && !init.shape.empty()) {
    ASSIGN_OR_RETURN(std::vector<int> partitions, partitioner_->Partition(init.shape, init.dtype));
    RETURN_IF_ERROR(ValidatePartitions(partitions, init.shape));
    shards = partitions[0];
  }
  const int num_ps = cluster_.num_ps();
  if (shards <= 1) {
    p.shards.push_back({name, next_ps_++ % num_ps, 0, init.shape.empty() ? 1 : init.shape[0]});
    return p;
  }
  const std::vector<RowRange> ranges = DivPartition(init.shape[0], shards);
  for (size_t i = 0; i < ranges.size(); ++i) {
    p.shards.push_back({absl::StrCat(name, "/part_", i), next_ps_++ % num_ps, ranges[i].begin, ranges[i].end});
  }
  return p;
}

absl::StatusOr<ShardedVariable> ParameterServerStrategy::CreateVariable(
    const std::string& name, const VariableInit& init, std::optional<OptimizerConfig> optimizer) {
  if (name.empty()) return absl::InvalidArgumentError("variable name is empty");
  RETURN_IF_ERROR(ValidateShape(init.shape, init.dtype));
  if (init.spec.kind == "tensor" && (init.spec.tensor.shape() != init.shape || init.spec.tensor.dtype() != init.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("initial value of '", name, "' does not match its shape"));
  }
  VariablePlacement placement;
  {
    // Check and claim the name atomically: without the claim, two concurrent creates of one
    // name could both pass the check and both place and create it (on different PS). A
    // create of a name being created by another thread waits for that one's outcome.
    MutexLock lock(&mu_);
    struct Claim {
      const absl::flat_hash_set<std::string>* creating;
      const std::string* name;
    } claim{&creating_, &name};
    mu_.Await(absl::Condition(+[](Claim* c) { return !c->creating->contains(*c->name); }, &claim));
    if (directory_.Find(name).ok()) return absl::AlreadyExistsError(absl::StrCat("variable '", name, "' exists"));
    ASSIGN_OR_RETURN(placement, Place(name, init));
    creating_.insert(name);
  }
  absl::Status created = ps_client_->CreateVariable(placement, init.spec, optimizer ? &*optimizer : nullptr,
                                                    /*wait_for_ready=*/true);
  {
    MutexLock lock(&mu_);
    if (created.ok()) {
      directory_.Add(placement);
      recipes_[name] = Recipe{init.spec, optimizer};
    }
    creating_.erase(name);
  }
  RETURN_IF_ERROR(created);
  ASSIGN_OR_RETURN(auto stored, directory_.Find(name));
  return ShardedVariable(std::move(stored), ps_client_.get());
}

absl::Status ParameterServerStrategy::RecreateVariables() {
  std::vector<std::pair<std::shared_ptr<const VariablePlacement>, Recipe>> todo;
  {
    MutexLock lock(&mu_);
    for (const auto& placement : directory_.All()) {
      auto it = recipes_.find(placement->name);
      if (it != recipes_.end()) todo.emplace_back(placement, it->second);
    }
  }
  for (const auto& [placement, recipe] : todo) {
    RETURN_IF_ERROR(ps_client_->CreateVariable(*placement, recipe.init,
                                               recipe.optimizer ? &*recipe.optimizer : nullptr,
                                               /*wait_for_ready=*/false));
  }
  return absl::OkStatus();
}

net::RpcClient& ParameterServerStrategy::ps_rpc(int i) { return *ps_clients_[static_cast<size_t>(i)]; }

absl::StatusOr<ShardedVariable> ParameterServerStrategy::GetVariable(const std::string& name) const {
  ASSIGN_OR_RETURN(auto placement, directory_.Find(name));
  return ShardedVariable(std::move(placement), ps_client_.get());
}

}  // namespace asyncps
