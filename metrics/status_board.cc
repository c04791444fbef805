#include "metrics/status_board.h"

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace asyncps::metrics {
namespace {

bool ValidScalarName(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace

StatusBoard::StatusBoard(ProcessMetrics& metrics, std::function<absl::Time()> clock)
    : metrics_(metrics),
      clock_(clock != nullptr ? std::move(clock) : std::function<absl::Time()>([] { return absl::Now(); })),
      started_(clock_()) {
  const std::map<std::string, std::string> labels = {{"role", metrics.role()}, {"task", metrics.task()}};
  scalar_ = &prometheus::BuildGauge()
                 .Name("asyncps_scalar")
                 .Help("Last value of a scalar the training program reported (loss, accuracy, ...)")
                 .Labels(labels)
                 .Register(metrics.registry());
  scalar_step_ = &prometheus::BuildGauge()
                      .Name("asyncps_scalar_step")
                      .Help("Training step of the last value of each reported scalar")
                      .Labels(labels)
                      .Register(metrics.registry());
}

StatusBoard::~StatusBoard() = default;

void StatusBoard::Serve() {
  metrics_.AddHandler("/status", [] {
    return ProcessMetrics::HttpResponse{200, "text/html; charset=utf-8", StatusPageHtml()};
  });
  metrics_.AddHandler("/status.json", [this] {
    return ProcessMetrics::HttpResponse{200, "application/json", Json()};
  });
}

void StatusBoard::SetMember(const std::string& role, int index, const std::string& address,
                            const std::string& state, uint64_t incarnation) {
  MutexLock lock(&mu_);
  Member& m = members_[{role, index}];
  if (incarnation != 0) {
    if (m.last_known_incarnation != 0 && incarnation != m.last_known_incarnation) ++m.restarts;
    m.last_known_incarnation = incarnation;
  }
  m.address = address;
  m.state = state;
  m.incarnation = incarnation;
}

void StatusBoard::AddEvent(const std::string& kind, const std::string& text) {
  MutexLock lock(&mu_);
  events_.push_back(Event{clock_(), kind, text});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

absl::Status StatusBoard::ReportScalar(const std::string& name, int64_t step, double value) {
  if (!ValidScalarName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scalar name '", name, "' is not a short identifier ([a-z0-9_], 1..32 characters)"));
  }
  if (!std::isfinite(value)) return absl::InvalidArgumentError(absl::StrCat("scalar '", name, "' is not finite"));
  {
    MutexLock lock(&mu_);
    auto it = series_.find(name);
    if (it == series_.end()) {
      if (series_.size() >= static_cast<size_t>(kMaxScalars)) {
        return absl::InvalidArgumentError(
            absl::StrCat("scalar '", name, "' would be name ", kMaxScalars + 1, "; at most ", kMaxScalars));
      }
      it = series_.emplace(name, std::vector<std::pair<int64_t, double>>()).first;
    }
    auto& points = it->second;
    points.emplace_back(step, value);
    if (points.size() > kMaxPointsPerScalar) {
      // Halve the resolution, keeping the whole run's shape and the latest point.
      std::vector<std::pair<int64_t, double>> kept;
      for (size_t i = 0; i < points.size(); i += 2) kept.push_back(points[i]);
      if (kept.back() != points.back()) kept.push_back(points.back());
      points = std::move(kept);
    }
  }
  scalar_->Add({{"name", name}}).Set(value);
  scalar_step_->Add({{"name", name}}).Set(static_cast<double>(step));
  return absl::OkStatus();
}

void StatusBoard::SetValuesSource(std::function<std::map<std::string, double>()> source) {
  MutexLock lock(&source_mu_);
  source_ = std::move(source);
  rate_samples_.clear();
  // The first sample: a page opened later gets a rate from its first request.
  if (source_) {
    const std::map<std::string, double> values = source_();
    if (auto it = values.find("closures_completed"); it != values.end()) SampleRate(clock_(), it->second);
  }
}

void StatusBoard::ClearValuesSource() {
  MutexLock lock(&source_mu_);
  source_ = nullptr;
  rate_samples_.clear();
}

double StatusBoard::SampleRate(absl::Time now, double completed) {
  if (!rate_samples_.empty() && completed < rate_samples_.back().second) rate_samples_.clear();  // a new counter
  // A sample at most every 100 ms: clients polling fast cannot grow the deque.
  if (rate_samples_.empty() || now - rate_samples_.back().first >= absl::Milliseconds(100)) {
    rate_samples_.emplace_back(now, completed);
  }
  while (rate_samples_.size() > 2 && rate_samples_[1].first <= now - kRateWindow) rate_samples_.pop_front();
  const auto& [t0, c0] = rate_samples_.front();
  const absl::Duration span = now - t0;
  if (span < kMinRateSpan) return -1;
  return (completed - c0) / absl::ToDoubleSeconds(span);
}

void StatusBoard::SetShardGroups(std::vector<ShardGroup> groups, std::map<std::string, double> counters) {
  MutexLock lock(&mu_);
  shard_groups_ = std::move(groups);
  replication_ = std::move(counters);
}

void StatusBoard::SetDataService(DataServiceStatus status) {
  MutexLock lock(&mu_);
  has_data_service_ = true;
  data_service_ = std::move(status);
}

std::string StatusBoard::Json() {
  nlohmann::json doc;
  doc["role"] = metrics_.role();
  const absl::Time now = clock_();
  doc["now"] = absl::ToUnixMillis(now) / 1000.0;
  doc["started"] = absl::ToUnixMillis(started_) / 1000.0;
  nlohmann::json values = nlohmann::json::object();
  {
    MutexLock lock(&source_mu_);
    if (source_) {
      const std::map<std::string, double> v = source_();
      for (const auto& [name, value] : v) values[name] = value;
      if (auto it = v.find("closures_completed"); it != v.end()) {
        if (const double rate = SampleRate(now, it->second); rate >= 0) values["closures_per_second"] = rate;
      }
    }
  }
  doc["values"] = values;
  MutexLock lock(&mu_);
  nlohmann::json members = nlohmann::json::array();
  for (const auto& [key, m] : members_) {
    members.push_back(
        {{"role", key.first},
         {"index", key.second},
         {"address", m.address},
         {"state", m.state},
         // Hex: a 64-bit id does not survive JavaScript's doubles.
         {"incarnation", m.incarnation == 0 ? "" : absl::StrCat(absl::Hex(m.incarnation))},
         {"restarts", m.restarts}});
  }
  doc["members"] = members;
  if (!shard_groups_.empty()) {
    nlohmann::json groups = nlohmann::json::array();
    for (const ShardGroup& g : shard_groups_) {
      groups.push_back({{"group", g.group},
                        {"generation", g.generation},
                        {"primary", g.primary},
                        {"backups", g.backups},
                        {"rebuilding", g.rebuilding}});
    }
    doc["shard_groups"] = groups;
    doc["replication"] = replication_;
  }
  if (has_data_service_) {
    const DataServiceStatus& d = data_service_;
    nlohmann::json workers = nlohmann::json::array();
    for (const auto& w : d.data_workers) {
      workers.push_back({{"index", w.index},
                         {"address", w.address},
                         {"state", w.state},
                         {"seconds_since_heartbeat", w.seconds_since_heartbeat},
                         {"jobs", w.jobs},
                         {"split_streams", w.split_streams},
                         {"elements", w.elements}});
    }
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : d.jobs) {
      jobs.push_back({{"id", j.id}, {"name", j.name}, {"dataset", j.dataset_id}, {"mode", j.mode}});
    }
    doc["data_service"] = {{"dispatcher", d.dispatcher},
                           {"state", d.dispatcher_state},
                           {"in_chief", d.in_chief},
                           {"journal", d.journal},
                           // Hex, as incarnations: 64 bits do not survive JavaScript's doubles.
                           {"generation", d.generation == 0 ? "" : absl::StrCat(absl::Hex(d.generation))},
                           {"datasets", d.datasets},
                           {"num_jobs", d.num_jobs},
                           {"jobs", jobs},
                           {"data_workers", workers}};
  }
  nlohmann::json series = nlohmann::json::object();
  for (const auto& [name, points] : series_) {
    nlohmann::json p = nlohmann::json::array();
    for (const auto& [step, value] : points) p.push_back({step, value});
    series[name] = p;
  }
  doc["series"] = series;
  nlohmann::json events = nlohmann::json::array();
  for (const Event& e : events_) {
    events.push_back({{"time", absl::ToUnixMillis(e.time) / 1000.0}, {"kind", e.kind}, {"text", e.text}});
  }
  doc["events"] = events;
  // Event texts carry error messages: bytes that are not UTF-8 are replaced, never thrown on.
  return doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace asyncps::metrics
