#include "examples/wordnet_supersense/wordnet_model.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "asyncps/coordinator.h"
#include "asyncps/optimizers.h"
#include "asyncps/status.h"
#include "asyncps/step_context.h"
#include "asyncps/strategy.h"
#include "asyncps/sync.h"
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
  Progress(const Options& options, int64_t total_steps)
      : options_(options), total_steps_(total_steps) {}
  void Step(double loss, int64_t examples) {
    ++steps_;
    examples_ += examples;
    recent_loss_ = steps_ == 1 ? loss : 0.98 * recent_loss_ + 0.02 * loss;
    const absl::Time now = absl::Now();
    if (!options_.progress || now - last_ < absl::Seconds(1)) return;
    std::printf("epoch %lld/%d  step %lld/%lld  %.0f examples/s  loss %.4f\n",
                static_cast<long long>(std::min<int64_t>(
                    options_.epochs, steps_ * options_.epochs / total_steps_ + 1)),
                options_.epochs, static_cast<long long>(steps_),
                static_cast<long long>(total_steps_),
                static_cast<double>(examples_ - reported_) / absl::ToDoubleSeconds(now - last_),
                recent_loss_);
    std::fflush(stdout);
    last_ = now;
    reported_ = examples_;
  }
  int64_t steps() const { return steps_; }
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
      options.buckets < 1 || !(options.learning_rate > 0) || !(options.initial_accumulator >= 0)) {
    return absl::InvalidArgumentError(
        "epochs, batch size, buckets and learning rate must be positive, dim in 1..4096");
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
    torch::optim::Adagrad adagrad(params,
                                  torch::optim::AdagradOptions(options.learning_rate)
                                      .initial_accumulator_value(options.initial_accumulator)
                                      .eps(1e-7));
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
        const size_t count =
            std::min(order.size() - begin, static_cast<size_t>(options.batch_size));
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
      const Batch batch =
          MakeBatch(corpus.test, all.data() + begin, std::min<size_t>(4096, all.size() - begin));
      correct += forward(batch).argmax(1).eq(batch.labels).sum().item<int64_t>();
    }
    result.test_accuracy =
        all.empty() ? 0 : static_cast<double>(correct) / static_cast<double>(all.size());
    return result;
  });
}

namespace {

constexpr char kTable[] = "wordnet/embedding";
constexpr char kPrefix[] =
    "wordnet/";  // the linear layer's variables: wordnet/weight, wordnet/bias

EmbeddingInitializer TableInitializer(const Options& options) {
  EmbeddingInitializer init;
  init.kind = EmbeddingInitializer::Kind::kUniform;
  init.minval = -InitScale(options.dim);
  init.maxval = InitScale(options.dim);
  init.seed = options.seed;
  return init;
}

OptimizerConfig Adagrad(const Options& options) {
  return opt::Adagrad(options.learning_rate, options.initial_accumulator, 1e-7f);
}

// A worker's copy of the training split, its linear layer (parameters pulled every step) and
// the bag over the table.
class ModelResource : public Resource {
 public:
  ModelResource(Corpus corpus, int batch_size, uint64_t seed, int dim)
      : corpus(std::move(corpus)),
        batch_size(batch_size),
        seed(seed),
        linear(dim, kNumClasses),
        bag(kTable, dim, torch_bridge::EmbeddingBag::Combiner::kMean) {}
  const Corpus corpus;
  const int batch_size;
  const uint64_t seed;
  // One step at a time uses the model (closures may overlap on a worker).
  Mutex mu;
  torch::nn::Linear linear ABSL_GUARDED_BY(mu);
  torch_bridge::EmbeddingBag bag ABSL_GUARDED_BY(mu);
  int64_t order_epoch ABSL_GUARDED_BY(mu) = -1;
  std::vector<int32_t> order ABSL_GUARDED_BY(mu);
};

// Args: {epoch, batch} (i64 [2]), a wordnet_model. Returns {loss, examples}.
absl::StatusOr<Values> TrainStep(StepContext& ctx) {
  ASSIGN_OR_RETURN(Tensor which, ctx.arg(0));
  if (which.dtype() != DType::kI64 || which.num_elements() != 2) {
    return absl::InvalidArgumentError("wordnet_train_step wants i64 [2] {epoch, batch}");
  }
  const int64_t epoch = which.data<int64_t>()[0], b = which.data<int64_t>()[1];
  ASSIGN_OR_RETURN(ModelResource * model, ctx.resource<ModelResource>(1));
  MutexLock lock(&model->mu);
  const size_t n = model->corpus.train.size();
  if (epoch < 0 || b < 0 || b >= BatchesPerEpoch(n, model->batch_size)) {
    return absl::InvalidArgumentError(absl::StrCat("no batch ", b, " in epoch ", epoch));
  }
  if (model->order_epoch != epoch) {
    model->order = EpochOrder(n, model->seed, epoch);
    model->order_epoch = epoch;
  }
  const size_t begin = static_cast<size_t>(b * model->batch_size);
  const size_t count = std::min(n - begin, static_cast<size_t>(model->batch_size));
  float loss_value = 0;
  RETURN_IF_ERROR(CatchTorch([&]() -> absl::Status {
    const Batch batch = MakeBatch(model->corpus.train, model->order.data() + begin, count);
    RETURN_IF_ERROR(torch_bridge::Pull(ctx, *model->linear, kPrefix));
    ASSIGN_OR_RETURN(torch::Tensor bags, model->bag.Forward(ctx, batch.keys, batch.offsets));
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(model->linear->forward(bags), batch.labels);
    loss.backward();
    loss_value = loss.item<float>();
    // Both pushes in flight together; numbered in this order on every attempt (exactly once).
    PsFuture<void> rows = model->bag.PushGradientsAsync(ctx);
    absl::Status dense = torch_bridge::PushGradients(ctx, *model->linear, kPrefix);
    absl::Status sparse = rows.Get();
    RETURN_IF_ERROR(dense);
    return sparse;
  }));
  return Values{Tensor::Scalar(loss_value), Tensor::Scalar<int64_t>(static_cast<int64_t>(count))};
}

absl::StatusOr<std::unique_ptr<Resource>> MakeModel(const ResourceContext& ctx) {
  ASSIGN_OR_RETURN(std::string dir, ctx.Arg("data_dir"));
  ASSIGN_OR_RETURN(int64_t batch, ctx.IntArg("batch"));
  ASSIGN_OR_RETURN(int64_t seed, ctx.IntArg("seed"));
  ASSIGN_OR_RETURN(int64_t dim, ctx.IntArg("dim"));
  if (batch < 1 || dim < 1 || dim > 4096)
    return absl::InvalidArgumentError("batch must be >= 1 and dim in 1..4096");
  ASSIGN_OR_RETURN(Corpus corpus, ReadCorpus(dir));
  corpus.test.clear();  // the chief evaluates
  return CatchTorch([&]() -> absl::StatusOr<std::unique_ptr<Resource>> {
    return std::make_unique<ModelResource>(std::move(corpus), static_cast<int>(batch),
                                           static_cast<uint64_t>(seed), static_cast<int>(dim));
  });
}

}  // namespace

Program MakeProgram() {
  Program program;
  program.AddResource("wordnet_model", MakeModel);
  program.AddFunction("wordnet_train_step", TrainStep);
  return program;
}

absl::StatusOr<Result> Train(ParameterServerStrategy& strategy, ClusterCoordinator& coordinator,
                             const Options& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(Corpus corpus, ReadCorpus(options.data_dir));
  return CatchTorch([&]() -> absl::StatusOr<Result> {
    torch::manual_seed(options.seed);
    torch::nn::Linear linear(options.dim, kNumClasses);
    RETURN_IF_ERROR(strategy.CreateEmbeddingTable(kTable, options.dim, TableInitializer(options),
                                                  Adagrad(options)));
    RETURN_IF_ERROR(torch_bridge::CreateVariables(strategy, *linear, Adagrad(options), kPrefix));
    ASSIGN_OR_RETURN(PerWorkerValues models,
                     coordinator.CreatePerWorkerResource(
                         "wordnet_model", {{"data_dir", options.data_dir},
                                           {"batch", absl::StrCat(options.batch_size)},
                                           {"seed", absl::StrCat(options.seed)},
                                           {"dim", absl::StrCat(options.dim)}}));
    const int64_t per_epoch = BatchesPerEpoch(corpus.train.size(), options.batch_size);
    const int64_t total = per_epoch * options.epochs;
    // Enough closures in flight that no worker waits for the chief.
    const size_t window = static_cast<size_t>(4 * std::max(1, coordinator.num_workers()));
    Progress progress(options, total);
    std::deque<RemoteValue> pending;
    int64_t scheduled = 0;
    const absl::Time start = absl::Now();
    while (progress.steps() < total) {
      while (scheduled < total && pending.size() < window) {
        Tensor which =
            Tensor::FromVector(std::vector<int64_t>{scheduled / per_epoch, scheduled % per_epoch});
        ASSIGN_OR_RETURN(RemoteValue v,
                         coordinator.Schedule("wordnet_train_step", {which, models}));
        pending.push_back(std::move(v));
        ++scheduled;
      }
      ASSIGN_OR_RETURN(Values out, pending.front().Fetch());
      pending.pop_front();
      progress.Step(out.at(0).ScalarAsDouble(), static_cast<int64_t>(out.at(1).ScalarAsDouble()));
    }
    RETURN_IF_ERROR(coordinator.Join());
    Result result;
    progress.Finish(start, &result);

    // Evaluation on the chief: the linear layer read back, the table looked up without
    // counting or inserting (a key no training step pushed reads its initial value).
    RETURN_IF_ERROR(torch_bridge::ReadVariables(strategy, *linear, kPrefix));
    const torch_bridge::EmbeddingBag bag(kTable, options.dim,
                                         torch_bridge::EmbeddingBag::Combiner::kMean);
    torch::NoGradGuard no_grad;
    int64_t correct = 0;
    std::vector<int32_t> all(corpus.test.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
    for (size_t begin = 0; begin < all.size(); begin += 4096) {
      const Batch batch =
          MakeBatch(corpus.test, all.data() + begin, std::min<size_t>(4096, all.size() - begin));
      ASSIGN_OR_RETURN(torch::Tensor bags, bag.Evaluate(strategy, batch.keys, batch.offsets));
      correct += linear->forward(bags).argmax(1).eq(batch.labels).sum().item<int64_t>();
    }
    result.test_accuracy =
        all.empty() ? 0 : static_cast<double>(correct) / static_cast<double>(all.size());
    return result;
  });
}

}  // namespace asyncps::wordnet
