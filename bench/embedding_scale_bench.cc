// The synthetic scale run of hash-keyed embedding tables (issue 21): one table spread over 4 PS,
// each PS holding its part under a memory cap, fed Zipf-distributed keys from a vocabulary that
// grows to tens of millions of distinct ids, so the table outgrows one PS's cap and is held
// across the 4 (the cap evicting the least recently updated rows on each). Then lookups of
// Zipf-distributed keys through EmbeddingClient (keys deduplicated per batch, one request per
// PS, all PS in parallel) against ps.Gather of as many rows of dense f32 variables on the same 4
// PS, measured in the same run over the same connections.
//
// Key stream: each push batch is half brand-new ids (the vocabulary grows by that many) and
// half ids drawn Zipf(s = 1.1) over the vocabulary so far (hot ids come back), so the number of
// distinct ids is known exactly. Rows are dim 8 with SGD (the memory a row costs is mostly the
// table's own bookkeeping at this dim, which the cap accounts for).
//
// Usage: embedding_scale_bench [--quick] [--json=PATH]
//   full:  4 PS capped at 160 MiB, 30M distinct ids, lookups of 100k keys
//   quick: 4 PS capped at 8 MiB, 1M distinct ids (a few seconds; ctest label bench)
//
// Prints distinct ids, rows held per PS and in all, memory per PS against its cap (never
// above), the table's size against one cap, lookups/s and the ratio against the dense gather
// (median of interleaved rounds). Exits 0; 1 when a call fails or a PS exceeds its cap.

#include <algorithm>
#include <cmath>
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
#include "core/sync.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "ps/embedding/embedding_store.h"
#include "ps/embedding/key_partition.h"
#include "ps/ps.capnp.h"
#include "ps/ps_wire.h"
#include "worker/embedding_client.h"

namespace asyncps {
namespace embedding_scale_bench {
namespace {

using bench::Clock;
using bench::Median;
using bench::Seconds;
constexpr int kPs = 4;
constexpr int64_t kDim = 8;
constexpr char kToken[] = "embedding-scale-bench";

// Ranks 1..n with P(rank) ~ rank^-s (s > 1), by inverting the continuous approximation of the
// CDF: cheap, and Zipf-shaped enough for a cache/eviction workload.
class Zipf {
 public:
  explicit Zipf(double s) : s_(s) {}
  int64_t Draw(std::mt19937_64& rng, int64_t n) {
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const double a = 1.0 - s_;
    const double top = std::pow(static_cast<double>(n) + 1.0, a);
    const double x = std::pow(1.0 + u * (top - 1.0), 1.0 / a);
    return std::clamp<int64_t>(static_cast<int64_t>(x), 1, n);
  }

 private:
  const double s_;
};

// The id of vocabulary rank r: scattered over int64 (hot ids are not small numbers).
int64_t IdOf(int64_t rank) { return static_cast<int64_t>(ps::MixKey(static_cast<uint64_t>(rank) * 0x9e3779b97f4a7c15ull)); }

int Main(int argc, char** argv) {
  bool quick;
  std::string json;
  if (!bench::ParseBenchFlags(argc, argv, &quick, &json)) return 2;
  bench::Report report(argc, argv);
  const uint64_t cap = quick ? uint64_t{8} << 20 : uint64_t{160} << 20;
  const int64_t distinct_target = quick ? 1'000'000 : 30'000'000;
  const int64_t push_batch = quick ? 50'000 : 200'000;  // keys per push, half of them new
  const int64_t lookup_batch = quick ? 20'000 : 100'000;
  const int64_t dense_rows = quick ? 100'000 : 2'000'000;  // per PS
  const int rounds = quick ? 3 : 7;
  const int batches_per_round = quick ? 5 : 20;

  net::EventLoop server_loop, client_loop;
  std::vector<std::unique_ptr<bench::EmbeddingPs>> nodes;
  std::vector<net::RpcClient*> clients;
  for (int i = 0; i < kPs; ++i) {
    auto node = bench::StartEmbeddingPs(server_loop, client_loop, i, kToken);
    if (!node.ok()) return 1;
    clients.push_back((*node)->client.get());
    nodes.push_back(*std::move(node));
  }
  EmbeddingClient embeddings(clients, absl::Seconds(120));

  ps::EmbeddingTableConfig config;
  config.name = "emb";
  config.dim = kDim;
  config.optimizer = opt::SGD(0.01f);
  config.memory_cap_bytes = cap;
  if (absl::Status s = embeddings.CreateTable(config, false); !s.ok()) {
    std::fprintf(stderr, "create table: %s\n", s.ToString().c_str());
    return 1;
  }
  // The dense reference: f32 [dense_rows, dim] on every PS.
  for (int i = 0; i < kPs; ++i) {
    if (absl::Status s = bench::CreateUniformDenseVariable(*clients[i], "dense", dense_rows, kDim, nullptr,
                                                           absl::Seconds(120));
        !s.ok()) {
      std::fprintf(stderr, "create dense: %s\n", s.ToString().c_str());
      return 1;
    }
  }

  // Fill: the vocabulary grows to distinct_target ids while hot ids keep coming back.
  std::mt19937_64 rng(21);
  Zipf zipf(1.1);
  int64_t vocabulary = 0;
  uint64_t peak_bytes = 0;
  const auto fill_begin = Clock::now();
  int64_t pushed = 0;
  std::vector<float> grad_values(static_cast<size_t>(push_batch) * kDim, 0.001f);
  while (vocabulary < distinct_target) {
    std::vector<int64_t> keys;
    keys.reserve(static_cast<size_t>(push_batch));
    const int64_t fresh = std::min(push_batch / 2, distinct_target - vocabulary);
    for (int64_t i = 0; i < fresh; ++i) keys.push_back(IdOf(++vocabulary));
    while (static_cast<int64_t>(keys.size()) < push_batch) keys.push_back(IdOf(zipf.Draw(rng, vocabulary)));
    const int64_t n = static_cast<int64_t>(keys.size());
    Tensor grads = Tensor::FromVector<float>({n, kDim}, std::vector<float>(grad_values.begin(), grad_values.begin() + n * kDim));
    if (absl::Status s = embeddings.Push("emb", Tensor::FromVector(keys), grads); !s.ok()) {
      std::fprintf(stderr, "push: %s\n", s.ToString().c_str());
      return 1;
    }
    pushed += n;
    for (auto& node : nodes) peak_bytes = std::max(peak_bytes, node->tables.Find("emb").value()->Stats().memory_bytes);
  }
  const double fill_seconds = Seconds(fill_begin);

  uint64_t rows = 0, bytes = 0, evicted = 0;
  bool over_cap = peak_bytes > cap;
  for (int i = 0; i < kPs; ++i) {
    const ps::EmbeddingTableStats s = nodes[i]->tables.Find("emb").value()->Stats();
    rows += s.rows;
    bytes += s.memory_bytes;
    evicted += s.evicted_cap;
    over_cap = over_cap || s.memory_bytes > cap;
    std::printf("ps %d: %llu rows, %.1f MiB of its %.0f MiB cap, %llu evicted by the cap\n", i,
                static_cast<unsigned long long>(s.rows), s.memory_bytes / 1048576.0, cap / 1048576.0,
                static_cast<unsigned long long>(s.evicted_cap));
  }
  const double vs_cap = static_cast<double>(bytes) / static_cast<double>(cap);
  std::printf("fill: %lld distinct ids (%lld keys pushed, %.1f M keys/s): %llu rows, %.1f MiB held over %d PS = %.2fx "
              "one PS's cap; peak per PS %.1f MiB (cap %.0f MiB)%s\n",
              static_cast<long long>(vocabulary), static_cast<long long>(pushed), pushed / fill_seconds / 1e6,
              static_cast<unsigned long long>(rows), bytes / 1048576.0, kPs, vs_cap, peak_bytes / 1048576.0,
              cap / 1048576.0, over_cap ? "  OVER THE CAP" : "");
  report.Add({.name = "table held across 4 PS",
              .value = static_cast<double>(bytes) / 1048576.0,
              .unit = "MiB",
              .reference = "one PS's memory cap",
              .reference_value = cap / 1048576.0,
              .note = absl::StrCat(vocabulary, " distinct ids, ", rows, " rows held, ", evicted,
                                   " evicted by the caps; peak per PS ", peak_bytes, " bytes")});

  // Lookups (Zipf over the whole vocabulary, evaluation: nothing inserted or counted) against
  // dense gathers of as many rows, split over the PS the same way.
  struct Batch {
    Tensor keys;
    std::vector<Tensor> dense_ids;  // per PS
  };
  std::vector<Batch> batches(static_cast<size_t>(batches_per_round));
  for (Batch& b : batches) {
    std::vector<int64_t> keys;
    std::vector<std::vector<int64_t>> ids(kPs);
    for (int64_t i = 0; i < lookup_batch; ++i) {
      const int64_t key = IdOf(zipf.Draw(rng, vocabulary));
      keys.push_back(key);
      ids[static_cast<size_t>(ps::PsForKey(key, kPs))].push_back(static_cast<int64_t>(ps::MixKey(static_cast<uint64_t>(key)) % static_cast<uint64_t>(dense_rows)));
    }
    b.keys = Tensor::FromVector(keys);
    for (auto& list : ids) b.dense_ids.push_back(Tensor::FromVector(list));
  }
  auto gather = [&](const Batch& b) {
    Mutex mu;
    int left = kPs;
    bool ok = true;
    for (int p = 0; p < kPs; ++p) {
      net::OutMessage req;
      auto list = req.InitRequestBody<wire::GatherRequest>().initLookups(1);
      list[0].setName("dense");
      req.AddTensor(b.dense_ids[static_cast<size_t>(p)], list[0].initIds());
      clients[p]->CallAsync("ps.Gather", std::move(req), {absl::Seconds(60), std::nullopt},
                            [&](absl::StatusOr<net::InMessage> r) {
                              MutexLock lock(&mu);
                              ok = ok && r.ok();
                              --left;
                            });
    }
    MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](int* l) { return *l == 0; }, &left));
    return ok;
  };
  std::vector<double> lookup_rates, gather_rates, ratios;
  for (int r = 0; r < rounds; ++r) {
    auto begin = Clock::now();
    for (const Batch& b : batches) {
      if (!embeddings.Lookup("emb", b.keys, /*train=*/false).ok()) return 1;
    }
    const double lookup = static_cast<double>(batches.size() * lookup_batch) / Seconds(begin);
    begin = Clock::now();
    for (const Batch& b : batches) {
      if (!gather(b)) return 1;
    }
    const double dense = static_cast<double>(batches.size() * lookup_batch) / Seconds(begin);
    lookup_rates.push_back(lookup);
    gather_rates.push_back(dense);
    ratios.push_back(lookup / dense);
  }
  const double lookup = Median(lookup_rates), dense = Median(gather_rates), ratio = Median(ratios);
  std::printf("lookups of %lld Zipf keys over %d PS: %.2f M keys/s | dense ps.Gather of as many rows: %.2f M rows/s "
              "| ratio %.2fx (median of %d rounds)\n",
              static_cast<long long>(lookup_batch), kPs, lookup / 1e6, dense / 1e6, ratio, rounds);
  report.Add({.name = "lookup Zipf keys, table over 4 capped PS",
              .value = lookup,
              .unit = "keys/s",
              .reference = "ps.Gather of as many dense rows on the same 4 PS",
              .reference_value = dense,
              .ratio = ratio,
              .note = absl::StrFormat("%d keys per call, dim %d; %lld distinct ids; median of %d rounds",
                                      static_cast<int>(lookup_batch), static_cast<int>(kDim),
                                      static_cast<long long>(vocabulary), rounds)});
  for (auto& n : nodes) n->client.reset();
  for (auto& n : nodes) n->server.reset();
  return report.Finish(json, over_cap ? 1 : 0);
}

}  // namespace
}  // namespace embedding_scale_bench
}  // namespace asyncps

int main(int argc, char** argv) { return asyncps::embedding_scale_bench::Main(argc, argv); }
