#include "checkpoint/checkpoint_manifest.h"

#include <nlohmann/json.hpp>

#include "ps/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps {
namespace {

using testutil::AdamConfig;
using testutil::FakeCluster;
using testutil::TestDir;
using ::testing::HasSubstr;
using testutil::Iota;

CheckpointManifest Sample() {
  CheckpointManifest m;
  m.step = 1234;
  m.wall_time = 1700000000.25;
  m.num_ps = 2;
  m.files = {{"ps-0-of-2.safetensors", {4096, 0xdeadbeef}}, {"ps-1-of-2.safetensors", {80, 7}}};
  ManifestVariable emb{"emb", DType::kF32, {5, 3}, AdamConfig(), {}};
  emb.optimizer->beta_2 = 0.98f;
  emb.optimizer->nesterov = true;
  emb.optimizer->decay_steps = 4690;
  emb.optimizer->decay_alpha = 0.25f;
  emb.shards.push_back(
      {"emb/part_0",
       0,
       3,
       "ps-0-of-2.safetensors",
       "emb/part_0",
       {{"m", "emb/part_0/.OPTIMIZER_SLOT/m"}, {"v", "emb/part_0/.OPTIMIZER_SLOT/v"}},
       17});
  emb.shards.push_back(
      {"emb/part_1",
       3,
       5,
       "ps-1-of-2.safetensors",
       "emb/part_1",
       {{"m", "emb/part_1/.OPTIMIZER_SLOT/m"}, {"v", "emb/part_1/.OPTIMIZER_SLOT/v"}},
       9});
  ManifestVariable step{"global_step", DType::kI64, {}, std::nullopt, {}};
  step.shards.push_back({"global_step", 0, 1, "ps-1-of-2.safetensors", "global_step", {}, 0});
  m.variables = {emb, step};
  return m;
}

TEST(CheckpointManifestTest, RoundTripsEveryField) {
  const CheckpointManifest m = Sample();
  auto back = ManifestFromJson(ManifestToJson(m), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->step, 1234);
  EXPECT_DOUBLE_EQ(back->wall_time, 1700000000.25);
  EXPECT_EQ(back->num_ps, 2);
  ASSERT_EQ(back->files.size(), 2u);
  EXPECT_EQ(back->files[0].name, "ps-0-of-2.safetensors");
  EXPECT_EQ(back->files[0].digest.bytes, 4096u);
  EXPECT_EQ(back->files[0].digest.crc32, 0xdeadbeefu);
  ASSERT_EQ(back->variables.size(), 2u);
  const ManifestVariable& emb = back->variables[0];
  EXPECT_EQ(emb.name, "emb");
  EXPECT_EQ(emb.dtype, DType::kF32);
  EXPECT_EQ(emb.shape, (Shape{5, 3}));
  ASSERT_TRUE(emb.optimizer.has_value());
  EXPECT_EQ(emb.optimizer->kind, OptimizerKind::kAdam);
  EXPECT_FLOAT_EQ(emb.optimizer->learning_rate, 0.05f);
  EXPECT_FLOAT_EQ(emb.optimizer->beta_2, 0.98f);
  EXPECT_TRUE(emb.optimizer->nesterov);
  EXPECT_EQ(emb.optimizer->decay_steps, 4690);
  EXPECT_FLOAT_EQ(emb.optimizer->decay_alpha, 0.25f);
  ASSERT_EQ(emb.shards.size(), 2u);
  EXPECT_EQ(emb.shards[1].name, "emb/part_1");
  EXPECT_EQ(emb.shards[1].row_begin, 3);
  EXPECT_EQ(emb.shards[1].row_end, 5);
  EXPECT_EQ(emb.shards[1].file, "ps-1-of-2.safetensors");
  EXPECT_EQ(emb.shards[1].slots.at("v"), "emb/part_1/.OPTIMIZER_SLOT/v");
  EXPECT_EQ(emb.shards[1].iterations, 9);
  EXPECT_EQ(emb.ShardShape(emb.shards[1]), (Shape{2, 3}));
  EXPECT_FALSE(back->variables[1].optimizer.has_value());
  EXPECT_EQ(back->variables[1].dtype, DType::kI64);
  EXPECT_TRUE(back->variables[1].shape.empty());
  EXPECT_EQ(ManifestToJson(*back), ManifestToJson(m));
}

TEST(CheckpointManifestTest, CoordinatorStateRoundTripsAndIsOptional) {
  CheckpointManifest m = Sample();
  auto without = ManifestFromJson(ManifestToJson(m), "test");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->coordinator_state.empty());
  EXPECT_EQ(ManifestToJson(m).find("coordinator_state"), std::string::npos);  // older readers agree

  m.coordinator_state = {{"split_cursor/train", R"({"epoch":3})"}, {"other", ""}};
  auto with = ManifestFromJson(ManifestToJson(m), "test");
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->coordinator_state, m.coordinator_state);

  nlohmann::json j = nlohmann::json::parse(ManifestToJson(m));
  j["coordinator_state"]["other"] = 5;
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(), HasSubstr("'other' is not a string"));
  j["coordinator_state"] = "x";
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(), HasSubstr("coordinator_state is not an object"));
}

TEST(CheckpointManifestTest, EmbeddingTablesRoundTripAndAreChecked) {
  CheckpointManifest m = Sample();
  EXPECT_EQ(ManifestToJson(m).find("embedding_tables"), std::string::npos);  // older readers agree
  EXPECT_TRUE(ManifestFromJson(ManifestToJson(m), "test")->embedding_tables.empty());
  m.files.push_back({"embedding-0-ps-0-of-2.safetensors", {300, 1}});
  m.files.push_back({"embedding-0-ps-1-of-2.safetensors", {200, 2}});
  m.embedding_key_partition = "jump_splitmix64_v1";
  m.embedding_tables = {
      {"users",
       16,
       42,
       {"embedding-0-ps-0-of-2.safetensors", "embedding-0-ps-1-of-2.safetensors"}}};
  auto back = ManifestFromJson(ManifestToJson(m), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->embedding_key_partition, "jump_splitmix64_v1");
  ASSERT_NE(back->FindEmbeddingTable("users"), nullptr);
  EXPECT_EQ(back->FindEmbeddingTable("users")->dim, 16);
  EXPECT_EQ(back->FindEmbeddingTable("users")->rows, 42u);
  EXPECT_EQ(back->FindEmbeddingTable("users")->files, m.embedding_tables[0].files);
  EXPECT_EQ(back->FindEmbeddingTable("items"), nullptr);

  const nlohmann::json good = nlohmann::json::parse(ManifestToJson(m));
  nlohmann::json j = good;
  j["embedding_tables"]["tables"][0]["files"][1] = "nope.safetensors";
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(),
              HasSubstr("file 'nope.safetensors' is not in \"files\""));
  j = good;
  j["embedding_tables"]["tables"].push_back(j["embedding_tables"]["tables"][0]);
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(), HasSubstr("listed twice"));
  j = good;
  j["embedding_tables"]["tables"][0]["files"][1] = "embedding-0-ps-0-of-2.safetensors";
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(),
              HasSubstr("belongs to two tables"));
  j = good;
  j["embedding_tables"]["tables"][0]["dim"] = 0;
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(), HasSubstr("'dim'"));
  j = good;
  j["embedding_tables"].erase("key_partition");
  EXPECT_THAT(ManifestFromJson(j.dump(), "test").status().message(),
              HasSubstr("'key_partition' missing"));
}

// Manifests written before the learning-rate decay existed have no decay fields: they load with
// no decay, as they trained.
TEST(CheckpointManifestTest, ManifestWithoutDecayFieldsLoadsWithNoDecay) {
  using nlohmann::json;
  json j = json::parse(ManifestToJson(Sample()));
  j["variables"][0]["optimizer"].erase("decay_steps");
  j["variables"][0]["optimizer"].erase("decay_alpha");
  auto back = ManifestFromJson(j.dump(), "test");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->variables[0].optimizer.has_value());
  EXPECT_EQ(back->variables[0].optimizer->decay_steps, 0);
  EXPECT_EQ(back->variables[0].optimizer->decay_alpha, 0.0f);
  EXPECT_FLOAT_EQ(back->variables[0].optimizer->beta_2, 0.98f);
}

TEST(CheckpointManifestTest, RejectsEveryBrokenField) {
  using nlohmann::json;
  const json good = json::parse(ManifestToJson(Sample()));
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"format", [](json& j) { j["format"] = "other"; }, "format is 'other'"},
      {"version", [](json& j) { j["version"] = 2; }, "version 2 is not supported"},
      {"step missing", [](json& j) { j.erase("step"); }, "field 'step' missing"},
      {"step negative", [](json& j) { j["step"] = -1; }, "'step' is not an integer >= 0"},
      {"files not array", [](json& j) { j["files"] = 3; }, "'files' is not an array"},
      {"file name", [](json& j) { j["files"][0]["name"] = "../x"; },
       "invalid checkpoint file name"},
      {"file twice", [](json& j) { j["files"][1]["name"] = j["files"][0]["name"]; },
       "listed twice"},
      {"crc range", [](json& j) { j["files"][0]["crc32"] = 1LL << 33; }, "does not fit in 32 bits"},
      {"bytes type", [](json& j) { j["files"][0]["bytes"] = "12"; }, "'bytes' is not an integer"},
      {"dtype", [](json& j) { j["variables"][0]["dtype"] = "F16"; }, "unknown dtype 'F16'"},
      {"shape",
       [](json& j) {
         j["variables"][0]["shape"] = {5, -3};
       },
       "not a non-negative integer"},
      {"optimizer field", [](json& j) { j["variables"][0]["optimizer"].erase("beta_1"); },
       "'beta_1' missing"},
      {"decay steps", [](json& j) { j["variables"][0]["optimizer"]["decay_steps"] = -1; },
       "'decay_steps' is not an integer >= 0"},
      {"decay steps fraction", [](json& j) { j["variables"][0]["optimizer"]["decay_steps"] = 2.5; },
       "'decay_steps' is not an integer >= 0"},
      {"decay steps text", [](json& j) { j["variables"][0]["optimizer"]["decay_steps"] = "10"; },
       "'decay_steps' is not an integer >= 0"},
      {"decay steps past 2^62",
       [](json& j) { j["variables"][0]["optimizer"]["decay_steps"] = (uint64_t{1} << 63) + 1; },
       "'decay_steps' is not an integer >= 0"},
      {"decay alpha text", [](json& j) { j["variables"][0]["optimizer"]["decay_alpha"] = "0.5"; },
       "'decay_alpha' is not a number"},
      {"decay alpha null", [](json& j) { j["variables"][0]["optimizer"]["decay_alpha"] = nullptr; },
       "'decay_alpha' is not a number"},
      {"decay alpha past f32", [](json& j) { j["variables"][0]["optimizer"]["decay_alpha"] = 1e39; },
       "'decay_alpha' is not a number"},
      {"learning rate past f32", [](json& j) { j["variables"][0]["optimizer"]["learning_rate"] = -1e300; },
       "'learning_rate' is not a number"},
      {"iterations past 2^62",
       [](json& j) { j["variables"][0]["shards"][0]["iterations"] = (uint64_t{1} << 62) + 1; },
       "'iterations' is not an integer >= 0"},
      {"rows gap",
       [](json& j) {
         j["variables"][0]["shards"][1]["rows"] = {4, 5};
       },
       "do not continue from row 3"},
      {"rows short",
       [](json& j) {
         j["variables"][0]["shards"][1]["rows"] = {3, 4};
       },
       "cover rows [0, 4) of 5"},
      {"rows past end",
       [](json& j) {
         j["variables"][0]["shards"][1]["rows"] = {3, 6};
       },
       "within the variable's 5 rows"},
      {"unknown file", [](json& j) { j["variables"][0]["shards"][0]["file"] = "zz"; },
       "file 'zz' is not in"},
      {"slot type", [](json& j) { j["variables"][0]["shards"][0]["slots"]["m"] = 1; },
       "slot 'm' is not a tensor name"},
      {"iterations", [](json& j) { j["variables"][0]["shards"][0]["iterations"] = 1.5; },
       "'iterations' is not an integer"},
      {"variable twice", [](json& j) { j["variables"][1] = j["variables"][0]; }, "listed twice"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.edit(j);
    auto m = ManifestFromJson(j.dump(), "/x/manifest.json");
    EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss) << c.what << ": " << m.status();
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.message)) << c.what;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("/x/manifest.json")) << c.what;
  }
  // Duplicate keys, which a plain JSON parser would silently resolve to the last one.
  std::string text = good.dump();
  const std::string needle = "\"iterations\":17";
  text.replace(text.find(needle), needle.size(), "\"iterations\":17,\"iterations\":3");
  EXPECT_THAT(std::string(ManifestFromJson(text, "m").status().message()),
              HasSubstr("'iterations' appears twice"));
  // Cut anywhere: never accepted.
  const std::string full = ManifestToJson(Sample());
  for (size_t len = 0; len + 2 < full.size(); len += 7) {
    EXPECT_FALSE(ManifestFromJson(full.substr(0, len), "m").ok()) << len;
  }
}

// Saved with 2 PS and 4 shards (Adam, shards updated different numbers of times), restored
// into several other layouts; values and both Adam slots must come back row for row, and
// step counters follow the documented rule (max over the saved shards a target shard reads).
TEST(CheckpointManifestTest, ReshardsValuesSlotsAndCountersAcrossLayouts) {
  TestDir temp("reshard");
  const std::string& dir = temp.path();
  const OptimizerConfig adam = AdamConfig();
  FakeCluster source(2);
  source.Add("emb", Iota({13, 3}, 1), {4, 3, 3, 3}, {0, 1, 0, 1}, &adam);
  source.Add("bias", Iota({13}, -2), {4, 3, 3, 3}, {1, 0, 1, 0}, &adam);
  source.Add("scalar", Tensor::Scalar<float>(2.5f), {1}, {1}, &adam);
  // Shard i gets i + 1 updates (dense), so counters differ: 1, 2, 3, 4.
  for (int i = 0; i < 4; ++i) {
    for (const char* name : {"emb", "bias"}) {
      auto v = source.Shard(absl::StrCat(name, "/part_", i));
      for (int k = 0; k <= i; ++k)
        ASSERT_TRUE(v->ApplyGradient(Iota(v->shape(), static_cast<float>(k - i))).ok());
    }
  }
  ASSERT_TRUE(source.Shard("scalar")->ApplyGradient(Tensor::Scalar<float>(1.0f)).ok());
  auto ckpt = source.Save(dir, 100);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();

  struct Layout {
    const char* what;
    int num_ps;
    std::vector<int64_t> rows;
    std::vector<int> ps;
    std::vector<int64_t> iterations;  // expected per target shard
  };
  const std::vector<Layout> layouts = {
      {"3 PS / 2 shards", 3, {7, 6}, {2, 0}, {2, 4}},  // [0,7) reads shards 0,1; [7,13) reads 2,3
      {"1 PS / unsharded", 1, {13}, {0}, {4}},
      {"3 PS / 5 shards", 3, {3, 3, 3, 2, 2}, {0, 1, 2, 0, 1}, {1, 2, 3, 4, 4}},
      {"2 PS / 4 shards, other cut", 2, {1, 5, 6, 1}, {1, 1, 0, 0}, {1, 2, 4, 4}},
      {"13 single rows",
       2,
       std::vector<int64_t>(13, 1),
       std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0},
       {1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4}},
  };
  for (const Layout& layout : layouts) {
    SCOPED_TRACE(layout.what);
    FakeCluster target(layout.num_ps);
    target.Add("emb", Tensor(DType::kF32, {13, 3}), layout.rows, layout.ps, &adam);
    target.Add("bias", Tensor(DType::kF32, {13}), layout.rows, layout.ps, &adam);
    target.Add("scalar", Tensor::Scalar<float>(0), {1}, {layout.num_ps - 1}, &adam);
    ASSERT_TRUE(target.Restore(*ckpt).ok());
    for (const char* name : {"emb", "bias", "scalar"}) {
      for (const char* slot : {"", "m", "v"}) {
        EXPECT_TRUE(target.Logical(name, slot).Equals(source.Logical(name, slot)))
            << name << " slot '" << slot << "'";
      }
    }
    for (size_t i = 0; i < layout.rows.size(); ++i) {
      const auto& shard = target.placements[0].shards[i];
      EXPECT_EQ(target.Shard(shard.name)->iterations(), layout.iterations[i]) << shard.name;
    }
    EXPECT_EQ(target.Shard("scalar")->iterations(), 1);
  }
}

TEST(CheckpointManifestTest, RestoreIntoCreatesMissingAndRejectsMismatches) {
  TestDir temp("reshard_missing");
  const std::string& dir = temp.path();
  const OptimizerConfig adam = AdamConfig();
  FakeCluster source(2);
  source.Add("w", Iota({6, 2}, 0), {3, 3}, {0, 1}, &adam);
  auto ckpt = source.Save(dir, 1);
  ASSERT_TRUE(ckpt.ok());
  auto manifest = VerifyCheckpoint(*ckpt, CheckpointCheck::kChecksums);
  ASSERT_TRUE(manifest.ok());

  // Placement only (no variables on the stores, as after a PS restart): the PS creates them.
  FakeCluster target(3);
  target.placements.push_back(
      {"w", DType::kF32, {6, 2}, {{"w/part_0", 2, 0, 2}, {"w/part_1", 0, 2, 6}}});
  ASSERT_TRUE(target.Restore(*ckpt).ok());
  EXPECT_TRUE(target.Logical("w").Equals(source.Logical("w")));
  EXPECT_TRUE(target.Logical("w", "v").Equals(source.Logical("w", "v")));
  EXPECT_EQ(target.Shard("w/part_1")->optimizer_config()->kind, OptimizerKind::kAdam);

  auto plan = PlanRestore(*manifest, *ckpt, {{"other", DType::kF32, {6, 2}, {{"other", 0, 0, 6}}}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(plan.status().message()), HasSubstr("has no variable 'other'"));
  plan = PlanRestore(*manifest, *ckpt, {{"w", DType::kF32, {7, 2}, {{"w", 0, 0, 7}}}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
  plan = PlanRestore(*manifest, *ckpt, {{"w", DType::kF64, {6, 2}, {{"w", 0, 0, 6}}}});
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CheckpointManifestTest, BuildManifestNeedsEveryShard) {
  std::vector<VariablePlacement> placements = {
      {"w", DType::kF32, {4}, {{"w/part_0", 0, 0, 2}, {"w/part_1", 1, 2, 4}}}};
  ps::SavedFile f{"ps-0-of-2.safetensors",
                  {10, 1},
                  {{"w/part_0", DType::kF32, {2}, "w/part_0", {}, {}, 0, std::nullopt}}};
  auto m = BuildManifest(1, 0, 2, placements, {f});
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("no parameter server saved shard 'w/part_1'"));
  f.shards.push_back({"w/part_1", DType::kF32, {3}, "w/part_1", {}, {}, 0, std::nullopt});
  m = BuildManifest(1, 0, 2, placements, {f});
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("saved as f32[3], expected f32[2]"));
}

}  // namespace
}  // namespace asyncps
