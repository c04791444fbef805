// Coordinator restart in the main job, with every process real: the Fashion-MNIST chief
// (examples/fashion_mnist, checkpointing every 1000 steps) is SIGKILLed after it has saved a
// checkpoint mid-training, while its 2 PS and 2 workers keep running; the same command line
// started again resumes from that checkpoint's step (the newest the dead chief committed),
// the workers drop the dead chief's datasets and models, and training still reaches the main
// job's target, 0.88 test accuracy. The chief evaluates after every epoch and stops at the
// target (at most 20 epochs): a single snapshot at a fixed epoch varies run to run by about
// +-0.005 around 0.88 (0.8785..0.889 seen), so a fixed-epoch check would be flaky. About a
// minute on two cores.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/checkpoint_follower.h"
#include "core/subprocess.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using testutil::NumberAfter;

// The last step the chief reported saving in `output`; -1 when none.
int64_t LastSavedStep(const std::string& output) {
  int64_t last = -1;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const int64_t step = NumberAfter(std::string(line), "saved checkpoint step ");
    if (step >= 0) last = step;
  }
  return last;
}

constexpr int64_t kMaxSteps = 20 * (60'000 / 128);

TEST(FashionMnistResumeTest, ChiefResumesFromCheckpointAndReachesTarget) {
  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 2;
  o.worker_binary = "fashion_mnist";
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  testutil::TestDir temp("fmnist_resume");
  const fs::path dir = fs::path(temp.path()) / "ckpt";  // made by the chief
  Subprocess::Options chief = (*cluster)->ChiefSubprocessOptions(
      {testutil::LocalCluster::BinaryPath("fashion_mnist"), "--epochs=20", "--eval_every=1",
       "--stop_at_accuracy=0.88", absl::StrCat("--checkpoint_dir=", dir.string()),
       "--checkpoint_every_steps=1000", "--max_to_keep=2"});

  auto first = Subprocess::Start(chief);
  ASSERT_TRUE(first.ok()) << first.status();
  // Step 1000 is early in epoch 3, before the MLP reaches 0.88 (about epoch 5 or later).
  auto saved = (*first)->WaitForLine("saved checkpoint step 1000", absl::Minutes(4));
  ASSERT_TRUE(saved.ok()) << saved.status() << "\n" << (*first)->output();
  (*first)->Signal(SIGKILL);
  auto killed = (*first)->Wait(absl::Seconds(30));
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 128 + SIGKILL);
  const std::string first_output = (*first)->output();
  EXPECT_EQ(first_output.find("trained "), std::string::npos)
      << "the chief finished before it was killed";
  // Normally 1000; later if it committed another one before the signal landed.
  const int64_t last_saved = LastSavedStep(first_output);
  ASSERT_GE(last_saved, 1000) << first_output;

  auto second = Subprocess::Start(chief);  // the same command line
  ASSERT_TRUE(second.ok()) << second.status();
  auto resumed = (*second)->WaitForLine("resumed from checkpoint step", absl::Minutes(2));
  ASSERT_TRUE(resumed.ok()) << resumed.status() << "\n" << (*second)->output();
  EXPECT_EQ(NumberAfter(*resumed, "resumed from checkpoint step "), last_saved) << *resumed;
  auto exit_code = (*second)->Wait(absl::Minutes(5));
  ASSERT_TRUE(exit_code.ok()) << exit_code.status() << "\n" << (*second)->output();
  EXPECT_EQ(*exit_code, 0) << (*second)->output();

  const std::string output = (*second)->output();
  // Reaching the target: the best evaluation of the resumed run (it stops at the first that
  // reaches 0.88; the final one, a few in-flight steps later, may read a hair lower).
  std::string accuracy_line;
  double accuracy = -1;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const size_t at = line.rfind("test accuracy ");
    double value = 0;
    if (at == absl::string_view::npos || !absl::SimpleAtod(line.substr(at + 14), &value)) continue;
    if (value > accuracy) {
      accuracy = value;
      accuracy_line = std::string(line);
    }
  }
  std::printf("first chief: last checkpoint step %lld\nsecond chief: %s\n%s\n",
              static_cast<long long>(last_saved), resumed->c_str(), accuracy_line.c_str());
  // The second chief counted on from the checkpoint's step (and trained past it).
  const int64_t trained = NumberAfter(output, "trained ");
  EXPECT_GT(trained, last_saved) << output;
  EXPECT_LE(trained, kMaxSteps) << output;
  EXPECT_GE(accuracy, 0.88) << output;
  EXPECT_EQ(LastSavedStep(output), trained) << "the end of training is a checkpoint";
  for (int w = 0; w < 2; ++w) {
    const std::string log = (*cluster)->worker_output(w);
    EXPECT_NE(log.find("a new coordinator (incarnation"), std::string::npos)
        << "worker " << w << ":\n"
        << log;
  }
  // Marked final for evaluators following the directory.
  auto final_step = ReadFinalCheckpointMarker(dir.string());
  ASSERT_TRUE(final_step.ok()) << final_step.status();
  EXPECT_EQ(*final_step, trained);
  // max_to_keep=2: only the two newest checkpoints are left.
  int committed = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    committed += fs::exists(entry.path() / "manifest.json");
  EXPECT_EQ(committed, 2);
}

}  // namespace
}  // namespace asyncps
