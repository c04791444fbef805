#include "ps/embedding/embedding_service.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_checkpoint.h"
#include "ps/embedding/embedding_initializer.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/embedding/key_partition.h"

namespace asyncps::ps {
namespace embedding_service_test_internal {
namespace {

constexpr char kToken[] = "emb-test-token";

EmbeddingTableConfig Config(const std::string& name = "emb", int64_t dim = 4) {
  EmbeddingTableConfig c;
  c.name = name;
  c.dim = dim;
  c.initializer.seed = 7;
  c.optimizer = opt::Adam(0.01f);
  return c;
}

Tensor Keys(std::vector<int64_t> keys) { return Tensor::FromVector<int64_t>(keys); }

Tensor Grads(size_t n, int64_t dim, float g) {
  std::vector<float> v(n * dim, g);
  return *Tensor::FromSpan<float>({static_cast<int64_t>(n), dim}, v);
}

// An EmbeddingService on a real RpcServer on 127.0.0.1, called through a real RpcClient.
class EmbeddingServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EmbeddingService::Options options;
    options.ps_metrics = ps_metrics_.get();
    options.metrics = embedding_metrics_.get();
    service_ = std::make_unique<EmbeddingService>(store_, options);
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.token = kToken;
    server_ = std::make_unique<net::RpcServer>(loop_, server_options);
    service_->RegisterWith(server_->methods());
    ASSERT_TRUE(server_->Start().ok());
    net::RpcClient::Options client_options;
    client_options.address = "127.0.0.1:" + std::to_string(server_->port());
    client_options.role = "chief";
    client_options.token = kToken;
    client_ = std::make_unique<net::RpcClient>(loop_, client_options);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  absl::StatusOr<net::InMessage> Call(const std::string& method, net::OutMessage request) {
    return client_->Call(method, std::move(request), absl::Seconds(60));
  }

  absl::StatusOr<bool> Create(const EmbeddingTableConfig& config) {
    net::OutMessage req;
    BuildCreateEmbeddingTableRequest(config, req);
    auto resp = Call(kCreateEmbeddingTableMethod, std::move(req));
    if (!resp.ok()) return resp.status();
    return resp->ResponseBody<wire::CreateEmbeddingTableResponse>().getCreated();
  }

  absl::StatusOr<std::vector<float>> Lookup(const std::string& table, std::vector<int64_t> keys, bool train = false) {
    net::OutMessage req;
    EmbeddingKeys lookup{table, Keys(keys)};
    BuildEmbeddingLookupRequest({&lookup, 1}, train, req);
    auto resp = Call(kEmbeddingLookupMethod, std::move(req));
    if (!resp.ok()) return resp.status();
    auto values = ReadEmbeddingLookupResponse(*resp, 1);
    if (!values.ok()) return values.status();
    missing_ = resp->ResponseBody<wire::EmbeddingLookupResponse>().getMissing()[0];
    return std::vector<float>((*values)[0].flat<float>().begin(), (*values)[0].flat<float>().end());
  }

  absl::Status Push(const std::string& table, std::vector<int64_t> keys, Tensor grads, const UpdateTag& tag = {}) {
    net::OutMessage req;
    EmbeddingGradients push{table, Keys(keys), std::move(grads)};
    BuildEmbeddingPushRequest({&push, 1}, tag, req);
    auto resp = Call(kEmbeddingPushMethod, std::move(req));
    if (!resp.ok()) return resp.status();
    auto body = resp->ResponseBody<wire::EmbeddingPushResponse>();
    already_applied_ = body.getAlreadyApplied();
    created_ = body.getCreated();
    return absl::OkStatus();
  }

  net::EventLoop loop_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_ =
      std::move(metrics::ProcessMetrics::Create("ps", 0, /*listen_address=*/"")).value();
  std::unique_ptr<PsMetrics> ps_metrics_ = std::make_unique<PsMetrics>(*metrics_);
  std::unique_ptr<EmbeddingMetrics> embedding_metrics_ = std::make_unique<EmbeddingMetrics>(*metrics_);
  EmbeddingStore store_;
  std::unique_ptr<EmbeddingService> service_;
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> client_;
  uint32_t missing_ = 0;
  uint32_t already_applied_ = 0;
  uint64_t created_ = 0;
};

TEST_F(EmbeddingServiceTest, CreateLookupPushLookup) {
  ASSERT_EQ(Create(Config()).value_or(false), true);
  ASSERT_EQ(Create(Config()).value_or(true), false);  // idempotent
  auto before = Lookup("emb", {1, 2, 3}, /*train=*/true);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(missing_, 3u);
  std::vector<float> init(4);
  EmbeddingInitialValue(Config().initializer, 2, 4, init.data());
  EXPECT_EQ(std::vector<float>(before->begin() + 4, before->begin() + 8), init);
  ASSERT_TRUE(Push("emb", {1, 2, 3}, Grads(3, 4, 0.5f)).ok());
  EXPECT_EQ(created_, 3u);
  auto after = Lookup("emb", {1, 2, 3});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(missing_, 0u);
  EXPECT_NE(*after, *before);
}

TEST_F(EmbeddingServiceTest, BadCreatesAreRefused) {
  ASSERT_EQ(Create(Config()).value_or(false), true);
  EXPECT_EQ(Create(Config("emb", 8)).status().code(), absl::StatusCode::kAlreadyExists);
  auto c = Config("other");
  c.dtype = DType::kI64;
  EXPECT_EQ(Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create(Config("neg", -3)).status().code(), absl::StatusCode::kInvalidArgument);
  auto huge = Create(Config("huge", int64_t{1} << 31));
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(huge.status().message().find("dim"), std::string::npos) << huge.status();
  c = Config("capped");
  c.memory_cap_bytes = 4096;
  EXPECT_EQ(Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create(Config("fine")).value_or(false), true);  // still serving
}

TEST_F(EmbeddingServiceTest, BadPushesChangeNothing) {
  auto capped = Config("capped");
  capped.optimizer = opt::SGD(0.1f);
  capped.memory_cap_bytes = 256 << 10;
  ASSERT_EQ(Create(Config()).value_or(false), true);
  ASSERT_EQ(Create(capped).value_or(false), true);
  auto nan = Grads(2, 4, 1.0f);
  nan.data<float>()[5] = std::nanf("");
  auto s = Push("emb", {1, 2}, nan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("NaN"), std::string::npos) << s;
  EXPECT_EQ(Push("emb", {1, 2}, Grads(2, 8, 1.0f)).code(), absl::StatusCode::kInvalidArgument);  // dim
  EXPECT_EQ(Push("emb", {1, 2}, Tensor::FromVector<double>({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})).code(),
            absl::StatusCode::kInvalidArgument);  // dtype
  EXPECT_EQ(Push("emb", {1, 2, 3}, Grads(2, 4, 1.0f)).code(), absl::StatusCode::kInvalidArgument);  // rows
  EXPECT_EQ(Push("nope", {1}, Grads(1, 4, 1.0f)).code(), absl::StatusCode::kNotFound);
  std::vector<int64_t> many(20000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>(i);
  auto big = Push("capped", many, Grads(many.size(), 4, 1.0f));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.message().find("memory cap"), std::string::npos) << big;
  EXPECT_EQ(store_.Find("emb").value()->Stats().rows, 0u);
  EXPECT_EQ(store_.Find("capped").value()->Stats().rows, 0u);
  EXPECT_TRUE(Push("emb", {1, 2}, Grads(2, 4, 1.0f)).ok());
  EXPECT_EQ(store_.Find("emb").value()->Stats().rows, 2u);
}

// bf16 is only the dense variables' gradient encoding: an embedding push in it is refused (an
// unknown dtype, naming the table) and changes nothing. A damaged decay is refused at creation.
TEST_F(EmbeddingServiceTest, Bf16PushesAndDamagedDecaysAreRefused) {
  ASSERT_EQ(Create(Config()).value_or(false), true);
  ASSERT_TRUE(Push("emb", {1, 2}, Grads(2, 4, 1.0f)).ok());
  auto before = Lookup("emb", {1, 2});
  ASSERT_TRUE(before.ok()) << before.status();
  net::OutMessage req;
  auto p = req.InitRequestBody<wire::EmbeddingPushRequest>().initPushes(1)[0];
  p.setTable("emb");
  req.AddTensor(Keys({1, 2}), p.initKeys());
  req.AddTensorAsBf16(Grads(2, 4, 1.0f), p.initGradients());
  const absl::Status s = Call(kEmbeddingPushMethod, std::move(req)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("dtype code 7"), std::string::npos) << s;
  EXPECT_EQ(store_.Find("emb").value()->Stats().step, 1);
  auto after = Lookup("emb", {1, 2});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, *before);
  for (const auto& [steps, alpha] : std::vector<std::pair<int64_t, float>>{
           {-1, 0.0f}, {10, std::nanf("")}, {10, -0.5f}, {10, std::numeric_limits<float>::infinity()}}) {
    auto c = Config("decayed");
    c.optimizer = opt::CosineDecay(opt::SGD(0.1f), steps, alpha);
    const absl::Status created = Create(c).status();
    EXPECT_EQ(created.code(), absl::StatusCode::kInvalidArgument) << created;
    EXPECT_NE(created.message().find("decay_"), std::string::npos) << created;
  }
  EXPECT_FALSE(store_.Find("decayed").ok());
  // A create of a table that exists (idempotent) checks the config it names all the same.
  auto again = Config();
  again.optimizer = opt::CosineDecay(again.optimizer, 10, std::nanf(""));
  const absl::Status exists = Create(again).status();
  EXPECT_EQ(exists.code(), absl::StatusCode::kInvalidArgument) << exists;
  EXPECT_NE(exists.message().find("decay_alpha"), std::string::npos) << exists;
  EXPECT_EQ(Create(Config()).value_or(true), false);
  EXPECT_TRUE(Push("emb", {1, 2}, Grads(2, 4, 1.0f)).ok());  // still serving
}

TEST_F(EmbeddingServiceTest, RepeatedTaggedPushAppliesOnce) {
  auto c = Config();
  c.optimizer = opt::SGD(1.0f);
  ASSERT_EQ(Create(c).value_or(false), true);
  UpdateTag tag{.coordinator = 1000, .closure = 1001, .sequence = 1, .watermark = 1000};
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f), tag).ok());
  EXPECT_EQ(already_applied_, 0u);
  auto once = Lookup("emb", {9});
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f), tag).ok());
  EXPECT_EQ(already_applied_, 1u);
  EXPECT_EQ(Lookup("emb", {9}).value(), *once);
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f)).ok());  // untagged: applied every time
  EXPECT_NE(Lookup("emb", {9}).value(), *once);
}

TEST_F(EmbeddingServiceTest, TaggedPushAppliesAgainAfterARestore) {
  auto c = Config();
  c.optimizer = opt::SGD(1.0f);
  ASSERT_EQ(Create(c).value_or(false), true);
  EmbeddingTable* table = store_.Find("emb").value();
  const EmbeddingTableState empty = table->Export();
  UpdateTag tag{.coordinator = 1000, .closure = 1001, .sequence = 1, .watermark = 1000};
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f), tag).ok());
  const std::vector<float> once = Lookup("emb", {9}).value();
  // The restore undoes the push; the closure's re-run (same tag) must apply it again, once.
  const EmbeddingTableState* states[] = {&empty};
  ASSERT_TRUE(table->Import(states, [](int64_t) { return true; }).ok());
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f), tag).ok());
  EXPECT_EQ(already_applied_, 0u);
  EXPECT_EQ(Lookup("emb", {9}).value(), once);
  ASSERT_TRUE(Push("emb", {9}, Grads(1, 4, 1.0f), tag).ok());
  EXPECT_EQ(already_applied_, 1u);
}

// A fresh directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("emb_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST_F(EmbeddingServiceTest, SaveAndRestoreThroughTheService) {
  auto c = Config();
  c.admission.min_count = 2;
  c.admission.sketch_width = 1024;
  ASSERT_EQ(Create(c).value_or(false), true);
  std::vector<int64_t> keys = {5, 6, 7, 8};
  ASSERT_TRUE(Lookup("emb", keys, true).ok());
  ASSERT_TRUE(Lookup("emb", keys, true).ok());
  ASSERT_TRUE(Push("emb", keys, Grads(4, 4, 0.25f)).ok());
  auto want = Lookup("emb", keys);
  TempDir dir;
  net::OutMessage save;
  auto s = save.InitRequestBody<wire::SaveEmbeddingTablesRequest>();
  s.setDirectory(dir.path());
  s.setFileName("emb-0.safetensors");
  s.setStep(1);
  s.setNumPs(1);
  auto saved = Call("ps.SaveEmbeddingTables", std::move(save));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->ResponseBody<wire::SaveEmbeddingTablesResponse>().getRows(), 4u);
  ASSERT_TRUE(Push("emb", keys, Grads(4, 4, 3.0f)).ok());  // after the save: undone by the restore
  net::OutMessage restore;
  auto r = restore.InitRequestBody<wire::RestoreEmbeddingTablesRequest>();
  r.setDirectory(dir.path());
  r.initFiles(1).set(0, "emb-0.safetensors");
  r.setNumPs(1);
  auto restored = Call("ps.RestoreEmbeddingTables", std::move(restore));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(Lookup("emb", keys).value(), *want);
  EXPECT_EQ(store_.Find("emb").value()->restores(), 1u);
  // A corrupt file is refused and the table keeps serving.
  { std::FILE* f = std::fopen((dir.path() + "/bad.safetensors").c_str(), "wb"); std::fputs("garbage!", f); std::fclose(f); }
  net::OutMessage bad;
  auto b = bad.InitRequestBody<wire::RestoreEmbeddingTablesRequest>();
  b.setDirectory(dir.path());
  b.initFiles(1).set(0, "bad.safetensors");
  b.setNumPs(1);
  EXPECT_FALSE(Call("ps.RestoreEmbeddingTables", std::move(bad)).ok());
  EXPECT_EQ(Lookup("emb", keys).value(), *want);
}

// `src` (a saved embedding checkpoint file in `dir`) written again as `dst` with table `table`'s
// recorded config (JSON) passed through `edit`: a damaged or hand-edited file.
void RewriteConfig(const std::string& dir, const std::string& src, const std::string& dst, const std::string& table,
                   const std::function<void(nlohmann::json&)>& edit) {
  auto file = SafetensorsFile::Open(dir + "/" + src);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SafetensorsEntry& e : file->header().tensors) tensors.emplace_back(e.name, file->Get(e.name).value());
  std::map<std::string, std::string> metadata = file->header().metadata;
  nlohmann::json config = nlohmann::json::parse(metadata.at("table/" + table));
  edit(config);
  metadata["table/" + table] = config.dump();
  ASSERT_TRUE(WriteSafetensorsFile(dir + "/" + dst, tensors, metadata).ok());
}

// A restore of several tables is all or nothing: a table whose state only Import refuses (here
// a step past 2^62) used to be refused after the tables before it were replaced.
TEST_F(EmbeddingServiceTest, RestoreOfSeveralTablesRefusedByOneChangesNone) {
  ASSERT_EQ(Create(Config("a")).value_or(false), true);
  ASSERT_EQ(Create(Config("b")).value_or(false), true);
  ASSERT_TRUE(Push("a", {1, 2}, Grads(2, 4, 0.5f)).ok());
  ASSERT_TRUE(Push("b", {3}, Grads(1, 4, 0.5f)).ok());
  TempDir dir;
  ASSERT_TRUE(SaveEmbeddingTables(store_, dir.path(), "good.safetensors", {}, 1, 1, 0).ok());
  RewriteConfig(dir.path(), "good.safetensors", "bad.safetensors", "b",
                [](nlohmann::json& j) { j["step"] = std::numeric_limits<int64_t>::max(); });
  ASSERT_TRUE(Push("a", {1, 2}, Grads(2, 4, 2.0f)).ok());  // after the save: what a restore would undo
  const std::vector<float> a = Lookup("a", {1, 2}).value();
  const std::vector<float> b = Lookup("b", {3}).value();
  auto restored = RestoreEmbeddingTables(store_, dir.path(), {"bad.safetensors"}, 1, 0);
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument) << restored.status();
  EXPECT_NE(restored.status().message().find("'b'"), std::string::npos) << restored.status();
  EXPECT_EQ(Lookup("a", {1, 2}).value(), a);
  EXPECT_EQ(Lookup("b", {3}).value(), b);
  EXPECT_EQ(store_.Find("a").value()->restores(), 0u);
  EXPECT_EQ(store_.Find("a").value()->Stats().step, 2);
  ASSERT_TRUE(RestoreEmbeddingTables(store_, dir.path(), {"good.safetensors"}, 1, 0).ok());
  EXPECT_NE(Lookup("a", {1, 2}).value(), a) << "the good file restores";
}

// A damaged number in a table's recorded config (a fraction or a number past its field's type,
// decay fields included): refused as DataLoss naming the field, before anything changes. A
// decay out of its range is refused by the optimizer's own checks.
TEST_F(EmbeddingServiceTest, DamagedRecordedConfigNumbersAreRefused) {
  auto c = Config();
  c.optimizer = opt::CosineDecay(opt::SGD(0.1f), 100, 0.25f);
  ASSERT_EQ(Create(c).value_or(false), true);
  ASSERT_TRUE(Push("emb", {1, 2}, Grads(2, 4, 0.5f)).ok());
  TempDir dir;
  ASSERT_TRUE(SaveEmbeddingTables(store_, dir.path(), "good.safetensors", {}, 1, 1, 0).ok());
  ASSERT_TRUE(Push("emb", {1, 2}, Grads(2, 4, 2.0f)).ok());
  const std::vector<float> before = Lookup("emb", {1, 2}).value();
  struct Case {
    const char* field;
    std::function<void(nlohmann::json&)> edit;
    absl::StatusCode code;
  };
  const absl::StatusCode kDataLoss = absl::StatusCode::kDataLoss;
  const std::vector<Case> cases = {
      {"decay_steps", [](nlohmann::json& j) { j["optimizer"]["decay_steps"] = 2.5; }, kDataLoss},
      {"decay_steps", [](nlohmann::json& j) { j["optimizer"]["decay_steps"] = 1e300; }, kDataLoss},
      {"decay_steps", [](nlohmann::json& j) { j["optimizer"]["decay_steps"] = uint64_t{1} << 63; }, kDataLoss},
      {"decay_steps", [](nlohmann::json& j) { j["optimizer"]["decay_steps"] = -4; },
       absl::StatusCode::kInvalidArgument},
      {"decay_alpha", [](nlohmann::json& j) { j["optimizer"]["decay_alpha"] = 1e300; }, kDataLoss},
      {"decay_alpha", [](nlohmann::json& j) { j["optimizer"]["decay_alpha"] = "0.5"; }, kDataLoss},
      {"decay_alpha", [](nlohmann::json& j) { j["optimizer"]["decay_alpha"] = 1.5; },
       absl::StatusCode::kInvalidArgument},
      {"learning_rate", [](nlohmann::json& j) { j["optimizer"]["learning_rate"] = -1e300; }, kDataLoss},
      {"step", [](nlohmann::json& j) { j["step"] = 1e300; }, kDataLoss},
      {"min_count", [](nlohmann::json& j) { j["admission"]["min_count"] = -1; }, kDataLoss},
      {"sketch_width", [](nlohmann::json& j) { j["admission"]["sketch_width"] = uint64_t{1} << 40; }, kDataLoss},
  };
  for (const Case& k : cases) {
    RewriteConfig(dir.path(), "good.safetensors", "bad.safetensors", "emb", k.edit);
    auto restored = RestoreEmbeddingTables(store_, dir.path(), {"bad.safetensors"}, 1, 0);
    EXPECT_EQ(restored.status().code(), k.code) << k.field << ": " << restored.status();
    EXPECT_NE(restored.status().message().find(k.field), std::string::npos) << restored.status();
    EXPECT_EQ(Lookup("emb", {1, 2}).value(), before) << k.field;
    EXPECT_EQ(store_.Find("emb").value()->restores(), 0u) << k.field;
  }
  ASSERT_TRUE(RestoreEmbeddingTables(store_, dir.path(), {"good.safetensors"}, 1, 0).ok());
  EXPECT_EQ(store_.Find("emb").value()->config().optimizer.decay_steps, 100);
  EXPECT_EQ(store_.Find("emb").value()->config().optimizer.decay_alpha, 0.25f);
}

// Checkpoint files written by `from` PS (each its own store), restored into `to` PS.
void ReshardThroughFiles(int from, int to) {
  TempDir dir;
  auto c = Config("t", 6);
  c.optimizer = opt::Ftrl(0.1f);
  auto c2 = Config("u", 3);
  std::vector<std::unique_ptr<EmbeddingStore>> old_ps;
  std::mt19937_64 rng(from * 100 + to);
  std::vector<int64_t> all;
  for (int p = 0; p < from; ++p) {
    old_ps.push_back(std::make_unique<EmbeddingStore>());
    ASSERT_TRUE(old_ps[p]->Create(c).ok());
    ASSERT_TRUE(old_ps[p]->Create(c2).ok());
  }
  for (int step = 0; step < 10; ++step) {
    std::vector<std::vector<int64_t>> per_ps(from);
    for (int i = 0; i < 300; ++i) {
      const int64_t key = static_cast<int64_t>(rng());
      per_ps[PsForKey(key, from)].push_back(key);
      all.push_back(key);
    }
    for (int p = 0; p < from; ++p) {
      std::vector<float> g(per_ps[p].size() * 6, 0.1f * step - 0.3f);
      ASSERT_TRUE(old_ps[p]->Find("t").value()->Push(per_ps[p], g.data()).ok());
      ASSERT_TRUE(old_ps[p]->Find("u").value()->Push(per_ps[p], g.data()).ok());
    }
  }
  std::vector<std::string> files;
  for (int p = 0; p < from; ++p) {
    files.push_back("emb-" + std::to_string(p) + ".safetensors");
    ASSERT_TRUE(SaveEmbeddingTables(*old_ps[p], dir.path(), files.back(), {}, 10, from, p).ok());
  }
  std::vector<std::unique_ptr<EmbeddingStore>> new_ps;
  for (int j = 0; j < to; ++j) {
    new_ps.push_back(std::make_unique<EmbeddingStore>());
    auto rows = RestoreEmbeddingTables(*new_ps[j], dir.path(), files, to, j);
    ASSERT_TRUE(rows.ok()) << rows.status();
  }
  for (int i = 0; i < 1000; ++i) all.push_back(static_cast<int64_t>(rng()));  // never pushed
  for (const char* table : {"t", "u"}) {
    for (int64_t key : all) {
      EmbeddingTable* a = old_ps[PsForKey(key, from)]->Find(table).value();
      EmbeddingTable* b = new_ps[PsForKey(key, to)]->Find(table).value();
      std::vector<float> va(a->dim()), vb(b->dim());
      a->Lookup({&key, 1}, false, va.data());
      b->Lookup({&key, 1}, false, vb.data());
      ASSERT_EQ(va, vb) << table << " " << key;
      ASSERT_EQ(a->HasRow(key), b->HasRow(key));
    }
  }
  // Slots came along: the same push on both sides keeps them equal.
  const int64_t key = all.front();
  EmbeddingTable* a = old_ps[PsForKey(key, from)]->Find("t").value();
  EmbeddingTable* b = new_ps[PsForKey(key, to)]->Find("t").value();
  std::vector<float> g(6, 0.7f), va(6), vb(6);
  ASSERT_TRUE(a->Push({&key, 1}, g.data()).ok());
  ASSERT_TRUE(b->Push({&key, 1}, g.data()).ok());
  a->Lookup({&key, 1}, false, va.data());
  b->Lookup({&key, 1}, false, vb.data());
  EXPECT_EQ(va, vb);
}

TEST(EmbeddingCheckpointTest, FilesOfFourPsRestoreIntoThree) { ReshardThroughFiles(4, 3); }
TEST(EmbeddingCheckpointTest, FilesOfTwoPsRestoreIntoFive) { ReshardThroughFiles(2, 5); }

}  // namespace
}  // namespace embedding_service_test_internal
}  // namespace asyncps::ps
