// Failover pause with replicated shards (issue 19): 3 real PS processes with ps_replicas=2, the
// bench as the chief. One thread writes tagged row updates to shard group 0 back to back; the
// bench SIGKILLs group 0's primary and measures the pause: the longest stretch without an
// acknowledged write after the SIGKILL (it ends with the first write the promoted backup
// acknowledges; answers the dying primary had already sent do not count), against
// the heartbeat timeout that bounds the chief's detection. The PS is restarted and rebuilt
// (waited for on the chief's shard map) before the next kill.
//
// Usage: failover_bench [--quick] [--json=PATH]
//   --quick: one kill at one heartbeat timeout (a smoke run); default: 3 kills at each of
//   1 s and 2 s. --json: the figures as JSON too (bench/report.h).
//
// Exits 0 whether or not the aim (pause <= timeout + 200 ms) is met; 1 when a step fails.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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

constexpr int kPs = 3;
constexpr int64_t kRows = 3 * 1024;

bool FullyReplicated(const ps::ShardMap& map) {
  for (const ps::GroupEntry& g : map.groups) {
    if (g.primary < 0 || g.backups.size() != 1 || !g.rebuilding.empty()) return false;
  }
  return map.groups.size() == kPs;
}

// Waits (polling the chief's map every 10 ms) until `condition` holds; false after 60 s.
template <typename F>
bool WaitFor(F condition) {
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60); absl::Now() < deadline;) {
    if (condition()) return true;
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));
  }
  return condition();
}

// Pauses (ms) of `kills` failovers of group 0 at heartbeat timeout `timeout`.
absl::StatusOr<std::vector<double>> MeasurePauses(absl::Duration timeout, int kills) {
  testutil::LocalCluster::Options o;
  o.num_ps = kPs;
  o.num_workers = 1;  // a cluster needs one; it is not used
  o.extra_env = {{"ASYNCPS_PS_REPLICAS", "2"}};
  ASSIGN_OR_RETURN(auto cluster, testutil::LocalCluster::Start(o));
  ChiefProcess::Options options = cluster->ChiefOptions();
  options.process.ps_replicas = 2;
  options.process.ps_heartbeat_timeout = timeout;
  ASSIGN_OR_RETURN(auto process, ChiefProcess::Create(cluster->chief_spec(), options));
  ASSIGN_OR_RETURN(auto partitioner, FixedShardsPartitioner::Create(kPs));
  testutil::TestChief chief(std::move(process), std::move(partitioner));
  PsMonitor& monitor = *chief.process().ps_monitor();
  RETURN_IF_ERROR(chief.strategy().CreateVariable("x", init::Zeros({kRows, 16}, DType::kF32)).status());
  if (!WaitFor([&] { return FullyReplicated(monitor.map()); })) return absl::DeadlineExceededError("not replicated");

  // The writer: tagged adds to rows of group 0 (the first third), each acknowledged time kept.
  Mutex mu;
  std::vector<absl::Time> acks;
  absl::Status write_error;
  bool stop = false;
  std::thread writer([&] {
    const Tensor ids = Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 3});
    const Tensor ones = Tensor::FromVector(std::vector<float>(4 * 16, 1.0f)).Reshape({4, 16}).value();
    for (uint64_t n = 1;; ++n) {
      {
        MutexLock lock(&mu);
        if (stop) return;
      }
      ps::UpdateTag tag{.coordinator = 1000, .closure = 1000 + n, .sequence = 1, .watermark = 1000 + n};
      absl::Status s = chief.process().ps().Update({{"x", UpdateKind::kAdd, ones, ids}}, tag);
      MutexLock lock(&mu);
      if (!s.ok()) {
        write_error = s;
        return;
      }
      acks.push_back(absl::Now());
    }
  });
  std::vector<double> pauses;
  absl::Status failed;
  for (int k = 0; k < kills && failed.ok(); ++k) {
    const int primary = monitor.map().Find(0)->primary;
    // A few hundred writes before the kill, so the writer is in its stride.
    const size_t before = [&] {
      MutexLock lock(&mu);
      return acks.size();
    }();
    WaitFor([&] {
      MutexLock lock(&mu);
      return acks.size() >= before + 200 || !write_error.ok();
    });
    const absl::Time killed = absl::Now();
    failed = cluster->KillPs(primary);
    if (!failed.ok()) break;
    // Until the chief has promoted group 0's backup and a write was acknowledged after that.
    if (!WaitFor([&] { return monitor.map().Find(0)->primary != primary; })) {
      failed = absl::DeadlineExceededError("group 0 not failed over");
      break;
    }
    const absl::Time promoted = absl::Now();
    if (!WaitFor([&] {
          MutexLock lock(&mu);
          return (!acks.empty() && acks.back() > promoted) || !write_error.ok();
        })) {
      failed = absl::DeadlineExceededError("no write acknowledged after the failover");
      break;
    }
    {
      MutexLock lock(&mu);
      if (!write_error.ok()) {
        failed = write_error;
        break;
      }
      // The longest stretch without an acknowledgement after the kill: answers already on
      // their way from the dying primary land in the first microseconds and do not end it.
      double pause = 0;
      absl::Time previous = killed;
      for (auto it = std::upper_bound(acks.begin(), acks.end(), killed); it != acks.end(); ++it) {
        pause = std::max(pause, absl::ToDoubleMilliseconds(*it - previous));
        previous = *it;
      }
      pauses.push_back(pause);
    }
    std::printf("heartbeat timeout %s: kill %d of ps %d: pause %.0f ms\n", absl::FormatDuration(timeout).c_str(),
                k + 1, primary, pauses.back());
    std::fflush(stdout);
    failed = cluster->RestartPs(primary);
    if (failed.ok() && !WaitFor([&] { return FullyReplicated(monitor.map()); })) {
      failed = absl::DeadlineExceededError(absl::StrCat("ps ", primary, " not rebuilt: ", monitor.map().DebugString()));
    }
  }
  {
    MutexLock lock(&mu);
    stop = true;
  }
  writer.join();
  RETURN_IF_ERROR(failed);
  return pauses;
}

int Main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (!bench::ParseJsonFlag(argv[i], &json)) {
      std::fprintf(stderr, "usage: failover_bench [--quick] [--json=PATH]\n");
      return 2;
    }
  }
  bench::Report report(argc, argv);
  report.aims().Declare("failover pause", bench::AimBound::kAtMost, 1.0);
  const std::vector<absl::Duration> timeouts =
      quick ? std::vector<absl::Duration>{absl::Seconds(1)} : std::vector<absl::Duration>{absl::Seconds(1), absl::Seconds(2)};
  bool complete = true;
  for (absl::Duration timeout : timeouts) {
    absl::StatusOr<std::vector<double>> pauses = MeasurePauses(timeout, quick ? 1 : 3);
    if (!pauses.ok()) {
      std::fprintf(stderr, "failover_bench: %s\n", pauses.status().ToString().c_str());
      complete = false;
      break;
    }
    std::sort(pauses->begin(), pauses->end());
    const double median = (*pauses)[pauses->size() / 2];
    const double bound = absl::ToDoubleMilliseconds(timeout) + 200;
    report.Add({.name = absl::StrCat("failover pause, heartbeat timeout ", absl::FormatDuration(timeout)),
                .value = median,
                .unit = "ms",
                .reference = "heartbeat timeout + 200 ms",
                .reference_value = bound,
                .aim = "failover pause",
                .note = absl::StrCat("median of ", pauses->size(), " SIGKILLs of group 0's primary; max ",
                                     pauses->back(), " ms")});
    std::printf("heartbeat timeout %s: median pause %.0f ms (max %.0f) against %.0f ms\n",
                absl::FormatDuration(timeout).c_str(), median, pauses->back(), bound);
  }
  if (absl::Status s = report.Write(json, complete); !s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return complete ? 0 : 1;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
