#ifndef ASYNCPS_EXAMPLES_FMNIST_TRAINING_H_
#define ASYNCPS_EXAMPLES_FMNIST_TRAINING_H_

// Fashion-MNIST classifiers in LibTorch trained asynchronously on the parameter servers: the
// Program every process of examples/fashion_mnist builds, the chief's training loop, and the
// same model trained in one process with no network (the reference of bench/train_bench).
//
// No LibTorch header here: only fmnist_training.cc includes <torch/torch.h>.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "asyncps/program.h"

namespace asyncps {
class CheckpointManager;
class ClusterCoordinator;
class ParameterServerStrategy;
}  // namespace asyncps

namespace asyncps::fmnist {

// The main command's step (examples/fashion_mnist without --overlap_pull, --fused_push_pull or
// --closures_per_worker, and bench/train_bench's "default" configuration): the pipelined step,
// overlap_pull fused into the push with three closures per worker, the fastest on 2 PS + 2 workers that keeps the MLP
// at its accuracy target in its default epochs (docs/performance.md). Options::overlap_pull
// itself stays off: a program that runs one closure per worker gains nothing from it.
inline constexpr bool kDefaultOverlapPull = true;
inline constexpr int kDefaultClosuresPerWorker = 3;
// Options::fused_push_pull in the main command: on, with 3 closures per worker. Measured with
// train_bench (same-run pairs, 2-core VM under load; docs/performance.md): fused with 2 closures
// per worker was slower than the plain pull (its push is answered later, and the worker's model
// sat idle waiting for its next closure); fused with 3 was 11-15% faster than the plain pull with
// 2 in 5 of 6 pairs (0.95x in one), at the same mean staleness (0.97-0.98), with lower CPU per
// example in 5 of 6, test accuracy 0.881-0.888.
inline constexpr bool kDefaultFusedPushPull = true;
// Options::max_staleness and Options::staleness_aware_lr in the main command.
inline constexpr int64_t kDefaultMaxStaleness = -1;
inline constexpr bool kDefaultStalenessAwareLr = false;
// Options::cosine_lr_decay in the main command (fashion_mnist --lr_decay): on. Measured with
// train_bench --only default,decay (5 same-run pairs, quiet 2-core VM, seeds 1, 1, 1, 2, 3;
// docs/performance.md): test accuracy 0.8917-0.8955 with the decay against 0.8728-0.8905 with
// the constant rate, at the same examples/s (ratios to one process 1.01-1.03 against 1.00-1.08);
// the one-process reference likewise gains (0.8939-0.8967 against 0.8830-0.8872).
inline constexpr bool kDefaultCosineLrDecay = true;

struct Options {
  std::string model = "mlp";  // "mlp" (784-256-128-10) or "cnn" (two conv layers)
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 10;
  int batch_size = 128;
  float learning_rate = 1e-3f;  // Adam, on the parameter servers
  uint64_t seed = 1;
  // Evaluate on the test set every this many epochs during training (0: only at the end).
  double eval_every_epochs = 0;
  // Stop as soon as an evaluation reaches this test accuracy (0: train every epoch).
  double stop_at_accuracy = 0;
  // Each worker's step starts reading the next step's parameters right behind its push of this
  // step's gradients, and releases its model before waiting for the push's answer. The next
  // step then computes on parameters that may lack this worker's own last push: ONE STEP MORE
  // STALENESS. It pays when the coordinator runs more than one closure per worker
  // (ClusterCoordinator::Options::closures_per_worker): the next closure pulls and computes
  // while this one waits for the PS; with one closure per worker the wait stays on the step.
  bool overlap_pull = false;
  // With overlap_pull: the push and the next step's pull go out as one request per PS
  // (torch_bridge::PushGradientsAndPullAsync), answered with the values once the push is
  // applied. Saves a request per PS per step, and the next step always computes on values that
  // include this worker's own last push (no extra staleness), but the push's apply is then
  // on the next step's critical path. Off: the pull is its own request (see
  // kDefaultFusedPushPull for the main command's choice).
  bool fused_push_pull = false;
  // Staleness options of the model's Adam (docs/staleness.md): pushes staler than
  // max_staleness are refused and their steps recomputed (negative: no bound), and the
  // staleness-aware learning rate (lr / max(1, staleness)).
  int64_t max_staleness = -1;
  bool staleness_aware_lr = false;
  // A cosine decay of the learning rate (Keras CosineDecay, alpha 0) over the run's
  // LrDecaySteps(options) updates: on the PS keyed on each variable's version (updates applied
  // to it: one per step, whichever worker ran it), in TrainLocal on the step count. Off: the
  // constant learning_rate.
  bool cosine_lr_decay = false;
  // Progress lines on stdout, at most one a second.
  bool progress = true;
  // Checkpoints (examples/training_checkpoints.h): with a directory, the variables and
  // optimizer state are saved every checkpoint_every_steps steps (at a join point) and at the
  // end, keeping the newest max_to_keep; a chief started again with the same options restores
  // the newest good checkpoint and continues from its step. Empty: no checkpoints.
  std::string checkpoint_dir;
  int64_t checkpoint_every_steps = 500;
  int max_to_keep = 3;
  // Dynamic sharding (ShardingPolicy::kDynamic): the chief hands out the training set in splits
  // and each step reads exactly the batch it was bound to, so every epoch visits every example
  // once, also when workers die. Off: each worker reads its static shard, repeated.
  bool dynamic_sharding = false;
  // Saves and restores through this manager (on checkpoint_dir) instead of one of Train's own:
  // the one the coordinator's automatic PS recovery restores from (fashion_mnist
  // --ps_recovery=auto). Steps a recovery loses (ClusterCoordinator::ps_recovery_stats) are
  // trained again, so the step count always equals the updates in the model. Not owned.
  CheckpointManager* checkpoint_manager = nullptr;
  // A proof of exactly-once training (scripts/soak.py): a counter per training example on the
  // parameter servers (variable "example_counts", i64 [60000]) to which every step adds 1 for
  // each example of its batch, deduplicated like its gradients. At the end the chief reads it
  // and Train fails (DataLoss) unless every example was applied exactly once per epoch. Needs
  // dynamic_sharding and a batch_size that divides 60,000 (so no example is dropped with a
  // partial batch), and a run that trains every epoch (no stop_at_accuracy).
  bool count_examples = false;
  // A random crop and flip of every training image (a 28x28 crop of the image padded by one
  // pixel, flipped left-right with probability 1/2). Each example's draw depends on its split's
  // shuffle seed only (a new one each epoch under dynamic sharding), so a split read again
  // after a failure, on any worker or data worker, holds the same augmented images.
  bool augment = false;
  // The tf.data service (data_service/): the dispatcher's "host:port". The chief registers the
  // training pipeline ("fmnist_train" with these options, augmentation included) with the
  // dispatcher and the workers read their batches from the data workers, split-bound under
  // dynamic sharding (needs dynamic_sharding): every example still applied exactly once, and
  // the pipeline's CPU is spent on the data workers instead of the trainers. Empty: each
  // worker runs its own pipeline.
  std::string data_service;
  // The cluster token the chief presents to the dispatcher (ProcessOptions::cluster_token).
  std::string data_service_token;
  // Called on the chief after each completed step (1-based); for tests that inject failures.
  std::function<void(int64_t step)> on_step;
};

struct Evaluation {
  double seconds;  // since training started
  int64_t steps;
  double accuracy;
};

struct Result {
  double test_accuracy = 0;
  int64_t steps = 0;            // the step reached, counting those restored from a checkpoint
  int64_t resumed_from_step = 0;  // the checkpoint's step this run started from (0: none)
  int64_t examples = 0;         // trained by this run (not those of the restored steps)
  double seconds = 0;          // wall time of the whole run, evaluations included
  double train_seconds = 0;    // seconds minus the time spent evaluating
  double examples_per_second = 0;  // examples / train_seconds
  double final_loss = 0;           // mean loss of the last steps
  // The directory of the last checkpoint this run saved (with checkpoint_dir, the one at the
  // end of training); empty when it saved none (no checkpoint_dir, or a resumed run that had
  // nothing left to train).
  std::string checkpoint_path;
  std::vector<Evaluation> evaluations;  // the last one is the final evaluation

  // Seconds until an evaluation first reached `accuracy`; negative when none did.
  double SecondsTo(double accuracy) const;
};

// The updates a cosine_lr_decay run decays over: every step of every epoch (epochs x 60,000 /
// batch_size), each one update of each variable.
int64_t LrDecaySteps(const Options& options);

// The Program of every process: dataset "fmnist_train" (args: images, labels, batch, seed;
// sharded by worker, shuffled, repeated, batched, prefetched), resource "fmnist_model" (args:
// model) holding the worker's LibTorch module, and function "fmnist_train_step" (args: an
// iterator over fmnist_train, an fmnist_model) that pulls the parameters, runs forward and
// backward on one batch, pushes the gradients and returns {loss, examples}. Also dataset
// "fmnist_service" (args: dispatcher, id): registered dataset `id` read from the tf.data service
// (Options::data_service) in processing mode dynamic, authenticated with `cluster_token`.
Program MakeProgram(std::string cluster_token = "");

// The chief: creates the model's variables (Adam on the PS; placed by the strategy), the
// per-worker datasets and models, trains options.epochs epochs of 60,000 examples with a
// bounded window of closures in flight, and evaluates on the 10,000 test images by reading the
// variables into a local copy of the model.
absl::StatusOr<Result> Train(ParameterServerStrategy& strategy, ClusterCoordinator& coordinator,
                             const Options& options);

// The same model, data pipeline and step in this process with torch::optim::Adam: no network,
// no parameter server.
absl::StatusOr<Result> TrainLocal(const Options& options);

// The side-car evaluator's model: loads the 10,000 test images and a model of options.model
// once, and returns a function that reads the checkpoint in `checkpoint_dir` (the variables
// Train creates, with torch_bridge::LoadCheckpoint: no cluster) into that model and returns its
// test accuracy; LoadCheckpoint's errors otherwise (a torn file, a shape that does not match).
// The function is not thread-safe (it reuses one model).
using CheckpointEvaluator = std::function<absl::StatusOr<double>(const std::string& checkpoint_dir)>;
absl::StatusOr<CheckpointEvaluator> MakeCheckpointEvaluator(const Options& options);

// LibTorch threads of this process (see torch_bridge::SetNumThreads).
void SetTorchThreads(int threads);

}  // namespace asyncps::fmnist

#endif  // ASYNCPS_EXAMPLES_FMNIST_TRAINING_H_
