#include "torch/embedding_bag.h"

#include <torch/torch.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/embedding/embedding_service.h"
#include "ps/embedding/embedding_store.h"
#include "worker/embedding_client.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"

namespace asyncps::torch_bridge {
namespace {

constexpr char kToken[] = "embedding-bag-test";
constexpr int64_t kDim = 2;

// Two PS embedding services in this process; table "t": dim 2, SGD learning rate 1, key k's row
// set to (k, 10k) by a first push from the initial zeros.
class EmbeddingBagTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      stores_.push_back(std::make_unique<ps::EmbeddingStore>());
      services_.push_back(
          std::make_unique<ps::EmbeddingService>(*stores_.back(), ps::EmbeddingService::Options()));
      net::RpcServer::Options so;
      so.role = "ps";
      so.token = kToken;
      servers_.push_back(std::make_unique<net::RpcServer>(loop_, so));
      services_.back()->RegisterWith(servers_.back()->methods());
      ASSERT_TRUE(servers_.back()->Start().ok());
      net::RpcClient::Options co;
      co.address = "127.0.0.1:" + std::to_string(servers_.back()->port());
      co.role = "worker";
      co.token = kToken;
      clients_.push_back(std::make_unique<net::RpcClient>(client_loop_, co));
    }
    ps_ = std::make_unique<PsClient>(
        std::vector<net::RpcClient*>{clients_[0].get(), clients_[1].get()}, directory_);
    ps::EmbeddingTableConfig config;
    config.name = "t";
    config.dim = kDim;
    config.initializer.kind = ps::EmbeddingInitializer::Kind::kZeros;
    config.optimizer = opt::SGD(1.0f);
    EmbeddingClient client(ps_->connections(), absl::Seconds(20));
    ASSERT_TRUE(client.CreateTable(config, false).ok());
    std::vector<float> grads;
    for (int64_t k : keys_)
      grads.insert(grads.end(), {-static_cast<float>(k), -10.0f * static_cast<float>(k)});
    ASSERT_TRUE(client
                    .Push("t", Tensor::FromVector(keys_),
                          Tensor::FromVector<float>({4, kDim}, absl::MakeConstSpan(grads)))
                    .ok());
  }

  void TearDown() override {
    ps_.reset();
    clients_.clear();
    servers_.clear();
  }

  StepContext Context() {
    return StepContext(0, {}, *ps_, std::make_shared<std::atomic<bool>>(false));
  }

  std::vector<float> Row(int64_t key) {
    EmbeddingClient client(ps_->connections(), absl::Seconds(20));
    auto rows = client.Lookup("t", Tensor::FromVector<int64_t>({key}), false);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return {rows->data<float>()[0], rows->data<float>()[1]};
  }

  const std::vector<int64_t> keys_ = {1, 2, 3, 4};
  net::EventLoop loop_;
  net::EventLoop client_loop_;
  VariableDirectory directory_;
  std::vector<std::unique_ptr<ps::EmbeddingStore>> stores_;
  std::vector<std::unique_ptr<ps::EmbeddingService>> services_;
  std::vector<std::unique_ptr<net::RpcServer>> servers_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::unique_ptr<PsClient> ps_;
};

torch::Tensor Longs(std::vector<int64_t> v) { return torch::tensor(v, torch::kLong); }

TEST_F(EmbeddingBagTest, SumAndMeanCombineRows) {
  StepContext ctx = Context();
  // Bags {1, 2, 2}, {} and {4}.
  const torch::Tensor keys = Longs({1, 2, 2, 4}), offsets = Longs({0, 3, 3});
  EmbeddingBag sum("t", kDim, EmbeddingBag::Combiner::kSum);
  auto s = sum.Forward(ctx, keys, offsets);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(
      torch::equal(*s, torch::tensor({5.0f, 50.0f, 0.0f, 0.0f, 4.0f, 40.0f}).reshape({3, 2})));
  EmbeddingBag mean("t", kDim, EmbeddingBag::Combiner::kMean);
  auto m = mean.Forward(ctx, keys, offsets);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(torch::allclose(
      *m, torch::tensor({5.0f / 3, 50.0f / 3, 0.0f, 0.0f, 4.0f, 40.0f}).reshape({3, 2})));
}

TEST_F(EmbeddingBagTest, BackwardPushesOneGradientPerDistinctKey) {
  StepContext ctx = Context();
  EmbeddingBag bag("t", kDim, EmbeddingBag::Combiner::kSum);
  // Bags {1, 2, 2} and {2, 3}; loss = sum of all outputs: key 2's gradient is 3 per element.
  auto out = bag.Forward(ctx, Longs({1, 2, 2, 2, 3}), Longs({0, 3}));
  ASSERT_TRUE(out.ok()) << out.status();
  out->sum().backward();
  ASSERT_TRUE(bag.PushGradients(ctx).ok());
  EXPECT_EQ(Row(1), (std::vector<float>{0, 9}));
  EXPECT_EQ(Row(2), (std::vector<float>{-1, 17}));
  EXPECT_EQ(Row(3), (std::vector<float>{2, 29}));
  EXPECT_EQ(Row(4), (std::vector<float>{4, 40}));  // not in the batch: untouched
  EXPECT_TRUE(absl::IsFailedPrecondition(bag.PushGradients(ctx))) << "the rows were forgotten";
}

TEST_F(EmbeddingBagTest, EvaluationReadsWithoutInserting) {
  StepContext ctx = Context();
  EmbeddingBag bag("t", kDim, EmbeddingBag::Combiner::kMean);
  // Key 99 has no row: it reads the initial zeros, and a forward alone creates nothing.
  auto out = bag.Forward(ctx, Longs({99, 1}), Longs({0}));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(torch::allclose(*out, torch::tensor({0.5f, 5.0f}).reshape({1, 2})));
  EXPECT_EQ(Row(99), (std::vector<float>{0, 0}));
  uint64_t rows = 0;
  for (const auto& store : stores_) rows += (*store->Find("t"))->Stats().rows;
  EXPECT_EQ(rows, 4u) << "only the four keys pushed in SetUp have rows";
}

TEST_F(EmbeddingBagTest, BadInputIsAnError) {
  StepContext ctx = Context();
  EmbeddingBag bag("t", kDim, EmbeddingBag::Combiner::kSum);
  EXPECT_TRUE(absl::IsInvalidArgument(
      bag.Forward(ctx, torch::tensor({1, 2}, torch::kInt), Longs({0})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(bag.Forward(ctx, Longs({1, 2}), Longs({1})).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(bag.Forward(ctx, Longs({1, 2}), Longs({0, 3})).status()));
  EmbeddingBag wide("t", kDim + 1, EmbeddingBag::Combiner::kSum);
  EXPECT_TRUE(absl::IsInvalidArgument(wide.Forward(ctx, Longs({1}), Longs({0})).status()));
  EmbeddingBag unknown("nope", kDim, EmbeddingBag::Combiner::kSum);
  EXPECT_TRUE(absl::IsNotFound(unknown.Forward(ctx, Longs({1}), Longs({0})).status()));
  EXPECT_TRUE(absl::IsFailedPrecondition(bag.PushGradients(ctx)));
  auto out = bag.Forward(ctx, Longs({1}), Longs({0}));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(bag.PushGradients(ctx))) << "no backward yet";
}

}  // namespace
}  // namespace asyncps::torch_bridge
