#ifndef ASYNCPS_METRICS_STATUS_BOARD_H_
#define ASYNCPS_METRICS_STATUS_BOARD_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/sync.h"
#include "metrics/process_metrics.h"

namespace prometheus {
class Gauge;
template <typename T>
class Family;
}  // namespace prometheus

namespace asyncps::metrics {

// What the chief shows a person at a glance: cluster members and their state, recent events,
// live values (queue depth, closures completed, ...) and user scalars (loss, accuracy) over
// steps. Served as JSON at /status.json and as a page at /status (Serve) on the process's
// metrics endpoint. User scalars are also exported to Prometheus as
//   asyncps_scalar{name}        the last value reported
//   asyncps_scalar_step{name}   the step it was reported at
// `name` is a metric label, so it must be a short identifier ([a-z0-9_], at most 32
// characters) from a small fixed set (at most kMaxScalars names).
//
// Thread-safe. `metrics` must outlive the board.
class StatusBoard {
 public:
  static constexpr int kMaxScalars = 16;
  static constexpr size_t kMaxPointsPerScalar = 1000;  // then every other point is dropped
  static constexpr size_t kMaxEvents = 100;            // the oldest go first

  // The clock the board reads (absl::Now when null): tests pass their own to check the
  // closure rate below without sleeping.
  explicit StatusBoard(ProcessMetrics& metrics, std::function<absl::Time()> clock = nullptr);
  ~StatusBoard();

  // The closure rate (/status.json "values.closures_per_second", the page's "closures/s"
  // tile) is computed here, on the server, from the values source's "closures_completed":
  // over about the last kRateWindow, from samples taken when the source is set and at each
  // /status.json request. So the first request of a page (a fresh tab, a screenshot) already
  // shows it, and every viewer sees the same figure. Absent until two samples lie
  // kMinRateSpan apart; a counter that went down (a new coordinator) starts over.
  static constexpr absl::Duration kRateWindow = absl::Seconds(10);
  static constexpr absl::Duration kMinRateSpan = absl::Milliseconds(500);

  // Registers GET /status (the page) and /status.json on the metrics endpoint.
  void Serve();

  // A cluster member's state as the chief sees it: "up", "down", "recovering", "starting",
  // or anything short; `incarnation` 0 when unknown. Adds or replaces (role, index). Each
  // non-zero incarnation that differs from the last non-zero one seen for (role, index) counts
  // as a restart of that member (the "restarts" field of /status.json): a new process at the
  // same address, however it was started (asyncps_launch --max_restarts, Kubernetes, by hand).
  void SetMember(const std::string& role, int index, const std::string& address, const std::string& state,
                 uint64_t incarnation);
  // `kind` is a word ("worker_down", "worker_rebuilt", "checkpoint_saved", ...).
  void AddEvent(const std::string& kind, const std::string& text);

  // A user scalar at a training step. InvalidArgument for a bad name, a non-finite value or a
  // new name past kMaxScalars.
  absl::Status ReportScalar(const std::string& name, int64_t step, double value);

  // Live values read at each /status.json request (closures completed, queue depth, ...). The
  // source runs on an HTTP thread (and once in SetValuesSource, for the rate's first
  // sample); ClearValuesSource waits for a call in progress, so an owner can clear it and
  // then be destroyed.
  void SetValuesSource(std::function<std::map<std::string, double>()> source);
  void ClearValuesSource();

  // Replicated shards (ps_replicas >= 2, coordinator/ps_monitor.h): each shard group's primary
  // (-1: no live copy), in-sync backups, copies being rebuilt and generation, shown in
  // /status.json as "shard_groups" and on the page as a table; `counters` (failovers, state
  // transfers, bytes copied, ...) as "replication". Replaces what was set before.
  struct ShardGroup {
    int group = 0;
    uint64_t generation = 0;
    int primary = -1;
    std::vector<int> backups;
    std::vector<int> rebuilding;
  };
  void SetShardGroups(std::vector<ShardGroup> groups, std::map<std::string, double> counters);

  // The tf.data service (data_service/status_watch.h polls its dispatcher): shown in
  // /status.json as "data_service" and on the page as a section. Replaces what was set before.
  struct DataServiceStatus {
    struct DataWorker {
      int index = 0;
      std::string address;
      std::string state;  // "up", "lost", "absent"
      double seconds_since_heartbeat = -1;
      int64_t jobs = 0;
      int64_t split_streams = 0;
      int64_t elements = 0;
    };
    struct Job {
      int64_t id = 0;
      std::string name;
      int64_t dataset_id = 0;
      std::string mode;
    };
    std::string dispatcher;        // host:port
    std::string dispatcher_state;  // "up", "unreachable"
    bool in_chief = false;
    std::string journal;  // "" in memory
    uint64_t generation = 0;
    int64_t datasets = 0;
    int64_t num_jobs = 0;
    std::vector<Job> jobs;  // the most recent
    std::vector<DataWorker> data_workers;
  };
  void SetDataService(DataServiceStatus status);

  // The JSON document /status.json returns.
  std::string Json();

 private:
  struct Member {
    std::string address;
    std::string state;
    uint64_t incarnation = 0;
    uint64_t last_known_incarnation = 0;  // the last non-zero one; kept while down
    int64_t restarts = 0;
  };
  struct Event {
    absl::Time time;
    std::string kind;
    std::string text;
  };

  // Records (now, completed) and returns the closures per second over the window, or -1.
  double SampleRate(absl::Time now, double completed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(source_mu_);

  ProcessMetrics& metrics_;
  const std::function<absl::Time()> clock_;
  const absl::Time started_;
  prometheus::Family<prometheus::Gauge>* scalar_;
  prometheus::Family<prometheus::Gauge>* scalar_step_;

  Mutex source_mu_;
  std::function<std::map<std::string, double>()> source_ ABSL_GUARDED_BY(source_mu_);
  // (time, closures completed), oldest first: the first is the latest at or before the
  // window's start, so the rate spans the whole window once the run is that old.
  std::deque<std::pair<absl::Time, double>> rate_samples_ ABSL_GUARDED_BY(source_mu_);

  Mutex mu_;
  std::map<std::pair<std::string, int>, Member> members_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<ShardGroup> shard_groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> replication_ ABSL_GUARDED_BY(mu_);
  bool has_data_service_ ABSL_GUARDED_BY(mu_) = false;
  DataServiceStatus data_service_ ABSL_GUARDED_BY(mu_);
  // Points (step, value) per scalar name.
  std::map<std::string, std::vector<std::pair<int64_t, double>>> series_ ABSL_GUARDED_BY(mu_);
};

// The status page: plain HTML and a little JavaScript that polls status.json (relative to the
// page) and draws members, values, events and one SVG plot per scalar. Nothing is fetched
// from elsewhere.
const char* StatusPageHtml();

}  // namespace asyncps::metrics

#endif  // ASYNCPS_METRICS_STATUS_BOARD_H_
