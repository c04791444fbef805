// Embedding tables in coordinator checkpoints, against real parameter-server processes: a
// CheckpointManager save includes every table, and a restore into another number of PS gives
// identical lookups; a corrupt or unusable table file fails the restore and the PS keep serving.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_reader.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/initializers.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/optimizer_config.h"
#include "core/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/rpc_client.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/embedding/key_partition.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testutil::LocalCluster;

constexpr char kTable[] = "users";
constexpr int64_t kDim = 4;
constexpr absl::Duration kTimeout = absl::Seconds(30);

std::unique_ptr<LocalCluster> StartCluster(int num_ps) {
  LocalCluster::Options o;
  o.num_ps = num_ps;
  o.num_workers = 1;  // a cluster spec needs one; checkpoints never use it
  auto cluster = LocalCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? std::move(*cluster) : nullptr;
}

std::string Normal(const testutil::TestDir& dir) {
  return fs::path(dir.path()).lexically_normal().string();
}

ps::EmbeddingTableConfig TableConfig(int64_t dim) {
  ps::EmbeddingTableConfig c;
  c.name = kTable;
  c.dim = dim;
  c.initializer.seed = 7;
  c.optimizer.kind = OptimizerKind::kAdam;
  c.optimizer.learning_rate = 0.05f;
  return c;
}

absl::Status CreateTable(ParameterServerStrategy& strategy, int64_t dim) {
  for (int ps = 0; ps < strategy.cluster().num_ps(); ++ps) {
    net::OutMessage m;
    ps::BuildCreateEmbeddingTableRequest(TableConfig(dim), m);
    auto r =
        strategy.process().ps_rpc(ps).Call(ps::kCreateEmbeddingTableMethod, std::move(m), kTimeout);
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// Keys grouped by the PS that holds them.
std::map<int, std::vector<int64_t>> ByPs(const std::vector<int64_t>& keys, int num_ps) {
  std::map<int, std::vector<int64_t>> out;
  for (int64_t k : keys) out[ps::PsForKey(k, num_ps)].push_back(k);
  return out;
}

// One Adam push of a gradient that depends on the key and `round`.
void Push(ParameterServerStrategy& strategy, const std::vector<int64_t>& keys, int round) {
  for (auto& [ps, part] : ByPs(keys, strategy.cluster().num_ps())) {
    Tensor grads(DType::kF32, {static_cast<int64_t>(part.size()), kDim});
    for (int64_t i = 0; i < grads.num_elements(); ++i)
      grads.data<float>()[i] =
          0.01f * static_cast<float>((part[i / kDim] * 3 + i % kDim + round) % 13 - 6);
    net::OutMessage m;
    ps::BuildEmbeddingPushRequest({{kTable, Tensor::FromVector<int64_t>(part), grads}},
                                  ps::UpdateTag{}, m);
    auto r = strategy.process().ps_rpc(ps).Call(ps::kEmbeddingPushMethod, std::move(m), kTimeout);
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

// Every key's row, by key.
std::map<int64_t, std::vector<float>> Lookup(ParameterServerStrategy& strategy,
                                             const std::vector<int64_t>& keys) {
  std::map<int64_t, std::vector<float>> out;
  for (auto& [ps, part] : ByPs(keys, strategy.cluster().num_ps())) {
    net::OutMessage m;
    ps::BuildEmbeddingLookupRequest({{kTable, Tensor::FromVector<int64_t>(part)}}, /*train=*/false,
                                    m);
    auto r = strategy.process().ps_rpc(ps).Call(ps::kEmbeddingLookupMethod, std::move(m), kTimeout);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    auto values = ps::ReadEmbeddingLookupResponse(*r, 1);
    EXPECT_TRUE(values.ok()) << values.status();
    if (!values.ok()) return {};
    for (size_t i = 0; i < part.size(); ++i) {
      const float* row = (*values)[0].data<float>() + i * kDim;
      out[part[i]] = std::vector<float>(row, row + kDim);
    }
  }
  return out;
}

std::vector<int64_t> TrainedKeys() {
  std::vector<int64_t> keys;
  for (int64_t k = 1; k <= 300; ++k) keys.push_back(k * 7919 - 150000);  // negative ones too
  return keys;
}

// Trained keys and a few never pushed (their initial values).
std::vector<int64_t> LookedUpKeys() {
  std::vector<int64_t> keys = TrainedKeys();
  for (int64_t k = 0; k < 5; ++k) keys.push_back(int64_t{1} << 40 | k);
  return keys;
}

Tensor ReadBias(ParameterServerStrategy& strategy) {
  auto values = strategy.process().ps().Read({"bias"});
  EXPECT_TRUE(values.ok()) << values.status();
  return values.ok() ? (*values)[0] : Tensor();
}

// A model of one dense variable and one table on a fresh chief of `cluster`.
struct Model {
  std::unique_ptr<testutil::TestChief> chief;
  std::unique_ptr<CheckpointManager> manager;
  ParameterServerStrategy& strategy() { return chief->strategy(); }
};

Model MakeModel(LocalCluster& cluster, const std::string& dir,
                CheckpointManager::Options options = {}) {
  Model model;
  auto chief = cluster.MakeChief();
  EXPECT_TRUE(chief.ok()) << chief.status();
  if (!chief.ok()) return model;
  model.chief = std::move(*chief);
  EXPECT_TRUE(model.strategy().CreateVariable("bias", init::Zeros({6}), opt::Adam(0.05f)).ok());
  EXPECT_TRUE(CreateTable(model.strategy(), kDim).ok());
  model.manager = std::make_unique<CheckpointManager>(model.strategy(), dir, options);
  model.manager->AddEmbeddingTable(kTable);
  return model;
}

// Saved by 2 PS, restored into 3, trained on, saved by 3 and restored into 2: lookups are
// identical each time, and the optimizer slots and table step came back too (the same push
// after a restore gives the same rows as on the original cluster).
TEST(EmbeddingCheckpointTest, RestoresTablesIntoThreeFromTwoPsAndBack) {
  testutil::TestDir test_dir("embedding_checkpoint_test");
  const std::string dir = Normal(test_dir);
  std::map<int64_t, std::vector<float>> saved, pushed_after;
  Tensor bias;
  std::string first;
  {
    auto cluster = StartCluster(2);
    ASSERT_NE(cluster, nullptr);
    Model model = MakeModel(*cluster, dir);
    ASSERT_NE(model.manager, nullptr);
    for (int round = 0; round < 3; ++round) Push(model.strategy(), TrainedKeys(), round);
    ASSERT_TRUE(
        model.strategy()
            .process()
            .ps()
            .PushGradients({{"bias", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}), std::nullopt}})
            .ok());
    auto path = model.manager->Save(10);
    ASSERT_TRUE(path.ok()) << path.status();
    first = *path;
    saved = Lookup(model.strategy(), LookedUpKeys());
    bias = ReadBias(model.strategy());
    Push(model.strategy(), TrainedKeys(), 3);
    pushed_after = Lookup(model.strategy(), LookedUpKeys());
    ASSERT_NE(pushed_after, saved);
  }
  auto manifest = ReadManifest(first);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->embedding_tables.size(), 1u);
  EXPECT_EQ(manifest->embedding_key_partition, ps::kKeyPartitionName);
  const ManifestEmbeddingTable& table = manifest->embedding_tables[0];
  EXPECT_EQ(table.name, kTable);
  EXPECT_EQ(table.dim, kDim);
  EXPECT_EQ(table.rows, TrainedKeys().size());
  ASSERT_EQ(table.files.size(), 2u);  // one per PS, each in "files" with its size and CRC-32
  for (const std::string& f : table.files) {
    ASSERT_NE(manifest->FindFile(f), nullptr) << f;
    EXPECT_EQ(fs::file_size(first + "/" + f), manifest->FindFile(f)->digest.bytes);
  }

  std::string second;
  {
    auto cluster = StartCluster(3);
    ASSERT_NE(cluster, nullptr);
    Model model = MakeModel(*cluster, dir);
    ASSERT_NE(model.manager, nullptr);
    auto step = model.manager->Restore(first);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(*step, 10);
    EXPECT_EQ(Lookup(model.strategy(), LookedUpKeys()), saved);
    EXPECT_TRUE(ReadBias(model.strategy()).Equals(bias));
    Push(model.strategy(), TrainedKeys(), 3);
    EXPECT_EQ(Lookup(model.strategy(), LookedUpKeys()), pushed_after);
    auto path = model.manager->Save(20);
    ASSERT_TRUE(path.ok()) << path.status();
    second = *path;
    EXPECT_EQ(ReadManifest(second)->embedding_tables[0].files.size(), 3u);
  }
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  Model model = MakeModel(*cluster, dir);
  ASSERT_NE(model.manager, nullptr);
  auto step = model.manager->Restore(second);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 20);
  EXPECT_EQ(Lookup(model.strategy(), LookedUpKeys()), pushed_after);
}

// Flips one byte in the middle of `path`.
void Corrupt(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.is_open()) << path;
  f.seekg(static_cast<std::streamoff>(fs::file_size(path) - 8));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  f.seekp(static_cast<std::streamoff>(fs::file_size(path) - 8));
  f.write(&c, 1);
}

// A corrupt table file fails the restore naming the file, with or without the coordinator's
// pre-check of every file, and changes nothing: the PS keep serving their current rows and
// variables. A table whose file cannot be applied on a PS (its dim differs from the live table's)
// fails the restore before any variable changes.
TEST(EmbeddingCheckpointTest, BadTableFileFailsRestoreAndPsKeepsServing) {
  testutil::TestDir test_dir("embedding_checkpoint_test");
  const std::string dir = Normal(test_dir);
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  Model model = MakeModel(*cluster, dir);
  ASSERT_NE(model.manager, nullptr);
  Push(model.strategy(), TrainedKeys(), 0);
  auto path = model.manager->Save(5);
  ASSERT_TRUE(path.ok()) << path.status();
  Push(model.strategy(), TrainedKeys(), 1);
  ASSERT_TRUE(
      model.strategy()
          .process()
          .ps()
          .PushGradients({{"bias", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}), std::nullopt}})
          .ok());
  const auto live = Lookup(model.strategy(), LookedUpKeys());
  const Tensor live_bias = ReadBias(model.strategy());
  const std::string file = ReadManifest(*path)->embedding_tables[0].files[1];
  Corrupt(*path + "/" + file);

  auto restored = model.manager->Restore(*path);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss) << restored.status();
  EXPECT_THAT(restored.status().message(), HasSubstr(file));
  CheckpointManager::Options no_precheck;
  no_precheck.verify_before_restore = false;
  CheckpointManager unverified(model.strategy(), dir, no_precheck);
  restored = unverified.Restore(*path);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss) << restored.status();
  EXPECT_THAT(restored.status().message(), HasSubstr(file));
  EXPECT_EQ(Lookup(model.strategy(), LookedUpKeys()), live);
  EXPECT_TRUE(ReadBias(model.strategy()).Equals(live_bias));
  Push(model.strategy(), TrainedKeys(), 2);  // still serving pushes
  EXPECT_NE(Lookup(model.strategy(), LookedUpKeys()), live);

  // A cluster whose table has another dim: the PS refuses the table, no variable changes.
  auto other = StartCluster(2);
  ASSERT_NE(other, nullptr);
  auto chief = other->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  ASSERT_TRUE(strategy.CreateVariable("bias", init::Zeros({6}), opt::Adam(0.05f)).ok());
  ASSERT_TRUE(CreateTable(strategy, kDim + 1).ok());
  CheckpointManager manager(strategy, dir, CheckpointManager::Options{});
  auto good = model.manager->Save(6);
  ASSERT_TRUE(good.ok()) << good.status();
  restored = manager.Restore(*good);
  EXPECT_FALSE(restored.ok());
  EXPECT_THAT(restored.status().message(), HasSubstr("embedding tables (no variable changed"));
  EXPECT_THAT(restored.status().message(), HasSubstr(kTable));
  EXPECT_TRUE(ReadBias(strategy).Equals(Tensor::FromVector<float>({0, 0, 0, 0, 0, 0})));
}

// A registered table the checkpoint lacks fails the restore before any PS changes; a table a PS
// lost (restarted empty) fails the save instead of leaving its rows out.
TEST(EmbeddingCheckpointTest, MissingTableFailsRestoreAndSave) {
  testutil::TestDir test_dir("embedding_checkpoint_test");
  const std::string dir = Normal(test_dir);
  auto cluster = StartCluster(2);
  ASSERT_NE(cluster, nullptr);
  auto chief = cluster->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  ASSERT_TRUE(strategy.CreateVariable("bias", init::Zeros({6}), opt::Adam(0.05f)).ok());
  CheckpointManager manager(strategy, dir, CheckpointManager::Options{});
  auto without = manager.Save(1);  // no table yet
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(ReadManifest(*without)->embedding_tables.empty());

  // Created on PS 0 only, as if PS 1 had restarted since: found on PS 0, missing on PS 1.
  net::OutMessage m;
  ps::BuildCreateEmbeddingTableRequest(TableConfig(kDim), m);
  ASSERT_TRUE(strategy.process()
                  .ps_rpc(0)
                  .Call(ps::kCreateEmbeddingTableMethod, std::move(m), kTimeout)
                  .ok());
  auto saved = manager.Save(2);
  EXPECT_FALSE(saved.ok());
  // A PS failure (it lost its state), which PS recovery repairs and a retry outlives, as for a
  // variable: Unavailable saying so, not NotFound (on which a program exits non-retryably).
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kUnavailable) << saved.status();
  EXPECT_THAT(saved.status().message(), HasSubstr("restarted empty"));
  EXPECT_THAT(saved.status().message(), HasSubstr("ps 1"));
  EXPECT_THAT(saved.status().message(), HasSubstr(kTable));
  EXPECT_EQ(manager.List(), std::vector<std::string>{*without});

  manager.AddEmbeddingTable(kTable);
  auto restored = manager.Restore(*without);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kNotFound) << restored.status();
  EXPECT_THAT(restored.status().message(), HasSubstr("no embedding table 'users'"));
}

}  // namespace
}  // namespace asyncps
