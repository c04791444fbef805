// Hash-keyed embedding tables (ps/embedding/) against dense PS variables of the same rows,
// measured in the same run, through the same RPC server and client on 127.0.0.1:
//   * lookup: ps.EmbeddingLookup of 10k keys (half with a row, half without: their initial
//     values are computed) against ps.Gather of 10k rows of a dense f32 [rows, 64] variable
//     (aim >= 0.5x the dense rate);
//   * push: ps.EmbeddingPush of 10k existing keys through Adam against ps.PushGradients of 10k
//     rows (ids) of the dense variable through Adam (aim >= 0.5x);
//   * memory: bytes the table allocated per row (EmbeddingTable::Stats) against the payload
//     dim * 4 * (1 + slots) (aim <= 1.3x).
// The lookup and push cases are also measured in process (EmbeddingTable::Lookup/Push against
// Variable::Gather/ApplyRowGradients), which shows the table's own cost without the RPC's,
// and lookups of keys without rows (initial values computed) against keys with rows.
//
// Usage: embedding_bench [--quick] [--json=PATH]
//
// Rows are 64 floats. Each figure is the median, over interleaved rounds, of the ratio of
// one round's rates (the machine is shared: pairing keeps load swings out of the ratio).
// Exits 0 (a measurement, not a test); 1 when a call fails.

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "bench/embedding_ps.h"
#include "bench/report.h"
#include "metrics/process_metrics.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/ps_wire.h"

namespace asyncps {
namespace {

using bench::Clock;
using bench::Median;
using bench::Seconds;
constexpr int64_t kDim = 64;
constexpr int64_t kBatch = 10000;
constexpr char kToken[] = "embedding-bench";

// Calls `fn` `reps` times and returns calls per second (0 when a call failed).
template <typename Fn>
double Rate(int reps, Fn&& fn) {
  const auto begin = Clock::now();
  for (int i = 0; i < reps; ++i) {
    if (!fn()) return 0;
  }
  return reps / Seconds(begin);
}

struct Pair {
  std::vector<double> table, dense;
  double ratio() const {
    std::vector<double> r;
    for (size_t i = 0; i < table.size(); ++i) r.push_back(dense[i] > 0 ? table[i] / dense[i] : 0);
    return Median(r);
  }
};

bool Print(bench::Report& report, const std::string& name, const std::string& reference, const Pair& p,
            const std::string& aim) {
  const double table = Median(p.table), dense = Median(p.dense), ratio = p.ratio();
  std::printf("%-34s %9.1f calls/s (%6.2f Mrows/s) | %-28s %9.1f calls/s | ratio %5.2fx%s\n", name.c_str(), table,
              table * kBatch / 1e6, reference.c_str(), dense, ratio,
              aim.empty() ? "" : (report.aims().Meets(aim, ratio) ? "  AIM MET" : "  AIM MISSED"));
  return report.Add({.name = name,
                     .value = table,
                     .unit = "calls/s",
                     .reference = reference,
                     .reference_value = dense,
                     .ratio = ratio,
                     .aim = aim,
                     .note = absl::StrFormat("%d keys of dim %d per call; median of %d paired rounds", kBatch, kDim,
                                             static_cast<int>(p.table.size()))});
}

int Main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  bench::Report report(argc, argv);
  report.aims().Declare("lookup", bench::AimBound::kAtLeast, 0.5);
  report.aims().Declare("push", bench::AimBound::kAtLeast, 0.5);
  report.aims().Declare("memory", bench::AimBound::kAtMost, 1.3);
  const int64_t rows = quick ? 50000 : 500000;
  const int rounds = quick ? 3 : 9;
  const int reps = quick ? 3 : 10;

  // One server with both services, one client.
  net::EventLoop loop;
  auto metrics = std::move(metrics::ProcessMetrics::Create("ps", 0, "")).value();
  ps::PsMetrics ps_metrics(*metrics);
  ps::PsService::Options dense_options;
  dense_options.metrics = &ps_metrics;
  ps::EmbeddingService::Options emb_options;
  emb_options.ps_metrics = &ps_metrics;
  auto node = bench::StartEmbeddingPs(loop, loop, /*task_index=*/0, kToken, dense_options, emb_options);
  if (!node.ok()) return 1;
  ps::VariableStore& store = (*node)->store;
  ps::EmbeddingStore& tables = (*node)->tables;
  net::RpcClient& client = *(*node)->client;
  auto call = [&](const char* method, net::OutMessage m) -> absl::StatusOr<net::InMessage> {
    return client.Call(method, std::move(m), absl::Seconds(60));
  };

  // The dense variable: f32 [rows, 64], uniform, Adam.
  const OptimizerConfig adam = opt::Adam(1e-3f);
  if (absl::Status s = bench::CreateUniformDenseVariable(client, "dense", rows, kDim, &adam, absl::Seconds(60));
      !s.ok()) {
    std::fprintf(stderr, "create dense: %s\n", s.ToString().c_str());
    return 1;
  }
  // The table: dim 64, Adam, rows keys prefilled by pushes.
  ps::EmbeddingTableConfig config;
  config.name = "emb";
  config.dim = kDim;
  config.optimizer = adam;
  {
    net::OutMessage req;
    ps::BuildCreateEmbeddingTableRequest(config, req);
    if (!call(ps::kCreateEmbeddingTableMethod, std::move(req)).ok()) return 1;
  }
  std::mt19937_64 rng(1);
  std::vector<int64_t> keys(rows);
  for (int64_t& k : keys) k = static_cast<int64_t>(rng());
  ps::EmbeddingTable* table = tables.Find("emb").value();
  {
    std::vector<float> g(kBatch * kDim, 0.001f);
    for (int64_t begin = 0; begin < rows; begin += kBatch) {
      const int64_t n = std::min(kBatch, rows - begin);
      if (!table->Push(absl::MakeConstSpan(keys).subspan(begin, n), g.data()).ok()) return 1;
    }
  }
  const ps::EmbeddingTableStats stats = table->Stats();
  const double payload = static_cast<double>(kDim) * 4 * (1 + table->num_slots());
  const double per_row = static_cast<double>(stats.memory_bytes) / static_cast<double>(stats.rows);
  const double memory_ratio = per_row / payload;
  std::printf("memory: %llu rows, %.1f bytes per row allocated, payload dim*4*(1+%d) = %.0f bytes | ratio %.3fx%s\n",
              static_cast<unsigned long long>(stats.rows), per_row, table->num_slots(), payload, memory_ratio,
              report.aims().Meets("memory", memory_ratio) ? "  AIM MET" : "  AIM MISSED");
  report.Add({.name = "memory per row (dim 64, Adam)",
              .value = per_row,
              .unit = "bytes",
              .reference = "payload dim*4*(1+slots)",
              .reference_value = payload,
              .aim = "memory",
              .note = absl::StrCat(stats.rows, " rows")});

  // Batches: lookups of 5k existing + 5k new keys; pushes of 10k existing keys; dense ids.
  const int kBatches = 8;
  std::vector<Tensor> lookup_keys, push_keys, dense_ids;
  for (int b = 0; b < kBatches; ++b) {
    std::vector<int64_t> lk, pk, ids;
    std::vector<int64_t> perm(rows);
    for (int64_t i = 0; i < rows; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t i = 0; i < kBatch; ++i) {
      pk.push_back(keys[perm[i]]);
      ids.push_back(perm[i]);
      lk.push_back(i % 2 == 0 ? keys[perm[i]] : static_cast<int64_t>(rng()));
    }
    lookup_keys.push_back(Tensor::FromVector<int64_t>(lk));
    push_keys.push_back(Tensor::FromVector<int64_t>(pk));
    dense_ids.push_back(Tensor::FromVector<int64_t>(ids));
  }
  std::vector<float> gv(kBatch * kDim, 0.001f);
  Tensor grads = *Tensor::FromSpan<float>({kBatch, kDim}, gv);

  int next = 0;
  auto emb_lookup = [&] {
    net::OutMessage req;
    ps::EmbeddingKeys l{"emb", lookup_keys[next++ % kBatches]};
    ps::BuildEmbeddingLookupRequest({&l, 1}, true, req);
    auto r = call(ps::kEmbeddingLookupMethod, std::move(req));
    return r.ok() && ps::ReadEmbeddingLookupResponse(*r, 1).ok();
  };
  auto dense_gather = [&] {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::GatherRequest>().initLookups(1);
    list[0].setName("dense");
    req.AddTensor(dense_ids[next++ % kBatches], list[0].initIds());
    return call("ps.Gather", std::move(req)).ok();
  };
  auto emb_push = [&] {
    net::OutMessage req;
    ps::EmbeddingGradients p{"emb", push_keys[next++ % kBatches], grads};
    ps::BuildEmbeddingPushRequest({&p, 1}, ps::UpdateTag(), req);
    return call(ps::kEmbeddingPushMethod, std::move(req)).ok();
  };
  auto dense_push = [&] {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(1);
    list[0].setName("dense");
    req.AddTensor(grads, list[0].initValue());
    list[0].setHasIds(true);
    req.AddTensor(dense_ids[next++ % kBatches], list[0].initIds());
    return call("ps.PushGradients", std::move(req)).ok();
  };
  std::shared_ptr<ps::Variable> dense = store.Find("dense").value();
  std::vector<float> out(kBatch * kDim);
  auto local_lookup = [&] {
    table->Lookup(lookup_keys[next++ % kBatches].flat<int64_t>(), true, out.data());
    return true;
  };
  std::vector<Tensor> old_keys, new_keys;
  for (int b = 0; b < kBatches; ++b) {
    std::vector<int64_t> o(kBatch), n(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) {
      o[i] = keys[rng() % rows];
      n[i] = static_cast<int64_t>(rng());
    }
    old_keys.push_back(Tensor::FromVector<int64_t>(o));
    new_keys.push_back(Tensor::FromVector<int64_t>(n));
  }
  auto local_old = [&] {
    table->Lookup(old_keys[next++ % kBatches].flat<int64_t>(), true, out.data());
    return true;
  };
  auto local_new = [&] {
    table->Lookup(new_keys[next++ % kBatches].flat<int64_t>(), true, out.data());
    return true;
  };
  auto local_gather = [&] { return dense->Gather(dense_ids[next++ % kBatches]).ok(); };
  auto local_push = [&] { return table->Push(push_keys[next++ % kBatches].flat<int64_t>(), gv.data()).ok(); };
  auto local_dense_push = [&] { return dense->ApplyRowGradients(dense_ids[next++ % kBatches], grads).ok(); };

  Pair lookup, push, local_l, local_p, local_old_new;
  for (int round = 0; round < rounds; ++round) {
    lookup.table.push_back(Rate(reps, emb_lookup));
    lookup.dense.push_back(Rate(reps, dense_gather));
    push.table.push_back(Rate(reps, emb_push));
    push.dense.push_back(Rate(reps, dense_push));
    local_l.table.push_back(Rate(reps, local_lookup));
    local_l.dense.push_back(Rate(reps, local_gather));
    local_p.table.push_back(Rate(reps, local_push));
    local_p.dense.push_back(Rate(reps, local_dense_push));
    local_old_new.table.push_back(Rate(reps, local_new));
    local_old_new.dense.push_back(Rate(reps, local_old));
  }
  bool ok = true;
  for (const Pair* p : {&lookup, &push, &local_l, &local_p, &local_old_new}) {
    for (double r : p->table) ok = ok && r > 0;
    for (double r : p->dense) ok = ok && r > 0;
  }
  Print(report, "lookup 10k keys (half new) RPC", "ps.Gather 10k rows", lookup, "lookup");
  Print(report, "push 10k keys Adam RPC", "ps.PushGradients 10k rows", push, "push");
  Print(report, "lookup 10k keys in process", "Variable::Gather", local_l, "");
  Print(report, "push 10k keys Adam in process", "Variable::ApplyRowGradients", local_p, "");
  Print(report, "lookup 10k new keys in process", "10k keys with rows", local_old_new, "");
  std::printf("%s\n", report.aims().Summary().c_str());
  return report.Finish(json, ok ? 0 : 1);
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::Main(argc, argv); }
