#include "data_service/dispatcher_state.h"

#include <sys/stat.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/durable_file.h"
#include "core/status_macros.h"

namespace asyncps::data_service {
namespace {

// First line of the journal: magic, version, CRC-32 and byte length of the JSON that follows.
constexpr char kMagic[] = "asyncps-dispatcher-journal";
constexpr int kVersion = 1;
constexpr uint64_t kMaxJournalBytes = uint64_t{256} << 20;

}  // namespace

namespace {

// A new generation: the time in µs, so a dispatcher started later has a larger one (what data
// workers compare), and larger than any made before in this process; never 0 (which means
// "unknown" on the wire).
uint64_t NewGeneration() {
  static std::atomic<uint64_t> last{0};
  const auto now = static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixMicros(absl::Now())));
  uint64_t prev = last.load();
  uint64_t next;
  do {
    next = std::max(now, prev + 1);
  } while (!last.compare_exchange_weak(prev, next));
  return next;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DispatcherState>> DispatcherState::Open(const std::string& work_dir) {
  if (work_dir.empty()) {
    std::unique_ptr<DispatcherState> state(new DispatcherState(""));
    state->generation_ = NewGeneration();
    return state;
  }
  if (::mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("dispatcher work_dir '", work_dir, "': mkdir: ", std::strerror(errno)));
  }
  std::unique_ptr<DispatcherState> state(new DispatcherState(absl::StrCat(work_dir, "/dispatcher_journal")));
  absl::StatusOr<std::string> text = ReadFileToString(state->path_, kMaxJournalBytes);
  if (absl::IsNotFound(text.status())) {
    state->generation_ = NewGeneration();
    return state;
  }
  if (!text.ok()) return text.status();
  MutexLock lock(&state->mu_);
  if (absl::Status s = state->Parse(*text); !s.ok()) {
    return absl::DataLossError(absl::StrCat("dispatcher journal '", state->path_, "' is corrupt (", s.message(),
                                            "); refusing to start without the state it held: restore the file "
                                            "or remove it to start with no datasets"));
  }
  return state;
}

absl::StatusOr<int64_t> DispatcherState::RegisterDataset(const std::string& name,
                                                         const std::map<std::string, std::string>& args) {
  if (name.empty()) return absl::InvalidArgumentError("RegisterDataset: empty dataset name");
  MutexLock lock(&mu_);
  for (const DatasetDef& d : datasets_) {
    if (d.name == name && d.args == args) return d.id;
  }
  datasets_.push_back({static_cast<int64_t>(datasets_.size()) + 1, name, args});
  if (absl::Status s = Persist(); !s.ok()) {
    datasets_.pop_back();
    return s;
  }
  return datasets_.back().id;
}

absl::StatusOr<DatasetDef> DispatcherState::GetDataset(int64_t id) const {
  MutexLock lock(&mu_);
  if (id < 1 || id > static_cast<int64_t>(datasets_.size())) {
    return absl::NotFoundError(absl::StrCat("unknown dataset id ", id, " (", datasets_.size(),
                                            " datasets are registered with the dispatcher)"));
  }
  return datasets_[id - 1];
}

absl::StatusOr<int64_t> DispatcherState::GetOrCreateJob(int64_t dataset_id, const std::string& name,
                                                        ProcessingMode mode) {
  RETURN_IF_ERROR(GetDataset(dataset_id).status());
  MutexLock lock(&mu_);
  if (!name.empty()) {
    for (const JobDef& j : jobs_) {
      if (j.name != name) continue;
      if (j.dataset_id != dataset_id || j.mode != mode) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job '", name, "' exists for dataset ", j.dataset_id, " in processing mode ", ProcessingModeName(j.mode),
            "; it cannot be reused for dataset ", dataset_id, " in mode ", ProcessingModeName(mode)));
      }
      return j.id;
    }
  }
  jobs_.push_back({static_cast<int64_t>(jobs_.size()) + 1, name, dataset_id, mode});
  if (absl::Status s = Persist(); !s.ok()) {
    jobs_.pop_back();
    return s;
  }
  return jobs_.back().id;
}

size_t DispatcherState::num_datasets() const {
  MutexLock lock(&mu_);
  return datasets_.size();
}

size_t DispatcherState::num_jobs() const {
  MutexLock lock(&mu_);
  return jobs_.size();
}

std::vector<JobDef> DispatcherState::RecentJobs(size_t max) const {
  MutexLock lock(&mu_);
  const size_t first = jobs_.size() > max ? jobs_.size() - max : 0;
  return std::vector<JobDef>(jobs_.begin() + static_cast<std::ptrdiff_t>(first), jobs_.end());
}

std::string DispatcherState::Serialize() const {
  nlohmann::json datasets = nlohmann::json::array();
  for (const DatasetDef& d : datasets_) datasets.push_back({{"id", d.id}, {"name", d.name}, {"args", d.args}});
  nlohmann::json jobs = nlohmann::json::array();
  for (const JobDef& j : jobs_) {
    jobs.push_back({{"id", j.id}, {"name", j.name}, {"dataset", j.dataset_id}, {"mode", static_cast<int>(j.mode)}});
  }
  const std::string body =
      nlohmann::json{{"generation", generation_}, {"datasets", datasets}, {"jobs", jobs}}.dump();
  return absl::StrFormat("%s %d %08x %d\n%s", kMagic, kVersion, Crc32(0, body.data(), body.size()), body.size(),
                         body);
}

absl::Status DispatcherState::Parse(const std::string& text) {
  const size_t eol = text.find('\n');
  if (eol == std::string::npos) return absl::InvalidArgumentError("no header line");
  char magic[64] = {0};
  int version = 0;
  unsigned crc = 0;
  unsigned long long size = 0;
  const std::string header = text.substr(0, eol);
  if (std::sscanf(header.c_str(), "%63s %d %8x %llu", magic, &version, &crc, &size) != 4 ||
      std::string(magic) != kMagic) {
    return absl::InvalidArgumentError("bad header line");
  }
  if (version != kVersion) return absl::InvalidArgumentError(absl::StrCat("unknown version ", version));
  const std::string body = text.substr(eol + 1);
  if (body.size() != size) {
    return absl::InvalidArgumentError(absl::StrCat("body is ", body.size(), " bytes, header says ", size));
  }
  if (Crc32(0, body.data(), body.size()) != crc) return absl::InvalidArgumentError("CRC mismatch");
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return absl::InvalidArgumentError("body is not a JSON object");
  // Written by Serialize and CRC-checked: a shape error here is a bug or tampering, caught all
  // the same rather than thrown.
  try {
    // Journals from before generations have none: one fixed generation stands for them.
    generation_ = doc.contains("generation") ? doc.at("generation").get<uint64_t>() : 1;
    if (generation_ == 0) return absl::InvalidArgumentError("generation 0");
    for (const auto& d : doc.at("datasets")) {
      datasets_.push_back({d.at("id").get<int64_t>(), d.at("name").get<std::string>(),
                           d.at("args").get<std::map<std::string, std::string>>()});
      if (datasets_.back().id != static_cast<int64_t>(datasets_.size())) {
        return absl::InvalidArgumentError("dataset ids out of order");
      }
    }
    for (const auto& j : doc.at("jobs")) {
      const int mode = j.at("mode").get<int>();
      ASSIGN_OR_RETURN(ProcessingMode m, ProcessingModeFromName(ProcessingModeName(static_cast<ProcessingMode>(mode))));
      jobs_.push_back({j.at("id").get<int64_t>(), j.at("name").get<std::string>(), j.at("dataset").get<int64_t>(), m});
      if (jobs_.back().id != static_cast<int64_t>(jobs_.size())) return absl::InvalidArgumentError("job ids out of order");
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed body: ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status DispatcherState::Persist() const {
  if (path_.empty()) return absl::OkStatus();
  const std::string text = Serialize();
  ASSIGN_OR_RETURN(std::unique_ptr<DurableFileWriter> writer, DurableFileWriter::Create(path_));
  RETURN_IF_ERROR(writer->Append(text.data(), text.size()));
  return writer->Commit();
}

}  // namespace asyncps::data_service
