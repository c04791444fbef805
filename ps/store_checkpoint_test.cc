#include "ps/store_checkpoint.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/durable_file.h"
#include "checkpoint/test_temp_dir.h"
#include "ps/parallel_apply.h"
#include "ps/variable_store.h"

namespace asyncps::ps {
namespace {

using ::testing::HasSubstr;

std::string TempDir() { return TestTempDir("checkpoint_shard_test"); }

OptimizerConfig Adam() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 0.1f;
  return c;
}

Tensor Iota(Shape shape, float start) {
  Tensor t(DType::kF32, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

void Add(VariableStore& store, const std::string& name, Tensor value, const OptimizerConfig* opt) {
  ASSERT_TRUE(store.Insert(Variable::Create(name, std::move(value), opt).value()).ok());
}

// A plan restoring every shard of `saved` whole, under the same names.
RestorePlan WholePlan(const std::string& dir, const SavedFile& saved) {
  RestorePlan plan;
  plan.directory = dir;
  plan.files.push_back({saved.file_name, saved.digest});
  for (const SavedShard& s : saved.shards) {
    RestoreShard r;
    r.name = s.name;
    r.dtype = s.dtype;
    r.shape = s.shape;
    r.optimizer = s.optimizer;
    r.iterations = s.iterations;
    const int64_t rows = s.shape.empty() ? 1 : s.shape[0];
    r.pieces.push_back({0, s.tensor, s.slot_names, s.slot_tensors, 0, rows, 0});
    plan.shards.push_back(std::move(r));
  }
  return plan;
}

TEST(CheckpointShardTest, RoundTripsValuesSlotsAndCountersIntoAnEmptyStore) {
  const std::string dir = TempDir();
  VariableStore store;
  const OptimizerConfig adam = Adam();
  Add(store, "w", Iota({4, 3}, 0), &adam);
  Add(store, "step", Tensor::Scalar<int64_t>(42), nullptr);
  auto w = store.Find("w").value();
  ASSERT_TRUE(w->ApplyGradient(Iota({4, 3}, 1)).ok());
  ASSERT_TRUE(w->ApplyRowGradients(Tensor::FromVector<int64_t>({1}, {2}), Iota({1, 3}, 5)).ok());
  const Variable::State before = w->CheckpointState();
  ASSERT_EQ(before.iterations, 2);

  auto saved = SaveShards(store, dir, "ps-0.safetensors", {"w", "step"}, 7);
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_EQ(saved->shards.size(), 2u);
  EXPECT_EQ(saved->shards[0].slot_names, (std::vector<std::string>{"m", "v"}));
  EXPECT_EQ(saved->shards[0].slot_tensors[0], "w/.OPTIMIZER_SLOT/m");
  EXPECT_EQ(saved->shards[0].iterations, 2);
  ASSERT_TRUE(saved->shards[0].optimizer.has_value());
  EXPECT_EQ(saved->shards[0].optimizer->kind, OptimizerKind::kAdam);
  EXPECT_FALSE(saved->shards[1].optimizer.has_value());
  EXPECT_EQ(saved->digest.bytes, FileSize(dir + "/ps-0.safetensors").value());

  // Variables a restore creates split their applies over the store's pool.
  ApplyPool pool(ApplyPool::Options{.helpers = 0});
  VariableStore fresh(std::numeric_limits<uint64_t>::max(), &pool);
  ASSERT_TRUE(RestoreShards(fresh, WholePlan(dir, *saved)).ok());
  EXPECT_EQ(fresh.Find("w").value()->apply_pool(), &pool);
  auto restored = fresh.Find("w").value()->CheckpointState();
  EXPECT_TRUE(restored.value.Equals(before.value));
  ASSERT_EQ(restored.slots.size(), 2u);
  EXPECT_TRUE(restored.slots[0].Equals(before.slots[0]));
  EXPECT_TRUE(restored.slots[1].Equals(before.slots[1]));
  EXPECT_EQ(restored.iterations, 2);
  EXPECT_EQ(fresh.Find("step").value()->Read().data<int64_t>()[0], 42);

  // Restoring onto existing variables overwrites them.
  ASSERT_TRUE(w->ApplyGradient(Iota({4, 3}, 1)).ok());
  ASSERT_TRUE(RestoreShards(store, WholePlan(dir, *saved)).ok());
  EXPECT_TRUE(w->Read().Equals(before.value));
  EXPECT_EQ(w->iterations(), 2);
}

TEST(CheckpointShardTest, RowPiecesReassembleAShardWithItsSlots) {
  const std::string dir = TempDir();
  VariableStore a;
  const OptimizerConfig adam = Adam();
  Add(a, "p0", Iota({3, 2}, 0), &adam);
  Add(a, "p1", Iota({2, 2}, 100), &adam);
  ASSERT_TRUE(a.Find("p0").value()->ApplyGradient(Iota({3, 2}, 1)).ok());
  ASSERT_TRUE(a.Find("p1").value()->ApplyGradient(Iota({2, 2}, 1)).ok());
  ASSERT_TRUE(a.Find("p1").value()->ApplyGradient(Iota({2, 2}, 1)).ok());
  auto saved = SaveShards(a, dir, "f.safetensors", {"p0", "p1"}, 1);
  ASSERT_TRUE(saved.ok());
  // Merge rows 1..2 of p0 and 0..1 of p1 into a 4-row variable "m" (pieces given out of order).
  RestorePlan plan;
  plan.directory = dir;
  plan.files.push_back({saved->file_name, saved->digest});
  RestoreShard m{"m", DType::kF32, {4, 2}, adam, 2, {}};
  m.pieces.push_back(
      {0, "p1", {"m", "v"}, {SlotTensorName("p1", "m"), SlotTensorName("p1", "v")}, 0, 2, 2});
  m.pieces.push_back(
      {0, "p0", {"v", "m"}, {SlotTensorName("p0", "v"), SlotTensorName("p0", "m")}, 1, 3, 0});
  plan.shards.push_back(m);
  VariableStore b;
  ASSERT_TRUE(RestoreShards(b, plan).ok());
  const auto got = b.Find("m").value()->CheckpointState();
  const auto s0 = a.Find("p0").value()->CheckpointState();
  const auto s1 = a.Find("p1").value()->CheckpointState();
  for (int slot = -1; slot < 2; ++slot) {
    const Tensor& g = slot < 0 ? got.value : got.slots[static_cast<size_t>(slot)];
    const Tensor& x0 = slot < 0 ? s0.value : s0.slots[static_cast<size_t>(slot)];
    const Tensor& x1 = slot < 0 ? s1.value : s1.slots[static_cast<size_t>(slot)];
    EXPECT_TRUE(g.Slice(0, 2)->Clone().Equals(x0.Slice(1, 3)->Clone())) << slot;
    EXPECT_TRUE(g.Slice(2, 4)->Clone().Equals(x1.Slice(0, 2)->Clone())) << slot;
  }
  EXPECT_EQ(got.iterations, 2);
}

TEST(CheckpointShardTest, BadPlansAndCorruptFilesChangeNothing) {
  const std::string dir = TempDir();
  VariableStore store;
  const OptimizerConfig adam = Adam();
  Add(store, "w", Iota({4, 2}, 0), &adam);
  auto saved = SaveShards(store, dir, "f.safetensors", {"w"}, 1);
  ASSERT_TRUE(saved.ok());
  ASSERT_TRUE(store.Find("w").value()->ApplyGradient(Iota({4, 2}, 1)).ok());
  const Tensor current = store.Find("w").value()->Read();

  auto expect_unchanged = [&](const RestorePlan& plan, absl::StatusCode code,
                              const std::string& message) {
    const absl::Status s = RestoreShards(store, plan);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_TRUE(store.Find("w").value()->Read().Equals(current));
    EXPECT_FALSE(store.Find("new").ok());
  };
  const RestorePlan good = WholePlan(dir, *saved);
  {  // A second shard that would be created first, then a gap in the pieces of "w".
    RestorePlan plan = good;
    RestoreShard extra = plan.shards[0];
    extra.name = "new";
    plan.shards.insert(plan.shards.begin(), extra);
    plan.shards[1].pieces[0].src_row_end = 3;
    expect_unchanged(plan, absl::StatusCode::kInvalidArgument, "cover 3 rows");
  }
  {
    RestorePlan plan = good;
    plan.shards[0].pieces[0].slot_names = {"m"};
    plan.shards[0].pieces[0].slot_tensors = {SlotTensorName("w", "m")};
    expect_unchanged(plan, absl::StatusCode::kFailedPrecondition, "no optimizer slot 'v'");
  }
  {
    RestorePlan plan = good;
    plan.shards[0].shape = {5, 2};
    expect_unchanged(plan, absl::StatusCode::kFailedPrecondition, "checkpoint restores f32[5, 2]");
  }
  {
    RestorePlan plan = good;
    plan.shards[0].pieces[0].tensor = "nope";
    expect_unchanged(plan, absl::StatusCode::kNotFound, "no tensor 'nope'");
  }
  {
    RestorePlan plan = good;
    plan.shards[0].dtype = DType::kF64;
    plan.shards[0].name = "new";
    plan.shards[0].optimizer.reset();
    expect_unchanged(plan, absl::StatusCode::kDataLoss, "is f32, expected f64");
  }
  for (int64_t iterations : {int64_t{-1}, Variable::kMaxIterations + 1, std::numeric_limits<int64_t>::max()}) {
    // A shard that would be created first, then "w" with a step counter no variable takes (a
    // negative one, or one whose version would soon wrap): refused before either is restored.
    RestorePlan plan = good;
    RestoreShard extra = plan.shards[0];
    extra.name = "new";
    plan.shards.insert(plan.shards.begin(), extra);
    plan.shards[1].iterations = iterations;
    expect_unchanged(plan, absl::StatusCode::kInvalidArgument, absl::StrCat("step counter ", iterations));
  }
  for (const auto& [steps, alpha] : std::vector<std::pair<int64_t, float>>{
           {-3, 0.0f}, {10, std::numeric_limits<float>::quiet_NaN()}, {10, 2.0f}}) {
    // A damaged decay setting on a shard the restore creates, after "w": neither is restored.
    RestorePlan plan = good;
    RestoreShard extra = plan.shards[0];
    extra.name = "new";
    extra.optimizer->decay_steps = steps;
    extra.optimizer->decay_alpha = alpha;
    plan.shards.push_back(extra);
    expect_unchanged(plan, absl::StatusCode::kInvalidArgument, "decay_");
    // The same on the shard of a variable that exists: checked all the same.
    RestorePlan onto = good;
    onto.shards[0].optimizer->decay_steps = steps;
    onto.shards[0].optimizer->decay_alpha = alpha;
    expect_unchanged(onto, absl::StatusCode::kInvalidArgument, "decay_");
  }
  {  // One flipped data byte: the CRC-32 no longer matches.
    std::string bytes = ReadFileToString(dir + "/f.safetensors", 1 << 20).value();
    bytes[bytes.size() - 3] ^= 1;
    std::ofstream(dir + "/f.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    expect_unchanged(good, absl::StatusCode::kDataLoss, "checksum mismatch");
  }
  {
    RestorePlan plan = good;
    plan.files[0].file_name = "../f.safetensors";
    expect_unchanged(plan, absl::StatusCode::kInvalidArgument, "invalid checkpoint file name");
  }
}

TEST(CheckpointShardTest, SaveRejectsUnknownVariablesAndWritesNothing) {
  const std::string dir = TempDir();
  VariableStore store;
  Add(store, "w", Iota({2}, 0), nullptr);
  auto saved = SaveShards(store, dir, "f.safetensors", {"w", "missing"}, 1);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  EXPECT_FALSE(SaveShards(store, "relative/dir", "f.safetensors", {"w"}, 1).ok());
  EXPECT_FALSE(SaveShards(store, dir, "a/b", {"w"}, 1).ok());
}

// Saving while another thread keeps applying Adam updates with a constant gradient g: the
// saved moments must be exactly those of the saved step counter t (m = (1 - b1^t) g and
// v = (1 - b2^t) g^2 up to rounding), whatever moment the copy was taken at.
TEST(CheckpointShardTest, ValueSlotsAndCounterCapturedTogetherInTraining) {
  const std::string dir = TempDir();
  VariableStore store;
  const OptimizerConfig adam = Adam();
  Add(store, "w", Tensor(DType::kF32, {64, 16}), &adam);
  auto w = store.Find("w").value();
  Tensor g(DType::kF32, {64, 16});
  for (int64_t i = 0; i < g.num_elements(); ++i) g.data<float>()[i] = 0.5f;
  Tensor ids(DType::kI64, {64});
  for (int64_t i = 0; i < 64; ++i) ids.data<int64_t>()[i] = i;
  std::atomic<bool> stop{false};
  std::thread trainer([&] {
    for (int i = 0; !stop.load(); ++i) {
      // Alternate dense and row pushes (the latter hold the variable lock only shared).
      ASSERT_TRUE((i % 2 == 0 ? w->ApplyGradient(g) : w->ApplyRowGradients(ids, g)).ok());
    }
  });
  for (int round = 0; round < 20; ++round) {
    auto saved = SaveShards(store, dir, "f.safetensors", {"w"}, round);
    ASSERT_TRUE(saved.ok()) << saved.status();
    auto file = SafetensorsFile::Open(dir + "/f.safetensors", &saved->digest);
    ASSERT_TRUE(file.ok()) << file.status();
    const double t = static_cast<double>(saved->shards[0].iterations);
    const Tensor m = file->Get("w/.OPTIMIZER_SLOT/m").value();
    const Tensor v = file->Get("w/.OPTIMIZER_SLOT/v").value();
    const double want_m = (1 - std::pow(0.9, t)) * 0.5;
    const double want_v = (1 - std::pow(0.999, t)) * 0.25;
    for (int64_t i = 0; i < m.num_elements(); ++i) {
      ASSERT_NEAR(m.data<float>()[i], want_m, 1e-4) << "t=" << t << " element " << i;
      ASSERT_NEAR(v.data<float>()[i], want_v, 1e-4) << "t=" << t << " element " << i;
    }
  }
  stop = true;
  trainer.join();
}

}  // namespace
}  // namespace asyncps::ps
