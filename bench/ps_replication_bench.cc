// Replicated shards (issue 19) against unreplicated ones, in one run: parameter servers in this
// process (ps/replication/local_ps_cluster_testing.h: real RpcServers and clients on 127.0.0.1)
// with ps_replicas = 2 (group 0 on PS 0, its backup on PS 1) against the same servers without a
// shard map (today's path). Cases: dense 4 MiB push through Adam, a 10k-row sparse push, a tiny
// push's p50 latency (each measured on both clusters, alive side by side, in alternating rounds:
// the ratio is of the medians, the note gives the per-round ratios' spread), and a state
// transfer of a 256 MiB shard against a dense pull of it.
//
// Usage: ps_replication_bench [--quick] [--json=PATH]
//   ASYNCPS_BENCH_CASES=dense,sparse,tiny,transfer,fmnist picks cases (all but fmnist when
//   unset). fmnist: the Fashion-MNIST main job through asyncps_launch --ps_replicas 1 and 2
//   (asyncps_launch and fashion_mnist must be built beside this binary; minutes).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "core/optimizer_config.h"
#include "ps/ps_wire.h"
#include "ps/read_wire_testing.h"
#include "ps/replication/local_ps_cluster_testing.h"

namespace asyncps {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

struct Setup {
  std::unique_ptr<ps::LocalPsCluster> cluster;
  uint64_t generation = 0;  // 0: no map (unreplicated)
};

Setup Make(int k) {
  ps::ReplicatedPs::Options o;
  o.replicas = k;
  Setup s;
  s.cluster = std::make_unique<ps::LocalPsCluster>(2, o);
  if (k > 1) {
    auto map = ps::ShardMap::Initial(2, 2);
    if (!map.ok() || !s.cluster->SetMapEverywhere(*map).ok()) std::abort();
    s.generation = 1;
  }
  return s;
}

void Route(wire::Route::Builder r, uint64_t generation) {
  r.setGroup(0);
  r.setGeneration(generation);
}

absl::Status Create(Setup& s, const std::string& name, const Shape& shape, bool adam) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::CreateVariableRequest>();
  body.setName(name);
  body.setDtype(static_cast<uint8_t>(DType::kF32));
  net::SetShape(body.initShape(static_cast<unsigned>(shape.size())), shape);
  ps::InitializerSpec init;
  init.kind = "zeros";
  ps::InitializerToWire(init, req, body.initInitializer());
  OptimizerConfig config = opt::Adam(0.001f);
  ps::OptimizerToWire(adam ? &config : nullptr, body.initOptimizer());
  if (s.generation != 0) Route(body.initRoute(), s.generation);
  return s.cluster->Call(0, "chief", "ps.CreateVariable", std::move(req)).status();
}

absl::Status Push(Setup& s, const std::string& name, const Tensor& g, const std::optional<Tensor>& ids) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::PushGradientsRequest>();
  auto grad = body.initGradients(1)[0];
  grad.setName(name);
  req.AddTensor(g, grad.initValue());
  if (ids) {
    grad.setHasIds(true);
    req.AddTensor(*ids, grad.initIds());
  }
  if (s.generation != 0) Route(body.initRoute(), s.generation);
  return s.cluster->Client(0, "worker").Call("ps.PushGradients", std::move(req), absl::Seconds(120)).status();
}

Tensor Ones(const Shape& shape) {
  Tensor t(DType::kF32, shape);
  std::fill(t.flat<float>().begin(), t.flat<float>().end(), 0.01f);
  return t;
}

// Pushes per second of `n` pushes.
double PushRate(Setup& s, const std::string& name, const Tensor& g, const std::optional<Tensor>& ids, int n) {
  for (int i = 0; i < 3; ++i) (void)Push(s, name, g, ids);
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    if (absl::Status st = Push(s, name, g, ids); !st.ok()) {
      std::fprintf(stderr, "push failed: %s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  return n / Seconds(start);
}

double TinyP50Us(Setup& s, int n) {
  const Tensor g = Ones({4});
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto start = Clock::now();
    (void)Push(s, "tiny", g, std::nullopt);
    us.push_back(Seconds(start) * 1e6);
  }
  return bench::Median(us);
}

// CPU time (user + system) of every thread of this process so far (both clusters and the
// client, of which only the one measured is busy) and of the child processes it waited for.
double ProcessCpuSeconds() {
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  double total = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage u;
    getrusage(who, &u);
    total += seconds(u.ru_utime) + seconds(u.ru_stime);
  }
  return total;
}

// Which cases run: ASYNCPS_BENCH_CASES, a comma list of dense, sparse, tiny, transfer, fmnist
// (all but fmnist when unset): for profiling one case.
bool Wanted(const char* name) {
  const char* env = std::getenv("ASYNCPS_BENCH_CASES");
  if (env == nullptr || *env == '\0') return true;
  for (absl::string_view c : absl::StrSplit(env, ',')) {
    if (c == name) return true;
  }
  return false;
}

// Runs `measure(setup)` for k=1 and k=2 in alternating rounds (k=1 first in even rounds), so
// that the shared machine's load drifts over both alike, and adds the medians with the spread
// of the per-round ratios k2/k1.
template <typename Fn>
void Interleaved(Setup* setups, int rounds, const std::string& name, const std::string& unit, const std::string& aim,
                 bench::Report& report, Fn measure) {
  std::vector<double> k1, k2, ratios, cpu_ratios;
  for (int r = 0; r < rounds; ++r) {
    double v[2], cpu[2];
    for (int i = 0; i < 2; ++i) {
      const int k = (r % 2 == 0) ? i : 1 - i;
      const double cpu_before = ProcessCpuSeconds();
      v[k] = measure(setups[k]);
      cpu[k] = ProcessCpuSeconds() - cpu_before;
    }
    k1.push_back(v[0]);
    k2.push_back(v[1]);
    ratios.push_back(v[1] / v[0]);
    cpu_ratios.push_back(cpu[1] / cpu[0]);
  }
  std::sort(ratios.begin(), ratios.end());
  report.Add({.name = name, .value = bench::Median(k2), .unit = unit, .reference = "k=1",
              .reference_value = bench::Median(k1),
              .note = absl::StrCat(aim, "; per-round ratio k2/k1 over ", rounds, " alternating rounds: min ",
                                   absl::SixDigits(ratios.front()), " median ", absl::SixDigits(bench::Median(ratios)),
                                   " max ", absl::SixDigits(ratios.back()),
                                   "; process CPU time k2/k1 for the same work: median ",
                                   absl::SixDigits(bench::Median(cpu_ratios)))});
}

// Examples/s of the main job (asyncps_launch --ps 2 --workers 2 --ps_replicas k --
// fashion_mnist --epochs e), from its "[chief] trained ... N examples/s" line; nullopt when
// the binaries (beside this one) are missing or the run fails.
std::optional<double> FashionMnistRate(int k, int epochs) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  const std::filesystem::path launch = dir / "asyncps_launch", program = dir / "fashion_mnist";
  if (ec || !std::filesystem::exists(launch) || !std::filesystem::exists(program)) return std::nullopt;
  const std::string command = absl::StrCat("ASYNCPS_METRICS_PORT=-1 '", launch.string(),
                                           "' --ps 2 --workers 2 --ps_replicas ", k, " -- '", program.string(),
                                           "' --epochs ", epochs, " 2>&1");
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return std::nullopt;
  std::optional<double> rate;
  char line[4096];
  while (std::fgets(line, sizeof(line), out) != nullptr) {
    const absl::string_view l(line);
    const size_t at = l.find(" examples/s");
    if (l.find("[chief] trained ") == absl::string_view::npos || at == absl::string_view::npos) continue;
    const size_t start = l.rfind(' ', at - 1);
    double v = 0;
    if (start != absl::string_view::npos && absl::SimpleAtod(l.substr(start + 1, at - start - 1), &v)) rate = v;
  }
  if (pclose(out) != 0) return std::nullopt;
  return rate;
}

int Run(bool quick, bench::Report& report) {
  const int rounds = quick ? 2 : 7;
  const int n_dense = quick ? 10 : 40;
  const int n_sparse = quick ? 10 : 60;
  const int n_tiny = quick ? 100 : 1000;
  Setup setups[2] = {Make(1), Make(2)};
  for (Setup& s : setups) {
    if (!Create(s, "dense", {1 << 20}, true).ok() || !Create(s, "table", {100000, 16}, true).ok() ||
        !Create(s, "tiny", {4}, true).ok()) {
      std::fprintf(stderr, "create failed\n");
      return 1;
    }
  }
  std::vector<int64_t> rows(10000);
  for (int64_t i = 0; i < 10000; ++i) rows[i] = (i * 7919) % 100000;
  const Tensor dense_grad = Ones({1 << 20});
  const Tensor sparse_grad = Ones({10000, 16});
  const Tensor ids = Tensor::FromVector<int64_t>(rows);
  if (Wanted("dense")) {
    Interleaved(setups, rounds, "dense 4MiB push+Adam k=2", "push/s", "aim >= 0.6x", report,
                [&](Setup& s) { return PushRate(s, "dense", dense_grad, std::nullopt, n_dense); });
  }
  if (Wanted("sparse")) {
    Interleaved(setups, rounds, "sparse 10k-row push+Adam k=2", "push/s", "aim >= 0.6x", report,
                [&](Setup& s) { return PushRate(s, "table", sparse_grad, ids, n_sparse); });
  }
  if (Wanted("tiny")) {
    Interleaved(setups, rounds, "tiny push p50 k=2", "us", "aim <= 2x", report,
                [&](Setup& s) { return TinyP50Us(s, n_tiny); });
  }
  // The main job, only when asked for (ASYNCPS_BENCH_CASES=fmnist: it runs real processes for
  // minutes): k=1 and k=2 in alternating rounds.
  if (const char* env = std::getenv("ASYNCPS_BENCH_CASES"); env != nullptr && Wanted("fmnist")) {
    const int fmnist_rounds = quick ? 1 : 3;
    const int epochs = quick ? 1 : 3;
    bool ok = true;
    Interleaved(setups, fmnist_rounds, "Fashion-MNIST main job k=2", "examples/s", "aim >= 0.8x", report,
                [&](Setup& s) {
                  std::optional<double> r = FashionMnistRate(s.generation == 0 ? 1 : 2, epochs);
                  ok = ok && r.has_value();
                  return r.value_or(0);
                });
    if (!ok) {
      std::fprintf(stderr, "the Fashion-MNIST runs need asyncps_launch and fashion_mnist beside this binary\n");
      return 1;
    }
  }
  if (!Wanted("transfer")) {
    for (const bench::Figure& f : report.figures()) {
      std::printf("%-34s %12.1f %-6s  vs %-10s %12.1f  ratio %.2fx  (%s)\n", f.name.c_str(), f.value, f.unit.c_str(),
                  f.reference.c_str(), f.reference_value, f.value / f.reference_value, f.note.c_str());
    }
    return 0;
  }

  // State transfer of one shard against a dense pull of the same bytes.
  const int64_t elements = (quick ? int64_t{16} : int64_t{256}) << 18;  // f32: 16 or 256 MiB
  const double mib = static_cast<double>(elements) * 4 / (1 << 20);
  ps::ReplicatedPs::Options o;
  o.replicas = 2;
  ps::LocalPsCluster cluster(2, o);
  ps::ShardMap alone = *ps::ShardMap::Initial(2, 2);
  alone.groups[0].backups = {};
  if (!cluster.SetMapEverywhere(alone).ok()) return 1;
  Setup view{nullptr, 1};
  {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::CreateVariableRequest>();
    body.setName("big");
    body.setDtype(static_cast<uint8_t>(DType::kF32));
    net::SetShape(body.initShape(1), {elements});
    ps::InitializerSpec init;
    init.kind = "ones";
    ps::InitializerToWire(init, req, body.initInitializer());
    ps::OptimizerToWire(nullptr, body.initOptimizer());
    Route(body.initRoute(), 1);
    if (!cluster.Call(0, "chief", "ps.CreateVariable", std::move(req)).ok()) return 1;
  }
  // The client's first pull receives into memory it never touched (its connection's block
  // pool is empty); the later ones into the block the first left idle. The aim compares with
  // their median (warm memory); the transfer's receiver always starts cold (a PS that comes
  // back is a new process), so the cold pull is shown beside it.
  std::vector<double> pulls;
  for (int i = 0; i < 3; ++i) {
    net::OutMessage req = ps::ReadRequestFor({"big"});
    Route(req.envelope().getRequest().getBody().getAs<wire::ReadRequest>().initRoute(), 1);
    const auto start = Clock::now();
    if (!cluster.Client(0, "worker").Call("ps.Read", std::move(req), absl::Seconds(120)).ok()) return 1;
    pulls.push_back(mib / Seconds(start));
  }
  ps::ShardMap rebuild = alone;
  rebuild.groups[0].generation = 2;
  rebuild.groups[0].rebuilding = {1};
  rebuild.generation = 2;
  if (!cluster.SetMap(1, rebuild).ok()) return 1;
  const auto start = Clock::now();
  if (!cluster.SetMap(0, rebuild).ok()) return 1;
  bool synced = false;
  while (!synced && Seconds(start) < 600) {
    net::OutMessage req;
    req.InitRequestBody<wire::Empty>();
    auto resp = cluster.Call(0, "chief", "ps.ReplicaStatus", std::move(req));
    if (!resp.ok()) return 1;
    for (auto c : resp->ResponseBody<wire::ReplicaStatusResponse>().getCopies()) {
      for (auto b : c.getBackups()) synced = synced || (c.getGroup() == 0 && b.getInSync());
    }
    // Polls gently: the machine's cores are what the transfer runs on.
    if (!synced) absl::SleepFor(absl::Milliseconds(2));
  }
  const double transfer = mib / Seconds(start);
  report.Add({.name = absl::StrCat("state transfer ", mib, "MiB shard"), .value = transfer, .unit = "MiB/s",
              .reference = "dense pull", .reference_value = bench::Median(pulls),
              .note = "aim >= 0.5x; the pull's median, into warm memory"});
  report.Add({.name = absl::StrCat("state transfer ", mib, "MiB vs cold"), .value = transfer, .unit = "MiB/s",
              .reference = "cold pull", .reference_value = pulls.front(),
              .note = absl::StrCat("the first pull, into memory the client never touched (not the aim's ",
                                   "reference); pulls ", absl::StrJoin(pulls, ", ", [](std::string* out, double v) {
                                     absl::StrAppend(out, static_cast<int64_t>(v));
                                   }), " MiB/s")});
  for (const bench::Figure& f : report.figures()) {
    std::printf("%-34s %12.1f %-6s  vs %-10s %12.1f  ratio %.2fx  (%s)\n", f.name.c_str(), f.value, f.unit.c_str(),
                f.reference.c_str(), f.reference_value, f.value / f.reference_value, f.note.c_str());
  }
  return synced ? 0 : 1;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!asyncps::bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  asyncps::bench::Report report(argc, argv);
  return report.Finish(json, asyncps::Run(quick, report));
}
