#ifndef ASYNCPS_DATA_SERVICE_DISPATCHER_STATE_H_
#define ASYNCPS_DATA_SERVICE_DISPATCHER_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync.h"
#include "data_service/service_dataset.h"

namespace asyncps::data_service {

struct DatasetDef {
  int64_t id = 0;
  std::string name;
  std::map<std::string, std::string> args;
};

struct JobDef {
  int64_t id = 0;
  std::string name;  // "" for an anonymous job
  int64_t dataset_id = 0;
  ProcessingMode mode = ProcessingMode::kOff;
};

// The dispatcher's durable state: registered datasets and jobs. With a work_dir, every change
// is written before it is acknowledged, to "<work_dir>/dispatcher_journal" (a CRC-checked
// snapshot replaced atomically, so a crash leaves the old or the new state, never half of one),
// and Open recovers it. A journal that fails its check is refused (DataLoss naming the file)
// rather than started from empty: ids handed out before would otherwise mean other datasets.
//
// Thread-safe.
class DispatcherState {
 public:
  // `work_dir` "" keeps the state in memory only. The directory is created when missing.
  static absl::StatusOr<std::unique_ptr<DispatcherState>> Open(const std::string& work_dir);

  // The id of dataset (name, args): the existing one when registered before, else a new one.
  absl::StatusOr<int64_t> RegisterDataset(const std::string& name, const std::map<std::string, std::string>& args);
  // NotFound for an id never registered.
  absl::StatusOr<DatasetDef> GetDataset(int64_t id) const;
  // The job named `name` over `dataset_id` (created on first use); an anonymous job ("") is
  // always new. NotFound for an unknown dataset; InvalidArgument when the name is taken by a job
  // with another dataset or processing mode.
  absl::StatusOr<int64_t> GetOrCreateJob(int64_t dataset_id, const std::string& name, ProcessingMode mode);

  size_t num_datasets() const;
  size_t num_jobs() const;
  // The `max` most recent jobs, oldest first.
  std::vector<JobDef> RecentJobs(size_t max) const;

  // This state's incarnation: the dispatcher's start time in µs when it started without a
  // journal to recover (in memory, or a work_dir with none yet), else the journal's. Data
  // workers and consumers compare it: ids of another generation name other datasets and jobs.
  uint64_t generation() const { return generation_; }

  // The journal's path ("" without a work_dir).
  const std::string& journal_path() const { return path_; }

 private:
  explicit DispatcherState(std::string path) : path_(std::move(path)) {}
  std::string Serialize() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Parse(const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Persist() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  uint64_t generation_ = 0;  // set by Open, then constant
  mutable Mutex mu_;
  std::vector<DatasetDef> datasets_ ABSL_GUARDED_BY(mu_);  // id i + 1 at [i]
  std::vector<JobDef> jobs_ ABSL_GUARDED_BY(mu_);          // id i + 1 at [i]
};

}  // namespace asyncps::data_service

#endif  // ASYNCPS_DATA_SERVICE_DISPATCHER_STATE_H_
