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
#include "data_service/log_limiter.h"
#include "data_service/wire.h"
#include "net/rpc_server.h"
#include "net/server_process.h"

namespace asyncps::data_service {
namespace {

// Who may call the service: anything of the cluster that reads data or serves it.
net::PeerRoles ServiceCallers() { return {"chief", "worker", "evaluator", "data_worker", "dispatcher"}; }

constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(500);
// A data worker not heard from for this long is no longer handed to consumers.
constexpr absl::Duration kWorkerExpiry = absl::Seconds(3);
// Errors a consumer can cause once per request are logged this often: the first few, then one
// per interval with the count of those suppressed.
constexpr int64_t kLogBurst = 10;
constexpr absl::Duration kLogInterval = absl::Seconds(10);

class DispatcherService {
 public:
  struct Config {
    std::string address;
    std::vector<std::string> listed;  // the cluster spec's data workers, by task index
    bool in_chief = false;
  };

  DispatcherService(DispatcherState& state, metrics::ProcessMetrics& m, Config config)
      : state_(state), config_(std::move(config)) {
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
    jobs_ = &prometheus::BuildGauge()
                 .Name("asyncps_dispatcher_jobs")
                 .Help("Jobs the tf.data service dispatcher created (named and anonymous)")
                 .Register(m.registry())
                 .Add({});
    datasets_->Set(static_cast<double>(state_.num_datasets()));
    jobs_->Set(static_cast<double>(state_.num_jobs()));
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
            LogLimited("GetDataset", def.status());
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
            LogLimited("GetOrCreateJob", id.status());
            return id.status();
          }
          jobs_->Set(static_cast<double>(state_.num_jobs()));
          auto out = resp->InitResponseBody<wire::ds::GetOrCreateJobResponse>();
          out.setJobId(*id);
          out.setGeneration(state_.generation());
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
            it->second = {body.getTaskIndex(), absl::Now(), body.getJobs(), body.getSplitStreams(),
                          body.getElements()};
          }
          if (is_new) spdlog::info("data worker {} registered from {}", body.getTaskIndex(), address);
          resp->InitResponseBody<wire::ds::HeartbeatResponse>().setGeneration(state_.generation());
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
          auto body = resp->InitResponseBody<wire::ds::GetWorkersResponse>();
          body.setNumDataWorkers(static_cast<int32_t>(config_.listed.size()));
          body.setGeneration(state_.generation());
          auto list = body.initWorkers(static_cast<unsigned>(live.size()));
          for (unsigned i = 0; i < live.size(); ++i) {
            list[i].setTaskIndex(live[i].first);
            list[i].setAddress(live[i].second);
          }
          return absl::OkStatus();
        },
        net::Dispatch::kInline);
    methods.Register<wire::Empty>(
        "dispatcher.GetStatus", ServiceCallers(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) -> absl::Status {
          FillStatus(resp->InitResponseBody<wire::ds::GetStatusResponse>());
          return absl::OkStatus();
        });
  }

 private:
  struct Seen {
    int index = 0;
    absl::Time last_seen;
    int64_t jobs = 0;
    int64_t split_streams = 0;
    int64_t elements = 0;
  };
  // How many of the most recent jobs GetStatus lists.
  static constexpr size_t kStatusJobs = 100;

  void LogLimited(const char* what, const absl::Status& status) {
    int64_t suppressed = 0;
    if (!log_limiter_.Allow(&suppressed)) return;
    if (suppressed > 0) {
      spdlog::warn("{}: {} ({} more such errors suppressed)", what, status.ToString(), suppressed);
    } else {
      spdlog::warn("{}: {}", what, status.ToString());
    }
  }

  void FillStatus(wire::ds::GetStatusResponse::Builder out) {
    out.setAddress(config_.address);
    out.setGeneration(state_.generation());
    out.setInChief(config_.in_chief);
    out.setJournal(state_.journal_path());
    out.setDatasets(static_cast<int64_t>(state_.num_datasets()));
    out.setNumJobs(static_cast<int64_t>(state_.num_jobs()));
    const std::vector<JobDef> jobs = state_.RecentJobs(kStatusJobs);
    auto job_list = out.initJobs(static_cast<unsigned>(jobs.size()));
    for (unsigned i = 0; i < jobs.size(); ++i) {
      job_list[i].setId(jobs[i].id);
      job_list[i].setName(jobs[i].name);
      job_list[i].setDatasetId(jobs[i].dataset_id);
      job_list[i].setMode(std::string(ProcessingModeName(jobs[i].mode)));
    }
    // The listed data workers by index (absent until heard from), then any heard from at an
    // address the spec does not list.
    struct Row {
      int index;
      std::string address;
      const Seen* seen;
    };
    MutexLock lock(&mu_);
    std::vector<Row> rows;
    for (size_t i = 0; i < config_.listed.size(); ++i) {
      auto it = workers_seen_.find(config_.listed[i]);
      rows.push_back({static_cast<int>(i), config_.listed[i], it == workers_seen_.end() ? nullptr : &it->second});
    }
    for (const auto& [address, seen] : workers_seen_) {
      if (std::find(config_.listed.begin(), config_.listed.end(), address) == config_.listed.end()) {
        rows.push_back({seen.index, address, &seen});
      }
    }
    const absl::Time now = absl::Now();
    auto list = out.initDataWorkers(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) {
      list[i].setAddress(rows[i].address);
      list[i].setTaskIndex(rows[i].index);
      const Seen* seen = rows[i].seen;
      if (seen == nullptr) {
        list[i].setState("absent");
        list[i].setSecondsSinceHeartbeat(-1);
        continue;
      }
      list[i].setState(now - seen->last_seen <= kWorkerExpiry ? "up" : "lost");
      list[i].setSecondsSinceHeartbeat(absl::ToDoubleSeconds(now - seen->last_seen));
      list[i].setJobs(seen->jobs);
      list[i].setSplitStreams(seen->split_streams);
      list[i].setElements(seen->elements);
    }
  }

  DispatcherState& state_;
  const Config config_;
  prometheus::Gauge* datasets_;
  prometheus::Gauge* workers_;
  prometheus::Gauge* jobs_;
  LogLimiter log_limiter_{kLogBurst, kLogInterval};
  Mutex mu_;
  absl::flat_hash_map<std::string, Seen> workers_seen_ ABSL_GUARDED_BY(mu_);
};

DispatcherService::Config ConfigFor(const ClusterSpec& cluster) {
  return {cluster.data_service_dispatcher(), cluster.data_workers(), cluster.dispatcher_in_chief()};
}

absl::StatusOr<std::unique_ptr<DispatcherState>> OpenState(const std::string& work_dir) {
  absl::StatusOr<std::unique_ptr<DispatcherState>> state = DispatcherState::Open(work_dir);
  if (!state.ok()) return state.status();
  spdlog::info("dispatcher state: {} datasets, {} jobs, generation {:x}{}", (*state)->num_datasets(),
               (*state)->num_jobs(), (*state)->generation(),
               work_dir.empty() ? " (in memory: no --dispatcher_work_dir)"
                                : absl::StrCat(" (journal ", (*state)->journal_path(), ")"));
  return state;
}

}  // namespace

int RunDispatcher(const ClusterSpec& cluster, const ProcessOptions& options) {
  absl::StatusOr<std::unique_ptr<DispatcherState>> state = OpenState(options.dispatcher_work_dir);
  if (!state.ok()) {
    spdlog::error("dispatcher: {}", state.status().ToString());
    return ExitCodeForStatus(state.status());
  }
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/4);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  DispatcherService service(**state, (*process)->process_metrics(), ConfigFor(cluster));
  service.RegisterWith((*process)->server().methods());
  return (*process)->ServeUntilSignal();
}

struct InChiefDispatcher::Impl {
  std::unique_ptr<DispatcherState> state;
  std::unique_ptr<DispatcherService> service;
  std::unique_ptr<net::RpcServer> server;
};

absl::StatusOr<std::unique_ptr<InChiefDispatcher>> InChiefDispatcher::Start(const ClusterSpec& cluster,
                                                                            const ProcessOptions& options,
                                                                            net::EventLoop& loop,
                                                                            metrics::ProcessMetrics& metrics,
                                                                            metrics::RpcMetrics* rpc_metrics) {
  const std::string& address = cluster.data_service_dispatcher();
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
  auto impl = std::make_unique<Impl>();
  ASSIGN_OR_RETURN(impl->state, OpenState(options.dispatcher_work_dir));
  impl->service = std::make_unique<DispatcherService>(*impl->state, metrics, ConfigFor(cluster));
  // The limits of any server process (net::ServerProcess), for the chief's one server.
  net::RpcServer::Options o;
  o.host = host;
  o.port = port;
  o.role = "chief";
  o.task_index = cluster.task_index();
  o.token = options.cluster_token;
  o.handler_threads = 4;
  o.metrics = rpc_metrics;
  o.max_connections = static_cast<int>(options.rpc_max_connections);
  o.handshake_timeout = absl::Milliseconds(options.rpc_handshake_timeout_ms);
  o.handshake_limits = net::HandshakeFrameLimits(static_cast<uint64_t>(options.rpc_handshake_max_bytes));
  o.idle_timeout =
      options.rpc_idle_timeout_s == 0 ? absl::InfiniteDuration() : absl::Seconds(options.rpc_idle_timeout_s);
  o.limits.max_payload_bytes = static_cast<uint64_t>(options.rpc_max_frame_bytes);
  impl->server = std::make_unique<net::RpcServer>(loop, o);
  impl->service->RegisterWith(impl->server->methods());
  if (absl::Status s = impl->server->Start(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("the chief's tf.data service dispatcher on ", address, ": ", s.message()));
  }
  spdlog::info("tf.data service dispatcher in the chief, on {}", address);
  return std::unique_ptr<InChiefDispatcher>(new InChiefDispatcher(std::move(impl)));
}

InChiefDispatcher::InChiefDispatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

InChiefDispatcher::~InChiefDispatcher() {
  // The server first: its handlers use the service and the state.
  impl_->server->Shutdown();
  impl_->server.reset();
}

int RunDataWorker(const ClusterSpec& cluster, const ProcessOptions& options, DatasetBuilder builder) {
  const std::string& dispatcher_address = cluster.data_service_dispatcher();
  if (dispatcher_address.empty()) {
    spdlog::error("data_worker: the cluster spec lists no dispatcher (TF_CONFIG job 'dispatcher', --dispatcher_host)");
    return kExitUsage;
  }
  // Enough handler threads that consumers reading different splits do not wait on each other.
  auto process = net::ServerProcess::Create(cluster, options, /*handler_threads=*/8);
  if (!process.ok()) {
    spdlog::error("{}", process.status().ToString());
    return ExitCodeForStatus(process.status());
  }
  net::RpcClient dispatcher((*process)->loop(), (*process)->ClientOptions(dispatcher_address));
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
  prometheus::Gauge& jobs_gauge = prometheus::BuildGauge()
                                      .Name("asyncps_data_worker_jobs")
                                      .Help("Jobs (OFF, FILE, DATA) this data worker keeps a pass of")
                                      .Register(m.registry())
                                      .Add({});
  prometheus::Gauge& streams_gauge = prometheus::BuildGauge()
                                         .Name("asyncps_data_worker_split_streams")
                                         .Help("Split pipelines (DYNAMIC) this data worker keeps positioned")
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
  // A consumer that retries a bad request in a loop must not turn into a log line per request.
  LogLimiter get_element_errors(kLogBurst, kLogInterval);
  (*process)->server().methods().Register<wire::ds::GetElementRequest>(
      "data_worker.GetElement", ServiceCallers(),
      [&](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) -> absl::Status {
        ASSIGN_OR_RETURN(ElementServer::Request request, DecodeRequest(req.RequestBody<wire::ds::GetElementRequest>()));
        absl::StatusOr<ElementServer::Result> result = server.Get(request);
        if (!result.ok()) {
          int64_t suppressed = 0;
          if (get_element_errors.Allow(&suppressed)) {
            spdlog::warn("GetElement(dataset {}, job {}): {}{}", request.dataset_id, request.job_id,
                         result.status().ToString(),
                         suppressed > 0 ? absl::StrCat(" (", suppressed, " more such errors suppressed)") : "");
          }
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
      const auto jobs = static_cast<int64_t>(server.job_records());
      const auto streams = static_cast<int64_t>(server.open_streams());
      jobs_gauge.Set(static_cast<double>(jobs));
      streams_gauge.Set(static_cast<double>(streams));
      net::OutMessage request;
      auto body = request.InitRequestBody<wire::ds::HeartbeatRequest>();
      body.setAddress(cluster.self_address());
      body.setTaskIndex(cluster.task_index());
      body.setJobs(jobs);
      body.setSplitStreams(streams);
      body.setElements(static_cast<int64_t>(elements.Value()));
      absl::StatusOr<net::InMessage> response = dispatcher.Call("dispatcher.Heartbeat", std::move(request), absl::Seconds(2));
      uint64_t generation = 0;
      if (response.ok()) {
        absl::Status decoded = net::CatchDecodeErrors([&]() {
          generation = response->ResponseBody<wire::ds::HeartbeatResponse>().getGeneration();
          return absl::OkStatus();
        });
        if (!decoded.ok()) response = decoded;
      }
      const uint64_t before = server.generation();
      if (generation != 0 && server.AdoptGeneration(generation) && before != 0) {
        spdlog::warn("dispatcher {} is a new generation ({:x}, was {:x}): it restarted without a journal; "
                     "dropped every dataset and job of the old one",
                     dispatcher_address, generation, before);
      }
      if (response.ok() != registered) {
        if (response.ok()) {
          spdlog::info("registered with dispatcher {}", dispatcher_address);
        } else {
          spdlog::warn("dispatcher {} unreachable: {}", dispatcher_address, response.status().ToString());
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
