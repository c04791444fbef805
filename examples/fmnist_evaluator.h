#ifndef ASYNCPS_EXAMPLES_FMNIST_EVALUATOR_H_
#define ASYNCPS_EXAMPLES_FMNIST_EVALUATOR_H_

// The evaluator role of examples/fashion_mnist (TensorFlow's side-car evaluator): follows the
// chief's checkpoint directory, evaluates each new checkpoint on the 10,000 test images, and
// stops after the one the chief marked final (checkpoint/checkpoint_follower.h). It talks to
// no task of the cluster, so a slow or dead evaluator never holds training up.
//
// Its own flags ("--name=value" or "--name value"; other arguments are ignored):
//   --checkpoint_dir=DIR        the chief's checkpoint directory (required; the chief's Train
//                               marks its last checkpoint final there)
//   --eval_poll_ms=N            how often DIR is scanned while nothing is new (500)
//   --eval_idle_timeout_s=N     give up after N s without a new checkpoint; 0 = never (0)
// Output, one line per checkpoint (and nothing else on stdout):
//   evaluator: checkpoint step 1200 test accuracy 0.8512 (0.3 s)
// Metrics (role "evaluator"): asyncps_evaluator_accuracy, asyncps_evaluator_checkpoint_step,
// asyncps_evaluator_evaluations_total, asyncps_evaluator_failures_total,
// asyncps_evaluator_evaluation_seconds (the last evaluation).

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "asyncps/cluster_spec.h"
#include "asyncps/process.h"
#include "examples/fmnist_training.h"

namespace asyncps::fmnist {

struct EvaluatorFlags {
  std::string checkpoint_dir;
  absl::Duration poll_interval = absl::Milliseconds(500);
  absl::Duration idle_timeout = absl::InfiniteDuration();
};

// InvalidArgument naming the flag when one is malformed. checkpoint_dir is empty when
// --checkpoint_dir is not given.
absl::StatusOr<EvaluatorFlags> ParseEvaluatorFlags(int argc, char** argv);


// Runs the evaluator until the final checkpoint was evaluated and returns the process exit code
// (core/exit_code.h): 0 then; 2 for bad flags; 1 when the test set cannot be read; 200 when
// the checkpoint directory went quiet for --eval_idle_timeout_s. A checkpoint that cannot be
// evaluated (deleted meanwhile, corrupt) is logged, counted and skipped. `train` gives the
// model and the data directory (the chief's --model and --data_dir); `process` the log level and
// /metrics port main read; `argv` the evaluator's own flags (ParseEvaluatorFlags). Call from main.
int RunEvaluator(const ClusterSpec& cluster, const ProcessOptions& process, const Options& train, int argc,
                 char** argv);

}  // namespace asyncps::fmnist

#endif  // ASYNCPS_EXAMPLES_FMNIST_EVALUATOR_H_
