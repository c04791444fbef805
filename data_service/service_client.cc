#include "data_service/service_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "data_service/data_service.capnp.h"
#include "data_service/wire.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"

namespace asyncps::data_service {
namespace {

// How long a worker list from the dispatcher is used before asking again.
constexpr absl::Duration kWorkersFresh = absl::Seconds(2);
constexpr absl::Duration kDispatcherCallTimeout = absl::Seconds(10);
// One data worker gets this long to answer before the read moves to another one.
constexpr absl::Duration kElementCallTimeout = absl::Seconds(30);

}  // namespace

bool IsRetryable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s) || absl::IsAborted(s);
}

ServiceClient::ServiceClient(ServiceOptions options)
    : options_(std::move(options)), loop_(std::make_unique<net::EventLoop>()) {}

ServiceClient::~ServiceClient() {
  {
    MutexLock lock(&mu_);
    clients_.clear();  // before the loop they run on
  }
  loop_.reset();
}

net::RpcClient& ServiceClient::ClientFor(const std::string& address) {
  std::unique_ptr<net::RpcClient>& client = clients_[address];
  if (client == nullptr) {
    net::RpcClient::Options o;
    o.address = address;
    o.role = options_.role;
    o.task_index = options_.task_index;
    o.token = options_.token;
    o.wait_for_ready = false;
    o.max_backoff = absl::Milliseconds(200);
    client = std::make_unique<net::RpcClient>(*loop_, o);
  }
  return *client;
}

absl::Status ServiceClient::RetryUnavailable(const std::function<absl::Status()>& call) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.timeout_ms);
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    absl::Status s = call();
    if (!IsRetryable(s) || absl::Now() + backoff > deadline) return s;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::StatusOr<int64_t> ServiceClient::RegisterDataset(const std::string& name,
                                                       const std::map<std::string, std::string>& args) {
  int64_t id = 0;
  RETURN_IF_ERROR(RetryUnavailable([&]() -> absl::Status {
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::ds::RegisterDatasetRequest>();
    body.setName(name);
    SetArgs(args, body.initArgs(static_cast<unsigned>(args.size())));
    net::RpcClient* client;
    {
      MutexLock lock(&mu_);
      client = &ClientFor(options_.dispatcher);
    }
    ASSIGN_OR_RETURN(net::InMessage response,
                     client->Call("dispatcher.RegisterDataset", std::move(request), kDispatcherCallTimeout));
    return net::CatchDecodeErrors([&]() {
      id = response.ResponseBody<wire::ds::RegisterDatasetResponse>().getDatasetId();
      return absl::OkStatus();
    });
  }));
  return id;
}

absl::StatusOr<int64_t> ServiceClient::GetOrCreateJob(int64_t dataset_id, const std::string& job_name,
                                                      ProcessingMode mode, uint64_t* generation) {
  int64_t id = 0;
  RETURN_IF_ERROR(RetryUnavailable([&]() -> absl::Status {
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::ds::GetOrCreateJobRequest>();
    body.setDatasetId(dataset_id);
    body.setJobName(job_name);
    body.setMode(static_cast<uint8_t>(mode));
    net::RpcClient* client;
    {
      MutexLock lock(&mu_);
      client = &ClientFor(options_.dispatcher);
    }
    ASSIGN_OR_RETURN(net::InMessage response,
                     client->Call("dispatcher.GetOrCreateJob", std::move(request), kDispatcherCallTimeout));
    return net::CatchDecodeErrors([&]() {
      auto body = response.ResponseBody<wire::ds::GetOrCreateJobResponse>();
      id = body.getJobId();
      if (generation != nullptr) *generation = body.getGeneration();
      return absl::OkStatus();
    });
  }));
  return id;
}

absl::StatusOr<std::vector<std::string>> ServiceClient::Workers(bool refresh) {
  net::RpcClient* client;
  {
    MutexLock lock(&mu_);
    if (!refresh && !workers_.empty() && absl::Now() - workers_at_ < kWorkersFresh) return workers_;
    client = &ClientFor(options_.dispatcher);
  }
  net::OutMessage request;
  request.InitRequestBody<wire::Empty>();
  absl::StatusOr<net::InMessage> response = client->Call("dispatcher.GetWorkers", std::move(request), kDispatcherCallTimeout);
  std::vector<std::string> workers;
  int listed = 0;
  absl::Status s = response.status();
  if (s.ok()) {
    s = net::CatchDecodeErrors([&]() {
      auto body = response->ResponseBody<wire::ds::GetWorkersResponse>();
      for (auto w : body.getWorkers()) workers.emplace_back(w.getAddress().cStr());
      listed = body.getNumDataWorkers();
      return absl::OkStatus();
    });
  }
  MutexLock lock(&mu_);
  if (!s.ok()) {
    // The dispatcher may be restarting: the data workers are still there.
    if (IsRetryable(s) && !workers_.empty()) return workers_;
    return s;
  }
  // By address: every consumer numbers the data workers alike, whatever order the dispatcher
  // keeps them in (PreferredDataWorker's index means the same data worker in every process).
  std::sort(workers.begin(), workers.end());
  workers_ = std::move(workers);
  listed_workers_ = listed;
  workers_at_ = absl::Now();
  return workers_;
}

int ServiceClient::listed_workers() {
  MutexLock lock(&mu_);
  return listed_workers_;
}

absl::StatusOr<ElementServer::Result> ServiceClient::GetElement(const std::string& address,
                                                                const ElementServer::Request& request,
                                                                absl::Duration timeout) {
  net::OutMessage message;
  EncodeRequest(request, message.InitRequestBody<wire::ds::GetElementRequest>());
  net::RpcClient* client;
  {
    MutexLock lock(&mu_);
    client = &ClientFor(address);
  }
  ASSIGN_OR_RETURN(net::InMessage response, client->Call("data_worker.GetElement", std::move(message), timeout));
  return DecodeResult(response);
}

std::shared_ptr<ServiceClient::PendingRead> ServiceClient::GetElementAsync(const std::string& address,
                                                                          const ElementServer::Request& request) {
  auto pending = std::make_shared<PendingRead>();
  net::OutMessage message;
  EncodeRequest(request, message.InitRequestBody<wire::ds::GetElementRequest>());
  net::RpcClient* client;
  {
    MutexLock lock(&mu_);
    client = &ClientFor(address);
  }
  // On the loop thread: decoding views the payloads, it does not block.
  client->CallAsync("data_worker.GetElement", std::move(message), kElementCallTimeout,
                    [pending](absl::StatusOr<net::InMessage> response) {
                      absl::StatusOr<ElementServer::Result> result =
                          response.ok() ? DecodeResult(*response) : response.status();
                      MutexLock lock(&pending->mu_);
                      pending->result_ = std::move(result);
                      pending->done_ = true;
                    });
  return pending;
}

absl::StatusOr<ElementServer::Result> ServiceClient::PendingRead::Wait() {
  MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return result_;
}

absl::StatusOr<ElementServer::Result> ServiceClient::Fetch(const ElementServer::Request& request, uint64_t preferred,
                                                           std::string* served_by) {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.timeout_ms);
  absl::Duration backoff = absl::Milliseconds(10);
  absl::Status last = absl::UnavailableError("no data worker answered");
  for (uint64_t attempt = 0;; ++attempt) {
    absl::StatusOr<std::vector<std::string>> workers = Workers(/*refresh=*/attempt > 0);
    if (workers.ok() && !workers->empty()) {
      const std::string address = (*workers)[(preferred + attempt) % workers->size()];
      absl::StatusOr<ElementServer::Result> result =
          GetElement(address, request, std::min(kElementCallTimeout, std::max(deadline - absl::Now(), absl::ZeroDuration())));
      if (result.ok() || !IsRetryable(result.status())) {
        if (served_by != nullptr) *served_by = address;
        return result;
      }
      last = absl::Status(result.status().code(), absl::StrCat("data worker ", address, ": ", result.status().message()));
    } else if (!workers.ok()) {
      if (!IsRetryable(workers.status())) return workers.status();
      last = workers.status();
    } else {
      last = absl::UnavailableError(absl::StrCat("no data worker is registered with dispatcher ", options_.dispatcher));
    }
    if (absl::Now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat("reading from the tf.data service for ", options_.timeout_ms,
                                                 " ms failed; last: ", last.ToString()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

}  // namespace asyncps::data_service
