#include "data_service/service_dataset.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <deque>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "data/dataset_node.h"
#include "data_service/service_client.h"

namespace asyncps::data_service {

absl::string_view ProcessingModeName(ProcessingMode mode) {
  switch (mode) {
    case ProcessingMode::kOff:
      return "off";
    case ProcessingMode::kDynamic:
      return "dynamic";
    case ProcessingMode::kFile:
      return "file";
    case ProcessingMode::kData:
      return "data";
  }
  return "unknown";
}

absl::StatusOr<ProcessingMode> ProcessingModeFromName(absl::string_view name) {
  if (name == "off" || name == "parallel_epochs") return ProcessingMode::kOff;
  if (name == "dynamic" || name == "distributed_epoch") return ProcessingMode::kDynamic;
  if (name == "file") return ProcessingMode::kFile;
  if (name == "data") return ProcessingMode::kData;
  return absl::InvalidArgumentError(absl::StrCat("unknown processing mode '", name, "' (want off, dynamic, file or data)"));
}

absl::StatusOr<int64_t> RegisterDataset(const ServiceOptions& service, const std::string& name,
                                        const std::map<std::string, std::string>& args) {
  ServiceClient client(service);
  return client.RegisterDataset(name, args);
}

namespace {

// On a job iterator's first read (request.job_id 0): the dataset's id, the job `read` names
// (created or joined) and the read options every request of it carries, into `request`.
absl::Status JoinJobOnce(ServiceClient& client, const std::function<absl::StatusOr<int64_t>()>& dataset_id,
                         const ReadOptions& read, ElementServer::Request& request) {
  if (request.job_id != 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(request.dataset_id, dataset_id());
  ASSIGN_OR_RETURN(request.job_id,
                   client.GetOrCreateJob(request.dataset_id, read.job_name, read.mode, &request.generation));
  request.mode = read.mode;
  request.max_element_bytes = read.max_element_bytes;
  request.compression = read.compression;
  return absl::OkStatus();
}

}  // namespace

uint64_t PreferredDataWorker(const data::SourceSplit& split) {
  // The coordinator cuts an epoch into splits of one size (the last one may be shorter), so
  // begin / size numbers them 0, 1, 2, ...: consecutive splits go to consecutive data workers.
  // Every process computes the same number (absl::HashOf, used before, is salted per process:
  // two trainers sharing a split asked different data workers, each of which then built and
  // replayed the split's pipeline, and 8 splits an epoch fell 2:1 on one data worker as often
  // as not).
  const int64_t size = std::max<int64_t>(1, split.end - split.begin);
  return static_cast<uint64_t>(std::max<int64_t>(0, split.begin) / size);
}

namespace {

// One split of dynamic sharding, read element by element from whichever data worker answers
// (ServiceClient::Fetch): position p is the same element on every data worker. With
// ReadOptions::max_outstanding_requests n > 1 the reads of positions p+1 .. p+n-1 go out to the
// split's data worker while p is awaited; one that fails is read again with failover in its
// turn, so fetching ahead changes no element and no order.
class SplitIterator : public data::Iterator {
 public:
  SplitIterator(std::shared_ptr<ServiceClient> client, int64_t dataset_id, const ReadOptions& read,
                const data::SourceSplit& split, uint64_t seed, std::shared_ptr<std::atomic<bool>> beyond_source)
      : client_(std::move(client)),
        beyond_source_(std::move(beyond_source)),
        outstanding_(static_cast<size_t>(read.max_outstanding_requests)) {
    request_.dataset_id = dataset_id;
    request_.mode = ProcessingMode::kDynamic;
    request_.bound = true;
    request_.begin = split.begin;
    request_.end = split.end;
    request_.seed = seed;
    request_.max_element_bytes = read.max_element_bytes;
    request_.compression = read.compression;
    preferred_ = PreferredDataWorker(split);
  }

  absl::StatusOr<data::Element> Next() override {
    if (ended_) return absl::OutOfRangeError("end of split");
    request_.acked = request_.position;
    SendAhead();
    absl::StatusOr<ElementServer::Result> result = absl::UnavailableError("not read ahead");
    if (!ahead_.empty()) {
      result = ahead_.front()->Wait();
      ahead_.pop_front();
    }
    if (!result.ok()) {
      if (!IsRetryable(result.status())) return result.status();
      result = client_->Fetch(request_, preferred_);
      if (!result.ok()) return result.status();
    }
    if (result->end_of_sequence) {
      ended_ = true;
      ahead_.clear();  // reads past the end: their answers are dropped
      if (result->beyond_source && beyond_source_ != nullptr) beyond_source_->store(true);
      return absl::OutOfRangeError("end of split");
    }
    ++request_.position;
    return std::move(result->element);
  }

 private:
  // Keeps reads of positions [position, position + outstanding) in flight (n > 1 only).
  void SendAhead() {
    if (outstanding_ <= 1) return;
    absl::StatusOr<std::vector<std::string>> workers = client_->Workers(/*refresh=*/false);
    if (!workers.ok() || workers->empty()) return;
    const std::string& address = (*workers)[preferred_ % workers->size()];
    while (ahead_.size() < outstanding_) {
      ElementServer::Request ahead = request_;
      ahead.position = request_.position + static_cast<int64_t>(ahead_.size());
      ahead_.push_back(client_->GetElementAsync(address, ahead));
    }
  }

  const std::shared_ptr<ServiceClient> client_;
  const std::shared_ptr<std::atomic<bool>> beyond_source_;
  const size_t outstanding_;
  ElementServer::Request request_;
  uint64_t preferred_ = 0;
  bool ended_ = false;
  // Reads of positions request_.position, request_.position + 1, ... in that order.
  std::deque<std::shared_ptr<ServiceClient::PendingRead>> ahead_;
};

// A job's elements (kOff, kFile, kData), first come first served across its consumers: asks the data
// workers in turn and ends once every data worker it knows has ended the job. With
// ReadOptions::max_outstanding_requests n, up to n reads are in flight, spread over the data
// workers in turn, and elements are returned in the order the reads were sent.
class JobIterator : public data::Iterator {
 public:
  JobIterator(std::shared_ptr<ServiceClient> client, std::function<absl::StatusOr<int64_t>()> dataset_id,
              const ReadOptions& read)
      : client_(std::move(client)), dataset_id_(std::move(dataset_id)), read_(read) {}

  absl::StatusOr<data::Element> Next() override {
    RETURN_IF_ERROR(JoinJobOnce(*client_, dataset_id_, read_, request_));
    const absl::Time deadline = absl::Now() + absl::Milliseconds(client_->options().timeout_ms);
    absl::Status last = absl::OkStatus();
    while (absl::Now() < deadline) {
      if (pending_.empty()) {
        ASSIGN_OR_RETURN(std::vector<std::string> workers, client_->Workers(/*refresh=*/!last.ok()));
        open_.clear();
        for (const std::string& w : workers) {
          if (!finished_.contains(w)) open_.push_back(w);
        }
        if (open_.empty() && !finished_.empty()) {
          // FILE and DATA: each data worker holds its own share, so the job ends only once every
          // data worker of the cluster spec ended it, including any not registered yet.
          const bool sharded = read_.mode == ProcessingMode::kFile || read_.mode == ProcessingMode::kData;
          const int listed = client_->listed_workers();
          if (!sharded || static_cast<int>(finished_.size()) >= listed) {
            return absl::OutOfRangeError("end of the job's data");
          }
          last = absl::UnavailableError(absl::StrCat("waiting for data workers to register: ", finished_.size(),
                                                     " of the ", listed, " listed ended the job"));
          absl::SleepFor(absl::Milliseconds(50));
          continue;
        }
        if (open_.empty()) {
          last = absl::UnavailableError("no data worker is registered with the dispatcher");
          absl::SleepFor(absl::Milliseconds(50));
          continue;
        }
        // n reads over the open data workers in turn (n = 1: one read, as without fetch-ahead).
        for (int i = 0; i < read_.max_outstanding_requests; ++i) SendToNextOpen();
      }
      const std::string address = pending_.front().address;
      absl::StatusOr<ElementServer::Result> result = pending_.front().read->Wait();
      pending_.pop_front();
      if (!result.ok()) {
        if (!IsRetryable(result.status())) return result.status();
        last = result.status();
        continue;
      }
      if (result->end_of_sequence) {
        finished_.insert(address);
        continue;
      }
      SendToNextOpen();  // refills behind the element taken
      return std::move(result->element);
    }
    return absl::UnavailableError(absl::StrCat("reading job '", read_.job_name, "' from the tf.data service: ",
                                               last.ToString()));
  }

 private:
  struct Pending {
    std::string address;
    std::shared_ptr<ServiceClient::PendingRead> read;
  };

  // One read to the next data worker in turn that has not ended the job.
  void SendToNextOpen() {
    for (size_t tries = 0; tries < open_.size(); ++tries) {
      const std::string& address = open_[next_++ % open_.size()];
      if (finished_.contains(address)) continue;
      pending_.push_back({address, client_->GetElementAsync(address, request_)});
      return;
    }
  }

  const std::shared_ptr<ServiceClient> client_;
  const std::function<absl::StatusOr<int64_t>()> dataset_id_;
  const ReadOptions read_;
  ElementServer::Request request_;
  absl::flat_hash_set<std::string> finished_;
  uint64_t next_ = 0;
  std::vector<std::string> open_;  // the data workers last listed that had not ended the job
  std::deque<Pending> pending_;    // reads in flight, oldest first
};

// Consumer `consumer_index` of a coordinated job: round r from data worker r mod w of the w
// listed data workers (ordered by address), as that data worker's round r / w; element
// consumer_index of it.
class CoordinatedIterator : public data::Iterator {
 public:
  CoordinatedIterator(std::shared_ptr<ServiceClient> client,
                      std::function<absl::StatusOr<int64_t>()> dataset_id, const ReadOptions& read)
      : client_(std::move(client)), dataset_id_(std::move(dataset_id)), read_(read) {}

  absl::StatusOr<data::Element> Next() override {
    if (request_.job_id == 0) {
      RETURN_IF_ERROR(JoinJobOnce(*client_, dataset_id_, read_, request_));
      request_.num_consumers = read_.num_consumers;
      request_.consumer_index = read_.consumer_index;
    }
    const absl::Time deadline = absl::Now() + absl::Milliseconds(client_->options().timeout_ms);
    absl::Status last = absl::OkStatus();
    while (absl::Now() < deadline) {
      ASSIGN_OR_RETURN(std::vector<std::string> workers, client_->Workers(/*refresh=*/!last.ok()));
      if (workers.empty()) {
        last = absl::UnavailableError("no data worker is registered with the dispatcher");
      } else {
        // Every consumer orders the data workers alike, whatever the dispatcher's order.
        std::sort(workers.begin(), workers.end());
        const auto n = static_cast<int64_t>(workers.size());
        ElementServer::Request request = request_;
        request.round = round_ / n;  // the data worker's own round
        const std::string& address = workers[static_cast<size_t>(round_ % n)];
        absl::StatusOr<ElementServer::Result> result = client_->GetElement(
            address, request, absl::Milliseconds(client_->options().timeout_ms));
        if (result.ok()) {
          if (result->end_of_sequence) return absl::OutOfRangeError("end of the job's data");
          ++round_;
          return std::move(result->element);
        }
        // Unavailable is also a data worker holding this round until slower consumers catch up.
        if (!IsRetryable(result.status())) return result.status();
        last = result.status();
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::UnavailableError(absl::StrCat("coordinated read of round ", round_, " of job '",
                                               read_.job_name, "': ", last.ToString()));
  }

 private:
  const std::shared_ptr<ServiceClient> client_;
  const std::function<absl::StatusOr<int64_t>()> dataset_id_;
  const ReadOptions read_;
  ElementServer::Request request_;
  int64_t round_ = 0;  // over all data workers
};

// The guide's rules for coordinated reads, checked before anything is contacted.
absl::Status CheckCoordination(const ReadOptions& read) {
  if (read.num_consumers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadOptions::num_consumers is ", read.num_consumers));
  }
  if (read.num_consumers == 0) {
    if (read.consumer_index != 0) {
      return absl::InvalidArgumentError("ReadOptions::consumer_index is set without num_consumers");
    }
    return absl::OkStatus();
  }
  if (read.consumer_index < 0 || read.consumer_index >= read.num_consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadOptions::consumer_index ", read.consumer_index,
                     " is outside [0, num_consumers = ", read.num_consumers, ")"));
  }
  if (read.job_name.empty()) {
    return absl::InvalidArgumentError(
        "coordinated reads (ReadOptions::num_consumers) need a job_name that every consumer names");
  }
  if (read.mode == ProcessingMode::kDynamic) {
    return absl::InvalidArgumentError(
        "coordinated reads (ReadOptions::num_consumers) cannot use processing mode dynamic: its "
        "reads are bound "
        "to the coordinator's splits");
  }
  return absl::OkStatus();
}

// A dataset read through the service. The client (an I/O thread and connections) starts with
// the first iterator and is shared by every iterator of this node.
class ServiceNode : public data::internal::DatasetNode {
 public:
  ServiceNode(ServiceOptions service, ReadOptions read, int64_t dataset_id, std::string name,
              std::map<std::string, std::string> args)
      : service_(std::move(service)),
        read_(std::move(read)),
        shared_(std::make_shared<Shared>(std::move(name), std::move(args), dataset_id)) {}

  absl::StatusOr<std::unique_ptr<data::Iterator>> MakeIterator(
      const data::internal::IteratorContext& ctx) const override {
    if (read_.max_outstanding_requests < 1) {
      return absl::InvalidArgumentError("ReadOptions::max_outstanding_requests must be at least 1");
    }
    RETURN_IF_ERROR(CheckCoordination(read_));
    std::shared_ptr<ServiceClient> client = Client();
    if (ctx.split.has_value() && ctx.single_pass) {
      if (read_.mode != ProcessingMode::kDynamic) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a dynamically sharded per-worker dataset reads the tf.data service in processing mode dynamic, not ",
            ProcessingModeName(read_.mode)));
      }
      if (ctx.split->stride != 1) return absl::InvalidArgumentError("split-bound reads take contiguous splits");
      ASSIGN_OR_RETURN(int64_t id, DatasetId(client));
      return std::make_unique<SplitIterator>(client, id, read_, *ctx.split, ctx.epoch_key, ctx.beyond_source);
    }
    if (ctx.split.has_value()) {
      return absl::InvalidArgumentError(
          "a dataset read from the tf.data service is sharded by the service (ProcessingMode::kData), not by "
          "ShardingPolicy::kData");
    }
    if (read_.mode == ProcessingMode::kDynamic) {
      return absl::InvalidArgumentError(
          "processing mode dynamic is read through a ShardingPolicy::kDynamic per-worker dataset (the "
          "coordinator's split cursor binds each closure to its split)");
    }
    // Iterators may outlive the node: they share its state, not the node.
    if (read_.num_consumers > 0) {
      return std::make_unique<CoordinatedIterator>(
          client, [shared = shared_, client]() { return shared->DatasetId(*client); }, read_);
    }
    return std::make_unique<JobIterator>(
        client, [shared = shared_, client]() { return shared->DatasetId(*client); }, read_);
  }

 private:
  // What the node's iterators share.
  struct Shared {
    Shared(std::string name, std::map<std::string, std::string> args, int64_t id)
        : name(std::move(name)), args(std::move(args)), dataset_id(id) {}
    // Registers on first use when made by Distribute (no name: FromDatasetId's id as given).
    absl::StatusOr<int64_t> DatasetId(ServiceClient& client) {
      MutexLock lock(&mu);
      if (!name.empty() && dataset_id == 0) {
        ASSIGN_OR_RETURN(dataset_id, client.RegisterDataset(name, args));
      }
      return dataset_id;
    }
    const std::string name;
    const std::map<std::string, std::string> args;
    Mutex mu;
    int64_t dataset_id ABSL_GUARDED_BY(mu);
    std::shared_ptr<ServiceClient> client ABSL_GUARDED_BY(mu);
  };

  std::shared_ptr<ServiceClient> Client() const {
    MutexLock lock(&shared_->mu);
    if (shared_->client == nullptr) shared_->client = std::make_shared<ServiceClient>(service_);
    return shared_->client;
  }
  absl::StatusOr<int64_t> DatasetId(const std::shared_ptr<ServiceClient>& client) const {
    return shared_->DatasetId(*client);
  }

  const ServiceOptions service_;
  const ReadOptions read_;
  const std::shared_ptr<Shared> shared_;
};

}  // namespace

data::Dataset FromDatasetId(const ServiceOptions& service, int64_t dataset_id, const ReadOptions& options) {
  return data::Dataset(std::make_shared<ServiceNode>(service, options, dataset_id, "", std::map<std::string, std::string>{}));
}

data::Dataset Distribute(const ServiceOptions& service, const std::string& name, std::map<std::string, std::string> args,
                         const ReadOptions& options) {
  return data::Dataset(std::make_shared<ServiceNode>(service, options, /*dataset_id=*/0, name, std::move(args)));
}

}  // namespace asyncps::data_service
