#include "examples/fmnist_evaluator.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "asyncps/checkpoints.h"
#include "asyncps/process.h"

namespace asyncps::fmnist {
namespace {

// The evaluator's metric families, children labelled with the process's role and task.
struct EvaluatorMetrics {
  explicit EvaluatorMetrics(metrics::ProcessMetrics& m)
      : labels{{"role", m.role()}, {"task", m.task()}},
        accuracy(Gauge(m, "asyncps_evaluator_accuracy", "Test accuracy of the last checkpoint evaluated")),
        step(Gauge(m, "asyncps_evaluator_checkpoint_step", "Step of the last checkpoint evaluated")),
        seconds(Gauge(m, "asyncps_evaluator_evaluation_seconds", "How long the last evaluation took")),
        evaluations(Counter(m, "asyncps_evaluator_evaluations_total", "Checkpoints evaluated")),
        failures(Counter(m, "asyncps_evaluator_failures_total", "Checkpoints that could not be evaluated")) {}

  prometheus::Gauge& Gauge(metrics::ProcessMetrics& m, const char* name, const char* help) {
    return prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(m.registry()).Add({});
  }
  prometheus::Counter& Counter(metrics::ProcessMetrics& m, const char* name, const char* help) {
    return prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(m.registry()).Add({});
  }

  std::map<std::string, std::string> labels;
  prometheus::Gauge& accuracy;
  prometheus::Gauge& step;
  prometheus::Gauge& seconds;
  prometheus::Counter& evaluations;
  prometheus::Counter& failures;
};

}  // namespace

absl::StatusOr<EvaluatorFlags> ParseEvaluatorFlags(int argc, char** argv) {
  EvaluatorFlags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) continue;
    std::string name = arg.substr(2), value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    }
    int64_t n = 0;
    if (name == "checkpoint_dir") {
      flags.checkpoint_dir = value;
    } else if (name == "eval_poll_ms") {
      if (!absl::SimpleAtoi(value, &n) || n < 1 || n > 3'600'000) {
        return absl::InvalidArgumentError(absl::StrCat("--eval_poll_ms wants 1..3600000, got '", value, "'"));
      }
      flags.poll_interval = absl::Milliseconds(n);
    } else if (name == "eval_idle_timeout_s") {
      if (!absl::SimpleAtoi(value, &n) || n < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--eval_idle_timeout_s wants N >= 0, got '", value, "'"));
      }
      flags.idle_timeout = n == 0 ? absl::InfiniteDuration() : absl::Seconds(n);
    }
  }
  return flags;
}

int RunEvaluator(const ClusterSpec& cluster, const ProcessOptions& process, const Options& train, int argc,
                 char** argv) {
  InitLogging("evaluator", cluster.task_index(), process.log_level);
  absl::StatusOr<EvaluatorFlags> flags = ParseEvaluatorFlags(argc, argv);
  if (flags.ok() && flags->checkpoint_dir.empty()) {
    flags = absl::InvalidArgumentError("the evaluator needs --checkpoint_dir (the chief's checkpoint directory)");
  }
  if (!flags.ok()) {
    spdlog::error("{}", flags.status().ToString());
    return kExitUsage;
  }
  auto registry = metrics::ProcessMetrics::Create("evaluator", cluster.task_index(), process);
  if (!registry.ok()) {
    spdlog::error("{}", registry.status().ToString());
    return ExitCodeForStatus(registry.status());
  }
  EvaluatorMetrics metrics(**registry);
  absl::StatusOr<CheckpointEvaluator> evaluate = MakeCheckpointEvaluator(train);
  if (!evaluate.ok()) {
    spdlog::error("{}", evaluate.status().ToString());
    return ExitCodeForStatus(evaluate.status());
  }
  CheckpointFollower::Options follow;
  follow.poll_interval = flags->poll_interval;
  follow.idle_timeout = flags->idle_timeout;
  CheckpointFollower follower(flags->checkpoint_dir, follow);
  spdlog::info("evaluator following {} (model {}, metrics on port {})", flags->checkpoint_dir, train.model,
               (*registry)->port());
  int64_t evaluated = 0;
  double last_accuracy = 0;
  while (true) {
    absl::StatusOr<CheckpointDir> next = follower.Next();
    if (absl::IsOutOfRange(next.status())) {
      std::printf("evaluator: done after %lld checkpoints, final test accuracy %.4f\n",
                  static_cast<long long>(evaluated), last_accuracy);
      std::fflush(stdout);
      return kExitOk;
    }
    if (!next.ok()) {
      spdlog::error("{}", next.status().ToString());
      return ExitCodeForStatus(next.status());
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<double> accuracy = (*evaluate)(next->path);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!accuracy.ok()) {
      // Deleted by max_to_keep before we got to it, or damaged: the next one may be fine.
      spdlog::warn("cannot evaluate {}: {}", next->path, accuracy.status().ToString());
      metrics.failures.Increment();
      continue;
    }
    ++evaluated;
    last_accuracy = *accuracy;
    metrics.accuracy.Set(*accuracy);
    metrics.step.Set(static_cast<double>(next->step));
    metrics.seconds.Set(seconds);
    metrics.evaluations.Increment();
    std::printf("evaluator: checkpoint step %lld test accuracy %.4f (%.1f s)\n", static_cast<long long>(next->step),
                *accuracy, seconds);
    std::fflush(stdout);
  }
}

}  // namespace asyncps::fmnist
