#ifndef ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_MODEL_H_
#define ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_MODEL_H_

// The fastText model on WordNet supersenses (wordnet_reader.h): a bag of hashed uni+bigram keys,
// each a 64-wide embedding row, mean-combined, then a linear layer to the 45 lexicographer files;
// softmax cross-entropy, Adagrad.
//
// Two ways to train it, with the same batches in the same order:
//   * TrainLocal: one process, torch::nn::EmbeddingBag over a fixed hashed vocabulary
//     (key mod `buckets` rows) with sparse gradients and torch::optim::Adagrad: the reference;
//   * Train: the chief of an asyncps job, an embedding table on the parameter servers keyed by
//     the int64 keys themselves (no folding, rows made on first touch) and the linear layer as
//     dense variables, Adagrad applied on the parameter servers.
//
// No LibTorch header here: only wordnet_model.cc includes <torch/torch.h>.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "asyncps/program.h"
#include "examples/wordnet_supersense/wordnet_reader.h"

namespace asyncps {
class ClusterCoordinator;
class ParameterServerStrategy;
}  // namespace asyncps

namespace asyncps::wordnet {

struct Options {
  std::string data_dir = kDefaultDir;
  int epochs = 5;
  int batch_size = 64;
  int dim = 64;
  // TrainLocal: rows of the fixed hashed vocabulary (a key uses row key mod buckets).
  int64_t buckets = int64_t{1} << 20;
  // Adagrad. A small initial accumulator matters here: a mean over ~40 keys gives each row a
  // small gradient, which Keras' default 0.1 would scale down to almost nothing at first.
  float learning_rate = 0.5f;
  float initial_accumulator = 1e-4f;
  uint64_t seed = 1;
  bool progress = true;  // progress lines on stdout, at most one a second
};

struct Result {
  double test_accuracy = 0;
  int64_t steps = 0;
  int64_t examples = 0;
  double train_seconds = 0;        // wall time of training, evaluation excluded
  double examples_per_second = 0;  // examples / train_seconds
  double final_loss = 0;           // a running mean of the last steps' losses
};

// One process, no network: the reference.
absl::StatusOr<Result> TrainLocal(const Options& options);

// The Program every process of examples/wordnet_supersense builds: resource "wordnet_model"
// (args: data_dir, batch, seed, dim) holding the worker's copy of the corpus and linear layer,
// and function "wordnet_train_step" (args: i64 [2] {epoch, batch index}, a wordnet_model) that
// trains batch `batch index` of epoch `epoch`'s order and returns {loss, examples}.
Program MakeProgram();

// The chief: creates the embedding table and the linear layer's variables, schedules every
// batch of options.epochs epochs, and evaluates on the test split by looking up the table
// (unknown keys read their initial value; nothing is inserted).
absl::StatusOr<Result> Train(ParameterServerStrategy& strategy, ClusterCoordinator& coordinator,
                             const Options& options);

// LibTorch threads of this process.
void SetTorchThreads(int threads);

}  // namespace asyncps::wordnet

#endif  // ASYNCPS_EXAMPLES_WORDNET_SUPERSENSE_WORDNET_MODEL_H_
