#ifndef ASYNCPS_DATA_SERVICE_ELEMENT_SERVER_H_
#define ASYNCPS_DATA_SERVICE_ELEMENT_SERVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "data/dataset.h"
#include "data_service/dispatcher_state.h"
#include "data_service/service_dataset.h"

namespace asyncps::data_service {

// Builds program dataset `name` with `args` as task `index` of `count` (kOff and kFile: the
// data worker's own index among the data workers, under kFile with its share of the "files"
// argument; kDynamic and kData: 0 of 1, the same pipeline everywhere;
// `dynamic`: checked as a single-pass split pipeline, no Repeat). The error of a program that
// lacks the dataset names it.
using DatasetBuilder = std::function<absl::StatusOr<data::Dataset>(
    const std::string& name, const std::map<std::string, std::string>& args, int index, int count, bool dynamic)>;
// The dataset registered under an id (asks the dispatcher).
using DatasetLookup = std::function<absl::StatusOr<DatasetDef>(int64_t id)>;

// What a data worker produces, independent of the network.
//
// Split-bound reads (kDynamic): element `position` of the pipeline over records [begin, end) of
// the sources, shuffles seeded by `seed` (Dataset::MakeSinglePassSplitIterator) — the same on
// every data worker, so a consumer whose data worker died asks another for the same position.
// Each split's pipeline is kept positioned where the last read left it (up to 3 pipelines per
// split, for consumers at different positions of it: none rebuilds and replays another's
// pipeline for an earlier position), and the last elements
// it produced are kept until the consumer acknowledges them (requests ahead of the next one,
// from a consumer fetching ahead, fill them in), so reading a split in order costs one element
// per element. Memory is bounded whatever consumers do: at most `max_streams` split pipelines
// (least recently used dropped) with at most `max_kept_per_stream` elements each; a dropped
// pipeline or element is produced again when asked for.
//
// Job reads (kOff, kFile, kData): the job's next element from this data worker's one pass over
// the dataset (its own files under kFile, its own shard under kData); every consumer of the job
// shares the pass.
//
// Coordinated job reads (Request::num_consumers n > 0, the guide's consumer_index /
// num_consumers): the pass is cut into rounds of n consecutive elements, and consumer i gets
// element i of each round, so the n consumers of one round get n distinct, consecutive
// elements. A round is kept until each consumer has taken its element (asking again for one
// not yet dropped gives the same element); a consumer may run at most `max_kept_per_stream`
// rounds ahead of the slowest, past that the read is Unavailable (the consumer waits and asks
// again). A job is read either coordinated with one n or not at all coordinated: anything else
// is InvalidArgument, as is a dataset that ends (coordinated reads need a Repeat'd dataset).
//
// Job records are bounded too: at most `max_jobs` jobs keep a pass (least recently read
// dropped first: a job no consumer reads any more, as a consumer that gave up leaves it); a job
// whose pass ended keeps no pass, only its id, in at most `max_ended_ranges` ranges of
// consecutive ended ids (the lowest, oldest, dropped first). A dropped job read again starts
// from the beginning, as after a restart of the data worker.
//
// Dispatcher generations: the ids of datasets and jobs mean something only for the dispatcher
// that gave them out. A dispatcher that restarts without its journal starts a new generation
// (Request::generation, 0 when unknown) and gives the same ids out again for other jobs;
// AdoptGeneration with a newer one drops every dataset, split pipeline and job this server
// holds, and a read of an older generation than the server's is FailedPrecondition.
//
// Thread-safe: reads of different splits and jobs run in parallel.
class ElementServer {
 public:
  struct Options {
    int index = 0;  // this data worker's task index
    int count = 1;  // data workers in the cluster spec (static sharding)
    size_t max_streams = 64;
    size_t max_kept_per_stream = 8;
    uint64_t max_element_bytes = uint64_t{1} << 30;  // the server's own cap
    size_t max_jobs = 256;
    size_t max_ended_ranges = 4096;
  };
  struct Request {
    int64_t dataset_id = 0;
    int64_t job_id = 0;
    ProcessingMode mode = ProcessingMode::kOff;
    bool bound = false;
    int64_t begin = 0;
    int64_t end = 0;
    uint64_t seed = 0;
    int64_t position = 0;
    int64_t acked = 0;
    uint64_t max_element_bytes = 0;  // 0: the server's cap only
    Compression compression = Compression::kNone;  // of the answer on the wire
    // Coordinated reads: consumers of the job (0: first come first served), this consumer's
    // index among them and the round it asks for.
    int32_t num_consumers = 0;
    int32_t consumer_index = 0;
    int64_t round = 0;
    // The dispatcher generation the dataset and job ids come from (0: unknown, not checked).
    uint64_t generation = 0;
  };
  struct Result {
    bool end_of_sequence = false;
    bool beyond_source = false;
    int64_t position = 0;
    data::Element element;
  };

  ElementServer(Options options, DatasetBuilder builder, DatasetLookup lookup);

  // The element asked for. Errors: NotFound (unknown dataset id), the builder's error (a
  // program without the dataset), InvalidArgument (an element over the size limit, a request
  // that contradicts itself), the pipeline's own error.
  absl::StatusOr<Result> Get(const Request& request);

  // Moves to dispatcher generation `generation` when it is newer than the server's: drops
  // every dataset, split pipeline and job record (reads in progress finish on what they hold).
  // Returns true when it did.
  bool AdoptGeneration(uint64_t generation);
  uint64_t generation() const;

  // Elements kept for unacknowledged reads, over every split (for tests of the bound).
  size_t kept_elements() const;
  size_t open_streams() const;
  int64_t pipelines_built() const;
  // Jobs that keep a pass (read and not ended), and the ranges of ended job ids remembered.
  size_t job_records() const;
  size_t ended_job_ranges() const;

 private:
  struct SplitStream;
  // A job's pass on this data worker, shared by its consumers.
  struct JobStream {
    // One round of a coordinated job: element i is consumer i's.
    struct Round {
      std::vector<data::Element> elements;
      std::vector<bool> taken;
      int taken_count = 0;
    };
    Mutex mu;
    std::unique_ptr<data::Iterator> iterator ABSL_GUARDED_BY(mu);
    int64_t produced ABSL_GUARDED_BY(mu) = 0;
    bool ended ABSL_GUARDED_BY(mu) = false;
    bool started ABSL_GUARDED_BY(mu) = false;
    // Fixed by the job's first read: 0 for first-come first-served reads.
    int32_t num_consumers ABSL_GUARDED_BY(mu) = 0;
    int64_t rounds_made ABSL_GUARDED_BY(mu) = 0;
    std::map<int64_t, Round> rounds ABSL_GUARDED_BY(mu);  // made and not yet taken by everyone
  };
  using SplitKey = std::tuple<int64_t, int64_t, int64_t, uint64_t>;

  absl::StatusOr<data::Dataset> DatasetFor(int64_t id, ProcessingMode mode);
  absl::StatusOr<Result> GetBound(const Request& request);
  absl::StatusOr<Result> GetFromJob(const Request& request);
  absl::StatusOr<Result> GetCoordinated(const Request& request, const data::Dataset& dataset,
                                        JobStream& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
  absl::Status StartJob(const Request& request, const data::Dataset& dataset, JobStream& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job.mu);
  absl::Status CheckSize(const Request& request, const data::Element& element) const;
  absl::Status CheckGeneration(const Request& request);
  // Forgets `job_id`'s pass and remembers that it ended.
  void JobEnded(int64_t job_id);
  bool IsEnded(int64_t job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const DatasetBuilder builder_;
  const DatasetLookup lookup_;

  mutable Mutex mu_;
  std::map<std::pair<int64_t, ProcessingMode>, data::Dataset> datasets_ ABSL_GUARDED_BY(mu_);
  std::map<SplitKey, std::shared_ptr<SplitStream>> streams_ ABSL_GUARDED_BY(mu_);
  // Jobs read and not ended, with the use count of their last read (for LRU).
  absl::flat_hash_map<int64_t, std::pair<std::shared_ptr<JobStream>, uint64_t>> jobs_ ABSL_GUARDED_BY(mu_);
  // Ended job ids: [first, second) ranges by first.
  std::map<int64_t, int64_t> ended_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> built_{0};
};

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_ELEMENT_SERVER_H_
