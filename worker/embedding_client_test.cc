#include "worker/embedding_client.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_store.h"
#include "ps/embedding/key_partition.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace {

constexpr char kToken[] = "embedding-client-test";
constexpr int64_t kDim = 3;

// Two real PS embedding services on real RpcServers; table "t" (dim 3, SGD learning rate 1,
// rows starting at 0.5) on both.
class EmbeddingClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      stores_.push_back(std::make_unique<ps::EmbeddingStore>());
      services_.push_back(
          std::make_unique<ps::EmbeddingService>(*stores_.back(), ps::EmbeddingService::Options()));
      net::RpcServer::Options server_options;
      server_options.role = "ps";
      server_options.token = kToken;
      servers_.push_back(std::make_unique<net::RpcServer>(loop_, server_options));
      services_.back()->RegisterWith(servers_.back()->methods());
      ASSERT_TRUE(servers_.back()->Start().ok());
      net::RpcClient::Options client_options;
      client_options.address = "127.0.0.1:" + std::to_string(servers_.back()->port());
      client_options.role = "worker";
      client_options.token = kToken;
      clients_.push_back(std::make_unique<net::RpcClient>(client_loop_, client_options));
    }
    client_ = std::make_unique<EmbeddingClient>(
        std::vector<net::RpcClient*>{clients_[0].get(), clients_[1].get()}, absl::Seconds(20));
    ps::EmbeddingTableConfig config;
    config.name = "t";
    config.dim = kDim;
    config.initializer.kind = ps::EmbeddingInitializer::Kind::kConstant;
    config.initializer.value = 0.5;
    config.optimizer = opt::SGD(1.0f);
    ASSERT_TRUE(client_->CreateTable(config, /*wait_for_ready=*/false).ok());
    ASSERT_TRUE(client_->CreateTable(config, /*wait_for_ready=*/false).ok()) << "idempotent";
  }

  void TearDown() override {
    client_.reset();
    clients_.clear();
    servers_.clear();
  }

  // Keys that PsForKey sends to PS 0 and to PS 1, `n` of each.
  static std::vector<int64_t> KeysOn(int ps, int n) {
    std::vector<int64_t> keys;
    for (int64_t k = -1000; static_cast<int>(keys.size()) < n; ++k) {
      if (ps::PsForKey(k, 2) == ps) keys.push_back(k);
    }
    return keys;
  }

  net::EventLoop loop_;
  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<ps::EmbeddingStore>> stores_;
  std::vector<std::unique_ptr<ps::EmbeddingService>> services_;
  std::vector<std::unique_ptr<net::RpcServer>> servers_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::unique_ptr<EmbeddingClient> client_;
};

std::vector<float> Row(const Tensor& rows, int64_t i) {
  return std::vector<float>(rows.data<float>() + i * rows.dim(1),
                            rows.data<float>() + (i + 1) * rows.dim(1));
}

TEST_F(EmbeddingClientTest, PushSumsDuplicatesAndLookupScattersBack) {
  const int64_t a = KeysOn(0, 1)[0], b = KeysOn(1, 1)[0];
  // a twice (gradients summed), b once; SGD lr 1 from 0.5.
  const Tensor keys = Tensor::FromVector(std::vector<int64_t>{a, b, a});
  const Tensor grads =
      Tensor::FromVector<float>({3, kDim}, {0.25f, 0.5f, 0.125f, 1, 1, 1, 0.25f, 0.5f, 0.125f});
  ASSERT_TRUE(client_->Push("t", keys, grads).ok());
  auto rows =
      client_->Lookup("t", Tensor::FromVector(std::vector<int64_t>{b, a, b, 42}), /*train=*/false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->shape(), (Shape{4, kDim}));
  EXPECT_EQ(Row(*rows, 0), (std::vector<float>{-0.5f, -0.5f, -0.5f}));
  EXPECT_EQ(Row(*rows, 1), (std::vector<float>{0.0f, -0.5f, 0.25f}));
  EXPECT_EQ(Row(*rows, 2), Row(*rows, 0));
  // A key never pushed reads its initial value.
  EXPECT_EQ(Row(*rows, 3), (std::vector<float>{0.5f, 0.5f, 0.5f}));
}

TEST_F(EmbeddingClientTest, EachKeyGoesToItsPs) {
  const std::vector<int64_t> on0 = KeysOn(0, 3), on1 = KeysOn(1, 3);
  std::vector<int64_t> all = on0;
  all.insert(all.end(), on1.begin(), on1.end());
  Tensor ones(DType::kF32, {6, kDim});
  for (float& g : ones.flat<float>()) g = 1;
  ASSERT_TRUE(client_->Push("t", Tensor::FromVector(all), ones).ok());
  // A client of PS 0 alone asks it for every key: it has rows (0.5 - 1) for its own keys only.
  EmbeddingClient only0({clients_[0].get()}, absl::Seconds(20));
  auto mine = only0.Lookup("t", Tensor::FromVector(on0), false);
  auto others = only0.Lookup("t", Tensor::FromVector(on1), false);
  ASSERT_TRUE(mine.ok() && others.ok());
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Row(*mine, i), (std::vector<float>{-0.5f, -0.5f, -0.5f}));
    EXPECT_EQ(Row(*others, i), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  }
}

TEST_F(EmbeddingClientTest, BadInputIsRefusedBeforeSending) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->Lookup("t", Tensor::FromVector<int32_t>({1, 2}), true).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->Push("t", Tensor::FromVector<int64_t>({1, 2}), Tensor(DType::kF32, {3, kDim}))));
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->Push("t", Tensor::FromVector<int64_t>({1}), Tensor(DType::kF64, {1, kDim}))));
  // A dim the table does not have is the PS's InvalidArgument; nothing is applied.
  const int64_t key = KeysOn(0, 1)[0];
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->Push("t", Tensor::FromVector<int64_t>({key}), Tensor(DType::kF32, {1, kDim + 1}))));
  EXPECT_TRUE(
      absl::IsNotFound(client_->Lookup("nope", Tensor::FromVector<int64_t>({key}), true).status()));
  auto rows = client_->Lookup("t", Tensor::FromVector<int64_t>({key}), false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Row(*rows, 0), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  auto empty = client_->Lookup("t", Tensor(DType::kI64, {0}), true);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->num_elements(), 0);
}

TEST_F(EmbeddingClientTest, TaggedPushFromAStepAppliesOnce) {
  VariableDirectory directory;
  PsClient ps({clients_[0].get(), clients_[1].get()}, directory);
  const int64_t key = KeysOn(1, 1)[0];
  const Tensor keys = Tensor::FromVector<int64_t>({key});
  const Tensor grads = Tensor::FromVector<float>({1, kDim}, {1, 2, 3});
  const ps::UpdateTag closure{
      .coordinator = 1000, .closure = 1001, .sequence = 0, .watermark = 1000};
  for (int attempt = 0; attempt < 2; ++attempt) {  // the same closure run twice
    StepContext ctx(0, {}, ps, std::make_shared<std::atomic<bool>>(false));
    ctx.TagUpdates(closure);
    auto looked_up = ctx.LookupEmbeddings("t", keys);
    ASSERT_TRUE(looked_up.ok()) << looked_up.status();
    ASSERT_TRUE(ctx.PushEmbeddingGradients("t", keys, grads).ok());
  }
  auto rows = client_->Lookup("t", keys, false);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Row(*rows, 0), (std::vector<float>{-0.5f, -1.5f, -2.5f}));
}

}  // namespace
}  // namespace asyncps
