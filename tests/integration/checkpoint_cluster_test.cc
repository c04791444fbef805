// Checkpoints against real parameter-server processes: save and restore over 2 PS, restore
// into other cluster shapes, and a PS killed in the middle of Save().
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "core/optimizer_config.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "partitioners/partitioner.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testutil::LocalCluster;

std::shared_ptr<const Partitioner> Fixed(int shards) {
  return std::shared_ptr<const Partitioner>(FixedShardsPartitioner::Create(shards).value());
}

std::unique_ptr<LocalCluster> StartCluster(int num_ps) {
  LocalCluster::Options o;
  o.num_ps = num_ps;
  o.num_workers = 1;  // a cluster spec needs one; checkpoints never use it
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

// The path of the test's own directory, as the checkpoint code spells paths.
std::string Normal(const testutil::TestDir& dir) {
  return fs::path(dir.path()).lexically_normal().string();
}

Tensor Pattern(Shape shape, float scale) {
  Tensor t(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i)
    t.data<float>()[i] = scale * static_cast<float>((i * 7) % 11 - 5);
  return t;
}

// Creates the model (an Adam embedding, an Adam bias, a plain counter) and trains it a little
// with dense and row gradients.
void CreateAndTrain(ParameterServerStrategy& strategy) {
  ASSERT_TRUE(
      strategy.CreateVariable("emb", init::FromTensor(Pattern({13, 4}, 0.1f)), opt::Adam(0.05f))
          .ok());
  ASSERT_TRUE(
      strategy.CreateVariable("bias", init::FromTensor(Pattern({6}, 0.2f)), opt::Adam(0.05f)).ok());
  ASSERT_TRUE(strategy.CreateVariable("count", init::Constant({2}, 3, DType::kI64)).ok());
}

void Train(ParameterServerStrategy& strategy, int steps, float scale) {
  for (int i = 0; i < steps; ++i) {
    ASSERT_TRUE(strategy.process().ps()
                    .PushGradients(
                        {{"emb", Pattern({13, 4}, scale * static_cast<float>(i + 1)), std::nullopt},
                         {"bias", Pattern({6}, scale), std::nullopt}})
                    .ok());
    ASSERT_TRUE(strategy.process().ps()
                    .PushGradients(
                        {{"emb", Pattern({3, 4}, scale), Tensor::FromVector<int64_t>({0, 7, 12})}})
                    .ok());
  }
}

std::vector<Tensor> ReadAll(ParameterServerStrategy& strategy) {
  auto values = strategy.process().ps().Read({"emb", "bias", "count"});
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? *values : std::vector<Tensor>();
}

void ExpectSameTensors(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a[i].Equals(b[i]))
        << i << ": " << a[i].DebugString() << " vs " << b[i].DebugString();
}

// The optimizer slots and step counters as they are on the PS now: saved to a scratch
// checkpoint and read back.
struct SlotView {
  Tensor emb_m, emb_v, bias_m;
  std::map<std::string, int64_t> max_iterations;
};

SlotView SlotsOf(const std::string& checkpoint) {
  auto reader = CheckpointReader::Open(checkpoint);
  EXPECT_TRUE(reader.ok()) << reader.status();
  SlotView view;
  view.emb_m = (*reader)->Read("emb", "m").value();
  view.emb_v = (*reader)->Read("emb", "v").value();
  view.bias_m = (*reader)->Read("bias", "m").value();
  for (const auto& v : (*reader)->manifest().variables) {
    for (const auto& s : v.shards)
      view.max_iterations[v.name] = std::max(view.max_iterations[v.name], s.iterations);
  }
  return view;
}

TEST(CheckpointClusterTest, SavesRestoresAcrossRealPsWithSlotsAndRetention) {
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  auto chief = cluster->MakeChief(Fixed(4));
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  CreateAndTrain(strategy);
  Train(strategy, 3, 0.01f);
  testutil::TestDir test_dir("checkpoint_cluster_test");
  const std::string dir = Normal(test_dir);
  CheckpointManager manager(strategy, dir, /*max_to_keep=*/2);
  auto first = manager.Save(100);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, dir + "/ckpt-100");
  const std::vector<Tensor> saved = ReadAll(strategy);
  // Two files, one per PS, each written by its PS.
  auto manifest = ReadManifest(*first);
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->files.size(), 2u);
  EXPECT_EQ(manifest->step, 100);
  EXPECT_EQ(manifest->FindVariable("emb")->shards.size(), 4u);
  EXPECT_EQ(manifest->FindVariable("emb")->optimizer->kind, OptimizerKind::kAdam);
  EXPECT_EQ(manager.Save(100).status().code(), absl::StatusCode::kAlreadyExists);

  Train(strategy, 2, 0.03f);
  ASSERT_TRUE(manager.Save(200).ok());
  EXPECT_FALSE(ReadAll(strategy)[0].Equals(saved[0]));

  auto step = manager.Restore(*first);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 100);
  ExpectSameTensors(ReadAll(strategy), saved);
  // Slots and step counters came back too: a new checkpoint of the restored state has the
  // moments and counters of the first.
  const SlotView before = SlotsOf(*first);  // before retention deletes it
  auto third = manager.Save(300);
  ASSERT_TRUE(third.ok()) << third.status();
  const SlotView after = SlotsOf(*third);
  EXPECT_TRUE(after.emb_m.Equals(before.emb_m));
  EXPECT_TRUE(after.emb_v.Equals(before.emb_v));
  EXPECT_TRUE(after.bias_m.Equals(before.bias_m));
  EXPECT_EQ(after.max_iterations, before.max_iterations);
  EXPECT_EQ(before.max_iterations.at("emb"),
            6);  // 3 dense + 3 row pushes on the shards holding rows 0, 7, 12

  // Retention: only the newest two remain, and Latest is the newest.
  EXPECT_EQ(manager.List(), (std::vector<std::string>{dir + "/ckpt-200", dir + "/ckpt-300"}));
  EXPECT_EQ(manager.Latest().value(), dir + "/ckpt-300");
  EXPECT_FALSE(fs::exists(dir + "/ckpt-100"));
}

// Saved with 2 PS / 4 shards; restored with 3 PS / 2 shards and with 1 PS unsharded.
TEST(CheckpointClusterTest, RestoresIntoOtherClusterShapes) {
  testutil::TestDir test_dir("checkpoint_cluster_test");
  const std::string dir = Normal(test_dir);
  std::vector<Tensor> saved;
  std::string checkpoint;
  {
    auto cluster = StartCluster(2);
    ASSERT_NE(cluster, nullptr);
    auto chief = cluster->MakeChief(Fixed(4));
    ASSERT_TRUE(chief.ok()) << chief.status();
    ParameterServerStrategy& strategy = (*chief)->strategy();
    CreateAndTrain(strategy);
    Train(strategy, 2, 0.02f);
    CheckpointManager manager(strategy, dir, 3);
    auto path = manager.Save(7);
    ASSERT_TRUE(path.ok()) << path.status();
    checkpoint = *path;
    saved = ReadAll(strategy);
  }
  const SlotView saved_slots = SlotsOf(checkpoint);
  auto cluster = StartCluster(3);
  ASSERT_NE(cluster, nullptr);
  struct Shape {
    const char* what;
    std::shared_ptr<const Partitioner> partitioner;
    size_t emb_shards;
  };
  int round = 0;
  for (const Shape& shape :
       {Shape{"3 PS / 2 shards", Fixed(2), 2}, Shape{"unsharded", nullptr, 1}}) {
    SCOPED_TRACE(shape.what);
    // Fresh variable names per round are not needed: each round uses its own PS processes'
    // shard names ("emb/part_i" vs "emb"), and values are overwritten by the restore.
    auto chief = cluster->MakeChief(shape.partitioner);
    ASSERT_TRUE(chief.ok()) << chief.status();
    ParameterServerStrategy& strategy = (*chief)->strategy();
    ASSERT_TRUE(strategy.CreateVariable("emb", init::Zeros({13, 4}), opt::Adam(0.05f)).ok());
    ASSERT_TRUE(strategy.CreateVariable("bias", init::Zeros({6}), opt::Adam(0.05f)).ok());
    ASSERT_TRUE(strategy.CreateVariable("count", init::Zeros({2}, DType::kI64)).ok());
    EXPECT_EQ(strategy.GetVariable("emb")->num_shards(), shape.emb_shards);
    CheckpointManager manager(strategy, dir, 3);
    auto step = manager.Restore(checkpoint);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, 7);
    ExpectSameTensors(ReadAll(strategy), saved);
    auto again = manager.Save(100 + round++);
    ASSERT_TRUE(again.ok()) << again.status();
    const SlotView slots = SlotsOf(*again);
    EXPECT_TRUE(slots.emb_m.Equals(saved_slots.emb_m));
    EXPECT_TRUE(slots.emb_v.Equals(saved_slots.emb_v));
    EXPECT_TRUE(slots.bias_m.Equals(saved_slots.bias_m));
  }
}

// PS 1 stops after writing its file under the temporary name (test hook) and is SIGKILLed
// there; the save fails, the previous checkpoint stays the latest valid one, and after PS 1
// restarts (empty) restoring it brings every variable back.
TEST(CheckpointClusterTest, PsKilledMidSaveLeavesThePreviousCheckpoint) {
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  ASSERT_TRUE(cluster->KillPs(1).ok());
  setenv("ASYNCPS_TEST_CKPT_HANG_AT_STEP", "20", 1);
  const absl::Status restarted = cluster->RestartPs(1);
  unsetenv("ASYNCPS_TEST_CKPT_HANG_AT_STEP");
  ASSERT_TRUE(restarted.ok()) << restarted;

  auto chief = cluster->MakeChief(Fixed(4));
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  CreateAndTrain(strategy);
  Train(strategy, 2, 0.01f);
  testutil::TestDir test_dir("checkpoint_cluster_test");
  const std::string dir = Normal(test_dir);
  CheckpointManager manager(strategy, dir, 5);
  ASSERT_TRUE(manager.Save(10).ok());
  const std::vector<Tensor> at_10 = ReadAll(strategy);
  Train(strategy, 2, 0.05f);

  absl::StatusOr<std::string> second = absl::UnknownError("not run");
  std::thread save([&] { second = manager.Save(20); });
  const std::string temp = dir + "/ckpt-20/ps-1-of-2.safetensors.tmp";
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!fs::exists(temp) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(fs::exists(temp)) << "PS 1 never reached the hook";
  ASSERT_TRUE(cluster->KillPs(1).ok());
  save.join();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("ps 1"));
  EXPECT_EQ(manager.Latest().value(), dir + "/ckpt-10");
  EXPECT_FALSE(fs::exists(dir + "/ckpt-20/manifest.json"));

  ASSERT_TRUE(cluster->RestartPs(1).ok());
  auto step = manager.RestoreLatest();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 10);
  ExpectSameTensors(ReadAll(strategy), at_10);
  // Training continues on the restored state.
  Train(strategy, 1, 0.01f);
  EXPECT_TRUE(manager.Save(30).ok());
}

// A PS that restarted empty between training and a save answers "unknown variable" for what
// the strategy placed on it: the save fails as a PS failure (Unavailable, state lost), which a
// program exits with retryably and PS recovery repairs, not NotFound (found by the nemesis:
// fashion_mnist exited 1, not retryable, after a PS kill just before its first checkpoint).
TEST(CheckpointClusterTest, PsRestartedEmptyBeforeASaveIsAPsFailure) {
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  auto chief = cluster->MakeChief(Fixed(4));
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  CreateAndTrain(strategy);
  testutil::TestDir test_dir("checkpoint_cluster_test");
  CheckpointManager manager(strategy, Normal(test_dir), 5);
  ASSERT_TRUE(cluster->KillPs(1).ok());
  ASSERT_TRUE(cluster->RestartPs(1).ok());
  auto saved = manager.Save(1);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable) << saved.status();
  EXPECT_THAT(std::string(saved.status().message()), HasSubstr("restarted empty"));
  EXPECT_THAT(std::string(saved.status().message()), HasSubstr("ps 1"));
  EXPECT_TRUE(manager.List().empty()) << "nothing committed";
}

}  // namespace
}  // namespace asyncps
