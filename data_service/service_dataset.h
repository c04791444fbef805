#ifndef ASYNCPS_DATA_SERVICE_SERVICE_DATASET_H_
#define ASYNCPS_DATA_SERVICE_SERVICE_DATASET_H_

// The trainer's side of the tf.data service: register a program dataset with the dispatcher,
// then read it as an ordinary data::Dataset whose elements the data workers produce.
//
//   // chief
//   ASSIGN_OR_RETURN(int64_t id, data_service::RegisterDataset(service, "train", {{"n", "20000"}}));
//   coordinator.CreatePerWorkerDataset("from_service", {{"id", absl::StrCat(id)}}, ShardingPolicy::kDynamic);
//   // Program, every process
//   program.AddDataset("from_service", [&](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
//     ASSIGN_OR_RETURN(int64_t id, ctx.IntArg("id"));
//     return data_service::FromDatasetId(service, id, {.mode = data_service::ProcessingMode::kDynamic});
//   });
//
// Processing modes (the guide's ShardingPolicy):
//   kOff      every data worker produces the whole dataset for the job; consumers of one job
//             share what they produce, first come first served.
//   kDynamic  the coordinator's split cursor hands out the data: read the dataset through a
//             ShardingPolicy::kDynamic per-worker dataset. Each closure's batch is produced by
//             a data worker as element `batch` of its split's pipeline (the same on every data
//             worker), so a re-run after a trainer or data worker died reads the same records
//             and every example is applied exactly once (beyond the guide's at-most-once).
//   kData     static sharding by elements: data worker i of n (the cluster's data_worker list)
//             produces source records i, i + n, ... of the dataset.
//   kFile     static sharding by files: the registered dataset's argument "files" (paths joined
//             by commas) is divided, data worker i of n (the cluster's data_worker list)
//             building the dataset with files i, i + n, ... only, so each file is read by
//             exactly one data worker. Fewer files than data workers is the guide's error:
//             InvalidArgument from the read, naming both counts; so is a dataset without
//             "files".
// A restarted data worker starts kOff / kFile / kData jobs again from the beginning (the
// guide's rule).
//
// Coordinated reads (ReadOptions::num_consumers n > 0, the guide's "Coordinated Data Read"):
// the n consumers of a job read in lockstep rounds, all from the same data worker in a round
// (round r from data worker r mod w of the w the dispatcher lists, ordered by address), and
// consumer i gets element i of the round's n consecutive elements, so a dataset that yields
// rounds of n similar-sized batches gives every replica a similar batch at each step. As the
// guide says, this needs a named job (every consumer names it) and a dataset of infinite
// cardinality (add Repeat() at its end): a job that ends fails the read with InvalidArgument.
// A consumer runs at most ElementServer::Options::max_kept_per_stream rounds ahead of the
// slowest one (it waits for it, up to ServiceOptions::timeout_ms). Reads of a kDynamic dataset
// are bound to the coordinator's splits and cannot be coordinated. The iterator refuses, with
// InvalidArgument, num_consumers < 0, consumer_index outside [0, num_consumers) (or set
// without num_consumers), an empty job_name and processing mode dynamic.

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/dataset.h"

namespace asyncps::data_service {

enum class ProcessingMode : uint8_t { kOff = 0, kDynamic = 1, kFile = 2, kData = 3 };

// How elements travel from data workers to consumers. kZlib deflates every tensor (zlib level
// 1) on the data worker and inflates it on the consumer: fewer bytes on the wire for more CPU
// on both ends (bench/data_service_bench measures both).
enum class Compression : uint8_t { kNone = 0, kZlib = 1 };

absl::string_view ProcessingModeName(ProcessingMode mode);  // "off", "dynamic", "file", "data"
// Also accepts the guide's legacy names "parallel_epochs" (kOff) and "distributed_epoch".
absl::StatusOr<ProcessingMode> ProcessingModeFromName(absl::string_view name);

// Where the service is and how to authenticate to it.
struct ServiceOptions {
  std::string dispatcher;  // "host:port"
  std::string token;       // the cluster token (ProcessOptions::cluster_token)
  std::string role = "worker";  // this process's role and index, for the handshake
  int task_index = 0;
  // How long a read waits for a data worker to answer (failing over between them) before it
  // fails with Unavailable.
  int64_t timeout_ms = 120'000;
};

struct ReadOptions {
  ProcessingMode mode = ProcessingMode::kOff;
  // Consumers naming the same job share its elements; "" is an anonymous job of its own.
  std::string job_name = {};
  // Fetch-ahead by default, as TensorFlow's client: while a trainer computes on one batch the
  // data worker produces the next ones (with 1, the trainer waits for every batch to be made).
  static constexpr int kDefaultOutstandingRequests = 4;
  // Requests one consumer (iterator) keeps in flight to data workers; at least 1 (else the
  // iterator fails with InvalidArgument). A split-bound (kDynamic) iterator reads positions
  // p .. p+n-1 of its split at once from the split's data worker; a job iterator (kOff, kData)
  // keeps n reads out over the data workers in turn. The consumer holds at most n elements per
  // iterator; a data worker keeps at most ElementServer::Options::max_kept_per_stream (8)
  // unacknowledged elements per split, so n above that makes it produce some twice.
  int max_outstanding_requests = kDefaultOutstandingRequests;
  // A larger element is refused by the data worker with InvalidArgument naming its size.
  uint64_t max_element_bytes = uint64_t{256} << 20;
  // Per consumer (and so per job for its reads): how elements come over the wire.
  Compression compression = Compression::kNone;
  // Coordinated reads (see above): 0 consumers reads first come first served; with n > 0 this
  // iterator is consumer `consumer_index` of n, and reads one element at a time.
  int num_consumers = 0;
  int consumer_index = 0;
};

// Registers program dataset `name` (Program::AddDataset) built with `args`; returns its id. The
// same name and arguments registered again give the same id. Blocks; thread-safe.
absl::StatusOr<int64_t> RegisterDataset(const ServiceOptions& service, const std::string& name,
                                        const std::map<std::string, std::string>& args);

// The dataset registered as `dataset_id`, read through the service. Nothing is contacted until
// an iterator's first Next(): an unknown id is then NotFound from it.
data::Dataset FromDatasetId(const ServiceOptions& service, int64_t dataset_id, const ReadOptions& options);

// Which data worker a split-bound (kDynamic) read of `split` asks first: an index taken
// modulo the number of data workers, in the order of their addresses. The same in every
// process, so whichever trainer reads a split reads it where its pipeline stands, and
// consecutive splits of an epoch spread evenly over the data workers.
uint64_t PreferredDataWorker(const data::SourceSplit& split);

// RegisterDataset and FromDatasetId in one (the guide's `distribute`): registers when the first
// iterator starts.
data::Dataset Distribute(const ServiceOptions& service, const std::string& name,
                         std::map<std::string, std::string> args, const ReadOptions& options);

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_SERVICE_DATASET_H_
