#include "data_service/element_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"

namespace asyncps::data_service {

struct ElementServer::SplitStream {
  // One pipeline of the split, positioned at `next`.
  struct Cursor {
    std::unique_ptr<data::Iterator> iterator;
    std::shared_ptr<std::atomic<bool>> beyond_source;
    int64_t next = 0;  // position of the iterator's next element
    uint64_t last_used = 0;
  };
  // Consumers at different positions of one split (two trainers sharing it at an epoch's end,
  // a re-run elsewhere) each advance a pipeline of their own: with one, each would rebuild it
  // and replay the other's way back, in turns. At most kMaxCursors (the least recently used
  // goes).
  static constexpr size_t kMaxCursors = 3;
  Mutex mu;
  std::vector<Cursor> cursors ABSL_GUARDED_BY(mu);
  uint64_t uses ABSL_GUARDED_BY(mu) = 0;
  int64_t end_position ABSL_GUARDED_BY(mu) = -1;  // -1 until the split's end is seen
  bool beyond ABSL_GUARDED_BY(mu) = false;
  std::map<int64_t, data::Element> kept ABSL_GUARDED_BY(mu);
  uint64_t last_used = 0;  // guarded by ElementServer::mu_
};

namespace {

absl::Status CoordinatedEnded(int64_t job_id) {
  return absl::InvalidArgumentError(absl::StrCat(
      "job ", job_id,
      " ended under coordinated reads (num_consumers > 0), which need a dataset that never ends: "
      "add Repeat() at the end of the registered dataset"));
}

}  // namespace

ElementServer::ElementServer(Options options, DatasetBuilder builder, DatasetLookup lookup)
    : options_(options), builder_(std::move(builder)), lookup_(std::move(lookup)) {}

absl::StatusOr<data::Dataset> ElementServer::DatasetFor(int64_t id, ProcessingMode mode) {
  {
    MutexLock lock(&mu_);
    if (auto it = datasets_.find({id, mode}); it != datasets_.end()) return it->second;
  }
  const bool dynamic = mode == ProcessingMode::kDynamic;
  const bool same_everywhere = mode != ProcessingMode::kOff && mode != ProcessingMode::kFile;
  // Outside the lock: the lookup is an RPC and the build opens files.
  ASSIGN_OR_RETURN(DatasetDef def, lookup_(id));
  if (mode == ProcessingMode::kFile) {
    auto files = def.args.find("files");
    if (files == def.args.end() || files->second.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("processing mode file divides the dataset's \"files\" argument "
                                                     "(paths joined by commas); dataset ", id, " ('", def.name,
                                                     "') has none"));
    }
    const std::vector<std::string> all = absl::StrSplit(files->second, ',');
    const int count = std::max(1, options_.count);
    if (static_cast<int>(all.size()) < count) {
      return absl::InvalidArgumentError(absl::StrCat("processing mode file: dataset ", id, " ('", def.name, "') has ",
                                                     all.size(), " files for ", count,
                                                     " data workers (fewer files than data workers)"));
    }
    std::vector<std::string> mine;
    for (size_t i = static_cast<size_t>(options_.index); i < all.size(); i += static_cast<size_t>(count)) {
      mine.push_back(all[i]);
    }
    files->second = absl::StrJoin(mine, ",");
  }
  const int index = same_everywhere ? 0 : options_.index;
  const int count = same_everywhere ? 1 : std::max(1, options_.count);
  absl::StatusOr<data::Dataset> built = builder_(def.name, def.args, index, count, dynamic);
  if (!built.ok()) {
    return absl::Status(built.status().code(), absl::StrCat("data worker ", options_.index, ": dataset ", id, " ('",
                                                            def.name, "'): ", built.status().message()));
  }
  MutexLock lock(&mu_);
  return datasets_.emplace(std::make_pair(id, mode), *std::move(built)).first->second;
}

absl::Status ElementServer::CheckSize(const Request& request, const data::Element& element) const {
  uint64_t limit = options_.max_element_bytes;
  if (request.max_element_bytes != 0) limit = std::min(limit, request.max_element_bytes);
  uint64_t bytes = 0;
  for (const Tensor& t : element) bytes += t.num_bytes();
  if (bytes > limit) {
    return absl::InvalidArgumentError(absl::StrCat("element ", request.position, " of dataset ", request.dataset_id,
                                                   " is ", bytes, " bytes, over the limit of ", limit,
                                                   " bytes (ReadOptions::max_element_bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ElementServer::Result> ElementServer::Get(const Request& request) {
  RETURN_IF_ERROR(CheckGeneration(request));
  if (request.bound) {
    if (request.mode != ProcessingMode::kDynamic) {
      return absl::InvalidArgumentError("split-bound reads need processing mode dynamic");
    }
    if (request.begin < 0 || request.end < request.begin || request.position < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad split [", request.begin, ", ", request.end, ") position ",
                                                     request.position));
    }
    return GetBound(request);
  }
  if (request.mode == ProcessingMode::kDynamic) {
    return absl::InvalidArgumentError(
        "processing mode dynamic is read through a ShardingPolicy::kDynamic per-worker dataset (the coordinator's "
        "split cursor binds each closure to its split); this iterator was not bound to a split");
  }
  return GetFromJob(request);
}

absl::StatusOr<ElementServer::Result> ElementServer::GetBound(const Request& request) {
  ASSIGN_OR_RETURN(data::Dataset dataset, DatasetFor(request.dataset_id, ProcessingMode::kDynamic));
  std::shared_ptr<SplitStream> stream;
  {
    MutexLock lock(&mu_);
    const SplitKey key{request.dataset_id, request.begin, request.end, request.seed};
    auto [it, inserted] = streams_.try_emplace(key);
    if (inserted) it->second = std::make_shared<SplitStream>();
    stream = it->second;
    stream->last_used = ++uses_;
    while (streams_.size() > options_.max_streams) {
      auto oldest = std::min_element(streams_.begin(), streams_.end(), [](const auto& a, const auto& b) {
        return a.second->last_used < b.second->last_used;
      });
      streams_.erase(oldest);
    }
  }
  MutexLock lock(&stream->mu);
  // What the consumer acknowledged is not asked for again (a re-run elsewhere rebuilds it).
  stream->kept.erase(stream->kept.begin(), stream->kept.lower_bound(request.acked));
  Result result;
  result.position = request.position;
  if (auto it = stream->kept.find(request.position); it != stream->kept.end()) {
    result.element = it->second;
    RETURN_IF_ERROR(CheckSize(request, result.element));
    return result;
  }
  if (stream->end_position >= 0 && request.position >= stream->end_position) {
    result.end_of_sequence = true;
    result.beyond_source = stream->beyond;
    return result;
  }
  // The pipeline furthest along that is not past the position; none: build one (a re-read of
  // an element dropped, or a consumer behind every pipeline).
  SplitStream::Cursor* cursor = nullptr;
  for (SplitStream::Cursor& c : stream->cursors) {
    if (c.next <= request.position && (cursor == nullptr || c.next > cursor->next)) cursor = &c;
  }
  if (cursor == nullptr) {
    if (stream->cursors.size() >= SplitStream::kMaxCursors) {
      stream->cursors.erase(std::min_element(
          stream->cursors.begin(), stream->cursors.end(),
          [](const SplitStream::Cursor& a, const SplitStream::Cursor& b) { return a.last_used < b.last_used; }));
    }
    SplitStream::Cursor c;
    c.beyond_source = std::make_shared<std::atomic<bool>>(false);
    ASSIGN_OR_RETURN(c.iterator,
                     dataset.MakeSinglePassSplitIterator({request.begin, request.end, 1}, request.seed, c.beyond_source));
    built_.fetch_add(1);
    stream->cursors.push_back(std::move(c));
    cursor = &stream->cursors.back();
  }
  cursor->last_used = ++stream->uses;
  while (cursor->next <= request.position) {
    absl::StatusOr<data::Element> element = cursor->iterator->Next();
    if (!element.ok()) {
      const int64_t end = cursor->next;
      const bool beyond = cursor->beyond_source->load();
      stream->cursors.erase(stream->cursors.begin() + (cursor - stream->cursors.data()));
      if (!data::IsEndOfData(element.status())) return element.status();
      stream->end_position = end;
      stream->beyond = beyond;
      result.end_of_sequence = true;
      result.beyond_source = stream->beyond;
      return result;
    }
    const int64_t position = cursor->next++;
    if (position == request.position) {
      result.element = *std::move(element);
    } else if (position >= request.acked) {
      // Skipped over for a consumer that asked further ahead: its earlier requests come next.
      stream->kept[position] = *std::move(element);
    }
  }
  stream->kept[request.position] = result.element;
  while (stream->kept.size() > options_.max_kept_per_stream) stream->kept.erase(stream->kept.begin());
  RETURN_IF_ERROR(CheckSize(request, result.element));
  return result;
}

absl::StatusOr<ElementServer::Result> ElementServer::GetFromJob(const Request& request) {
  ASSIGN_OR_RETURN(data::Dataset dataset, DatasetFor(request.dataset_id, request.mode));
  std::shared_ptr<JobStream> job;
  {
    MutexLock lock(&mu_);
    if (IsEnded(request.job_id)) {
      if (request.num_consumers > 0) return CoordinatedEnded(request.job_id);
      Result ended;
      ended.end_of_sequence = true;
      return ended;
    }
    auto& [slot, last_used] = jobs_[request.job_id];
    if (slot == nullptr) slot = std::make_shared<JobStream>();
    last_used = ++uses_;
    job = slot;
    // A job past the bound that no consumer read for longest goes (its pass with it).
    while (jobs_.size() > std::max<size_t>(1, options_.max_jobs)) {
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.second < b.second.second;
      });
      jobs_.erase(oldest);
    }
  }
  // A reference, not the shared_ptr, names the lock for the thread-safety analysis.
  JobStream& stream = *job;
  MutexLock lock(&stream.mu);
  if (request.num_consumers < 0 ||
      (request.num_consumers > 0 &&
       (request.consumer_index < 0 || request.consumer_index >= request.num_consumers))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad coordinated read: consumer ", request.consumer_index, " of ", request.num_consumers));
  }
  Result result;
  if (stream.ended) {
    if (request.num_consumers > 0) return CoordinatedEnded(request.job_id);
    result.end_of_sequence = true;
    return result;
  }
  if (!stream.started) {
    stream.num_consumers = request.num_consumers;
  } else if (request.num_consumers != stream.num_consumers) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", request.job_id, " is read with num_consumers ", stream.num_consumers,
                     ", not ", request.num_consumers));
  }
  if (request.num_consumers > 0) return GetCoordinated(request, dataset, stream);
  if (stream.iterator == nullptr) RETURN_IF_ERROR(StartJob(request, dataset, stream));
  absl::StatusOr<data::Element> element = stream.iterator->Next();
  if (!element.ok()) {
    if (!data::IsEndOfData(element.status())) return element.status();
    stream.ended = true;
    stream.iterator.reset();
    JobEnded(request.job_id);
    result.end_of_sequence = true;
    return result;
  }
  result.position = stream.produced++;
  result.element = *std::move(element);
  Request sized = request;
  sized.position = result.position;
  RETURN_IF_ERROR(CheckSize(sized, result.element));
  return result;
}

absl::Status ElementServer::StartJob(const Request& request, const data::Dataset& dataset,
                                     JobStream& job) {
  if (request.mode == ProcessingMode::kData) {
    ASSIGN_OR_RETURN(job.iterator,
                     dataset.MakeSplitIterator({options_.index, std::numeric_limits<int64_t>::max(),
                                                std::max(1, options_.count)}));
  } else {
    ASSIGN_OR_RETURN(job.iterator, dataset.MakeIterator());
  }
  job.started = true;
  built_.fetch_add(1);
  return absl::OkStatus();
}

absl::StatusOr<ElementServer::Result> ElementServer::GetCoordinated(const Request& request,
                                                                    const data::Dataset& dataset,
                                                                    JobStream& job) {
  const int64_t kept = static_cast<int64_t>(std::max<size_t>(1, options_.max_kept_per_stream));
  if (request.round < 0)
    return absl::InvalidArgumentError(absl::StrCat("bad round ", request.round));
  if (request.round < job.rounds_made && !job.rounds.contains(request.round)) {
    return absl::FailedPreconditionError(
        absl::StrCat("round ", request.round, " of job ", request.job_id,
                     " was taken by all its consumers and dropped"));
  }
  const int64_t oldest = job.rounds.empty() ? job.rounds_made : job.rounds.begin()->first;
  if (request.round >= oldest + kept) {
    // Holding more rounds for a consumer that lags would make memory grow without bound.
    return absl::UnavailableError(
        absl::StrCat("consumer ", request.consumer_index, " asks for round ", request.round,
                     " of job ", request.job_id, ", more than ", kept, " rounds ahead of round ",
                     oldest, " not yet taken by all consumers"));
  }
  if (job.iterator == nullptr) RETURN_IF_ERROR(StartJob(request, dataset, job));
  while (job.rounds_made <= request.round) {
    JobStream::Round round;
    for (int32_t i = 0; i < job.num_consumers; ++i) {
      absl::StatusOr<data::Element> element = job.iterator->Next();
      if (!element.ok()) {
        if (!data::IsEndOfData(element.status())) return element.status();
        job.ended = true;
        job.iterator.reset();
        job.rounds.clear();
        JobEnded(request.job_id);
        return CoordinatedEnded(request.job_id);
      }
      round.elements.push_back(*std::move(element));
    }
    round.taken.assign(static_cast<size_t>(job.num_consumers), false);
    job.rounds.emplace(job.rounds_made++, std::move(round));
  }
  JobStream::Round& round = job.rounds.at(request.round);
  const auto index = static_cast<size_t>(request.consumer_index);
  Result result;
  result.position = request.round * job.num_consumers + request.consumer_index;
  result.element = round.elements[index];
  Request sized = request;
  sized.position = result.position;
  RETURN_IF_ERROR(CheckSize(sized, result.element));
  if (!round.taken[index]) {
    round.taken[index] = true;
    if (++round.taken_count == job.num_consumers) job.rounds.erase(request.round);
  }
  return result;
}

absl::Status ElementServer::CheckGeneration(const Request& request) {
  if (request.generation == 0) return absl::OkStatus();
  // A consumer may learn of a new dispatcher before this data worker's next heartbeat does.
  if (request.generation > generation()) AdoptGeneration(request.generation);
  MutexLock lock(&mu_);
  if (request.generation < generation_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dataset ", request.dataset_id, ", job ", request.job_id, " are of dispatcher generation ",
        request.generation, "; the dispatcher restarted without its journal since (generation ", generation_,
        ") and forgot them: register the dataset and start the job again"));
  }
  return absl::OkStatus();
}

bool ElementServer::AdoptGeneration(uint64_t generation) {
  // Moved out and destroyed after the lock is released: pipelines may hold files and threads.
  std::map<std::pair<int64_t, ProcessingMode>, data::Dataset> datasets;
  std::map<SplitKey, std::shared_ptr<SplitStream>> streams;
  absl::flat_hash_map<int64_t, std::pair<std::shared_ptr<JobStream>, uint64_t>> jobs;
  {
    MutexLock lock(&mu_);
    if (generation <= generation_) return false;
    generation_ = generation;
    datasets.swap(datasets_);
    streams.swap(streams_);
    jobs.swap(jobs_);
    ended_.clear();
  }
  return true;
}

uint64_t ElementServer::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

void ElementServer::JobEnded(int64_t job_id) {
  MutexLock lock(&mu_);
  jobs_.erase(job_id);
  if (IsEnded(job_id)) return;
  // Joins the range ending at job_id and the one starting at job_id + 1, when there are such.
  auto next = ended_.upper_bound(job_id);
  int64_t begin = job_id;
  int64_t end = job_id + 1;
  if (next != ended_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == job_id) {
      begin = prev->first;
      ended_.erase(prev);
    }
  }
  if (next != ended_.end() && next->first == job_id + 1) {
    end = next->second;
    ended_.erase(next);
  }
  ended_[begin] = end;
  // Ids grow: the lowest ranges are the oldest jobs.
  while (ended_.size() > std::max<size_t>(1, options_.max_ended_ranges)) ended_.erase(ended_.begin());
}

bool ElementServer::IsEnded(int64_t job_id) const {
  auto it = ended_.upper_bound(job_id);
  if (it == ended_.begin()) return false;
  return job_id < std::prev(it)->second;
}

size_t ElementServer::job_records() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

size_t ElementServer::ended_job_ranges() const {
  MutexLock lock(&mu_);
  return ended_.size();
}

size_t ElementServer::kept_elements() const {
  std::vector<std::shared_ptr<SplitStream>> streams;
  {
    MutexLock lock(&mu_);
    for (const auto& [key, s] : streams_) streams.push_back(s);
  }
  size_t n = 0;
  for (const auto& s : streams) {
    MutexLock lock(&s->mu);
    n += s->kept.size();
  }
  return n;
}

size_t ElementServer::open_streams() const {
  MutexLock lock(&mu_);
  return streams_.size();
}

int64_t ElementServer::pipelines_built() const { return built_.load(); }

}  // namespace asyncps::data_service
