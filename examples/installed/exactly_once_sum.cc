// A user program built outside the asyncps tree against the installed package (see
// CMakeLists.txt here); it includes only "asyncps/..." headers.
//
// The chief hands the numbers 0..kNumbers-1 out in batches (dynamic sharding: each batch to
// exactly one closure), and every closure, on whichever worker runs it, adds its batch to
// variables on the parameter servers and pushes a gradient through a server-side optimizer:
//   total += sum(batch), seen[i % kBuckets] += 1 for every i in the batch, w -= lr * 1.
// Once the epoch ends, the chief checks the exact results: the fetched batch sums and `total`
// equal kNumbers * (kNumbers - 1) / 2, every bucket of `seen` counts its numbers, and
// w == 1 - lr * (number of batches). Any mismatch exits non-zero.
//
//   asyncps_launch --ps 2 --workers 2 -- ./exactly_once_sum
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "asyncps/asyncps.h"
#include "asyncps/process.h"

namespace {

constexpr int64_t kNumbers = 1000;
constexpr int64_t kBatch = 25;
constexpr int64_t kBuckets = 8;
constexpr float kLearningRate = 0.5f;

asyncps::Program MakeProgram() {
  asyncps::Program program;
  program.AddDataset(
      "numbers", [](const asyncps::DatasetContext& ctx) -> absl::StatusOr<asyncps::data::Dataset> {
        ASSIGN_OR_RETURN(int64_t n, ctx.IntArg("n"));
        ASSIGN_OR_RETURN(int64_t batch, ctx.IntArg("batch"));
        return asyncps::data::Dataset::Range(0, n).Batch(batch);
      });
  program.AddFunction(
      "add_batch", [](asyncps::StepContext& ctx) -> absl::StatusOr<asyncps::Values> {
        absl::StatusOr<asyncps::data::Element> batch = ctx.Next(0);
        if (asyncps::data::IsEndOfData(batch.status())) {
          return asyncps::Values{asyncps::Tensor::Scalar<int64_t>(0)};  // the epoch is over
        }
        if (!batch.ok()) return batch.status();
        const asyncps::Tensor& numbers = batch->at(0);
        int64_t sum = 0;
        std::vector<int64_t> buckets;
        for (int64_t x : numbers.flat<int64_t>()) {
          sum += x;
          buckets.push_back(x % kBuckets);
        }
        // Both updates in one request per PS; then the gradient through w's optimizer.
        RETURN_IF_ERROR(ctx.Update(
            {{"total", asyncps::UpdateKind::kAdd, asyncps::Tensor::Scalar<int64_t>(sum), {}},
             {"seen", asyncps::UpdateKind::kAdd,
              asyncps::Tensor::FromVector(std::vector<int64_t>(buckets.size(), 1)),
              asyncps::Tensor::FromVector(buckets)}}));
        RETURN_IF_ERROR(ctx.PushGradients({{"w", asyncps::Tensor::Scalar(1.0f), {}}}));
        return asyncps::Values{asyncps::Tensor::Scalar<int64_t>(sum)};
      });
  return program;
}

absl::Status Expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok:      " : "MISMATCH:", what.c_str());
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::Status RunChief(asyncps::ChiefProcess& chief, const asyncps::Program& program) {
  asyncps::ParameterServerStrategy strategy(chief);
  ASSIGN_OR_RETURN(
      asyncps::ShardedVariable total,
      strategy.CreateVariable("total", asyncps::init::Zeros({}, asyncps::DType::kI64)));
  ASSIGN_OR_RETURN(
      asyncps::ShardedVariable seen,
      strategy.CreateVariable("seen", asyncps::init::Zeros({kBuckets}, asyncps::DType::kI64)));
  ASSIGN_OR_RETURN(
      asyncps::ShardedVariable w,
      strategy.CreateVariable("w", asyncps::init::Scalar(1.0f), asyncps::opt::SGD(kLearningRate)));

  asyncps::ClusterCoordinator coordinator(strategy, program);
  ASSIGN_OR_RETURN(
      asyncps::PerWorkerDataset numbers,
      coordinator.CreatePerWorkerDataset(
          "numbers", {{"n", std::to_string(kNumbers)}, {"batch", std::to_string(kBatch)}},
          asyncps::ShardingPolicy::kDynamic, /*records_per_split=*/kBatch));
  ASSIGN_OR_RETURN(asyncps::PerWorkerValues iterator, numbers.MakeIterator());

  // Schedule until the epoch ends: Join says OutOfRange once every batch was handed out and
  // nothing runs; closures that found no batch say OutOfRange (or sum 0) too.
  int64_t fetched_sum = 0;
  for (int round = 0;; ++round) {
    if (round == 100) return absl::DeadlineExceededError("the epoch did not end in 100 rounds");
    std::vector<asyncps::RemoteValue> results;
    for (int i = 0; i < 16; ++i) {
      ASSIGN_OR_RETURN(asyncps::RemoteValue r, coordinator.Schedule("add_batch", {iterator}));
      results.push_back(r);
    }
    const absl::Status joined = coordinator.Join();
    for (const asyncps::RemoteValue& r : results) {
      absl::StatusOr<asyncps::Values> values = r.Fetch();
      if (values.ok()) {
        fetched_sum += values->at(0).data<int64_t>()[0];
      } else if (!absl::IsOutOfRange(values.status())) {
        return values.status();
      }
    }
    if (absl::IsOutOfRange(joined)) break;
    RETURN_IF_ERROR(joined);
  }

  constexpr int64_t kExpectedSum = kNumbers * (kNumbers - 1) / 2;
  constexpr int64_t kBatches = kNumbers / kBatch;
  ASSIGN_OR_RETURN(asyncps::Tensor total_value, total.Read());
  ASSIGN_OR_RETURN(asyncps::Tensor seen_value, seen.Read());
  ASSIGN_OR_RETURN(asyncps::Tensor w_value, w.Read());
  RETURN_IF_ERROR(
      Expect(fetched_sum == kExpectedSum, "fetched batch sums = " + std::to_string(fetched_sum) +
                                              ", expected " + std::to_string(kExpectedSum)));
  const int64_t t = total_value.data<int64_t>()[0];
  RETURN_IF_ERROR(Expect(t == kExpectedSum, "total = " + std::to_string(t) + ", expected " +
                                                std::to_string(kExpectedSum)));
  for (int64_t b = 0; b < kBuckets; ++b) {
    const int64_t got = seen_value.data<int64_t>()[b];
    // How many i < kNumbers have i % kBuckets == b.
    const int64_t want = (kNumbers - b + kBuckets - 1) / kBuckets;
    RETURN_IF_ERROR(Expect(got == want, "seen[" + std::to_string(b) + "] = " + std::to_string(got) +
                                            ", expected " + std::to_string(want)));
  }
  const float w_got = w_value.data<float>()[0];
  const float w_want = 1.0f - kLearningRate * kBatches;
  RETURN_IF_ERROR(
      Expect(std::fabs(w_got - w_want) < 1e-6f, "w = " + std::to_string(w_got) + ", expected " +
                                                    std::to_string(w_want) + " (SGD on the PS)"));
  std::printf("OK: %lld numbers in %lld batches, each applied exactly once\n",
              static_cast<long long>(kNumbers), static_cast<long long>(kBatches));
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<asyncps::ClusterSpec> cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "exactly_once_sum: %s\n", cluster.status().ToString().c_str());
    return asyncps::kExitUsage;
  }
  // Settings every role takes (token, /metrics port, log level), from flags and environment.
  const asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  asyncps::Program program = MakeProgram();
  if (!cluster->is_chief()) return asyncps::Serve(*cluster, program, process);  // ps and workers serve

  // The chief: its process (I/O loop, PS connections, /metrics), then the strategy on it.
  asyncps::InitLogging("chief", cluster->task_index(), process.log_level);
  absl::StatusOr<std::unique_ptr<asyncps::ChiefProcess>> chief =
      asyncps::ChiefProcess::Create(*cluster, {.process = process});
  const absl::Status status = chief.ok() ? RunChief(**chief, program) : chief.status();
  if (!status.ok()) {
    std::fprintf(stderr, "exactly_once_sum failed: %s\n", status.ToString().c_str());
    return asyncps::ExitCodeForStatus(status);
  }
  return 0;
}
