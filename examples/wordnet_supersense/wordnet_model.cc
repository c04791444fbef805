#include "examples/wordnet_supersense/wordnet_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "asyncps/status.h"
#include "asyncps/torch.h"

namespace asyncps::wordnet {
namespace {

template <typename Fn>
auto CatchTorch(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("torch: ", e.what_without_backtrace()));
  }
}

// Epoch `epoch`'s order of the `n` training examples: the same on every process (a seeded
// Fisher-Yates over a fixed generator), so a worker and the reference see the same batches.
std::vector<int32_t> EpochOrder(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<int32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  std::mt19937_64 rng(seed * 1'000'003 + static_cast<uint64_t>(epoch));
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

int64_t BatchesPerEpoch(size_t n, int batch_size) {
  return (static_cast<int64_t>(n) + batch_size - 1) / batch_size;
}

// A batch as EmbeddingBag input: every example's keys one after another, each example's
// first position, and the labels.
struct Batch {
  torch::Tensor keys;     // i64 [total keys]
  torch::Tensor offsets;  // i64 [examples]
  torch::Tensor labels;   // i64 [examples]
};

Batch MakeBatch(const std::vector<Example>& examples, const int32_t* index, size_t count) {
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) total += examples[static_cast<size_t>(index[i])].keys.size();
  Batch b{torch::empty({static_cast<int64_t>(total)}, torch::kLong),
          torch::empty({static_cast<int64_t>(count)}, torch::kLong),
          torch::empty({static_cast<int64_t>(count)}, torch::kLong)};
  int64_t* keys = b.keys.data_ptr<int64_t>();
  int64_t* offsets = b.offsets.data_ptr<int64_t>();
  int64_t* labels = b.labels.data_ptr<int64_t>();
  int64_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    const Example& e = examples[static_cast<size_t>(index[i])];
    offsets[i] = at;
    labels[i] = e.label;
    std::copy(e.keys.begin(), e.keys.end(), keys + at);
    at += static_cast<int64_t>(e.keys.size());
  }
  return b;
}

// Running statistics and the progress line (at most once a second).
class Progress {
 public:
  Progress(const Options& options, int64_t total_steps) : options_(options), total_steps_(total_steps) {}
  void Step(double loss, int64_t examples) {
    ++steps_;
    examples_ += examples;
    recent_loss_ = steps_ == 1 ? loss : 0.98 * recent_loss_ + 0.02 * loss;
    const absl::Time now = absl::Now();
    if (!options_.progress || now - last_ < absl::Seconds(1)) return;
    std::printf("epoch %lld/%d  step %lld/%lld  %.0f examples/s  loss %.4f\n",
                static_cast<long long>(std::min<int64_t>(options_.epochs, steps_ * options_.epochs / total_steps_ + 1)),
                options_.epochs, static_cast<long long>(steps_), static_cast<long long>(total_steps_),
                static_cast<double>(examples_ - reported_) / absl::ToDoubleSeconds(now - last_), recent_loss_);
    std::fflush(stdout);
    last_ = now;
    reported_ = examples_;
  }
  void Finish(absl::Time start, Result* result) const {
    result->steps = steps_;
    result->examples = examples_;
    result->train_seconds = std::max(1e-9, absl::ToDoubleSeconds(absl::Now() - start));
    result->examples_per_second = static_cast<double>(examples_) / result->train_seconds;
    result->final_loss = recent_loss_;
  }

 private:
  const Options& options_;
  const int64_t total_steps_;
  int64_t steps_ = 0;
  int64_t examples_ = 0;
  int64_t reported_ = 0;
  double recent_loss_ = 0;
  absl::Time last_ = absl::Now();
};

absl::Status CheckOptions(const Options& options) {
  if (options.epochs < 1 || options.batch_size < 1 || options.dim < 1 || options.dim > 4096 ||
      options.buckets < 1 || !(options.learning_rate > 0) ||
      !(options.initial_accumulator >= 0)) {
    return absl::InvalidArgumentError("epochs, batch size, buckets and learning rate must be positive, dim in 1..4096");
  }
  return absl::OkStatus();
}

// Rows start uniform in [-1/dim, 1/dim] (fastText's initialisation).
float InitScale(int dim) { return 1.0f / static_cast<float>(dim); }

}  // namespace

void SetTorchThreads(int threads) { torch_bridge::SetNumThreads(threads); }

absl::StatusOr<Result> TrainLocal(const Options& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(Corpus corpus, ReadCorpus(options.data_dir));
  return CatchTorch([&]() -> absl::StatusOr<Result> {
    torch::manual_seed(options.seed);
    torch::nn::EmbeddingBag embedding(torch::nn::EmbeddingBagOptions(options.buckets, options.dim)
                                          .mode(torch::kMean)
                                          .sparse(true));
    {
      torch::NoGradGuard no_grad;
      embedding->weight.uniform_(-InitScale(options.dim), InitScale(options.dim));
    }
    torch::nn::Linear linear(options.dim, kNumClasses);
    std::vector<torch::Tensor> params = {embedding->weight};
    for (const torch::Tensor& p : linear->parameters()) params.push_back(p);
    torch::optim::Adagrad adagrad(
        params, torch::optim::AdagradOptions(options.learning_rate).initial_accumulator_value(options.initial_accumulator).eps(1e-7));
    auto forward = [&](const Batch& b) {
      return linear->forward(embedding->forward(b.keys.remainder(options.buckets), b.offsets));
    };

    const int64_t per_epoch = BatchesPerEpoch(corpus.train.size(), options.batch_size);
    Progress progress(options, per_epoch * options.epochs);
    const absl::Time start = absl::Now();
    for (int epoch = 0; epoch < options.epochs; ++epoch) {
      const std::vector<int32_t> order = EpochOrder(corpus.train.size(), options.seed, epoch);
      for (int64_t b = 0; b < per_epoch; ++b) {
        const size_t begin = static_cast<size_t>(b * options.batch_size);
        const size_t count = std::min(order.size() - begin, static_cast<size_t>(options.batch_size));
        const Batch batch = MakeBatch(corpus.train, order.data() + begin, count);
        adagrad.zero_grad();
        torch::Tensor loss = torch::nn::functional::cross_entropy(forward(batch), batch.labels);
        loss.backward();
        adagrad.step();
        progress.Step(loss.item<double>(), static_cast<int64_t>(count));
      }
    }
    Result result;
    progress.Finish(start, &result);

    torch::NoGradGuard no_grad;
    int64_t correct = 0;
    std::vector<int32_t> all(corpus.test.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    for (size_t begin = 0; begin < all.size(); begin += 4096) {
      const Batch batch = MakeBatch(corpus.test, all.data() + begin, std::min<size_t>(4096, all.size() - begin));
      correct += forward(batch).argmax(1).eq(batch.labels).sum().item<int64_t>();
    }
    result.test_accuracy = all.empty() ? 0 : static_cast<double>(correct) / static_cast<double>(all.size());
    return result;
  });
}

Program MakeProgram() { return Program(); }

absl::StatusOr<Result> Train(ParameterServerStrategy&, ClusterCoordinator&, const Options&) {
  return absl::UnimplementedError("not yet");
}

}  // namespace asyncps::wordnet
