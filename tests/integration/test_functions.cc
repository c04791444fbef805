#include "tests/integration/test_functions.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/compression.h"
#include "core/incarnation.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "worker/step_context.h"

namespace asyncps::testutil {
namespace {

class Counter : public Resource {
 public:
  int64_t Bump() { return ++count_; }
  const uint64_t instance = RandomId();

 private:
  std::atomic<int64_t> count_{0};
};

class RegressionData : public Resource {
 public:
  explicit RegressionData(int seed) : rng_(static_cast<uint64_t>(seed) * 7919 + 1) {}

  // A batch of examples, each kFeaturesPerExample distinct feature ids with value 1.
  std::vector<std::vector<int64_t>> Batch(int size) {
    MutexLock lock(&mu_);
    std::uniform_int_distribution<int64_t> feature(0, kVocab - 1);
    std::vector<std::vector<int64_t>> batch(static_cast<size_t>(size));
    for (auto& example : batch) {
      while (example.size() < kFeaturesPerExample) {
        const int64_t f = feature(rng_);
        if (std::find(example.begin(), example.end(), f) == example.end()) example.push_back(f);
      }
    }
    return batch;
  }

 private:
  Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
};

// "count_ids" and, with `add_sum`, "count_and_sum_ids" (see test_functions.h).
absl::StatusOr<Values> CountIds(StepContext& ctx, bool add_sum) {
  absl::StatusOr<data::Element> batch = ctx.Next(0);
  if (data::IsEndOfData(batch.status())) {
    return Values{Tensor::Scalar<int64_t>(ctx.worker_index()), Tensor::Scalar<int64_t>(0)};
  }
  if (!batch.ok()) return batch.status();
  const Tensor& ids = batch->at(0);
  const int64_t n = ids.dim(0);
  RETURN_IF_ERROR(ctx.Scatter(UpdateKind::kAdd, "counts", ids, Tensor::FromVector(std::vector<int64_t>(n, 1))));
  if (add_sum) {
    int64_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += ids.data<int64_t>()[i];
    RETURN_IF_ERROR(ctx.AssignAdd("total", Tensor::Scalar<int64_t>(sum)));
  }
  ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
  while (std::chrono::steady_clock::now() < end) {
    if (ctx.cancelled()) return absl::CancelledError("cancelled");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return Values{Tensor::Scalar<int64_t>(ctx.worker_index()), Tensor::Scalar<int64_t>(n)};
}

absl::StatusOr<Values> SparseRegressionStep(StepContext& ctx) {
  ASSIGN_OR_RETURN(RegressionData * data, ctx.resource<RegressionData>(0));
  constexpr int kBatch = 32;
  const auto batch = data->Batch(kBatch);
  // Unique features of the batch, gathered once from their shards.
  absl::flat_hash_map<int64_t, int64_t> slot;
  std::vector<int64_t> ids;
  for (const auto& example : batch) {
    for (int64_t f : example) {
      if (slot.emplace(f, static_cast<int64_t>(ids.size())).second) ids.push_back(f);
    }
  }
  ASSIGN_OR_RETURN(Tensor w, ctx.Gather("w", Tensor::FromVector(ids)));
  Tensor grad(DType::kF32, {static_cast<int64_t>(ids.size()), 1});
  double loss = 0;
  for (const auto& example : batch) {
    float pred = 0, target = 0;
    for (int64_t f : example) {
      pred += w.data<float>()[slot[f]];
      target += TrueWeight(f);
    }
    const float residual = pred - target;
    loss += 0.5 * residual * residual;
    for (int64_t f : example) grad.data<float>()[slot[f]] += residual / kBatch;
  }
  RETURN_IF_ERROR(ctx.PushGradients({{"w", grad, Tensor::FromVector(ids)}}));
  return Values{Tensor::Scalar(static_cast<float>(loss / kBatch))};
}

}  // namespace

float TrueWeight(int64_t feature) { return static_cast<float>(std::sin(0.37 * static_cast<double>(feature))); }

Program MakeTestProgram() {
  Program program;
  program.AddFunction("increment", [](StepContext& ctx) -> absl::StatusOr<Values> {
    RETURN_IF_ERROR(ctx.AssignAdd("iterations", Tensor::Scalar<int64_t>(1)));
    return Values{};
  });
  program.AddFunction("slow_increment", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(0));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    // The workload: time passing in slices, so cancellation and SIGKILL land mid-closure.
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    RETURN_IF_ERROR(ctx.AssignAdd("iterations", Tensor::Scalar<int64_t>(1)));
    return Values{Tensor::Scalar<int64_t>(ctx.worker_index())};
  });
  program.AddFunction("slow_increment_then_mirror", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(0));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    RETURN_IF_ERROR(ctx.AssignAdd("iterations", Tensor::Scalar<int64_t>(1)));
    RETURN_IF_ERROR(ctx.AssignAdd("mirror", Tensor::Scalar<int64_t>(1)));
    return Values{};
  });
  program.AddFunction("fail", [](StepContext&) -> absl::StatusOr<Values> {
    return absl::InvalidArgumentError("intentional failure");
  });
  program.AddFunction("noop", [](StepContext&) -> absl::StatusOr<Values> { return Values{}; });
  program.AddFunction("use_counter", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Counter * counter, ctx.resource<Counter>(0));
    const int64_t count = counter->Bump();
    return Values{Tensor::FromVector<int64_t>(
        {3}, {ctx.worker_index(), count, static_cast<int64_t>(counter->instance & 0x7fffffffffffffff)})};
  });
  program.AddFunction("sparse_regression_step", SparseRegressionStep);
  program.AddFunction("mark_then_work", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor honour, ctx.arg(1));
    RETURN_IF_ERROR(ctx.AssignAdd("started", Tensor::Scalar<int64_t>(1)));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (honour.data<int64_t>()[0] != 0 && ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Values{};
  });
  program.AddFunction("whoami", [](StepContext& ctx) -> absl::StatusOr<Values> {
    return Values{Tensor::Scalar<int64_t>(ctx.worker_index())};
  });
  program.AddFunction("read_iterations", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor t, ctx.Read("iterations"));
    return Values{t};
  });
  program.AddFunction("next_element", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(data::Element element, ctx.Next(0));
    return Values{Tensor::Scalar<int64_t>(ctx.worker_index()), element.at(0)};
  });
  program.AddFunction("add_to_row", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor row, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    RETURN_IF_ERROR(ctx.Scatter(UpdateKind::kAdd, "rows", Tensor::FromVector<int64_t>({1}, {row.data<int64_t>()[0]}),
                                Tensor::FromVector<int64_t>({1}, {1})));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Values{};
  });
  // Exactly once through the fused push-and-read (StepContext::PushGradientsAndReadAsync):
  // one request per PS pushes gradient -1 to row `row` of the f32 vector "fused_rows" (SGD at
  // learning rate 1: +1) and answers "fused_rows" as it stands once the push is applied (a
  // retried push found applied answers it too). The row read must then be exactly 1: 0 would be
  // a read from before the push, 2 a push applied twice. Then works `ms`, so a worker killed
  // then has applied the push but not answered.
  program.AddFunction("push_and_read_row", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor row_arg, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    const int64_t row = row_arg.data<int64_t>()[0];
    StepContext::PushAndRead fused = ctx.PushGradientsAndReadAsync(
        {{"fused_rows", Tensor::FromVector<float>({1}, {-1.0f}), Tensor::FromVector<int64_t>({1}, {row})}},
        {"fused_rows"});
    RETURN_IF_ERROR(fused.pushed.Get());
    ASSIGN_OR_RETURN(VersionedValues read, fused.values.Get());
    const float seen = read.values.at(0).data<float>()[row];
    if (seen != 1.0f) {
      return absl::InternalError(absl::StrCat("push_and_read_row: row ", row, " read ", seen, " after its push"));
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Values{};
  });
  // push_and_read_row with a dense gradient compressed top-k (core/compression.h; per push:
  // GradientUpdate::compression), error feedback on: -1 at `row`, 0 elsewhere, over the whole
  // [N] "fused_rows" (each shard's top 1% is its largest magnitude: the -1, sent exactly).
  program.AddFunction("push_compressed_and_read_row", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor row_arg, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    const int64_t row = row_arg.data<int64_t>()[0];
    ASSIGN_OR_RETURN(Tensor current, ctx.Read("fused_rows"));
    std::vector<float> dense(static_cast<size_t>(current.num_elements()), 0.0f);
    if (row < 0 || row >= static_cast<int64_t>(dense.size())) return absl::InvalidArgumentError("row out of range");
    dense[static_cast<size_t>(row)] = -1.0f;
    GradientUpdate gradient{"fused_rows", Tensor::FromVector<float>(current.shape(), absl::MakeConstSpan(dense)),
                            std::nullopt};
    gradient.compression = Compression{CompressionKind::kTopK, 0.01};
    StepContext::PushAndRead fused = ctx.PushGradientsAndReadAsync({gradient}, {"fused_rows"});
    RETURN_IF_ERROR(fused.pushed.Get());
    ASSIGN_OR_RETURN(VersionedValues read, fused.values.Get());
    const float seen = read.values.at(0).data<float>()[row];
    if (seen != 1.0f) {
      return absl::InternalError(absl::StrCat("push_compressed_and_read_row: row ", row, " read ", seen));
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return Values{};
  });
  // Staleness (tests/integration/staleness_test.cc): adds 1 to rows[row] (exactly once), reads
  // "seen" (f32), works `ms`, then pushes gradient -1 to row v of "seen", v being the version
  // of "seen" this step read. With SGD at learning rate 1, each applied push adds 1 to the row
  // of the version it was computed from: under max_staleness 0 every applied push is fresh, so
  // "seen" ends with rows 0..N-1 at exactly 1; a stale push applied would make a row 2.
  program.AddFunction("count_and_mark_version", [](StepContext& ctx) -> absl::StatusOr<Values> {
    ASSIGN_OR_RETURN(Tensor row, ctx.arg(0));
    ASSIGN_OR_RETURN(Tensor ms, ctx.arg(1));
    RETURN_IF_ERROR(ctx.Scatter(UpdateKind::kAdd, "rows", Tensor::FromVector<int64_t>({1}, {row.data<int64_t>()[0]}),
                                Tensor::FromVector<int64_t>({1}, {1})));
    RETURN_IF_ERROR(ctx.Read("seen").status());
    const ShardVersions versions = ctx.versions();
    const auto version = versions.find("seen");
    if (version == versions.end()) return absl::InternalError("ps.Read reported no version for 'seen'");
    const int64_t v = version->second;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms.data<int64_t>()[0]);
    while (std::chrono::steady_clock::now() < end) {
      if (ctx.cancelled()) return absl::CancelledError("cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    RETURN_IF_ERROR(ctx.PushGradients(
        {{"seen", Tensor::FromVector<float>({1}, {-1.0f}), Tensor::FromVector<int64_t>({1}, {v})}}));
    return Values{};
  });
  program.AddDataset("range", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
    return data::Dataset::Range(0, n).Shard(ctx.num_workers(), ctx.worker_index());
  });
  program.AddDataset("ids", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
    ASSIGN_OR_RETURN(int64_t batch, ctx.IntArg("batch"));
    return data::Dataset::Range(0, n)
        .Shuffle(256, /*seed=*/static_cast<uint64_t>(ctx.worker_index()))
        .Batch(batch)
        .Prefetch(2);
  });
  program.AddFunction("count_ids", [](StepContext& ctx) { return CountIds(ctx, /*add_sum=*/false); });
  // count_ids, with a second update in another group: the batch's id sum added to the scalar
  // "total" (the step's call 2), as a user's counter program keeps a checksum beside its counts.
  program.AddFunction("count_and_sum_ids", [](StepContext& ctx) { return CountIds(ctx, /*add_sum=*/true); });
  program.AddDataset("idx_file", [](const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    ASSIGN_OR_RETURN(std::string path, ctx.Arg("path"));
    return data::Dataset::IdxFile(path);
  });
  program.AddResource("counter", [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
    return std::make_unique<Counter>();
  });
  program.AddResource("picky_counter", [](const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    ASSIGN_OR_RETURN(int64_t refuse, ctx.IntArg("fail_on_worker"));
    if (refuse == ctx.worker_index()) {
      return absl::FailedPreconditionError(absl::StrCat("picky_counter refuses worker ", ctx.worker_index()));
    }
    return std::make_unique<Counter>();
  });
  program.AddResource("regression_data", [](const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    return std::make_unique<RegressionData>(ctx.worker_index());
  });
  return program;
}

}  // namespace asyncps::testutil
