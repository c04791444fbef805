// WordNet supersense classification, the fastText model with its embedding table on the
// parameter servers (issue 21's sparse job).
//
//   build/bin/asyncps_launch --ps 2 --workers 2 -- build/bin/wordnet_supersense [--epochs N]
//       [--batch_size N] [--learning_rate LR] [--data_dir DIR] [--torch_threads N] [--seed N]
//   build/bin/wordnet_supersense --local [--buckets N] ...   (one process: the LibTorch reference)
//
// Every synset of WordNet 3.0 (Debian wordnet-base, /usr/share/wordnet) is an example: its part
// of speech, lemmas and gloss as hashed unigrams and bigrams; its label the lexicographer file
// (45 classes). About one synset in ten is the fixed test split. Every process reads the
// database itself; the chief schedules one closure per batch, prints progress at most once a
// second and finally the test accuracy.
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "asyncps/chief.h"
#include "asyncps/cluster_spec.h"
#include "asyncps/coordinator.h"
#include "asyncps/process.h"
#include "asyncps/serve.h"
#include "asyncps/status.h"
#include "asyncps/strategy.h"
#include "examples/wordnet_supersense/wordnet_model.h"

namespace {

struct Flags {
  asyncps::wordnet::Options train;
  int torch_threads = 1;
  bool local = false;
};

constexpr char kUsage[] =
    "wordnet_supersense [--epochs N] [--batch_size N] [--learning_rate LR] [--initial_accumulator "
    "A]\n"
    "                   [--data_dir DIR]\n"
    "                   [--torch_threads N] [--seed N] [--local [--buckets N]]\n"
    "  --local: train in this process (torch::nn::EmbeddingBag over --buckets hashed rows,\n"
    "    default 1048576) instead of on the cluster: the reference.\n"
    "Run it under build/bin/asyncps_launch --ps 2 --workers 2 -- (cluster flags pass through).\n";

// Our flags, "--name=value" or "--name value"; others are left to ClusterSpec/ProcessOptions.
absl::Status ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) continue;
    std::string name = arg.substr(2), value;
    const bool has_value = name.find('=') != std::string::npos;
    if (has_value) {
      value = name.substr(name.find('=') + 1);
      name = name.substr(0, name.find('='));
    } else if (name == "help") {
      return absl::CancelledError("help");
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    }
    bool used = true, ok = true, switch_flag = false;
    asyncps::wordnet::Options& t = flags->train;
    if (name == "epochs") {
      ok = absl::SimpleAtoi(value, &t.epochs) && t.epochs >= 1;
    } else if (name == "batch_size") {
      ok = absl::SimpleAtoi(value, &t.batch_size) && t.batch_size >= 1;
    } else if (name == "learning_rate") {
      ok = absl::SimpleAtof(value, &t.learning_rate) && t.learning_rate > 0;
    } else if (name == "initial_accumulator") {
      ok = absl::SimpleAtof(value, &t.initial_accumulator) && t.initial_accumulator >= 0;
    } else if (name == "data_dir") {
      t.data_dir = value;
      ok = !value.empty();
    } else if (name == "buckets") {
      ok = absl::SimpleAtoi(value, &t.buckets) && t.buckets >= 1;
    } else if (name == "seed") {
      ok = absl::SimpleAtoi(value, &t.seed);
    } else if (name == "torch_threads") {
      ok = absl::SimpleAtoi(value, &flags->torch_threads) && flags->torch_threads >= 1;
    } else if (name == "local") {
      switch_flag = true;
      ok = !has_value || value == "true" || value == "false";
      flags->local = !has_value || value == "true";
    } else {
      used = false;
    }
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for --", name));
    if (used && !switch_flag && !has_value) ++i;
  }
  return absl::OkStatus();
}

void PrintResult(const asyncps::wordnet::Result& r) {
  std::printf("trained %lld steps (%lld examples) in %.1f s, %.0f examples/s, final loss %.4f\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.examples), r.train_seconds,
              r.examples_per_second, r.final_loss);
  std::printf("test accuracy %.4f\n", r.test_accuracy);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (absl::Status s = ParseFlags(argc, argv, &flags); !s.ok()) {
    if (!absl::IsCancelled(s))
      std::fprintf(stderr, "wordnet_supersense: %s\n", s.ToString().c_str());
    std::fputs(kUsage, stderr);
    return absl::IsCancelled(s) ? 0 : 2;
  }
  asyncps::wordnet::SetTorchThreads(flags.torch_threads);
  if (flags.local) {
    std::printf(
        "training fastText on WordNet supersenses in one process: %d epochs, batch %d, %lld "
        "buckets\n",
        flags.train.epochs, flags.train.batch_size, static_cast<long long>(flags.train.buckets));
    auto result = asyncps::wordnet::TrainLocal(flags.train);
    if (!result.ok()) {
      std::fprintf(stderr, "wordnet_supersense failed: %s\n", result.status().ToString().c_str());
      return 1;
    }
    PrintResult(*result);
    return 0;
  }
  auto cluster = asyncps::ClusterSpec::FromEnvOrFlags(argc, argv);
  if (!cluster.ok()) {
    std::fprintf(stderr, "wordnet_supersense: %s\n%s", cluster.status().ToString().c_str(), kUsage);
    return 2;
  }
  const asyncps::ProcessOptions process = asyncps::ProcessOptions::FromEnvAndFlags(argc, argv);
  asyncps::Program program = asyncps::wordnet::MakeProgram();
  if (!cluster->is_chief()) return asyncps::Serve(*cluster, program, process);

  asyncps::InitLogging("chief", cluster->task_index(), process.log_level);
  auto chief = asyncps::ChiefProcess::Create(*cluster, {.process = process});
  if (!chief.ok()) {
    std::fprintf(stderr, "wordnet_supersense: %s\n", chief.status().ToString().c_str());
    return asyncps::ExitCodeForStatus(chief.status());
  }
  asyncps::ParameterServerStrategy strategy(**chief);
  asyncps::ClusterCoordinator coordinator(strategy, program);
  std::printf(
      "training fastText on WordNet supersenses: %d epochs, batch %d, %d workers, %d parameter "
      "servers\n",
      flags.train.epochs, flags.train.batch_size, cluster->num_workers(), cluster->num_ps());
  auto result = asyncps::wordnet::Train(strategy, coordinator, flags.train);
  if (!result.ok()) {
    std::fprintf(stderr, "wordnet_supersense failed: %s\n", result.status().ToString().c_str());
    return asyncps::ExitCodeForStatus(result.status());
  }
  PrintResult(*result);
  return 0;
}
