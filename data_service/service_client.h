#ifndef ASYNCPS_DATA_SERVICE_SERVICE_CLIENT_H_
#define ASYNCPS_DATA_SERVICE_SERVICE_CLIENT_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "data_service/element_server.h"
#include "data_service/service_dataset.h"

namespace asyncps::net {
class EventLoop;
class RpcClient;
}  // namespace asyncps::net

namespace asyncps::data_service {

// A consumer's connections to the dispatcher and the data workers, on an I/O thread of its own.
// Thread-safe; the destructor fails calls still in flight.
class ServiceClient {
 public:
  explicit ServiceClient(ServiceOptions options);
  ~ServiceClient();
  ServiceClient(const ServiceClient&) = delete;
  ServiceClient& operator=(const ServiceClient&) = delete;

  const ServiceOptions& options() const { return options_; }

  absl::StatusOr<int64_t> RegisterDataset(const std::string& name, const std::map<std::string, std::string>& args);
  // The job's id; `*generation` (when not null) the dispatcher generation it belongs to, for
  // ElementServer::Request::generation.
  absl::StatusOr<int64_t> GetOrCreateJob(int64_t dataset_id, const std::string& job_name, ProcessingMode mode,
                                         uint64_t* generation = nullptr);

  // The data workers the dispatcher saw heartbeat lately, by address. `refresh` false answers
  // from the last list when there is one. While the dispatcher is unreachable, the last list.
  absl::StatusOr<std::vector<std::string>> Workers(bool refresh);
  // The number of data workers the cluster spec lists, as the dispatcher last said (0 before
  // Workers got an answer, or from a dispatcher that does not say).
  int listed_workers();

  // One read from the data worker at `address`.
  absl::StatusOr<ElementServer::Result> GetElement(const std::string& address, const ElementServer::Request& request,
                                                   absl::Duration timeout);

  // A read sent ahead of its turn: done once the data worker answered or the call failed.
  class PendingRead {
   public:
    // Blocks until the answer (the call's timeout bounds the wait).
    absl::StatusOr<ElementServer::Result> Wait();

   private:
    friend class ServiceClient;
    Mutex mu_;
    bool done_ ABSL_GUARDED_BY(mu_) = false;
    absl::StatusOr<ElementServer::Result> result_ ABSL_GUARDED_BY(mu_);
  };
  // Sends one read to the data worker at `address` and returns at once; the answer lands in
  // the returned PendingRead, which the caller may drop unanswered (the answer is then
  // discarded). Fails (in the PendingRead) with Cancelled when this client is destroyed first.
  std::shared_ptr<PendingRead> GetElementAsync(const std::string& address, const ElementServer::Request& request);

  // `request` from some data worker, failing over between them: Unavailable and
  // DeadlineExceeded (a data worker died, hangs or restarts) move on to another one, until
  // ServiceOptions::timeout_ms passes. `preferred` picks the first one tried (index modulo the
  // number of data workers), so reads of one split go where its pipeline stands.
  absl::StatusOr<ElementServer::Result> Fetch(const ElementServer::Request& request, uint64_t preferred,
                                              std::string* served_by = nullptr);

  // Repeats `call` while it fails with Unavailable (the dispatcher restarting), until
  // ServiceOptions::timeout_ms passes.
  absl::Status RetryUnavailable(const std::function<absl::Status()>& call);

 private:
  net::RpcClient& ClientFor(const std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServiceOptions options_;
  std::unique_ptr<net::EventLoop> loop_;
  Mutex mu_;
  std::map<std::string, std::unique_ptr<net::RpcClient>> clients_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  int listed_workers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time workers_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

// Whether a failed read is worth trying on another data worker.
bool IsRetryable(const absl::Status& s);

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_SERVICE_CLIENT_H_
