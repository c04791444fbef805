#include "ps/ps_service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "net/envelope.capnp.h"
#include "net/event_loop.h"
#include "ps/parallel_apply.h"
#include "ps/ps.capnp.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps_wire.h"
#include "ps/read_wire_testing.h"
#include "core/bf16.h"
#include "core/compression.h"

namespace asyncps::ps {
namespace ps_service_test_internal {
namespace {

constexpr char kToken[] = "ps-test-token";

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.flat<T>().begin(), t.flat<T>().end());
}

struct UpdateSpec {
  std::string name;
  UpdateKind kind = UpdateKind::kAssign;
  Tensor value;
  std::optional<Tensor> ids;
};

struct GradientSpec {
  std::string name;
  Tensor value;
  std::optional<Tensor> ids;
  bool bf16 = false;  // value (f32) sent narrowed to bf16 (reduced-precision transport)
};

struct VariableInfo {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t iterations;
};

// A PsService on a real RpcServer on 127.0.0.1, called through a real RpcClient.
class PsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(std::numeric_limits<uint64_t>::max(), PsService::Options()); }

  // (Re)starts the server with a store capped at `max_bytes` (splitting applies over
  // `apply_pool`, when given) and a service with `options` (whose metrics, when not given, are
  // recorded in metrics_).
  void StartServer(uint64_t max_bytes, PsService::Options options, ApplyPool* apply_pool = nullptr) {
    client_.reset();
    server_.reset();
    if (options.metrics == nullptr) options.metrics = ps_metrics_.get();
    store_ = std::make_unique<VariableStore>(max_bytes, apply_pool);
    service_ = std::make_unique<PsService>(*store_, options);
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.token = kToken;
    server_ = std::make_unique<net::RpcServer>(loop_, server_options);
    service_->RegisterWith(server_->methods());
    ASSERT_TRUE(server_->Start().ok());
    net::RpcClient::Options client_options;
    client_options.address = "127.0.0.1:" + std::to_string(server_->port());
    client_options.role = "worker";
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

  absl::StatusOr<bool> Create(const std::string& name, DType dtype, const Shape& shape,
                              const InitializerSpec& init = InitializerSpec(),
                              const OptimizerConfig* optimizer = nullptr) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::CreateVariableRequest>();
    body.setName(name);
    body.setDtype(static_cast<uint8_t>(dtype));
    net::SetShape(body.initShape(static_cast<unsigned>(shape.size())), shape);
    InitializerToWire(init, req, body.initInitializer());
    OptimizerToWire(optimizer, body.initOptimizer());
    auto resp = Call("ps.CreateVariable", std::move(req));
    if (!resp.ok()) return resp.status();
    return resp->ResponseBody<wire::CreateVariableResponse>().getCreated();
  }

  absl::StatusOr<std::vector<Tensor>> Read(const std::vector<std::string>& names) {
    auto resp = Call("ps.Read", ReadRequestFor(names));
    if (!resp.ok()) return resp.status();
    return ReadResponseTensors(*resp);
  }

  Tensor ReadOne(const std::string& name) {
    auto r = Read({name});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->size() == 1 ? (*r)[0] : Tensor();
  }

  // With a tagged `tag`, as a closure sends it; already_applied_ receives the answer's count.
  absl::Status Update(const std::vector<UpdateSpec>& updates, const UpdateTag& tag = {}) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::UpdateRequest>();
    if (tag.tagged()) UpdateTagToWire(tag, body.initTag());
    auto list = body.initUpdates(static_cast<unsigned>(updates.size()));
    for (unsigned i = 0; i < updates.size(); ++i) {
      list[i].setName(updates[i].name);
      list[i].setKind(UpdateKindToWire(updates[i].kind));
      req.AddTensor(updates[i].value, list[i].initValue());
      if (updates[i].ids) {
        list[i].setHasIds(true);
        req.AddTensor(*updates[i].ids, list[i].initIds());
      }
    }
    return CallUpdate("ps.Update", std::move(req));
  }

  absl::Status Push(const std::vector<GradientSpec>& gradients, const UpdateTag& tag = {}) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    if (tag.tagged()) UpdateTagToWire(tag, body.initTag());
    auto list = body.initGradients(static_cast<unsigned>(gradients.size()));
    for (unsigned i = 0; i < gradients.size(); ++i) {
      list[i].setName(gradients[i].name);
      if (gradients[i].bf16) {
        req.AddTensorAsBf16(gradients[i].value, list[i].initValue());
      } else {
        req.AddTensor(gradients[i].value, list[i].initValue());
      }
      if (gradients[i].ids) {
        list[i].setHasIds(true);
        req.AddTensor(*gradients[i].ids, list[i].initIds());
      }
    }
    return CallUpdate("ps.PushGradients", std::move(req));
  }

  absl::Status CallUpdate(const std::string& method, net::OutMessage req) {
    already_applied_ = -1;
    auto resp = Call(method, std::move(req));
    if (!resp.ok()) return resp.status();
    already_applied_ = resp->ResponseBody<wire::UpdateResponse>().getAlreadyApplied();
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Tensor>> Gather(const std::vector<std::pair<std::string, Tensor>>& lookups) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::GatherRequest>().initLookups(static_cast<unsigned>(lookups.size()));
    for (unsigned i = 0; i < lookups.size(); ++i) {
      list[i].setName(lookups[i].first);
      req.AddTensor(lookups[i].second, list[i].initIds());
    }
    auto resp = Call("ps.Gather", std::move(req));
    if (!resp.ok()) return resp.status();
    std::vector<Tensor> out;
    for (auto ref : resp->ResponseBody<wire::GatherResponse>().getValues()) {
      auto t = resp->TensorAt(ref);
      if (!t.ok()) return t.status();
      out.push_back(t->Clone());
    }
    return out;
  }

  absl::StatusOr<std::vector<VariableInfo>> List() {
    net::OutMessage req;
    req.InitRequestBody<wire::Empty>();
    auto resp = Call("ps.ListVariables", std::move(req));
    if (!resp.ok()) return resp.status();
    std::vector<VariableInfo> out;
    for (auto v : resp->ResponseBody<wire::ListVariablesResponse>().getVariables()) {
      out.push_back({v.getName().cStr(), static_cast<DType>(v.getDtype()), net::GetShape(v.getShape()),
                     v.getIterations()});
    }
    return out;
  }

  absl::Status Health() {
    net::OutMessage req;
    req.InitRequestBody<wire::Empty>();
    return Call("ps.Health", std::move(req)).status();
  }

  // Creates `name` as f32 `shape` holding `values`.
  void CreateWith(const std::string& name, const Shape& shape, std::vector<float> values,
                  const OptimizerConfig* optimizer = nullptr) {
    InitializerSpec init;
    init.kind = "tensor";
    init.tensor = Tensor::FromVector<float>(shape, absl::MakeConstSpan(values));
    auto created = Create(name, DType::kF32, shape, init, optimizer);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_TRUE(*created);
  }

  net::EventLoop loop_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_ =
      std::move(metrics::ProcessMetrics::Create("ps", 0, /*listen_address=*/"")).value();
  std::unique_ptr<PsMetrics> ps_metrics_ = std::make_unique<PsMetrics>(*metrics_);
  std::unique_ptr<VariableStore> store_;
  std::unique_ptr<PsService> service_;
  int64_t already_applied_ = -1;  // of the latest Update or Push
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> client_;
};

Tensor Ids64(std::vector<int64_t> ids) { return Tensor::FromVector(ids); }
Tensor Ids32(std::vector<int32_t> ids) { return Tensor::FromVector(ids); }

TEST_F(PsServiceTest, HealthAnswers) { EXPECT_TRUE(Health().ok()); }

TEST_F(PsServiceTest, CreateIsIdempotentAndRejectsAConflictingShapeOrDtype) {
  InitializerSpec threes;
  threes.kind = "constant";
  threes.value = 3;
  auto created = Create("w", DType::kF32, {2, 3}, threes);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);

  // Same name, dtype and shape: kept as is (the new initializer is not applied).
  InitializerSpec sevens = threes;
  sevens.value = 7;
  created = Create("w", DType::kF32, {2, 3}, sevens);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(*created);
  EXPECT_EQ(Values<float>(ReadOne("w")), std::vector<float>(6, 3.0f));

  EXPECT_EQ(Create("w", DType::kF32, {3, 2}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Create("w", DType::kF64, {2, 3}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Values<float>(ReadOne("w")), std::vector<float>(6, 3.0f));
  EXPECT_EQ(store_->List().size(), 1u);
}

// With a pool in its store, the service makes variables that split their applies over it and
// checks a push's finiteness in parts: a NaN in the last part still refuses the whole push.
TEST_F(PsServiceTest, VariablesOfAStoreWithAPoolApplyInPartsAllOrNothing) {
  ApplyPool::Options small;
  small.helpers = 3;
  small.min_dense_elements = 16;
  small.min_check_elements = 16;
  ApplyPool pool(small);
  StartServer(std::numeric_limits<uint64_t>::max(), PsService::Options(), &pool);
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  ASSERT_TRUE(Create("w", DType::kF32, {64, 8}, InitializerSpec(), &sgd).ok());
  EXPECT_EQ(store_->Find("w").value()->apply_pool(), &pool);
  const Tensor before = ReadOne("w");
  Tensor minus_one(DType::kF32, {64, 8});
  std::fill_n(minus_one.data<float>(), minus_one.num_elements(), -1.0f);
  Tensor bad = minus_one.Clone();
  bad.data<float>()[bad.num_elements() - 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Push({{"w", bad, std::nullopt}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadOne("w").Equals(before));
  ASSERT_TRUE(Push({{"w", minus_one, std::nullopt}}).ok());
  const Tensor after = ReadOne("w");
  int64_t wrong = 0;
  for (int64_t i = 0; i < after.num_elements(); ++i) {
    wrong += after.data<float>()[i] != before.data<float>()[i] + 1.0f ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0);
}

TEST_F(PsServiceTest, CreateBuildsTheShardOnTheServer) {
  // The server builds the values from the spec: a shard with row_offset equals the same rows of
  // the whole variable built locally.
  InitializerSpec spec;
  spec.kind = "glorot_uniform";
  spec.seed = 17;
  spec.full_shape = {10, 4};
  spec.row_offset = 6;
  ASSERT_TRUE(Create("kernel/part_2", DType::kF32, {2, 4}, spec).ok());
  InitializerSpec whole_spec = spec;
  whole_spec.row_offset = 0;
  auto whole = Initialize(whole_spec, DType::kF32, {10, 4});
  ASSERT_TRUE(whole.ok());
  auto rows = whole->Slice(6, 8);
  ASSERT_TRUE(rows.ok());
  EXPECT_TRUE(ReadOne("kernel/part_2").Equals(*rows));

  // A bad initializer or optimizer creates nothing.
  InitializerSpec bad;
  bad.kind = "uniform";
  EXPECT_EQ(Create("ints", DType::kI32, {2}, bad).status().code(), absl::StatusCode::kInvalidArgument);
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.beta_1 = 2;
  EXPECT_EQ(Create("w", DType::kF32, {2}, InitializerSpec(), &adam).status().code(),
            absl::StatusCode::kInvalidArgument);
  OptimizerConfig sgd;
  EXPECT_EQ(Create("steps", DType::kI64, {2}, InitializerSpec(), &sgd).status().code(),
            absl::StatusCode::kInvalidArgument);
  InitializerSpec wrong_tensor;
  wrong_tensor.kind = "tensor";
  wrong_tensor.tensor = Tensor::FromVector<float>({3}, {1, 2, 3});
  EXPECT_EQ(Create("t", DType::kF32, {4}, wrong_tensor).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Read({"ints"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read({"w"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read({"steps"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read({"t"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->List().size(), 1u);
}

TEST_F(PsServiceTest, ReadReturnsSeveralVariablesInRequestOrder) {
  CreateWith("a", {2}, {1, 2});
  CreateWith("b", {2, 2}, {3, 4, 5, 6});
  InitializerSpec fives;
  fives.kind = "constant";
  fives.value = 5;
  ASSERT_TRUE(Create("c", DType::kI64, {3}, fives).ok());

  auto got = Read({"c", "a", "b", "a"});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 4u);
  EXPECT_EQ((*got)[0].dtype(), DType::kI64);
  EXPECT_EQ(Values<int64_t>((*got)[0]), (std::vector<int64_t>{5, 5, 5}));
  EXPECT_EQ(Values<float>((*got)[1]), (std::vector<float>{1, 2}));
  EXPECT_EQ((*got)[2].shape(), (Shape{2, 2}));
  EXPECT_EQ(Values<float>((*got)[2]), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_TRUE((*got)[3].Equals((*got)[1]));

  auto missing = Read({"a", "nope"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos) << missing.status();
}

TEST_F(PsServiceTest, UpdateAppliesDenseAndRowUpdatesInOneBatch) {
  CreateWith("w", {2, 2}, {1, 2, 3, 4});
  CreateWith("emb", {3, 2}, {0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(Update({{"w", UpdateKind::kMul, Tensor::FromVector<float>({2, 2}, {2, 2, 2, 2}), std::nullopt},
                      {"emb", UpdateKind::kAdd, Tensor::FromVector<float>({3, 2}, {1, 1, 2, 2, 4, 4}), Ids64({2, 0, 2})},
                      {"w", UpdateKind::kSub, Tensor::FromVector<float>({1, 2}, {1, 1}), Ids32({1})}})
                  .ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{2, 4, 5, 7}));
  EXPECT_EQ(Values<float>(ReadOne("emb")), (std::vector<float>{2, 2, 0, 0, 5, 5}));
}

// A batch is validated as a whole before anything is applied: when a later update is invalid,
// the earlier ones must not have been applied.
TEST_F(PsServiceTest, InvalidUpdateInABatchAppliesNothing) {
  CreateWith("a", {2}, {1, 2});
  CreateWith("b", {3, 1}, {0, 0, 0});
  InitializerSpec eights;
  eights.kind = "constant";
  eights.value = 8;
  ASSERT_TRUE(Create("ints", DType::kI32, {2}, eights).ok());
  const UpdateSpec first = {"a", UpdateKind::kAdd, Tensor::FromVector<float>({2}, {10, 10}), std::nullopt};

  // Wrong shape, wrong dtype, unknown variable, out-of-range id, integer division by zero.
  EXPECT_EQ(Update({first, {"b", UpdateKind::kAdd, Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Update({first, {"b", UpdateKind::kAdd, Tensor(DType::kF64, {3, 1}), std::nullopt}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Update({first, {"nope", UpdateKind::kAdd, Tensor(DType::kF32, {3, 1}), std::nullopt}}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Update({first, {"b", UpdateKind::kAssign, Tensor::FromVector<float>({2, 1}, {5, 5}), Ids64({0, 3})}}).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Update({first, {"ints", UpdateKind::kDiv, Tensor::FromVector<int32_t>({2}, {2, 0}), std::nullopt}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Update({first, {"ints", UpdateKind::kDiv, Tensor::FromVector<int32_t>({2}, {2, 2}), std::nullopt},
                    {"ints", UpdateKind::kDiv, Tensor::FromVector<int32_t>({1}, {0}), Ids64({1})}})
                .code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(Values<float>(ReadOne("a")), (std::vector<float>{1, 2}));
  EXPECT_EQ(Values<float>(ReadOne("b")), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(Values<int32_t>(ReadOne("ints")), (std::vector<int32_t>{8, 8}));

  // And the same first update alone goes through.
  ASSERT_TRUE(Update({first}).ok());
  EXPECT_EQ(Values<float>(ReadOne("a")), (std::vector<float>{11, 12}));
}

TEST_F(PsServiceTest, PushGradientsAppliesDenseAndSparseThroughTheOptimizer) {
  OptimizerConfig half;
  half.learning_rate = 0.5f;
  OptimizerConfig one;
  one.learning_rate = 1;
  CreateWith("w", {2, 2}, {1, 1, 1, 1}, &half);
  CreateWith("emb", {4, 2}, {0, 0, 0, 0, 0, 0, 0, 0}, &one);
  CreateWith("frozen", {2}, {1, 1});

  ASSERT_TRUE(Push({{"w", Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4}), std::nullopt},
                    {"emb", Tensor::FromVector<float>({3, 2}, {1, 1, 2, 2, 3, 3}), Ids64({1, 3, 1})}})
                  .ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0.5f, 0, -0.5f, -1}));
  EXPECT_EQ(Values<float>(ReadOne("emb")), (std::vector<float>{0, 0, -4, -4, 0, 0, -2, -2}));
  // Rows written: every row of the dense push (2) and one per id (3).
  const std::string labels = "{role=\"ps\",task=\"0\"} ";
  EXPECT_NE(metrics_->Serialize().find("asyncps_ps_rows_updated_total" + labels + "5"), std::string::npos);
  EXPECT_NE(metrics_->Serialize().find("asyncps_ps_variables" + labels + "3"), std::string::npos);

  // No optimizer; an invalid second gradient; an out-of-range id: nothing is applied.
  EXPECT_EQ(Push({{"frozen", Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Push({{"w", Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1}), std::nullopt},
                  {"emb", Tensor::FromVector<float>({1, 3}, {1, 1, 1}), Ids64({0})}})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Push({{"w", Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1}), std::nullopt},
                  {"emb", Tensor::FromVector<float>({1, 2}, {1, 1}), Ids64({4})}})
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0.5f, 0, -0.5f, -1}));
  EXPECT_EQ(Values<float>(ReadOne("frozen")), (std::vector<float>{1, 1}));

  ASSERT_TRUE(Push({{"emb", Tensor::FromVector<float>({1, 2}, {1, 1}), Ids32({0})}}).ok());
  // The refused pushes wrote nothing.
  EXPECT_NE(metrics_->Serialize().find("asyncps_ps_rows_updated_total" + labels + "6"), std::string::npos);
  auto list = List();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "emb");
  EXPECT_EQ((*list)[0].iterations, 2);
  EXPECT_EQ((*list)[1].name, "frozen");
  EXPECT_EQ((*list)[1].iterations, 0);
  EXPECT_EQ((*list)[2].name, "w");
  EXPECT_EQ((*list)[2].iterations, 1);
}

// f32 values that bf16 cannot hold exactly, and `t` narrowed to bf16 and widened back: what a
// bf16 push of `t` delivers.
Tensor Inexact(const Shape& shape, float scale) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (0.1234567f + static_cast<float>(i) * 1.0001f) * (i % 2 ? -1 : 1);
  return Tensor::FromVector<float>(shape, absl::MakeConstSpan(v));
}
Tensor RoundTripped(const Tensor& t) {
  std::vector<uint16_t> narrow(static_cast<size_t>(t.num_elements()));
  NarrowToBf16(t.data<float>(), narrow.data(), narrow.size());
  Tensor out(DType::kF32, t.shape());
  WidenFromBf16(narrow.data(), out.data<float>(), narrow.size());
  return out;
}
std::vector<uint32_t> Bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.num_elements()));
  std::memcpy(out.data(), t.raw_data(), out.size() * 4);
  return out;
}

// A bf16 push is the f32 push of its widened values, bit for bit (dense and by row, through
// Adam), and its dedup and versions are any push's.
TEST_F(PsServiceTest, Bf16PushAppliesTheWidenedGradient) {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.01f;
  const Tensor init = Inexact({3, 4}, 1);
  for (const char* name : {"a", "b", "ea", "eb"}) {
    CreateWith(name, {3, 4}, std::vector<float>(init.flat<float>().begin(), init.flat<float>().end()), &adam);
  }
  const Tensor g = Inexact({3, 4}, 1e-3f), rows = Inexact({2, 4}, 7e-2f);
  ASSERT_NE(Bits(RoundTripped(g)), Bits(g)) << "the test needs values bf16 rounds";
  const UpdateTag tag{/*coordinator=*/5, /*closure=*/5, /*sequence=*/1, /*watermark=*/5};
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(Push({{"a", g, std::nullopt, true}, {"ea", rows, Ids64({2, 0}), true}}, tag).ok());
    EXPECT_EQ(already_applied_, round == 0 ? 0 : 2) << "a repeat is deduplicated as any push";
  }
  ASSERT_TRUE(Push({{"b", RoundTripped(g), std::nullopt}, {"eb", RoundTripped(rows), Ids64({2, 0})}}).ok());
  EXPECT_EQ(Bits(ReadOne("a")), Bits(ReadOne("b")));
  EXPECT_EQ(Bits(ReadOne("ea")), Bits(ReadOne("eb")));
  EXPECT_NE(Bits(ReadOne("a")), Bits(init)) << "applied";
  EXPECT_EQ(store_->Find("a").value()->version(), store_->Find("b").value()->version());
}

// A read (ps.Read valuesAs, or a push's readAfterAs) asking for bf16 gets f32 variables
// narrowed to bf16 and others as they are, each TensorRef saying which.
TEST_F(PsServiceTest, Bf16ReadAnswersTheNarrowedValue) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  const Tensor value = Inexact({5}, 3);
  CreateWith("w", {5}, std::vector<float>(value.flat<float>().begin(), value.flat<float>().end()), &sgd);
  InitializerSpec ones;
  ones.kind = "ones";
  ASSERT_TRUE(Create("count", DType::kI64, {2}, ones).ok());
  std::vector<uint16_t> expected(5);
  NarrowToBf16(value.data<float>(), expected.data(), expected.size());

  net::OutMessage req = ReadRequestFor({"w", "count"});
  req.envelope().getRequest().getBody().getAs<wire::ReadRequest>().setValuesAs(kBf16WireCode);
  auto resp = Call("ps.Read", std::move(req));
  ASSERT_TRUE(resp.ok()) << resp.status();
  auto tensors = resp->ResponseBody<wire::ReadResponse>().getTensors();
  ASSERT_EQ(tensors.size(), 2u);
  ASSERT_TRUE(net::InMessage::IsBf16(tensors[0]));
  EXPECT_FALSE(resp->TensorAt(tensors[0]).ok()) << "a bf16 tensor is not read as any Tensor";
  auto w = resp->Bf16At(tensors[0]);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->shape, Shape({5}));
  EXPECT_EQ(std::vector<uint16_t>(w->data, w->data + w->count), expected);
  auto count = resp->TensorAt(tensors[1]);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(Values<int64_t>(*count), (std::vector<int64_t>{1, 1})) << "not f32: as it is";

  // The fused push-and-read: the value after the push, narrowed.
  net::OutMessage push;
  auto body = push.InitRequestBody<wire::PushGradientsRequest>();
  auto gradient = body.initGradients(1)[0];
  gradient.setName("w");
  push.AddTensorAsBf16(Tensor::FromVector<float>({5}, {1, 1, 1, 1, 1}), gradient.initValue());
  body.initReadAfter(1).set(0, "w");
  body.setReadAfterAs(kBf16WireCode);
  auto pushed = Call("ps.PushGradients", std::move(push));
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  auto values = pushed->ResponseBody<wire::UpdateResponse>().getValues();
  ASSERT_EQ(values.size(), 1u);
  auto after = pushed->Bf16At(values[0]);
  ASSERT_TRUE(after.ok()) << after.status();
  const Tensor now = ReadOne("w");
  std::vector<uint16_t> narrowed(5);
  NarrowToBf16(now.data<float>(), narrowed.data(), narrowed.size());
  EXPECT_EQ(std::vector<uint16_t>(after->data, after->data + after->count), narrowed);
  EXPECT_NE(Bits(now), Bits(value)) << "the push was applied first";

  // Any other code is refused.
  net::OutMessage odd = ReadRequestFor({"w"});
  odd.envelope().getRequest().getBody().getAs<wire::ReadRequest>().setValuesAs(2);
  EXPECT_EQ(Call("ps.Read", std::move(odd)).status().code(), absl::StatusCode::kInvalidArgument);
}

// A bf16 gradient whose payload does not hold 2 bytes per element of its shape, or that widens
// to NaN or Inf, is refused like any bad push: nothing of the push is applied.
TEST_F(PsServiceTest, BadBf16PushIsRefusedAndAppliesNothing) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  CreateWith("a", {4}, {1, 2, 3, 4}, &sgd);
  CreateWith("b", {4}, {1, 2, 3, 4}, &sgd);
  const std::vector<float> untouched = {1, 2, 3, 4};
  for (uint64_t payload_bytes : {6u, 16u, 0u}) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(2);
    list[0].setName("a");
    req.AddTensorAsBf16(Tensor::FromVector<float>({4}, {1, 1, 1, 1}), list[0].initValue());
    list[1].setName("b");
    auto ref = list[1].initValue();
    req.AddTensor(Tensor(DType::kU8, {static_cast<int64_t>(payload_bytes)}), ref);
    ref.setDtype(kBf16WireCode);
    net::SetShape(ref.initShape(1), {4});
    absl::Status s = CallUpdate("ps.PushGradients", std::move(req));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << payload_bytes << " " << s;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("'b'"));
    EXPECT_THAT(s.message(), ::testing::HasSubstr("bf16"));
  }
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::max()}) {  // the largest f32 narrows to Inf
    absl::Status s = Push({{"a", Tensor::FromVector<float>({4}, {1, 1, 1, 1}), std::nullopt, true},
                           {"b", Tensor::FromVector<float>({4}, {1, bad, 1, 1}), std::nullopt, true}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("NaN or Inf"));
  }
  EXPECT_EQ(Values<float>(ReadOne("a")), untouched);
  EXPECT_EQ(Values<float>(ReadOne("b")), untouched);
  EXPECT_EQ(store_->Find("a").value()->version(), 0);
}

TEST_F(PsServiceTest, GatherReturnsRowsOfSeveralVariables) {
  CreateWith("emb", {4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  CreateWith("bias", {3}, {7, 8, 9});
  auto got = Gather({{"emb", Ids64({3, 0, 3})}, {"bias", Ids32({2, 2, 0, 1})}});
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(Values<float>((*got)[0]), (std::vector<float>{30, 31, 0, 1, 30, 31}));
  EXPECT_EQ(Values<float>((*got)[1]), (std::vector<float>{9, 9, 7, 8}));

  EXPECT_EQ(Gather({{"emb", Ids64({4})}}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Gather({{"emb", Ids64({-1})}}).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(Gather({{"nope", Ids64({0})}}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Gather({{"emb", Tensor::FromVector<float>({1}, {0})}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PsServiceTest, ListVariablesDescribesEveryVariable) {
  auto empty = List();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());

  OptimizerConfig sgd;
  ASSERT_TRUE(Create("z", DType::kF32, {5, 3}, InitializerSpec(), &sgd).ok());
  ASSERT_TRUE(Create("a", DType::kI64, {}).ok());
  ASSERT_TRUE(Push({{"z", Tensor(DType::kF32, {5, 3}), std::nullopt}}).ok());
  ASSERT_TRUE(Push({{"z", Tensor(DType::kF32, {1, 3}), Ids64({4})}}).ok());

  auto list = List();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "a");
  EXPECT_EQ((*list)[0].dtype, DType::kI64);
  EXPECT_EQ((*list)[0].shape, Shape{});
  EXPECT_EQ((*list)[0].iterations, 0);
  EXPECT_EQ((*list)[1].name, "z");
  EXPECT_EQ((*list)[1].dtype, DType::kF32);
  EXPECT_EQ((*list)[1].shape, (Shape{5, 3}));
  EXPECT_EQ((*list)[1].iterations, 2);
}

TEST_F(PsServiceTest, UnknownVariableIsNotFoundEverywhere) {
  EXPECT_EQ(Read({"ghost"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Update({{"ghost", UpdateKind::kAdd, Tensor(DType::kF32, {1}), std::nullopt}}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Push({{"ghost", Tensor(DType::kF32, {1}), std::nullopt}}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Gather({{"ghost", Ids64({0})}}).status().code(), absl::StatusCode::kNotFound);
}

// Malformed requests get InvalidArgument, change nothing, and the server keeps serving.
TEST_F(PsServiceTest, MalformedRequestsAreInvalidArgumentAndServingContinues) {
  CreateWith("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  const std::vector<float> original = {1, 2, 3, 4, 5, 6};

  {  // A TensorRef whose shape does not match its payload (6 floats described as [2, 4]).
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensor(Tensor(DType::kF32, {2, 3}), u.initValue());
    net::SetShape(u.getValue().initShape(2), {2, 4});
    EXPECT_EQ(Call("ps.Update", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // Same, with [1, 6]: right byte count, wrong shape for the variable.
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensor(Tensor(DType::kF32, {2, 3}), u.initValue());
    net::SetShape(u.getValue().initShape(2), {1, 6});
    EXPECT_EQ(Call("ps.Update", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // A TensorRef with dtype code 99.
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensor(Tensor(DType::kF32, {2, 3}), u.initValue());
    u.getValue().setDtype(99);
    EXPECT_EQ(Call("ps.Update", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // A TensorRef pointing at a payload that is not there.
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensor(Tensor(DType::kF32, {2, 3}), u.initValue());
    u.getValue().setPayload(5);
    EXPECT_EQ(Call("ps.Update", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // An update kind beyond the enum.
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(static_cast<wire::UpdateKind>(99));
    req.AddTensor(Tensor(DType::kF32, {2, 3}), u.initValue());
    EXPECT_EQ(Call("ps.Update", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // Gather ids with a shape that does not match their payload.
    net::OutMessage req;
    auto l = req.InitRequestBody<wire::GatherRequest>().initLookups(1)[0];
    l.setName("w");
    req.AddTensor(Ids64({0, 1}), l.initIds());
    net::SetShape(l.getIds().initShape(1), {3});
    EXPECT_EQ(Call("ps.Gather", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  // CreateVariable: dtype code 99, an empty name, a negative dimension, a tensor initializer
  // without its tensor.
  EXPECT_EQ(Create("x", static_cast<DType>(99), {2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create("", DType::kF32, {2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create("x", DType::kF32, {-2}).status().code(), absl::StatusCode::kInvalidArgument);
  {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::CreateVariableRequest>();
    body.setName("x");
    body.setDtype(static_cast<uint8_t>(DType::kF32));
    net::SetShape(body.initShape(1), {2});
    body.initInitializer().setKind("tensor");
    EXPECT_EQ(Call("ps.CreateVariable", std::move(req)).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {  // A body of another method's type: a ReadRequest sent to ps.Update.
    net::OutMessage req;
    auto names = req.InitRequestBody<wire::ReadRequest>().initNames(1);
    names.set(0, "w");
    auto status = Call("ps.Update", std::move(req)).status();
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.code(), absl::StatusCode::kUnavailable) << status;
  }

  // Nothing changed, nothing was created, and the same connection still serves.
  EXPECT_TRUE(Health().ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), original);
  EXPECT_EQ(store_->List().size(), 1u);
  ASSERT_TRUE(Update({{"w", UpdateKind::kAdd, Tensor::FromVector<float>({2, 3}, {1, 1, 1, 1, 1, 1}), std::nullopt}})
                  .ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{2, 3, 4, 5, 6, 7}));
}

// ----- exactly-once updates (ps/update_dedup.h) ------------------------------------------------

constexpr uint64_t kCoordinator = 1 << 20;

double MetricValue(const std::string& exposition, const std::string& name, const std::string& labels);

UpdateTag ClosureCall(uint64_t closure, uint64_t sequence, uint64_t watermark = kCoordinator) {
  return UpdateTag{kCoordinator, kCoordinator + closure, sequence, watermark};
}

TEST_F(PsServiceTest, RepeatedClosureUpdateIsAlreadyAppliedAndAppliedOnce) {
  CreateWith("w", {4}, {0, 0, 0, 0});
  CreateWith("b", {1}, {0});
  const std::vector<UpdateSpec> call = {
      {"w", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1}), Tensor::FromVector<int64_t>({1}, {2})},
      {"b", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {5}), std::nullopt}};
  ASSERT_TRUE(Update(call, ClosureCall(7, 1)).ok());
  EXPECT_EQ(already_applied_, 0);
  // The closure's re-run sends the same call: success, nothing applied again.
  ASSERT_TRUE(Update(call, ClosureCall(7, 1)).ok());
  EXPECT_EQ(already_applied_, 2);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0, 0, 1, 0}));
  EXPECT_EQ(Values<float>(ReadOne("b")), (std::vector<float>{5}));
  // The step's second call (another sequence number) and another closure both apply.
  ASSERT_TRUE(Update(call, ClosureCall(7, 2)).ok());
  ASSERT_TRUE(Update(call, ClosureCall(8, 1)).ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0, 0, 3, 0}));
  // Updates from outside a closure (the chief's) are applied every time.
  ASSERT_TRUE(Update(call).ok());
  ASSERT_TRUE(Update(call).ok());
  EXPECT_EQ(already_applied_, 0);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0, 0, 5, 0}));
  EXPECT_EQ(MetricValue(metrics_->Serialize(), "asyncps_ps_dedup_skipped_total", "reason=\"repeat\""), 2);
}

TEST_F(PsServiceTest, AClosuresGradientPushRepeatedMovesTheOptimizerOnce) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.learning_rate = 0.5f;
  CreateWith("w", {2}, {1, 1}, &sgd);
  const std::vector<GradientSpec> push = {{"w", Tensor::FromVector<float>({2}, {2, 4}), std::nullopt}};
  for (int attempt = 0; attempt < 3; ++attempt) ASSERT_TRUE(Push(push, ClosureCall(1, 1)).ok());
  EXPECT_EQ(already_applied_, 1);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{0, -1}));
  auto listed = List();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ((*listed)[0].iterations, 1);
}

TEST_F(PsServiceTest, ClosuresFinishingInOrderEachApplyTheirPush) {
  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::kSgd;
  sgd.learning_rate = 1.0f;
  CreateWith("w", {2}, {0, 0}, &sgd);
  const std::vector<GradientSpec> push = {{"w", Tensor::FromVector<float>({2}, {1, 2}), std::nullopt}};
  // Each dispatched once every earlier closure finished: the watermark is its own id.
  for (uint64_t c = 1; c <= 5; ++c) {
    ASSERT_TRUE(Push(push, ClosureCall(c, 1, kCoordinator + c)).ok());
    EXPECT_EQ(already_applied_, 0);
  }
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{-5, -10}));
  EXPECT_LE(service_->dedup().entries(), 1u);
}

TEST_F(PsServiceTest, AClosureReRunAfterARestoreAppliesAgain) {
  CreateWith("w", {1}, {0});
  const std::vector<UpdateSpec> add = {{"w", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1}), std::nullopt}};
  auto w = store_->Find("w");
  ASSERT_TRUE(w.ok());
  const Variable::State checkpoint = (*w)->CheckpointState();
  ASSERT_TRUE(Update(add, ClosureCall(1, 1)).ok());
  // Automatic PS recovery restores the checkpoint (undoing the update) and re-runs the closure.
  ASSERT_TRUE((*w)->RestoreState(checkpoint).ok());
  ASSERT_TRUE(Update(add, ClosureCall(1, 1)).ok());
  EXPECT_EQ(already_applied_, 0);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{1}));
  ASSERT_TRUE(Update(add, ClosureCall(1, 1)).ok());
  EXPECT_EQ(already_applied_, 1);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{1}));
}

TEST_F(PsServiceTest, AZombieOfAFinishedClosureChangesNothing) {
  CreateWith("w", {1}, {0});
  const std::vector<UpdateSpec> add = {{"w", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1}), std::nullopt}};
  ASSERT_TRUE(Update(add, ClosureCall(1, 1)).ok());
  // Closure 2 was dispatched after closure 1 finished: its requests carry watermark 2.
  ASSERT_TRUE(Update(add, ClosureCall(2, 1, kCoordinator + 2)).ok());
  // Closure 1's old attempt, presumed dead, goes on with a call its finished attempt never made.
  ASSERT_TRUE(Update(add, ClosureCall(1, 2)).ok());
  EXPECT_EQ(already_applied_, 1);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{2}));
  EXPECT_EQ(MetricValue(metrics_->Serialize(), "asyncps_ps_dedup_skipped_total", "reason=\"below_watermark\""), 1);
  // A malformed tag is bad input: refused, nothing applied.
  EXPECT_EQ(Update(add, UpdateTag{kCoordinator, kCoordinator + 3, 0, kCoordinator}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{2}));
}

TEST_F(PsServiceTest, AnInvalidTaggedRequestClaimsNothing) {
  CreateWith("w", {2}, {0, 0});
  // Fails validation (wrong shape): nothing applied, and the call is not marked applied.
  ASSERT_FALSE(Update({{"w", UpdateKind::kAdd, Tensor::FromVector<float>({3}, {1, 1, 1}), std::nullopt}},
                      ClosureCall(1, 1))
                   .ok());
  EXPECT_EQ(service_->dedup().entries(), 0u);
  ASSERT_TRUE(
      Update({{"w", UpdateKind::kAdd, Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}}, ClosureCall(1, 1)).ok());
  EXPECT_EQ(Values<float>(ReadOne("w")), (std::vector<float>{1, 1}));
}

// The value of the series of `name` whose labels contain `labels` in metrics_, or -1.
double MetricValue(const std::string& exposition, const std::string& name, const std::string& labels) {
  size_t pos = 0;
  while ((pos = exposition.find(name + "{", pos)) != std::string::npos) {
    const size_t end = exposition.find('\n', pos);
    const std::string line = exposition.substr(pos, end - pos);
    pos = end;
    if (line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

class PsLimitsTest : public PsServiceTest {
 protected:
  double Rejected(const std::string& reason) {
    return MetricValue(metrics_->Serialize(), "asyncps_ps_rejected_requests_total",
                       "reason=\"" + reason + "\"");
  }
  double Nonfinite() {
    return MetricValue(metrics_->Serialize(), "asyncps_ps_nonfinite_gradients_total", "role=\"ps\"");
  }
};

TEST_F(PsLimitsTest, CreatePastTheVariableByteCapIsRefusedBeforeAllocating) {
  // Room for two [256, 256] f32 variables (256 KiB each) and a little more.
  const uint64_t one = Variable::ChargedBytes("a", DType::kF32, {256, 256}, 0);
  StartServer(2 * one + 1000, PsService::Options());
  InitializerSpec twos;
  twos.kind = "constant";
  twos.value = 2;
  ASSERT_TRUE(Create("a", DType::kF32, {256, 256}, twos).ok());
  ASSERT_TRUE(Create("b", DType::kF32, {256, 256}, twos).ok());
  const uint64_t held = store_->bytes();

  auto refused = Create("c", DType::kF32, {256, 256}, twos);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("'c'"));
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr(std::to_string(2 * one + 1000)));
  // A 1 TiB variable is refused the same way (it would never be allocated).
  EXPECT_EQ(Create("huge", DType::kF32, {int64_t{1} << 38}).status().code(), absl::StatusCode::kResourceExhausted);
  // Optimizer slots count: a variable a third the size with Adam's two slots does not fit either.
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  EXPECT_EQ(Create("d", DType::kF32, {256, 100}, InitializerSpec(), &adam).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Rejected("variable_bytes"), 3);
  EXPECT_EQ(store_->bytes(), held);
  EXPECT_EQ(store_->List().size(), 2u);
  // Idempotent re-creation of an existing variable costs nothing and still succeeds.
  auto again = Create("a", DType::kF32, {256, 256}, twos);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(*again);
  EXPECT_EQ(Values<float>(ReadOne("b")), std::vector<float>(256 * 256, 2.0f));
  EXPECT_EQ(MetricValue(metrics_->Serialize(), "asyncps_ps_variable_bytes", "role=\"ps\""), static_cast<double>(held));
}

TEST_F(PsLimitsTest, ReadAndGatherPastTheResponseCapAreRefused) {
  PsService::Options options;
  options.max_response_bytes = 1 << 20;
  StartServer(std::numeric_limits<uint64_t>::max(), options);
  InitializerSpec ones;
  ones.kind = "ones";
  ASSERT_TRUE(Create("w", DType::kF32, {1024, 256}, ones).ok());  // exactly 1 MiB

  ASSERT_TRUE(Read({"w"}).ok());
  // The same variable named twice is 2 MiB of answer.
  auto twice = Read({"w", "w"});
  ASSERT_EQ(twice.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(twice.status().message(), ::testing::HasSubstr("--ps_max_response_bytes"));

  // Rows of 1 KiB: 1024 of them fit, 1025 do not; neither do a million copies of row 0 (a
  // 4 MB request asking for a 1 GiB answer).
  std::vector<int32_t> ids(1024, 7);
  ASSERT_TRUE(Gather({{"w", Tensor::FromVector(ids)}}).ok());
  ids.push_back(7);
  EXPECT_EQ(Gather({{"w", Tensor::FromVector(ids)}}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Gather({{"w", Tensor::FromVector(std::vector<int32_t>(1 << 20, 0))}}).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Split over two lookups, the total still counts.
  EXPECT_EQ(Gather({{"w", Tensor::FromVector(std::vector<int32_t>(600, 1))},
                    {"w", Tensor::FromVector(std::vector<int32_t>(600, 2))}})
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Rejected("response_bytes"), 4);
  EXPECT_EQ(Values<float>(ReadOne("w")), std::vector<float>(1024 * 256, 1.0f));
}

TEST_F(PsLimitsTest, ListVariablesPastTheResponseCapIsRefused) {
  PsService::Options options;
  options.max_response_bytes = 4096;
  StartServer(std::numeric_limits<uint64_t>::max(), options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Create(std::string(1000, 'a' + i), DType::kF32, {1}).ok());
  ASSERT_TRUE(List().ok());
  ASSERT_TRUE(Create(std::string(1000, 'z'), DType::kF32, {1}).ok());
  EXPECT_EQ(List().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(PsLimitsTest, NonfiniteGradientsAreRefusedAndApplyNothing) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  CreateWith("a", {2}, {1, 2}, &sgd);
  CreateWith("b", {2, 2}, {1, 2, 3, 4}, &sgd);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  // A good gradient for 'a' and a NaN for 'b' in one push: nothing is applied.
  absl::Status s = Push({{"a", Tensor::FromVector<float>({2}, {1, 1}), std::nullopt},
                         {"b", Tensor::FromVector<float>({2, 2}, {0, nan, 0, 0}), std::nullopt}});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'b'"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("NaN or Inf"));
  // Row gradients likewise, with -Inf.
  s = Push({{"b", Tensor::FromVector<float>({1, 2}, {-inf, 0}), Ids64({1})}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = Push({{"a", Tensor::FromVector<float>({2}, {inf, 0}), std::nullopt}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(Values<float>(ReadOne("a")), (std::vector<float>{1, 2}));
  EXPECT_EQ(Values<float>(ReadOne("b")), (std::vector<float>{1, 2, 3, 4}));
  auto list = List();
  ASSERT_TRUE(list.ok());
  for (const VariableInfo& v : *list) EXPECT_EQ(v.iterations, 0) << v.name;
  EXPECT_EQ(Nonfinite(), 3);
  EXPECT_EQ(Rejected("nonfinite_gradient"), 3);
  // Finite gradients still go through.
  ASSERT_TRUE(Push({{"a", Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}}).ok());
  EXPECT_EQ(Values<float>(ReadOne("a")), (std::vector<float>{0, 1}));
}

// The sparse check rides on the pass that sums duplicates: a NaN in the last occurrence of a
// repeated id, after a good row gradient in the same push, still refuses the whole push.
TEST_F(PsLimitsTest, NonfiniteRepeatedRowGradientRefusesTheWholePush) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  CreateWith("e", {4, 2}, {1, 1, 2, 2, 3, 3, 4, 4}, &sgd);
  CreateWith("f", {4, 2}, {5, 5, 6, 6, 7, 7, 8, 8}, &sgd);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  absl::Status s = Push({{"e", Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1}), Ids64({0, 3})},
                         {"f", Tensor::FromVector<float>({3, 2}, {1, 1, 1, 1, 1, nan}), Ids64({2, 1, 2})}});
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'f'"));
  EXPECT_EQ(Values<float>(ReadOne("e")), (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(Values<float>(ReadOne("f")), (std::vector<float>{5, 5, 6, 6, 7, 7, 8, 8}));
  EXPECT_EQ(Nonfinite(), 1);
  // The same push made finite applies both, the repeated row summed once.
  ASSERT_TRUE(Push({{"e", Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1}), Ids64({0, 3})},
                    {"f", Tensor::FromVector<float>({3, 2}, {1, 1, 1, 1, 1, 2}), Ids64({2, 1, 2})}})
                  .ok());
  EXPECT_EQ(Values<float>(ReadOne("e")), (std::vector<float>{0, 0, 2, 2, 3, 3, 3, 3}));
  EXPECT_EQ(Values<float>(ReadOne("f")), (std::vector<float>{5, 5, 5, 5, 5, 4, 8, 8}));
}

TEST_F(PsLimitsTest, AllowNonfiniteGradientsAppliesThem) {
  PsService::Options options;
  options.allow_nonfinite_gradients = true;
  StartServer(std::numeric_limits<uint64_t>::max(), options);
  OptimizerConfig sgd;
  CreateWith("a", {2}, {1, 2}, &sgd);
  ASSERT_TRUE(Push({{"a", Tensor::FromVector<float>({2}, {std::numeric_limits<float>::quiet_NaN(), 0}),
                     std::nullopt}})
                  .ok());
  const Tensor a = ReadOne("a");
  EXPECT_TRUE(std::isnan(a.data<float>()[0]));
  EXPECT_EQ(a.data<float>()[1], 2);
  EXPECT_EQ(Nonfinite(), 1);  // counted even when allowed
  EXPECT_EQ(Rejected("nonfinite_gradient"), 0);
}

TEST_F(PsLimitsTest, CreateErrorsNameTheVariable) {
  InitializerSpec big;
  big.kind = "constant";
  big.value = 2147483648.0;  // 2^31: not an i32
  auto s = Create("counter", DType::kI32, {4}, big);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("'counter'"));
  big.value = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(Create("counter", DType::kI64, {4}, big).status().code(), absl::StatusCode::kInvalidArgument);

  // A zero dimension does not make huge ones behind it valid.
  s = Create("hollow", DType::kF32, {0, int64_t{1} << 40, int64_t{1} << 40});
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("'hollow'"));

  OptimizerConfig sgd;
  s = Create("steps", DType::kI32, {2}, InitializerSpec(), &sgd);
  ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("'steps'"));
  EXPECT_THAT(s.status().message(), ::testing::HasSubstr("f32"));
  EXPECT_TRUE(store_->List().empty());
  EXPECT_EQ(store_->bytes(), 0u);
}

TEST_F(PsLimitsTest, IntegerUpdatesWrapThroughTheService) {
  InitializerSpec init;
  init.kind = "tensor";
  init.tensor = Tensor::FromVector<int32_t>({2}, {std::numeric_limits<int32_t>::min(), 7});
  ASSERT_TRUE(Create("i", DType::kI32, {2}, init).ok());
  ASSERT_TRUE(Update({{"i", UpdateKind::kDiv, Tensor::FromVector<int32_t>({2}, {-1, -1}), std::nullopt}}).ok());
  EXPECT_EQ(Values<int32_t>(ReadOne("i")), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -7}));
  ASSERT_TRUE(Update({{"i", UpdateKind::kSub, Tensor::FromVector<int32_t>({1}, {1}), Ids64({0})}}).ok());
  EXPECT_EQ(Values<int32_t>(ReadOne("i"))[0], std::numeric_limits<int32_t>::max());
  // Division by zero later in a batch leaves the earlier update unapplied.
  EXPECT_EQ(Update({{"i", UpdateKind::kAdd, Tensor::FromVector<int32_t>({2}, {1, 1}), std::nullopt},
                    {"i", UpdateKind::kDiv, Tensor::FromVector<int32_t>({2}, {1, 0}), std::nullopt}})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<int32_t>(ReadOne("i")), (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), -7}));
}

// ---- Gradient compression (core/compression.h) ----------------------------------------------

// Pushes of hand-made compressed payloads; already_applied_ gets each answer's count.
class CompressedPushTest : public PsServiceTest {
 public:
  absl::Status PushEncoded(const std::string& name, uint8_t code, const std::vector<uint8_t>& payload,
                           const Shape& shape, const UpdateTag& tag = {}, std::optional<Tensor> ids = std::nullopt) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    if (tag.tagged()) UpdateTagToWire(tag, body.initTag());
    auto g = body.initGradients(1)[0];
    g.setName(name);
    Tensor bytes(DType::kU8, {static_cast<int64_t>(payload.size())});
    if (!payload.empty()) std::memcpy(bytes.raw_data(), payload.data(), payload.size());
    req.AddEncoded(code, bytes, shape, g.initValue());
    if (ids) {
      g.setHasIds(true);
      req.AddTensor(*ids, g.initIds());
    }
    return CallUpdate("ps.PushGradients", std::move(req));
  }
  int64_t applied() const { return already_applied_; }
};

std::vector<uint8_t> Int8Of(std::vector<float> values) {
  std::vector<uint8_t> out(Int8EncodedBytes(values.size()));
  EncodeInt8InPlace(values.data(), values.size(), out.data());
  return out;
}

std::vector<uint8_t> TopKOf(std::vector<float> values, double fraction) {
  std::vector<uint8_t> out(TopKEncodedBytes(TopKCount(values.size(), fraction)));
  EncodeTopKInPlace(values.data(), values.size(), fraction, out.data());
  return out;
}

// An int8 or top-k gradient is decoded to f32 on the PS and applied like any push (values
// chosen so that both encodings are exact: integers with 127 in every int8 block), and its
// dedup is any push's.
TEST_F(CompressedPushTest, CompressedPushesApplyTheDecodedGradient) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  constexpr size_t kN = 600;  // three int8 blocks, the last one partial
  CreateWith("w", {kN}, std::vector<float>(kN, 0.0f), &sgd);
  std::vector<float> g(kN);
  for (size_t i = 0; i < kN; ++i) g[i] = static_cast<float>(static_cast<int>(i % 255) - 127);
  for (size_t b = 0; b < kN; b += kInt8BlockSize) g[b] = 127;  // every block's scale is 1
  const UpdateTag tag{/*coordinator=*/5, /*closure=*/5, /*sequence=*/1, /*watermark=*/5};
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(PushEncoded("w", kInt8BlockWireCode, Int8Of(g), {kN}, tag).ok());
    EXPECT_EQ(applied(), round == 0 ? 0 : 1) << "a repeat is deduplicated as any push";
  }
  std::vector<float> expected(kN);
  for (size_t i = 0; i < kN; ++i) expected[i] = -g[i];
  EXPECT_EQ(Values<float>(ReadOne("w")), expected);

  // top-k of 1%: the 6 largest magnitudes (127 and -127 at i % 255 == 0 or 254), exactly.
  ASSERT_TRUE(PushEncoded("w", kTopKWireCode, TopKOf(g, 0.01), {kN}).ok());
  size_t moved = 0;
  const std::vector<float> after = Values<float>(ReadOne("w"));
  for (size_t i = 0; i < kN; ++i) {
    if (after[i] != expected[i]) {
      ++moved;
      EXPECT_EQ(after[i], expected[i] - g[i]) << i;
      EXPECT_EQ(std::fabs(g[i]), 127.0f) << i;
    }
  }
  EXPECT_EQ(moved, TopKCount(kN, 0.01));
}

// A compressed payload that does not fit its variable is refused before it is expanded, with
// a clear error naming the variable; nothing is applied and the PS keeps serving.
TEST_F(CompressedPushTest, BadCompressedPushesAreRefusedAndApplyNothing) {
  OptimizerConfig sgd;
  sgd.learning_rate = 1;
  CreateWith("w", {300}, std::vector<float>(300, 1.0f), &sgd);
  InitializerSpec ones;
  ones.kind = "ones";
  ASSERT_TRUE(Create("count", DType::kI64, {4}, ones).ok());
  const std::vector<float> ones300(300, 1.0f);
  std::vector<uint8_t> index_out_of_range = TopKOf(ones300, 0.01);
  const uint32_t big = 300;
  std::memcpy(index_out_of_range.data(), &big, 4);
  std::vector<uint8_t> repeated = TopKOf(ones300, 0.01);
  std::memcpy(repeated.data() + 4, repeated.data(), 4);
  std::vector<uint8_t> int8_short = Int8Of(ones300);
  int8_short.pop_back();
  struct Case {
    const char* what;
    std::string name;
    uint8_t code;
    std::vector<uint8_t> payload;
    Shape shape;
    std::optional<Tensor> ids = std::nullopt;
  };
  const std::vector<Case> cases = {
      {"int8 of more elements than the variable", "w", kInt8BlockWireCode, Int8Of(std::vector<float>(1 << 20, 1.0f)),
       {1 << 20}, std::nullopt},
      {"top-k claiming a huge shape", "w", kTopKWireCode, TopKOf(ones300, 0.01), {int64_t{1} << 40}, std::nullopt},
      {"int8 of another shape", "w", kInt8BlockWireCode, Int8Of(ones300), {30, 10}, std::nullopt},
      {"int8 payload one byte short", "w", kInt8BlockWireCode, int8_short, {300}, std::nullopt},
      {"top-k index out of range", "w", kTopKWireCode, index_out_of_range, {300}, std::nullopt},
      {"top-k index repeated", "w", kTopKWireCode, repeated, {300}, std::nullopt},
      {"top-k of more pairs than elements", "w", kTopKWireCode, TopKOf(std::vector<float>(301, 1.0f), 1.0), {300}, std::nullopt},
      {"top-k not whole pairs", "w", kTopKWireCode, std::vector<uint8_t>(12), {300}, std::nullopt},
      {"compressed for an integer variable", "count", kInt8BlockWireCode, Int8Of({1, 1, 1, 1}), {4}, std::nullopt},
      {"compressed with ids", "w", kInt8BlockWireCode, Int8Of({1, 1}), {2}, Ids64({0, 1})},
  };
  for (const Case& c : cases) {
    absl::Status s = PushEncoded(c.name, c.code, c.payload, c.shape, {}, c.ids);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << s;
    EXPECT_THAT(s.message(), ::testing::HasSubstr("'" + c.name + "'")) << c.what;
  }
  EXPECT_EQ(Values<float>(ReadOne("w")), ones300) << "nothing applied; the PS still serves";
  EXPECT_EQ(Values<int64_t>(ReadOne("count")), (std::vector<int64_t>{1, 1, 1, 1}));
  // A NaN scale (a block of the worker's gradient held Inf) decodes to NaN: refused as
  // non-finite, as an f32 push of it would be.
  std::vector<float> inf(300, 1.0f);
  inf[7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(PushEncoded("w", kInt8BlockWireCode, Int8Of(inf), {300}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Values<float>(ReadOne("w")), ones300);
}

}  // namespace
}  // namespace ps_service_test_internal
}  // namespace asyncps::ps
