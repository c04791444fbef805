// The main job: Fashion-MNIST trained asynchronously on parameter servers, the model written in
// LibTorch and run on the workers, Adam applied on the parameter servers.
//
//   build/bin/asyncps_launch --ps 2 --workers 2 -- build/bin/fashion_mnist [--model mlp|cnn]
//       [--epochs N] [--batch_size N] [--data_dir DIR] [--torch_threads N] [--eval_every EPOCHS]
//       [--checkpoint_dir DIR [--checkpoint_every_steps N] [--max_to_keep N]] [--sharding off|dynamic]
//       [--ps_recovery auto|off] [--overlap_pull=true|false] [--fused_push_pull=true|false] [--closures_per_worker N]
//       [--stop_at_accuracy A]   (stop once an evaluation, e.g. every --eval_every epochs, reaches A)
//       [--count_examples]       (a counter per example on the PS: fail unless each was applied
//                                 exactly once per epoch; needs --sharding dynamic)
//       [--augment]              (a random crop and flip of every training image)
//       [--data_service auto|off]
//       [--lr_decay cosine|none] (default cosine: the learning rate's decay to 0 over the run's updates)
//       [--test_only_no_dedup]   (TEST ONLY: exactly-once updates off, a planted bug for scripts/nemesis.py)
//
// Under asyncps_launch --data_workers D (a tf.data service dispatcher and D data workers in
// TF_CONFIG), --data_service auto (the default) moves the input pipeline, augmentation
// included, to the data workers: the chief registers it with the dispatcher and the workers
// read their batches split by split (dynamic sharding, implied: every example still applied
// exactly once per epoch). --data_service off keeps each worker's own pipeline.
//
// Every process runs this binary; TF_CONFIG says which role it plays. Workers read their shard
// of the 60,000 training images themselves (a per-worker dataset, rebuilt if a worker
// restarts); the chief schedules one closure per batch, prints progress at most once a second
// and finally evaluates the variables on the 10,000 test images.
//
// With --checkpoint_dir (a directory the chief and every PS can reach under that path), the
// chief saves a checkpoint every --checkpoint_every_steps steps (default 500) and at the end,
// keeping the newest --max_to_keep (default 3). Started again with the same command line — the
// chief alone after it died, or the whole cluster — it restores the newest good checkpoint
// and continues from its step ("resumed from checkpoint step N").
//
// --sharding dynamic: the chief hands out the training set (ShardingPolicy::kDynamic), so each
// epoch visits every example exactly once, even when workers die (--sharding off: each worker
// reads its static shard, repeated).
// --ps_recovery auto: a parameter server that dies and is restarted (same address) no longer
// ends the run with Unavailable (the default, TensorFlow's contract): the chief pauses, waits
// for it, restores the newest checkpoint onto every PS (without --checkpoint_dir: re-creates
// the lost variables from their initial values), re-runs the failed steps and trains the
// undone ones again ("a parameter server was lost and recovered: N step(s) undone").
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "asyncps/checkpoints.h"
#include "asyncps/chief.h"
#include "asyncps/cluster_spec.h"
#include "asyncps/coordinator.h"
#include "asyncps/process.h"
#include "asyncps/serve.h"
#include "asyncps/status.h"
#include "asyncps/strategy.h"
#include "examples/fmnist_evaluator.h"
#include "examples/fmnist_training.h"

namespace {

struct Flags {
  Flags() {
    train.overlap_pull = asyncps::fmnist::kDefaultOverlapPull;
    train.fused_push_pull = asyncps::fmnist::kDefaultFusedPushPull;
    train.max_staleness = asyncps::fmnist::kDefaultMaxStaleness;
    train.staleness_aware_lr = asyncps::fmnist::kDefaultStalenessAwareLr;
    train.cosine_lr_decay = asyncps::fmnist::kDefaultCosineLrDecay;
  }
  asyncps::fmnist::Options train;
  int torch_threads = 1;
  bool ps_recovery = false;
  int closures_per_worker = asyncps::fmnist::kDefaultClosuresPerWorker;
  bool data_service = true;  // --data_service auto: when the cluster has a dispatcher
  bool test_only_no_dedup = false;  // --test_only_no_dedup: a planted bug for scripts/nemesis.py
};

constexpr char kUsage[] =
    "fashion_mnist [--model mlp|cnn] [--epochs N] [--batch_size N] [--data_dir DIR]\n"
    "              [--torch_threads N] [--eval_every EPOCHS] [--seed N]\n"
    "              [--checkpoint_dir DIR] [--checkpoint_every_steps N] [--max_to_keep N]\n"
    "              [--sharding off|dynamic] [--stop_at_accuracy A] [--ps_recovery auto|off]\n"
    "              [--overlap_pull=true|false] [--fused_push_pull=true|false] [--closures_per_worker N]\n"
    "              [--count_examples]\n"
    "              [--augment] [--data_service auto|off] [--lr_decay cosine|none]\n"
    "  --lr_decay cosine (the default): the learning rate falls as a cosine from 1e-3 to 0 over\n"
    "    the run's updates (epochs x 60000 / batch_size, keyed on each variable's version on the\n"
    "    PS); none: constant (docs/operations.md).\n"
    "  --augment: a random crop (of the image padded by one pixel) and flip of every image.\n"
    "  --data_service auto: with a dispatcher in the cluster (asyncps_launch --data_workers D),\n"
    "    the data workers run the input pipeline (implies --sharding dynamic); off: the workers.\n"
    "  --overlap_pull (default true): pull the next step's parameters behind this step's push\n"
    "    and free the model before the push's answer; pays with --closures_per_worker 2 or more\n"
    "    (closures running at once per worker; default 3).\n"
    "  --fused_push_pull (default true): with --overlap_pull, the pull rides on the push (one\n"
    "    request per PS, answered with the values once the push is applied); false: the pull is\n"
    "    its own request and may miss this push (ONE STEP MORE STALENESS).\n"
    "    --overlap_pull=false --closures_per_worker 1: TensorFlow's step (pull, compute, push, wait).\n"
    "  --transport=f32|bf16 (a process flag, default f32): the workers' pulls and gradient pushes\n"
    "    in bf16, half the bytes on the wire (docs/performance.md, reduced-precision transport).\n"
    "  --compression=none|bf16|int8|topk:FRACTION (a process flag, default none): the workers push\n"
    "    their dense f32 gradients compressed, with error feedback (what a push does not send\n"
    "    stays on the worker for the next one): int8 with a scale per 256 values (~1/4 of the\n"
    "    bytes), or the FRACTION largest (topk:0.01: 1/50 of the bytes). Exactly-once is kept\n"
    "    (docs/performance.md, gradient compression).\n"
    "  --pull_compression=none|bf16|int8 (a process flag, default none): the workers' pulls of f32\n"
    "    values as bf16 or int8 (a scale per 256 values; ~1/4 of the bytes).\n"
    "  --count_examples: count on the PS how often each training example was applied and fail\n"
    "    unless it is exactly once per epoch (needs --sharding dynamic and a --batch_size that\n"
    "    divides 60000, e.g. 120; scripts/soak.py uses it).\n"
    "  --test_only_no_dedup: TEST ONLY, exactly-once updates off (a planted bug that\n"
    "    scripts/nemesis.py --plant no_dedup must find with --count_examples); never for training.\n"
    "Run it under build/bin/asyncps_launch --ps 2 --workers 2 -- (cluster flags pass through).\n";

// Our flags, "--name=value" or "--name value"; cluster flags (--ps_hosts, ...) are left to
// ClusterSpec. Unknown flags of our own form are an error.
absl::Status ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) continue;
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name == "help") {
      return absl::CancelledError("help");
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    }
    bool used = true, ok = true, switch_flag = false;
    if (name == "model") {
      flags->train.model = value;
      ok = value == "mlp" || value == "cnn";
    } else if (name == "epochs") {
      ok = absl::SimpleAtoi(value, &flags->train.epochs) && flags->train.epochs >= 1;
    } else if (name == "batch_size") {
      ok = absl::SimpleAtoi(value, &flags->train.batch_size) && flags->train.batch_size >= 1;
    } else if (name == "data_dir") {
      flags->train.data_dir = value;
      ok = !value.empty();
    } else if (name == "torch_threads") {
      ok = absl::SimpleAtoi(value, &flags->torch_threads) && flags->torch_threads >= 1;
    } else if (name == "eval_every") {
      ok = absl::SimpleAtod(value, &flags->train.eval_every_epochs) && flags->train.eval_every_epochs >= 0;
    } else if (name == "seed") {
      ok = absl::SimpleAtoi(value, &flags->train.seed);
    } else if (name == "checkpoint_dir") {
      flags->train.checkpoint_dir = value;
      ok = !value.empty();
    } else if (name == "checkpoint_every_steps") {
      ok = absl::SimpleAtoi(value, &flags->train.checkpoint_every_steps) && flags->train.checkpoint_every_steps >= 1;
    } else if (name == "sharding") {
      ok = value == "dynamic" || value == "off";
      flags->train.dynamic_sharding = value == "dynamic";
    } else if (name == "stop_at_accuracy") {
      ok = absl::SimpleAtod(value, &flags->train.stop_at_accuracy) && flags->train.stop_at_accuracy >= 0 &&
           flags->train.stop_at_accuracy <= 1;
    } else if (name == "ps_recovery") {
      ok = value == "auto" || value == "off";
      flags->ps_recovery = value == "auto";
    } else if (name == "overlap_pull") {
      // A switch: "--overlap_pull", or "--overlap_pull=true|false"; never takes the next argument.
      switch_flag = true;
      const bool has_value = arg.find('=') != std::string::npos;
      ok = !has_value || value == "true" || value == "false";
      flags->train.overlap_pull = !has_value || value == "true";
    } else if (name == "fused_push_pull") {
      // A switch like --overlap_pull.
      switch_flag = true;
      const bool has_value = arg.find('=') != std::string::npos;
      ok = !has_value || value == "true" || value == "false";
      flags->train.fused_push_pull = !has_value || value == "true";
    } else if (name == "count_examples") {
      // A switch like --overlap_pull.
      switch_flag = true;
      const bool has_value = arg.find('=') != std::string::npos;
      ok = !has_value || value == "true" || value == "false";
      flags->train.count_examples = !has_value || value == "true";
    } else if (name == "augment") {
      // A switch like --overlap_pull.
      switch_flag = true;
      const bool has_value = arg.find('=') != std::string::npos;
      ok = !has_value || value == "true" || value == "false";
      flags->train.augment = !has_value || value == "true";
    } else if (name == "lr_decay") {
      ok = value == "cosine" || value == "none";
      flags->train.cosine_lr_decay = value == "cosine";
    } else if (name == "data_service") {
      ok = value == "auto" || value == "off";
      flags->data_service = value == "auto";
    } else if (name == "closures_per_worker") {
      ok = absl::SimpleAtoi(value, &flags->closures_per_worker) && flags->closures_per_worker >= 1;
    } else if (name == "max_to_keep") {
      ok = absl::SimpleAtoi(value, &flags->train.max_to_keep);
    } else if (name == "test_only_no_dedup") {
      // TEST ONLY, a switch: exactly-once updates off (ClusterCoordinator::Options::
      // deduplicate_updates = false), TensorFlow's at-least-once. A planted bug, to show that
      // scripts/nemesis.py (with --count_examples) finds it; never for training.
      switch_flag = true;
      flags->test_only_no_dedup = true;
    } else {
      used = false;  // a cluster or process flag
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for --", name));
    if (used && !switch_flag && arg.find('=') == std::string::npos) ++i;
  }
  return absl::OkStatus();
}

// The end of a run: where its checkpoint is and the command that resumes from it (or trains on,
// given a larger --epochs), and where the status page was.
void PrintWhereToGoOn(const asyncps::fmnist::Options& train, const asyncps::fmnist::Result& result,
                      int metrics_port, const std::string& metrics_address) {
  if (!train.checkpoint_dir.empty()) {
    const std::string path =
        result.checkpoint_path.empty() ? train.checkpoint_dir : result.checkpoint_path;
    std::printf("checkpoint %s\n", path.c_str());
    // asyncps_launch gives every task its own command line; the same command restores the
    // newest checkpoint in --checkpoint_dir.
    const char* command = std::getenv("ASYNCPS_LAUNCH_COMMAND");
    if (command != nullptr && *command != '\0') {
      std::printf("resume (or train on with a larger --epochs): %s\n", command);
    } else {
      std::printf(
          "resume (or train on with a larger --epochs): start every task again with the same "
          "arguments\n");
    }
  }
  if (metrics_port > 0) {
    // The address it listened on (asyncps_launch --hosts netns binds the host's); one that
    // listens everywhere is reached through loopback.
    std::string host = metrics_address;
    if (host.empty() || host == "0.0.0.0" || host == "::") host = "127.0.0.1";
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    std::printf("status page was http://%s:%d/status\n", host.c_str(), metrics_port);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (absl::Status s = ParseFlags(argc, argv, &flags); !s.ok()) {
    if (!absl::IsCancelled(s)) std::fprintf(stderr, "fashion_mnist: %s\n", s.ToString().c_str());
    std::fputs(kUsage, stderr);
    return absl::IsCancelled(s) ? 0 : 2;
  }
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "fashion_mnist: %s\n%s", cluster.status().ToString().c_str(), kUsage);
    return 2;
  }
  // Every role's process settings (token, /metrics port, log level, limits), from flags and
  // environment, read once here and passed to whichever role this process plays.
  const asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  asyncps::fmnist::SetTorchThreads(flags.torch_threads);
  if (cluster->task_type() == asyncps::TaskType::kEvaluator) {
    return asyncps::fmnist::RunEvaluator(*cluster, process, flags.train, argc, argv);
  }
  asyncps::Program program = asyncps::fmnist::MakeProgram(process.cluster_token);
  if (!cluster->is_chief()) return asyncps::Serve(*cluster, program, process);

  // The chief's wiring, each piece made here: the process (I/O loop, PS connections, /metrics
  // and the status page), then the strategy and coordinator on it, destroyed in reverse order.
  asyncps::InitLogging("chief", cluster->task_index(), process.log_level);
  auto chief = asyncps::ChiefProcess::Create(*cluster, {.process = process});
  if (!chief.ok()) {
    std::fprintf(stderr, "fashion_mnist: %s\n", chief.status().ToString().c_str());
    return asyncps::ExitCodeForStatus(chief.status());
  }
  asyncps::ParameterServerStrategy strategy(**chief);
  // With automatic PS recovery the coordinator restores from the very manager training saves
  // through, so it sees every commit (and counts the steps a recovery undoes exactly).
  std::unique_ptr<asyncps::CheckpointManager> checkpoints;
  asyncps::ClusterCoordinator::Options coordinator_options;
  coordinator_options.closures_per_worker = flags.closures_per_worker;
  if (flags.test_only_no_dedup) {
    coordinator_options.deduplicate_updates = false;
    std::printf("TEST ONLY: exactly-once updates are off (--test_only_no_dedup)\n");
  }
  if (flags.ps_recovery) {
    if (!flags.train.checkpoint_dir.empty()) {
      checkpoints = std::make_unique<asyncps::CheckpointManager>(strategy, flags.train.checkpoint_dir,
                                                                 flags.train.max_to_keep);
      flags.train.checkpoint_manager = checkpoints.get();
    }
    coordinator_options.ps_recovery.enabled = true;
    coordinator_options.ps_recovery.checkpoints = checkpoints.get();
  }
  asyncps::ClusterCoordinator coordinator(strategy, program, coordinator_options);
  // The dispatcher task, or the chief itself when the cluster lists data workers only.
  if (flags.data_service && !cluster->data_service_dispatcher().empty()) {
    flags.train.data_service = cluster->data_service_dispatcher();
    flags.train.data_service_token = process.cluster_token;
    flags.train.dynamic_sharding = true;
    std::printf("input pipeline on the tf.data service: dispatcher %s, %d data workers (dynamic sharding)\n",
                cluster->data_service_dispatcher().c_str(), cluster->num_data_workers());
  }
  std::printf("training a %s on Fashion-MNIST: %d epochs, batch %d, %d workers, %d parameter servers\n",
              flags.train.model.c_str(), flags.train.epochs, flags.train.batch_size, cluster->num_workers(),
              cluster->num_ps());
  if (process.compression.lossy() || process.pull_compression.lossy()) {
    std::printf("the workers push gradients as %s and pull as %s\n",
                asyncps::CompressionName(process.compression).c_str(),
                asyncps::CompressionName(process.pull_compression).c_str());
  }
  // With --checkpoint_dir, Train ends with a checkpoint marked final, which ends evaluators.
  auto result = asyncps::fmnist::Train(strategy, coordinator, flags.train);
  if (!result.ok()) {
    std::fprintf(stderr, "fashion_mnist failed: %s\n", result.status().ToString().c_str());
    return asyncps::ExitCodeForStatus(result.status());  // a lost PS is retryable (>= 128)
  }
  std::printf("trained %lld steps (%lld examples) in %.1f s, %.0f examples/s, final loss %.4f\n",
              static_cast<long long>(result->steps), static_cast<long long>(result->examples), result->seconds,
              result->examples_per_second, result->final_loss);
  std::printf("test accuracy %.4f\n", result->test_accuracy);
  PrintWhereToGoOn(flags.train, *result, (*chief)->process_metrics().port(),
                   process.metrics_bind_address);
  return 0;
}
