#include "data_service/servers.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/exit_code.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data_service/data_service.capnp.h"
#include "data_service/dispatcher_state.h"
#include "data_service/wire.h"
#include "net/server_process.h"

namespace asyncps::data_service {
namespace {

// Who may call the service: anything of the cluster that reads data or serves it.
net::PeerRoles ServiceCallers() { return {"chief", "worker", "evaluator", "data_worker", "dispatcher"}; }

constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(500);
// A data worker not heard from for this long is no longer handed to consumers.
constexpr absl::Duration kWorkerExpiry = absl::Seconds(3);

class DispatcherService {
 public:
  DispatcherService(DispatcherState& state, metrics::ProcessMetrics& m) : state_(state) {
    datasets_ = &prometheus::BuildGauge()
                     .Name("asyncps_dispatcher_datasets")
                     .Help("Datasets registered with the tf.data service dispatcher")
                     .Register(m.registry())
                     .Add({});
    workers_ = &prometheus::BuildGauge()
                    .Name("asyncps_dispatcher_data_workers")
                    .Help("Data workers that heartbeated within the expiry")
                    .Register(m.registry())
                    .Add({});
    datasets_->Set(static_cast<double>(state_.num_datasets()));
  }

  void RegisterWith(net::MethodTable& methods) {
    methods.Register<wire::ds::RegisterDatasetRequest>(
        "dispatcher.RegisterDataset", ServiceCallers(),
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
          auto body = req.RequestBody<wire::ds::RegisterDatasetRequest>();
          const std::string name = body.getName().cStr();
          ASSIGN_OR_RETURN(int64_t id, state_.RegisterDataset(name, GetArgs(body.getArgs())));
          datasets_->Set(static_cast<double>(state_.num_datasets()));
          spdlog::info("dataset '{}' registered as id {}", name, id);
          resp->InitResponseBody<wire::ds::RegisterDatasetResponse>().setDatasetId(id);
          return absl::OkStatus();
        });
    methods.Register<wire::ds::GetDatasetRequest>(
        "dispatcher.GetDataset", ServiceCallers(),
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
          absl::StatusOr<DatasetDef> def = state_.GetDataset(req.RequestBody<wire::ds::GetDatasetRequest>().getDatasetId());
          if (!def.ok()) {
            spdlog::warn("GetDataset: {}", def.status().ToString());
            return def.status();
          }
          auto body = resp->InitResponseBody<wire::ds::GetDatasetResponse>();
          body.setName(def->name);
          SetArgs(def->args, body.initArgs(static_cast<unsigned>(def->args.size())));
          return absl::OkStatus();
        });
    methods.Register<wire::ds::GetOrCreateJobRequest>(
        "dispatcher.GetOrCreateJob", ServiceCallers(),
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
          auto body = req.RequestBody<wire::ds::GetOrCreateJobRequest>();
          ASSIGN_OR_RETURN(ProcessingMode mode, ModeFromWire(body.getMode()));
          absl::StatusOr<int64_t> id = state_.GetOrCreateJob(body.getDatasetId(), body.getJobName().cStr(), mode);
          if (!id.ok()) {
            spdlog::warn("GetOrCreateJob: {}", id.status().ToString());
            return id.status();
          }
          resp->InitResponseBody<wire::ds::GetOrCreateJobResponse>().setJobId(*id);
          return absl::OkStatus();
        });
    methods.Register<wire::ds::HeartbeatRequest>(
        "dispatcher.Heartbeat", {"data_worker"},
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
          auto body = req.RequestBody<wire::ds::HeartbeatRequest>();
          const std::string address = body.getAddress().cStr();
          bool is_new = false;
          {
            MutexLock lock(&mu_);
            auto [it, inserted] = workers_seen_.try_emplace(address);
            is_new = inserted || absl::Now() - it->second.last_seen > kWorkerExpiry;
            it->second = {body.getTaskIndex(), absl::Now()};
          }
          if (is_new) spdlog::info("data worker {} registered from {}", body.getTaskIndex(), address);
          resp->InitResponseBody<wire::Empty>();
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
    methods.Register<wire::Empty>(
        "dispatcher.GetWorkers", ServiceCallers(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) -> absl::Status {
          std::vector<std::pair<int, std::string>> live;
          {
            MutexLock lock(&mu_);
            const absl::Time now = absl::Now();
            for (const auto& [address, seen] : workers_seen_) {
              if (now - seen.last_seen <= kWorkerExpiry) live.emplace_back(seen.index, address);
            }
          }
          std::sort(live.begin(), live.end());
          workers_->Set(static_cast<double>(live.size()));
          auto list = resp->InitResponseBody<wire::ds::GetWorkersResponse>().initWorkers(static_cast<unsigned>(live.size()));
          for (unsigned i = 0; i < live.size(); ++i) {
            list[i].setTaskIndex(live[i].first);
            list[i].setAddress(live[i].second);
          }
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
  }

 private:
  struct Seen {
    int index = 0;
    absl::Time last_seen;
  };
  DispatcherState& state_;
  prometheus::Gauge* datasets_;
  prometheus::Gauge* workers_;
  Mutex mu_;
  absl::flat_hash_map<std::string, Seen> workers_seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int RunDispatcher(const ClusterSpec& cluster, const ProcessOptions& options, const std::string& work_dir) {
  absl::StatusOr<std::unique_ptr<DispatcherState>> state = DispatcherState::Open(work_dir);
  if (!state.ok()) {
    spdlog::error("dispatcher: {}", state.status().ToString());
    return ExitCodeForStatus(state.status());
  }
  spdlog::info("dispatcher state: {} datasets, {} jobs{}", (*state)->num_datasets(), (*state)->num_jobs(),
               work_dir.empty() ? " (in memory: no work_dir)" : absl::StrCat(" (journal ", (*state)->journal_path(), ")"));
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/4);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  DispatcherService service(**state, (*process)->process_metrics());
  service.RegisterWith((*process)->server().methods());
  return (*process)->ServeUntilSignal();
}

int RunDataWorker(const ClusterSpec& cluster, const ProcessOptions& options, DatasetBuilder builder) {
  if (cluster.dispatcher().empty()) {
    spdlog::error("data_worker: the cluster spec lists no dispatcher (TF_CONFIG job 'dispatcher', --dispatcher_host)");
    return kExitUsage;
  }
  // Enough handler threads that consumers reading different splits do not wait on each other.
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/8);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  net::RpcClient dispatcher((*process)->loop(), (*process)->ClientOptions(cluster.dispatcher()));
  metrics::ProcessMetrics& m = (*process)->process_metrics();
  prometheus::Counter& elements = prometheus::BuildCounter()
                                      .Name("asyncps_data_worker_elements_total")
                                      .Help("Elements this data worker served")
                                      .Register(m.registry())
                                      .Add({});
  prometheus::Counter& bytes = prometheus::BuildCounter()
                                   .Name("asyncps_data_worker_element_bytes_total")
                                   .Help("Tensor bytes of the elements this data worker served")
                                   .Register(m.registry())
                                   .Add({});

  ElementServer::Options server_options;
  server_options.index = cluster.task_index();
  server_options.count = cluster.num_data_workers();
  server_options.max_element_bytes = static_cast<uint64_t>(options.rpc_max_frame_bytes);
  ElementServer server(server_options, std::move(builder), [&dispatcher](int64_t id) -> absl::StatusOr<DatasetDef> {
    net::OutMessage request;
    request.InitRequestBody<wire::ds::GetDatasetRequest>().setDatasetId(id);
    ASSIGN_OR_RETURN(net::InMessage response, dispatcher.Call("dispatcher.GetDataset", std::move(request), absl::Seconds(10)));
    DatasetDef def;
    def.id = id;
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() {
      auto body = response.ResponseBody<wire::ds::GetDatasetResponse>();
      def.name = body.getName().cStr();
      def.args = GetArgs(body.getArgs());
      return absl::OkStatus();
    }));
    return def;
  });
  (*process)->server().methods().Register<wire::ds::GetElementRequest>(
      "data_worker.GetElement", ServiceCallers(),
      [&](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
        ASSIGN_OR_RETURN(ElementServer::Request request, DecodeRequest(req.RequestBody<wire::ds::GetElementRequest>()));
        absl::StatusOr<ElementServer::Result> result = server.Get(request);
        if (!result.ok()) {
          spdlog::warn("GetElement(dataset {}, job {}): {}", request.dataset_id, request.job_id,
                       result.status().ToString());
          return result.status();
        }
        uint64_t n = 0;
        for (const Tensor& t : result->element) n += t.num_bytes();
        if (!result->end_of_sequence) {
          elements.Increment();
          bytes.Increment(static_cast<double>(n));
        }
        EncodeResult(*result, request.compression, resp);
        return absl::OkStatus();
      });

  // Registration and heartbeats, from their own thread so a dispatcher that is down or
  // restarting never holds up serving.
  Mutex mu;
  bool stop = false;
  std::thread heartbeat([&]() {
    bool registered = false;
    while (true) {
      {
        MutexLock lock(&mu);
        if (mu.AwaitWithTimeout(absl::Condition(&stop), registered ? kHeartbeatInterval : absl::Milliseconds(50))) {
          return;
        }
      }
      net::OutMessage request;
      auto body = request.InitRequestBody<wire::ds::HeartbeatRequest>();
      body.setAddress(cluster.self_address());
      body.setTaskIndex(cluster.task_index());
      absl::StatusOr<net::InMessage> response = dispatcher.Call("dispatcher.Heartbeat", std::move(request), absl::Seconds(2));
      if (response.ok() != registered) {
        if (response.ok()) {
          spdlog::info("registered with dispatcher {}", cluster.dispatcher());
        } else {
          spdlog::warn("dispatcher {} unreachable: {}", cluster.dispatcher(), response.status().ToString());
        }
        registered = response.ok();
      }
    }
  });
  const int code = (*process)->ServeUntilSignal();
  {
    MutexLock lock(&mu);
    stop = true;
  }
  heartbeat.join();
  return code;
}

}  // namespace asyncps::data_service
