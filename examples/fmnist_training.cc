#include "examples/fmnist_training.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "asyncps/checkpoints.h"
#include "asyncps/coordinator.h"
#include "asyncps/data_service.h"
#include "asyncps/datasets.h"
#include "asyncps/initializers.h"
#include "asyncps/optimizers.h"
#include "asyncps/status.h"
#include "asyncps/step_context.h"
#include "asyncps/strategy.h"
#include "asyncps/sync.h"
#include "asyncps/torch.h"
#include "examples/fmnist_pipeline.h"
#include "examples/training_checkpoints.h"

namespace asyncps::fmnist {
namespace {

constexpr int64_t kTrainExamples = 60'000;
constexpr int64_t kTestExamples = 10'000;
constexpr int kClasses = 10;
// Options::count_examples: the per-example counter variable.
constexpr char kExampleCounts[] = "example_counts";
// Pixel statistics of the training set, for inputs of mean 0 and deviation 1.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3(register_module("fc3", torch::nn::Linear(128, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.reshape({x.size(0), 784});
    x = torch::relu(fc1->forward(x));
    x = torch::relu(fc2->forward(x));
    return fc3->forward(x);
  }
  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

// Two 3x3 convolutions with max pooling, then two dense layers.
struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = x.reshape({x.size(0), 1, 28, 28});
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.reshape({x.size(0), 32 * 7 * 7})));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Cnn);

// Either model behind one interface.
struct Net {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

absl::StatusOr<Net> MakeNet(const std::string& kind, uint64_t seed) {
  torch::manual_seed(seed);
  if (kind == "mlp") {
    Mlp mlp;
    return Net{mlp.ptr(), [mlp](const torch::Tensor& x) mutable { return mlp->forward(x); }};
  }
  if (kind == "cnn") {
    Cnn cnn;
    return Net{cnn.ptr(), [cnn](const torch::Tensor& x) mutable { return cnn->forward(x); }};
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown model '", kind, "' (want mlp or cnn)"));
}

// A worker's own copy of the model; its parameters are pulled from the PS every step.
class ModelResource : public Resource {
 public:
  ModelResource(Net net, bool overlap_pull, bool fused_push_pull)
      : overlap_pull(overlap_pull), fused_push_pull(fused_push_pull), net_(std::move(net)) {}
  // The model is used by one step at a time (closures may overlap on a worker).
  Mutex mu;
  Net& net() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return net_; }
  // Options::overlap_pull: the read a step starts for the next step's parameters.
  const bool overlap_pull;
  // Options::fused_push_pull.
  const bool fused_push_pull;
  std::optional<PsFuture<VersionedValues>> next_pull ABSL_GUARDED_BY(mu);

 private:
  Net net_;
};

template <typename Fn>
auto CatchTorch(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("torch: ", e.what_without_backtrace()));
  }
}

// u8 [B, 28, 28] images -> normalised f32; u8 [B] labels -> i64. A third component (the
// examples' ids, Options::count_examples) is not an input.
absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> ToInputs(const data::Element& batch) {
  if (batch.size() < 2 || batch.size() > 3 || batch[0].dtype() != DType::kU8 || batch[1].dtype() != DType::kU8 ||
      batch[0].rank() != 3 || batch[1].rank() != 1 || batch[0].dim(0) != batch[1].dim(0)) {
    return absl::InvalidArgumentError("want a batch of {u8 [B, 28, 28] images, u8 [B] labels}");
  }
  // Every pixel value's normalised float, computed once by the same LibTorch operations as
  // images.to(kFloat).mul_(1 / 255).sub_(mean).div_(std), so a batch is normalised in one pass
  // through the table (four passes over the batch took 4-5% of a worker's CPU).
  static const std::vector<float> kNormalised = [] {
    torch::Tensor t = torch::arange(256, torch::kFloat).mul_(1.0f / 255).sub_(kPixelMean).div_(kPixelStd);
    return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + 256);
  }();
  torch::Tensor x = torch::empty({batch[0].dim(0), batch[0].dim(1), batch[0].dim(2)}, torch::kFloat);
  const uint8_t* pixels = batch[0].data<uint8_t>();
  float* out = x.data_ptr<float>();
  for (int64_t i = 0, n = batch[0].num_elements(); i < n; ++i) out[i] = kNormalised[pixels[i]];
  ASSIGN_OR_RETURN(torch::Tensor labels, torch_bridge::ToTorch(batch[1]));
  return std::make_pair(x, labels.to(torch::kLong));
}

absl::StatusOr<data::Dataset> TrainDataset(const DatasetContext& ctx) {
  TrainPipelineOptions o;
  ASSIGN_OR_RETURN(o.images, ctx.Arg("images"));
  ASSIGN_OR_RETURN(o.labels, ctx.Arg("labels"));
  ASSIGN_OR_RETURN(o.batch, ctx.IntArg("batch"));
  ASSIGN_OR_RETURN(int64_t seed, ctx.IntArg("seed"));
  o.seed = static_cast<uint64_t>(seed);
  o.num_shards = ctx.num_workers();
  o.shard = ctx.worker_index();
  // Under dynamic sharding the chief makes the epochs (no Repeat) and the shard (worker 0 of 1).
  o.repeat = ctx.IntArg("repeat").value_or(1) != 0;
  o.ids = ctx.IntArg("ids").value_or(0) != 0;
  o.augment = ctx.IntArg("augment").value_or(0) != 0;
  o.prefetch = ctx.IntArg("prefetch").value_or(1) != 0;
  return TrainPipeline(o);
}

// Returns {loss, examples}. Reports where its time went as phases (StepContext::AddPhaseTime,
// the worker's asyncps_worker_step_phase_seconds_total). Holding the model: "model_wait"
// (another closure on this worker held it), "pull" (waiting for the parameters), "compute"
// (input conversion, forward, backward), "push" (sending the gradients and, without
// overlap_pull, waiting for the PS to apply them). With overlap_pull, after the model is free
// for the worker's next closure: "push_wait" (the PS's answer).
absl::StatusOr<Values> TrainStep(StepContext& ctx) {
  // The batch is read before taking the model, so with several closures in flight on this
  // worker the next step's input is ready while this one computes.
  ASSIGN_OR_RETURN(data::Element batch, ctx.Next(0));
  ASSIGN_OR_RETURN(ModelResource * model, ctx.resource<ModelResource>(1));
  absl::Time t = absl::Now();
  auto phase = [&](const char* name) {
    const absl::Time now = absl::Now();
    ctx.AddPhaseTime(name, now - t);
    t = now;
  };
  float loss_value = 0;
  std::optional<PsFuture<void>> push;  // overlap_pull: waited for after the model is free
  {
    MutexLock lock(&model->mu);
    phase("model_wait");
    Net& net = model->net();
    bool pulled = false;
    if (model->next_pull.has_value()) {
      PsFuture<VersionedValues> pull = std::move(*model->next_pull);
      model->next_pull.reset();
      // A failed read started by an earlier step is not this step's to report: pull afresh
      // through this step's context, which then reports a PS failure as one. The versions read
      // become this step's (its push names them: staleness).
      pulled = torch_bridge::FinishPull(ctx, std::move(pull), *net.module).ok();
    }
    if (!pulled) RETURN_IF_ERROR(torch_bridge::Pull(ctx, *net.module));
    phase("pull");
    RETURN_IF_ERROR(CatchTorch([&]() -> absl::Status {
      ASSIGN_OR_RETURN(auto inputs, ToInputs(batch));
      torch::Tensor loss = torch::nn::functional::cross_entropy(net.forward(inputs.first), inputs.second);
      loss.backward();
      loss_value = loss.item<float>();
      return absl::OkStatus();
    }));
    phase("compute");
    if (model->overlap_pull && model->fused_push_pull) {
      // The push carries the next step's read (one request per PS): its answer holds the
      // values with this push applied. The model is free for the worker's next closure, which
      // waits for that answer, while this one waits for the push's own result.
      StepContext::PushAndRead fused = torch_bridge::PushGradientsAndPullAsync(ctx, *net.module);
      push = std::move(fused.pushed);
      model->next_pull = std::move(fused.values);
    } else if (model->overlap_pull) {
      // The next step's read goes out right behind this push, so its round trip overlaps the
      // push's; it may miss this push (one step more staleness: measured, sending the read
      // first costs more accuracy than it gains speed). The model is free for the worker's
      // next closure while this one waits for the push's answer.
      push = torch_bridge::PushGradientsAsync(ctx, *net.module);
      model->next_pull = torch_bridge::PullVersionedAsync(ctx, *net.module);
    } else {
      RETURN_IF_ERROR(torch_bridge::PushGradients(ctx, *net.module));
    }
    phase("push");
  }
  if (batch.size() == 3) {
    // Options::count_examples: one more update of this closure, deduplicated like the push.
    const int64_t n = batch[2].dim(0);
    RETURN_IF_ERROR(ctx.Scatter(UpdateKind::kAdd, kExampleCounts, batch[2],
                                Tensor::FromVector(std::vector<int64_t>(static_cast<size_t>(n), 1))));
  }
  if (push.has_value()) {
    // Still this closure's push: the step reports its own failure, and the chief sees the
    // step done only once its gradients are applied (checkpoints stay consistent cuts).
    RETURN_IF_ERROR(push->Get());
    phase("push_wait");
  }
  return Values{Tensor::Scalar(loss_value), Tensor::Scalar<int64_t>(batch[1].dim(0))};
}

struct TestSet {
  torch::Tensor x;
  torch::Tensor y;
};

absl::StatusOr<TestSet> LoadTestSet(const std::string& dir) {
  data::Dataset test = data::Dataset::Zip({data::Dataset::IdxFile(dir + "/t10k-images-idx3-ubyte.gz"),
                                           data::Dataset::IdxFile(dir + "/t10k-labels-idx1-ubyte.gz")})
                           .Batch(kTestExamples, /*drop_remainder=*/false);
  ASSIGN_OR_RETURN(std::unique_ptr<data::Iterator> it, test.MakeIterator());
  ASSIGN_OR_RETURN(data::Element all, it->Next());
  return CatchTorch([&]() -> absl::StatusOr<TestSet> {
    ASSIGN_OR_RETURN(auto inputs, ToInputs(all));
    return TestSet{inputs.first.clone(), inputs.second.clone()};
  });
}

absl::StatusOr<double> Accuracy(Net& net, const TestSet& test) {
  return CatchTorch([&]() -> absl::StatusOr<double> {
    torch::NoGradGuard no_grad;
    int64_t correct = 0;
    const int64_t n = test.x.size(0);
    for (int64_t begin = 0; begin < n; begin += 1000) {
      const int64_t end = std::min(n, begin + 1000);
      torch::Tensor predicted = net.forward(test.x.slice(0, begin, end)).argmax(1);
      correct += predicted.eq(test.y.slice(0, begin, end)).sum().item<int64_t>();
    }
    return n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n);
  });
}

// `start_step`: without dynamic sharding a resumed run's workers start their data over (their
// input position is not in the checkpoint), so their shuffle seed moves on with the step
// instead of replaying the batches the run began with. With it, the checkpoint's split cursor
// says where the epoch stands (Train restores it).
std::map<std::string, std::string> DatasetArgs(const Options& options, int64_t start_step = 0) {
  return {{"images", options.data_dir + "/train-images-idx3-ubyte.gz"},
          {"labels", options.data_dir + "/train-labels-idx1-ubyte.gz"},
          {"batch", absl::StrCat(options.batch_size)},
          // Under dynamic sharding a resumed run reads the rest of the checkpoint's epoch, whose
          // batches must hold the records they held before: the seed stays.
          {"seed", absl::StrCat(options.seed + (options.dynamic_sharding ? 0 : static_cast<uint64_t>(start_step)))},
          {"repeat", options.dynamic_sharding ? "0" : "1"},
          {"ids", options.count_examples ? "1" : "0"},
          {"augment", options.augment ? "1" : "0"}};
}

absl::Status CheckOptions(const Options& options) {
  if (options.epochs < 1 || options.batch_size < 1 || options.batch_size > kTrainExamples) {
    return absl::InvalidArgumentError("epochs must be >= 1 and batch size in 1..60000");
  }
  if (options.checkpoint_every_steps < 1) return absl::InvalidArgumentError("checkpoint_every_steps must be >= 1");
  if (options.count_examples &&
      (!options.dynamic_sharding || kTrainExamples % options.batch_size != 0 || options.stop_at_accuracy > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "count_examples needs dynamic sharding, a batch size that divides ", kTrainExamples,
        " (no example dropped with a partial batch) and no stop_at_accuracy; got batch size ",
        options.batch_size));
  }
  if (!options.data_service.empty() && !options.dynamic_sharding) {
    return absl::InvalidArgumentError("reading through the tf.data service (data_service) needs dynamic sharding");
  }
  return absl::OkStatus();
}

// Progress of a run: losses, examples, and when evaluations are due.
class Tracker {
 public:
  // `start_step`: the step a resumed run continues from (its epoch and evaluations count on).
  Tracker(const Options& options, int64_t steps_per_epoch, int64_t total_steps,
          int64_t start_step = 0)
      : options_(options),
        steps_per_epoch_(steps_per_epoch),
        total_steps_(total_steps),
        start_step_(start_step),
        steps_(start_step) {}

  void Step(double loss, int64_t examples) {
    ++steps_;
    examples_ += examples;
    window_loss_ += loss;
    ++window_steps_;
    last_loss_ = loss;
    recent_loss_ = recent_loss_ == 0 ? loss : 0.98 * recent_loss_ + 0.02 * loss;
  }

  // Prints a line when a second has passed since the last one: epoch, step, examples/s and
  // mean loss since the last line, and the time left for every epoch at this run's mean pace
  // (an early stop at stop_at_accuracy comes sooner).
  void MaybeReport(const std::function<std::string()>& extra) {
    const absl::Time now = absl::Now();
    if (!options_.progress || now - last_report_ < absl::Seconds(1)) return;
    const double seconds = absl::ToDoubleSeconds(now - last_report_);
    const int64_t epoch = std::min<int64_t>(options_.epochs, steps_ / steps_per_epoch_ + 1);
    std::printf("epoch %lld/%d  step %lld/%lld  %.0f examples/s  loss %.4f  ETA %s%s\n",
                static_cast<long long>(epoch), options_.epochs, static_cast<long long>(steps_),
                static_cast<long long>(total_steps_),
                static_cast<double>(examples_ - reported_examples_) / seconds,
                window_steps_ > 0 ? window_loss_ / static_cast<double>(window_steps_) : 0.0,
                Eta(now).c_str(), extra().c_str());
    std::fflush(stdout);
    last_report_ = now;
    reported_examples_ = examples_;
    window_loss_ = 0;
    window_steps_ = 0;
  }

  // "1m05s", "42s"; "?" before the first step of this run.
  std::string Eta(absl::Time now) const {
    const int64_t done = steps_ - start_step_;
    if (done <= 0) return "?";
    const double per_step = absl::ToDoubleSeconds(now - started_) / static_cast<double>(done);
    const int64_t left = static_cast<int64_t>(
        per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - steps_)) + 0.5);
    if (left >= 3600) return absl::StrFormat("%dh%02dm", left / 3600, left % 3600 / 60);
    if (left >= 60) return absl::StrFormat("%dm%02ds", left / 60, left % 60);
    return absl::StrFormat("%ds", left);
  }

  bool EvaluationDue() const {
    if (options_.eval_every_epochs <= 0) return false;
    const int64_t every = std::max<int64_t>(
        1, static_cast<int64_t>(options_.eval_every_epochs * static_cast<double>(steps_per_epoch_)));
    return steps_ % every == 0 && steps_ < total_steps_;
  }

  // `steps` completed steps were undone (a lost PS was restored from a checkpoint).
  void Rewind(int64_t steps) { steps_ -= steps; }

  int64_t steps() const { return steps_; }
  int64_t examples() const { return examples_; }
  double recent_loss() const { return recent_loss_; }

 private:
  const Options& options_;
  const int64_t steps_per_epoch_;
  const int64_t total_steps_;
  const int64_t start_step_;
  const absl::Time started_ = absl::Now();
  int64_t steps_;
  int64_t examples_ = 0;
  int64_t reported_examples_ = 0;
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  double last_loss_ = 0;
  double recent_loss_ = 0;
  absl::Time last_report_ = absl::Now();
};

// Evaluates `net` (whose parameters `load` fills) and records it in `result`; returns whether
// training should stop (the accuracy target was reached).
absl::StatusOr<bool> EvaluateInto(const Options& options, Net& net, const TestSet& test,
                                  const std::function<absl::Status()>& load, absl::Time start, int64_t steps,
                                  absl::Duration* eval_time, Result* result) {
  const absl::Time t0 = absl::Now();
  RETURN_IF_ERROR(load());
  ASSIGN_OR_RETURN(double accuracy, Accuracy(net, test));
  *eval_time += absl::Now() - t0;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->evaluations.push_back({seconds, steps, accuracy});
  if (options.progress) {
    std::printf("evaluation after step %lld (%.1f s): test accuracy %.4f\n", static_cast<long long>(steps), seconds,
                accuracy);
    std::fflush(stdout);
  }
  return options.stop_at_accuracy > 0 && accuracy >= options.stop_at_accuracy;
}

void Finish(const Tracker& tracker, absl::Time start, absl::Duration eval_time, Result* result) {
  result->steps = tracker.steps();
  result->examples = tracker.examples();
  result->seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result->train_seconds = std::max(1e-9, result->seconds - absl::ToDoubleSeconds(eval_time));
  result->examples_per_second = static_cast<double>(result->examples) / result->train_seconds;
  result->final_loss = tracker.recent_loss();
  result->test_accuracy = result->evaluations.empty() ? 0 : result->evaluations.back().accuracy;
}

// Options::count_examples: every example's counter must equal the epochs trained.
absl::Status CheckExampleCounts(ParameterServerStrategy& strategy, const Options& options, int64_t epochs) {
  ASSIGN_OR_RETURN(ShardedVariable counts, strategy.GetVariable(kExampleCounts));
  ASSIGN_OR_RETURN(Tensor values, counts.Read());
  if (values.dtype() != DType::kI64 || values.num_elements() != kTrainExamples) {
    return absl::InternalError("example_counts has the wrong dtype or shape");
  }
  const int64_t* count = values.data<int64_t>();
  int64_t wrong = 0;
  std::string first;
  for (int64_t id = 0; id < kTrainExamples; ++id) {
    if (count[id] == epochs) continue;
    if (++wrong <= 5) absl::StrAppend(&first, first.empty() ? "" : ", ", "#", id, ": ", count[id]);
  }
  if (wrong > 0) {
    return absl::DataLossError(absl::StrCat(wrong, " of ", kTrainExamples, " examples were not applied exactly ",
                                            epochs, " times (", first, wrong > 5 ? ", ..." : "", ")"));
  }
  if (options.progress) {
    std::printf("exactly once: %lld examples x %lld epochs, every example applied once per epoch\n",
                static_cast<long long>(kTrainExamples), static_cast<long long>(epochs));
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace

double Result::SecondsTo(double accuracy) const {
  for (const Evaluation& e : evaluations) {
    if (e.accuracy >= accuracy) return e.seconds;
  }
  return -1;
}

void SetTorchThreads(int threads) { torch_bridge::SetNumThreads(threads); }

Program MakeProgram(std::string cluster_token) {
  Program program;
  program.AddDataset("fmnist_train", TrainDataset);
  program.AddDataset("fmnist_service", [token = std::move(cluster_token)](
                                           const DatasetContext& ctx) -> absl::StatusOr<data::Dataset> {
    data_service::ServiceOptions service;
    ASSIGN_OR_RETURN(service.dispatcher, ctx.Arg("dispatcher"));
    service.token = token;
    service.task_index = ctx.worker_index();
    ASSIGN_OR_RETURN(int64_t id, ctx.IntArg("id"));
    return data_service::FromDatasetId(service, id, {.mode = data_service::ProcessingMode::kDynamic});
  });
  program.AddResource("fmnist_model", [](const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
    ASSIGN_OR_RETURN(std::string kind, ctx.Arg("model"));
    // Absent (an older chief): no overlap.
    const bool overlap = ctx.Arg("overlap_pull").value_or("0") == "1";
    // Absent (an older chief): the pull as its own request.
    const bool fused = ctx.Arg("fused_push_pull").value_or("0") == "1";
    return CatchTorch([&]() -> absl::StatusOr<std::unique_ptr<Resource>> {
      ASSIGN_OR_RETURN(Net net, MakeNet(kind, 0));
      return std::make_unique<ModelResource>(std::move(net), overlap, fused);
    });
  });
  program.AddFunction("fmnist_train_step", TrainStep);
  return program;
}

absl::StatusOr<Result> Train(ParameterServerStrategy& strategy, ClusterCoordinator& coordinator,
                             const Options& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(TestSet test, LoadTestSet(options.data_dir));
  ASSIGN_OR_RETURN(Net net, CatchTorch([&] { return MakeNet(options.model, options.seed); }));
  // The chief's model gives the variables their initial values.
  // Idempotent: a restarted chief finds them on the running PS (and restores them below).
  OptimizerConfig adam = opt::MaxStaleness(opt::Adam(options.learning_rate), options.max_staleness);
  if (options.staleness_aware_lr) adam = opt::StalenessAwareLr(adam);
  if (options.cosine_lr_decay) adam = opt::CosineDecay(adam, LrDecaySteps(options), 0.0f);
  RETURN_IF_ERROR(torch_bridge::CreateVariables(strategy, *net.module, adam));
  if (options.count_examples) {
    // Created before the restore below, so a checkpoint puts the counts back with the model.
    RETURN_IF_ERROR(strategy.CreateVariable(kExampleCounts, init::Zeros({kTrainExamples}, DType::kI64)).status());
  }
  TrainingCheckpoints checkpoints(strategy, {options.checkpoint_dir, options.checkpoint_every_steps,
                                             options.max_to_keep, options.checkpoint_manager});
  ASSIGN_OR_RETURN(const int64_t start_step, checkpoints.RestoreLatest());
  // Per-worker datasets are built at once on the workers that are up, so a bad data path is
  // reported here; wait (bounded) for the workers to be admitted first.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (coordinator.workers_up() < coordinator.num_workers() && absl::Now() < deadline) {
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(20));  // poll pacing
  }
  // Dynamic splits of whole batches (about 8 per epoch), so an epoch has the same
  // kTrainExamples / batch_size steps: one iterator per epoch, every example once.
  const int64_t records_per_split =
      options.batch_size * ((kTrainExamples + 8 * options.batch_size - 1) / (8 * options.batch_size));
  std::string dataset_name = "fmnist_train";
  std::map<std::string, std::string> dataset_args = DatasetArgs(options, start_step);
  if (!options.data_service.empty()) {
    // The data workers build the pipeline; the workers' dataset reads it split by split.
    data_service::ServiceOptions service;
    service.dispatcher = options.data_service;
    service.token = options.data_service_token;
    service.role = "chief";
    // No prefetch thread on the data workers: the workers fetch ahead (fmnist_pipeline.h).
    dataset_args["prefetch"] = "0";
    ASSIGN_OR_RETURN(const int64_t id, data_service::RegisterDataset(service, dataset_name, dataset_args));
    dataset_name = "fmnist_service";
    dataset_args = {{"dispatcher", options.data_service}, {"id", absl::StrCat(id)}};
  }
  ASSIGN_OR_RETURN(PerWorkerDataset dataset,
                   coordinator.CreatePerWorkerDataset(
                       dataset_name, dataset_args,
                       options.dynamic_sharding ? ShardingPolicy::kDynamic : ShardingPolicy::kOff, records_per_split));
  const int64_t steps_per_epoch = kTrainExamples / options.batch_size;
  if (options.dynamic_sharding && !checkpoints.restored_state().empty()) {
    // The checkpoint's split cursor: the epoch goes on where it was saved (a chief restarted
    // mid-epoch reads no example twice and skips none).
    RETURN_IF_ERROR(coordinator.RestoreSplitCursors(checkpoints.restored_state()));
  }
  // (A checkpoint at an epoch's end holds the next epoch's cursor: see `next_join` below.)
  ASSIGN_OR_RETURN(PerWorkerValues iterators, dataset.MakeIterator());
  ASSIGN_OR_RETURN(PerWorkerValues models, coordinator.CreatePerWorkerResource(
                                       "fmnist_model", {{"model", options.model},
                                                        {"overlap_pull", options.overlap_pull ? "1" : "0"},
                                                        {"fused_push_pull", options.fused_push_pull ? "1" : "0"}}));

  const int64_t total_steps = steps_per_epoch * options.epochs;
  if (start_step > 0 && options.progress) {
    std::printf("resumed from checkpoint step %lld (epoch %lld/%d, step %lld of %lld)\n",
                static_cast<long long>(start_step),
                static_cast<long long>(std::min<int64_t>(options.epochs, start_step / steps_per_epoch + 1)),
                options.epochs, static_cast<long long>(start_step), static_cast<long long>(total_steps));
    std::fflush(stdout);
  }
  // Enough closures in flight that no worker waits for the chief, few enough that the
  // progress line and the stop at a target accuracy stay close to the truth.
  const size_t window = static_cast<size_t>(4 * std::max(1, coordinator.num_workers()));
  Tracker tracker(options, steps_per_epoch, total_steps, start_step);
  Result result;
  result.resumed_from_step = start_step;
  const absl::Time start = absl::Now();
  absl::Duration eval_time;
  auto load = [&] { return torch_bridge::ReadVariables(strategy, *net.module); };
  // Nothing is scheduled past a join point, so when the tracker reaches one nothing is in
  // flight: a checkpoint saved there is a consistent cut and its step counts exactly its
  // updates. Under dynamic sharding an epoch's end is a join point too: the next epoch's
  // iterator is made with nothing in flight and (with checkpoints) saved at once. So no two
  // epochs' closures are ever in flight together, and every checkpoint's cursor is the epoch
  // being read: a PS recovery's rollback and a restarted chief both land in that epoch.
  auto next_join_after = [&](int64_t step) {
    int64_t next = checkpoints.NextAfter(step);
    if (options.dynamic_sharding) next = std::min(next, (step / steps_per_epoch + 1) * steps_per_epoch);
    return next;
  };
  int64_t next_join = next_join_after(start_step);
  auto save = [&](int64_t step) -> absl::Status {
    RETURN_IF_ERROR(coordinator.Join());
    // With the split cursor (--sharding dynamic), so a PS recovery restoring this checkpoint
    // hands out again the batches it undoes: every example trained once, none skipped.
    ASSIGN_OR_RETURN(std::string dir, checkpoints.Save(step, coordinator.SplitCursorState()));
    if (!dir.empty()) result.checkpoint_path = dir;
    if (!dir.empty() && options.progress) {
      std::printf("saved checkpoint step %lld (%s)\n", static_cast<long long>(step), dir.c_str());
      std::fflush(stdout);
    }
    return absl::OkStatus();
  };
  auto workers = [&] { return absl::StrFormat("  workers %d/%d", coordinator.workers_up(), coordinator.num_workers()); };

  // Loss and accuracy go to the chief's status page and to Prometheus (asyncps_scalar{name}).
  auto report = [&](const char* name, double value) {
    absl::Status s = strategy.process().ReportScalar(name, tracker.steps(), value);
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());  // e.g. a NaN loss: training goes on
  };
  auto report_accuracy = [&] {
    if (!result.evaluations.empty()) report("accuracy", result.evaluations.back().accuracy);
  };

  if (options.dynamic_sharding && start_step % steps_per_epoch == 0 && start_step < total_steps) {
    // The epoch's start is a cut to recover to (at step 0 too, so a PS lost before the first
    // periodic checkpoint rolls back with the data instead of re-initialising).
    RETURN_IF_ERROR(save(start_step));
  }
  std::deque<RemoteValue> pending;
  int64_t scheduled = start_step;
  int64_t recoveries = 0, steps_lost = 0, batches_redone = 0;  // as last seen in coordinator.ps_recovery_stats()
  bool stop = false;
  while (tracker.steps() < total_steps && !stop) {
    while (!stop && scheduled < std::min(total_steps, next_join) && pending.size() < window) {
      ASSIGN_OR_RETURN(RemoteValue v, coordinator.Schedule("fmnist_train_step", {iterators, models}));
      pending.push_back(std::move(v));
      ++scheduled;
    }
    ASSIGN_OR_RETURN(Values out, pending.front().Fetch());
    pending.pop_front();
    tracker.Step(out.at(0).ScalarAsDouble(), static_cast<int64_t>(out.at(1).ScalarAsDouble()));
    report("loss", out.at(0).ScalarAsDouble());
    if (const PsRecovery::Stats recovery = coordinator.ps_recovery_stats(); recovery.recoveries > recoveries) {
      // Automatic PS recovery rolled the model back: train the undone steps again, so the step
      // count (and every checkpoint's step) is the number of updates the model holds. Under
      // dynamic sharding that is the batches the cursor hands out again (none when the lost
      // variables were re-initialised instead: the epoch has no more batches to give).
      const int64_t undone = options.dynamic_sharding ? recovery.batches_redone - batches_redone
                                                      : recovery.steps_lost - steps_lost;
      tracker.Rewind(undone);
      scheduled -= undone;
      std::printf("a parameter server was lost and recovered: %lld step(s) undone, training on from step %lld\n",
                  static_cast<long long>(undone), static_cast<long long>(tracker.steps()));
      if (options.dynamic_sharding && recovery.cursors_missing == 0) {
        std::printf("  the data was rolled back with the model: %lld batch(es) (%lld examples) are read again\n",
                    static_cast<long long>(recovery.batches_redone - batches_redone),
                    static_cast<long long>((recovery.batches_redone - batches_redone) * options.batch_size));
      }
      batches_redone = recovery.batches_redone;
      std::fflush(stdout);
      recoveries = recovery.recoveries;
      steps_lost = recovery.steps_lost;
    }
    if (options.on_step) options.on_step(tracker.steps());
    tracker.MaybeReport(workers);
    if (tracker.EvaluationDue()) {
      ASSIGN_OR_RETURN(stop, EvaluateInto(options, net, test, load, start, tracker.steps(), &eval_time, &result));
      report_accuracy();
    }
    if (tracker.steps() == next_join && !stop) {
      const int64_t step = tracker.steps();
      const bool epoch_end = options.dynamic_sharding && step % steps_per_epoch == 0 && step < total_steps;
      if (epoch_end) {
        ASSIGN_OR_RETURN(iterators, dataset.MakeIterator());  // the next epoch
      }
      if (step == checkpoints.NextAfter(step - 1) || epoch_end) RETURN_IF_ERROR(save(step));
      next_join = next_join_after(step);
    }
  }
  // Whatever is still in flight (after an early stop) finishes before the final evaluation.
  for (RemoteValue& v : pending) {
    ASSIGN_OR_RETURN(Values out, v.Fetch());
    tracker.Step(out.at(0).ScalarAsDouble(), static_cast<int64_t>(out.at(1).ScalarAsDouble()));
  }
  RETURN_IF_ERROR(coordinator.Join());
  // The end of training is a checkpoint too, so the same command started again has nothing
  // left to train (no-op when the last step was just saved, or restored), marked final for
  // evaluators following the directory.
  if (checkpoints.enabled()) {
    RETURN_IF_ERROR(save(tracker.steps()));
    RETURN_IF_ERROR(checkpoints.MarkFinal(tracker.steps()));
  }
  if (options.count_examples) RETURN_IF_ERROR(CheckExampleCounts(strategy, options, tracker.steps() / steps_per_epoch));
  ASSIGN_OR_RETURN(bool unused, EvaluateInto(options, net, test, load, start, tracker.steps(), &eval_time, &result));
  (void)unused;
  report_accuracy();
  Finish(tracker, start, eval_time, &result);
  return result;
}

absl::StatusOr<CheckpointEvaluator> MakeCheckpointEvaluator(const Options& options) {
  ASSIGN_OR_RETURN(TestSet loaded, LoadTestSet(options.data_dir));
  ASSIGN_OR_RETURN(Net made, CatchTorch([&] { return MakeNet(options.model, options.seed); }));
  auto test = std::make_shared<TestSet>(std::move(loaded));
  auto net = std::make_shared<Net>(std::move(made));
  return [test, net](const std::string& checkpoint_dir) -> absl::StatusOr<double> {
    RETURN_IF_ERROR(torch_bridge::LoadCheckpoint(checkpoint_dir, *net->module).status());
    return Accuracy(*net, *test);
  };
}

int64_t LrDecaySteps(const Options& options) {
  return kTrainExamples / options.batch_size * options.epochs;
}

absl::StatusOr<Result> TrainLocal(const Options& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(TestSet test, LoadTestSet(options.data_dir));
  ASSIGN_OR_RETURN(Net net, CatchTorch([&] { return MakeNet(options.model, options.seed); }));
  const auto args = DatasetArgs(options);
  ASSIGN_OR_RETURN(data::Dataset dataset, TrainDataset(DatasetContext(0, 1, args)));
  ASSIGN_OR_RETURN(std::unique_ptr<data::Iterator> it, dataset.MakeIterator());

  const int64_t steps_per_epoch = kTrainExamples / options.batch_size;
  const int64_t total_steps = steps_per_epoch * options.epochs;
  const int64_t decay_steps = std::max<int64_t>(1, LrDecaySteps(options));
  Tracker tracker(options, steps_per_epoch, total_steps);
  Result result;
  const absl::Time start = absl::Now();
  absl::Duration eval_time;
  return CatchTorch([&]() -> absl::StatusOr<Result> {
    // The PS's Adam (Keras) puts epsilon outside the bias correction; at 1e-7 the two agree
    // to well within what matters here.
    torch::optim::Adam adam(net.module->parameters(), torch::optim::AdamOptions(options.learning_rate).eps(1e-7));
    auto load = [] { return absl::OkStatus(); };
    auto none = [] { return std::string(); };
    bool stop = false;
    while (tracker.steps() < total_steps && !stop) {
      ASSIGN_OR_RETURN(data::Element batch, it->Next());
      ASSIGN_OR_RETURN(auto inputs, ToInputs(batch));
      adam.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(net.forward(inputs.first), inputs.second);
      loss.backward();
      if (options.cosine_lr_decay) {
        // The PS's schedule (UpdateRule::DecayScale, alpha 0) at version = the steps before this one.
        const double progress = static_cast<double>(std::min(tracker.steps(), decay_steps)) /
                                static_cast<double>(decay_steps);
        static_cast<torch::optim::AdamOptions&>(adam.param_groups()[0].options())
            .lr(options.learning_rate * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress)));
      }
      adam.step();
      tracker.Step(loss.item<double>(), inputs.first.size(0));
      tracker.MaybeReport(none);
      if (tracker.EvaluationDue()) {
        ASSIGN_OR_RETURN(stop, EvaluateInto(options, net, test, load, start, tracker.steps(), &eval_time, &result));
      }
    }
    ASSIGN_OR_RETURN(bool unused, EvaluateInto(options, net, test, load, start, tracker.steps(), &eval_time, &result));
    (void)unused;
    Finish(tracker, start, eval_time, &result);
    return result;
  });
}

}  // namespace asyncps::fmnist
