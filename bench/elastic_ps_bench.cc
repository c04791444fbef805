// What adding and removing a parameter server costs the job that keeps training (issue 37):
// 3 real PS processes as PS slots with ps_replicas=2, the job on the first 2 (initial_ps=2),
// the bench as the chief. A variable of --mib MiB (256 by default; sharded over the 3 shard
// groups) is the state that moves; one thread writes tagged row updates to every group back to
// back, the way closures do. Three windows of the same length are compared:
//   * none (after the moves, as long as the join took): no move, the writes' rate and their
//     longest gap (the reference);
//   * join: PS 2 is started and admitted (PsMonitor::AdmitPs, what membership.JoinPs does): its
//     share of the groups' copies is copied to it by state transfer while the writes go on,
//     then each group flips to its new copies in one map change;
//   * leave: PS 2 is drained (PsMonitor::DrainPs, what membership.LeavePs does) and its copies
//     move back.
// For each move it prints the writes' rate during the move against the rate without one, the
// longest gap between two acknowledged writes (the pause a worker sees) against the longest
// gap without one, and the time from the request to the new placement serving (every group on
// its target).
//
// Usage: elastic_ps_bench [--quick] [--mib=N] [--json=PATH]
//   --quick: 16 MiB (a smoke run). --json: the figures as JSON too (bench/report.h).
//
// Exits 0 whether or not the aims are met; 1 when a step fails.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "bench/report.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "partitioners/partitioner.h"
#include "ps/update_tag.h"
#include "tests/testutil/local_cluster.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace {

constexpr int kSlots = 3;
constexpr int64_t kRows = 3 * 1024;  // of the written variable, [kRows, 16] f32

// Waits (polling every 10 ms) until `condition` holds; false after `timeout`.
template <typename F>
bool WaitFor(F condition, absl::Duration timeout = absl::Seconds(300)) {
  for (const absl::Time deadline = absl::Now() + timeout; absl::Now() < deadline;) {
    if (condition()) return true;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));
  }
  return condition();
}

// Every group served with its two copies, none rebuilding, and none on a PS `holds_none`.
bool Settled(const ps::ShardMap& map, int holds_none) {
  for (const ps::GroupEntry& g : map.groups) {
    if (g.primary < 0 || g.backups.size() != 1 || !g.rebuilding.empty() || g.Holds(holds_none)) return false;
  }
  return true;
}

// The writer's acknowledged writes, as times.
class Writer {
 public:
  explicit Writer(ChiefProcess& chief) : chief_(chief), thread_([this] { Run(); }) {}
  ~Writer() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  struct Window {
    double writes_per_s = 0;
    double longest_gap_ms = 0;
  };
  // The writes acknowledged in [from, to).
  Window Between(absl::Time from, absl::Time to) {
    MutexLock lock(&mu_);
    Window w;
    size_t n = 0;
    absl::Time previous = from;
    for (auto it = std::lower_bound(acks_.begin(), acks_.end(), from); it != acks_.end() && *it < to; ++it) {
      w.longest_gap_ms = std::max(w.longest_gap_ms, absl::ToDoubleMilliseconds(*it - previous));
      previous = *it;
      ++n;
    }
    w.longest_gap_ms = std::max(w.longest_gap_ms, absl::ToDoubleMilliseconds(to - previous));
    w.writes_per_s = static_cast<double>(n) / absl::ToDoubleSeconds(to - from);
    return w;
  }
  absl::Status error() {
    MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Run() {
    // Four rows in each third of the variable: one in each shard group.
    std::vector<int64_t> rows;
    for (int g = 0; g < kSlots; ++g) {
      for (int64_t r = 0; r < 4; ++r) rows.push_back(g * (kRows / kSlots) + r);
    }
    const Tensor ids = Tensor::FromVector(rows);
    const Tensor ones =
        Tensor::FromVector(std::vector<float>(rows.size() * 16, 1.0f)).Reshape({static_cast<int64_t>(rows.size()), 16}).value();
    for (uint64_t n = 1;; ++n) {
      {
        MutexLock lock(&mu_);
        if (stop_) return;
      }
      ps::UpdateTag tag{.coordinator = 2000, .closure = 2000 + n, .sequence = 1, .watermark = 2000 + n};
      absl::Status s = chief_.ps().Update({{"x", UpdateKind::kAdd, ones, ids}}, tag);
      MutexLock lock(&mu_);
      if (!s.ok()) {
        error_ = s;
        return;
      }
      acks_.push_back(absl::Now());
    }
  }

  ChiefProcess& chief_;
  Mutex mu_;
  std::vector<absl::Time> acks_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: started once the members above exist
};

struct Move {
  std::string name;
  Writer::Window during;
  double seconds = 0;  // from the request to every group on its target
  int64_t bytes = 0;   // state transfer bytes of the move's copies
};

int Main(int argc, char** argv) {
  int64_t mib = 256;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      mib = 16;
    } else if (absl::StartsWith(argv[i], "--mib=") && absl::SimpleAtoi(argv[i] + 6, &mib) && mib >= 1) {
    } else if (!bench::ParseJsonFlag(argv[i], &json)) {
      std::fprintf(stderr, "usage: elastic_ps_bench [--quick] [--mib=N] [--json=PATH]\n");
      return 2;
    }
  }
  bench::Report report(argc, argv);
  report.aims().Declare("rate during a move", bench::AimBound::kAtLeast, 0.5);
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "elastic_ps_bench: %s\n", s.ToString().c_str());
    return report.Finish(json, 1);
  };

  testutil::LocalCluster::Options o;
  o.num_ps = kSlots;
  o.num_workers = 1;  // a cluster needs one; it is not used
  o.extra_env = {{"ASYNCPS_PS_REPLICAS", "2"}, {"ASYNCPS_INITIAL_PS", "2"}};
  absl::StatusOr<std::unique_ptr<testutil::LocalCluster>> cluster = testutil::LocalCluster::Start(o);
  if (!cluster.ok()) return fail(cluster.status());
  // Slot 2 has no PS until the join.
  if (absl::Status s = (*cluster)->KillPs(2); !s.ok()) return fail(s);
  ChiefProcess::Options options = (*cluster)->ChiefOptions();
  options.process.ps_replicas = 2;
  options.process.initial_ps = 2;
  absl::StatusOr<std::unique_ptr<ChiefProcess>> process = ChiefProcess::Create((*cluster)->chief_spec(), options);
  if (!process.ok()) return fail(process.status());
  testutil::TestChief chief(std::move(*process), *FixedShardsPartitioner::Create(kSlots));
  PsMonitor& monitor = *chief.process().ps_monitor();
  if (absl::Status s = chief.strategy().CreateVariable("x", init::Zeros({kRows, 16}, DType::kF32)).status(); !s.ok()) {
    return fail(s);
  }
  // The state that moves: mib MiB of f32 in rows of 1024 values.
  const int64_t rows = mib * 256;
  if (absl::Status s = chief.strategy().CreateVariable("state", init::Zeros({rows, 1024}, DType::kF32)).status();
      !s.ok()) {
    return fail(s);
  }
  if (!WaitFor([&] { return Settled(monitor.map(), 2); })) return fail(absl::DeadlineExceededError("not replicated"));
  std::printf("%lld MiB over 3 shard groups, 2 copies each, on PS 0 and 1 (PS slot 2 empty)\n",
              static_cast<long long>(mib));
  std::fflush(stdout);

  Writer writer(chief.process());
  std::vector<Move> moves;
  {
    const PsMonitor::Stats before = monitor.stats();
    const absl::Time t0 = absl::Now();
    if (absl::Status s = (*cluster)->RestartPs(2); !s.ok()) return fail(s);
    absl::StatusOr<PsMonitor::Admitted> admitted = monitor.AdmitPs(2, (*cluster)->chief_spec().ps()[2]);
    if (!admitted.ok()) return fail(admitted.status());
    if (!WaitFor([&] {
          const PsMonitor::Stats s = monitor.stats();
          return s.moves_done - before.moves_done >= s.moves_started - before.moves_started;
        })) {
      return fail(absl::DeadlineExceededError(absl::StrCat("the join's moves did not finish: ", monitor.map().DebugString())));
    }
    const absl::Time t1 = absl::Now();
    moves.push_back({"join (start PS 2, admit, move its copies)", writer.Between(t0, t1), absl::ToDoubleSeconds(t1 - t0),
                     monitor.stats().move_bytes - before.move_bytes});
  }
  {
    const PsMonitor::Stats before = monitor.stats();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<int> moved = monitor.DrainPs(2, absl::Seconds(300));
    if (!moved.ok()) return fail(moved.status());
    const absl::Time t1 = absl::Now();
    moves.push_back({"leave (drain PS 2)", writer.Between(t0, t1), absl::ToDoubleSeconds(t1 - t0),
                     monitor.stats().move_bytes - before.move_bytes});
  }
  // The reference: the same writes with no move, over a window as long as the join took.
  const absl::Time quiet_from = absl::Now();
  Notification().WaitForNotificationWithTimeout(absl::Seconds(std::max(1.0, moves.front().seconds)));
  const absl::Time quiet_to = absl::Now();
  if (absl::Status s = writer.error(); !s.ok()) return fail(s);
  const Writer::Window quiet = writer.Between(quiet_from, quiet_to);
  std::printf("no move: %.0f writes/s, longest gap %.1f ms\n", quiet.writes_per_s, quiet.longest_gap_ms);
  report.Add({.name = "writes, no move", .value = quiet.writes_per_s, .unit = "writes/s",
              .note = absl::StrCat("tagged 12-row updates to all 3 groups, back to back; longest gap ",
                                   quiet.longest_gap_ms, " ms")});
  for (const Move& m : moves) {
    std::printf("%s: %.1f s to every group on its target, %.1f MiB copied; %.0f writes/s (%.2fx), longest gap %.1f ms "
                "(%.1fx the longest without a move)\n",
                m.name.c_str(), m.seconds, static_cast<double>(m.bytes) / (1 << 20), m.during.writes_per_s,
                m.during.writes_per_s / quiet.writes_per_s, m.during.longest_gap_ms,
                m.during.longest_gap_ms / std::max(quiet.longest_gap_ms, 0.001));
    report.Add({.name = absl::StrCat(m.name, ": writes during the move"), .value = m.during.writes_per_s,
                .unit = "writes/s", .reference = "writes, no move", .reference_value = quiet.writes_per_s,
                .aim = "rate during a move",
                .note = absl::StrCat(mib, " MiB of state, ", static_cast<double>(m.bytes) / (1 << 20),
                                     " MiB copied")});
    report.Add({.name = absl::StrCat(m.name, ": longest write gap"), .value = m.during.longest_gap_ms, .unit = "ms",
                .reference = "longest gap, no move", .reference_value = quiet.longest_gap_ms,
                .note = "the pause a worker sees during the move"});
    report.Add({.name = absl::StrCat(m.name, ": request to serving"), .value = m.seconds, .unit = "s",
                .note = "until every shard group is on its new placement"});
  }
  std::fflush(stdout);
  return report.Finish(json, 0);
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
