// The LibTorch bridge: zero-copy tensor conversion, and a module's parameters as variables on
// real parameter-server processes (pull equals the PS bit for bit; a push applies exactly the
// gradients autograd computed, checked against the same optimizer step done here).
#include <torch/torch.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "ps/update_rule.h"
#include "coordinator/parameter_server_strategy.h"
#include "gtest/gtest.h"
#include "partitioners/partitioner.h"
#include "ps/update_rule.h"
#include "tests/testutil/local_cluster.h"
#include "torch/module_variables.h"
#include "torch/tensor_bridge.h"
#include "worker/step_context.h"

namespace asyncps {
namespace {

bool SameBytes(const at::Tensor& a, const Tensor& b) {
  at::Tensor c = a.contiguous();
  return c.numel() == b.num_elements() && c.nbytes() == b.num_bytes() &&
         std::memcmp(c.data_ptr(), b.raw_data(), b.num_bytes()) == 0;
}

TEST(TensorBridgeTest, ToTorchViewsTheSameBytes) {
  Tensor t = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto v = torch_bridge::ToTorch(t);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->data_ptr(), t.raw_data());
  EXPECT_EQ(v->sizes(), at::IntArrayRef({2, 3}));
  EXPECT_EQ(v->scalar_type(), at::kFloat);
  v->mul_(2);  // writes are shared
  EXPECT_EQ(t.data<float>()[5], 12.0f);
}

TEST(TensorBridgeTest, TorchViewKeepsBytesAlive) {
  at::Tensor v;
  {
    Tensor t = Tensor::FromVector<int64_t>({3}, {7, 8, 9});
    auto r = torch_bridge::ToTorch(t);
    ASSERT_TRUE(r.ok());
    v = *r;
  }  // the only asyncps handle is gone; the deleter still holds the bytes
  EXPECT_EQ(v.scalar_type(), at::kLong);
  EXPECT_EQ(v[2].item<int64_t>(), 9);
}

TEST(TensorBridgeTest, FromTorchViewsContiguousTensors) {
  at::Tensor a = at::arange(12, at::kFloat).reshape({3, 4});
  auto t = torch_bridge::FromTorch(a);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->raw_data(), a.data_ptr());
  EXPECT_EQ(t->shape(), (Shape{3, 4}));
  EXPECT_TRUE(SameBytes(a, *t));
}

TEST(TensorBridgeTest, FromTorchCopiesStridedTensors) {
  at::Tensor a = at::arange(12, at::kFloat).reshape({3, 4}).t();
  auto t = torch_bridge::FromTorch(a);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->shape(), (Shape{4, 3}));
  EXPECT_EQ(t->data<float>()[1], 4.0f);  // a[0][1] == original[1][0]
}

TEST(TensorBridgeTest, FromTorchRejectsDtypesWithoutAMatch) {
  auto t = torch_bridge::FromTorch(at::zeros({2}, at::kHalf));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(torch_bridge::FromTorch(at::Tensor()).status().code(), absl::StatusCode::kInvalidArgument);
}

struct NetImpl : ::torch::nn::Module {
  explicit NetImpl(int hidden = 5) {
    fc1 = register_module("fc1", ::torch::nn::Linear(6, hidden));
    fc2 = register_module("fc2", ::torch::nn::Linear(hidden, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(::torch::relu(fc1->forward(x))); }
  ::torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

TEST(TakeGradientsTest, HandsOverAutogradsBuffersByNameAndClearsThem) {
  Net net;
  EXPECT_TRUE(torch_bridge::TakeGradients(*net)->empty());  // no backward yet: nothing to push
  net->fc2->bias.set_requires_grad(false);                  // a parameter without a gradient
  at::Tensor loss = net->forward(at::randn({4, 6})).sum();
  loss.backward();
  std::map<std::string, const void*> buffers;
  for (const auto& p : net->named_parameters()) {
    if (p.value().grad().defined()) buffers[p.key()] = p.value().grad().data_ptr();
  }
  ASSERT_EQ(buffers.size(), 3u);

  auto gradients = torch_bridge::TakeGradients(*net, "net/");
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  ASSERT_EQ(gradients->size(), 3u);
  for (const GradientUpdate& g : *gradients) {
    SCOPED_TRACE(g.name);
    ASSERT_EQ(g.name.rfind("net/", 0), 0u);
    EXPECT_EQ(g.value.raw_data(), buffers.at(g.name.substr(4)));  // the same bytes, not a copy
    EXPECT_FALSE(g.ids.has_value());
  }
  for (const auto& p : net->named_parameters()) EXPECT_FALSE(p.value().grad().defined()) << p.key();
}

class ModuleVariablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testutil::LocalCluster::Options o;
    o.num_ps = 2;
    o.num_workers = 1;  // a cluster needs one; this test is its own worker (StepContext here)
    auto cluster = testutil::LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    // Two shards per variable: every pull and push crosses both PS.
    auto partitioner = FixedShardsPartitioner::Create(2);
    ASSERT_TRUE(partitioner.ok());
    auto chief = cluster_->MakeChief(std::move(*partitioner));
    ASSERT_TRUE(chief.ok()) << chief.status();
    chief_ = std::move(*chief);
  }

  StepContext Context() {
    return StepContext(0, {}, chief_->process().ps(), std::make_shared<std::atomic<bool>>(false));
  }

  // The variable's value on the PS.
  Tensor PsValue(const std::string& name) {
    auto v = chief_->strategy().GetVariable(name);
    EXPECT_TRUE(v.ok()) << v.status();
    auto t = v->Read();
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : Tensor();
  }

  std::unique_ptr<testutil::LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
};

TEST_F(ModuleVariablesTest, PullGivesEveryParameterThePsValueBitForBit) {
  Net chief;
  ASSERT_TRUE(torch_bridge::CreateVariables(chief_->strategy(), *chief, opt::Adam(1e-3f), "net/").ok());
  auto fc1 = chief_->strategy().GetVariable("net/fc1.weight");
  ASSERT_TRUE(fc1.ok());
  EXPECT_EQ(fc1->num_shards(), 2u);
  EXPECT_NE(fc1->shards()[0].ps, fc1->shards()[1].ps);

  Net worker;  // its own (different) random initialisation
  ASSERT_FALSE(at::equal(worker->fc1->weight, chief->fc1->weight));
  StepContext ctx = Context();
  ASSERT_TRUE(torch_bridge::Pull(ctx, *worker, "net/").ok());
  for (const auto& p : worker->named_parameters()) {
    SCOPED_TRACE(p.key());
    EXPECT_TRUE(SameBytes(p.value(), PsValue("net/" + p.key())));
    EXPECT_TRUE(SameBytes(p.value(), *torch_bridge::FromTorch(chief->named_parameters()[p.key()])));  // module's own init
    EXPECT_TRUE(p.value().requires_grad());
  }
}

TEST_F(ModuleVariablesTest, PushAppliesExactlyTheAutogradGradients) {
  const OptimizerConfig adam = opt::Adam(0.01f);
  auto local = ps::UpdateRule::Create(adam);
  ASSERT_TRUE(local.ok());
  Net chief;
  ASSERT_TRUE(torch_bridge::CreateVariables(chief_->strategy(), *chief, adam).ok());

  // The expected state, kept here: variable values and Adam's m and v per parameter.
  std::map<std::string, std::vector<Tensor>> expected;  // name -> {var, m, v}
  for (const auto& p : chief->named_parameters()) {
    Tensor value = torch_bridge::FromTorch(p.value())->Clone();
    expected[p.key()] = {value, Tensor(DType::kF32, value.shape()), Tensor(DType::kF32, value.shape())};
  }

  Net worker;
  at::manual_seed(7);
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    StepContext ctx = Context();
    ASSERT_TRUE(torch_bridge::Pull(ctx, *worker).ok());
    at::Tensor x = at::randn({8, 6});
    at::Tensor y = at::randint(0, 3, {8}, at::kLong);
    at::Tensor loss = ::torch::nn::functional::cross_entropy(worker->forward(x), y);
    loss.backward();
    std::map<std::string, Tensor> grads;
    for (const auto& p : worker->named_parameters()) grads[p.key()] = torch_bridge::FromTorch(p.value().grad())->Clone();
    ASSERT_TRUE(torch_bridge::PushGradients(ctx, *worker).ok());
    for (const auto& p : worker->named_parameters()) EXPECT_FALSE(p.value().grad().defined());

    for (auto& [name, state] : expected) {
      SCOPED_TRACE(name);
      float* slots[] = {state[1].data<float>(), state[2].data<float>()};
      (*local)->Apply(state[0].data<float>(), grads[name].data<float>(), slots, state[0].num_elements(), step);
      EXPECT_TRUE(PsValue(name).Equals(state[0]));
    }
  }
}

// The fused step (PushGradientsAndPullAsync, then FinishPull): each push applies exactly the
// autograd gradients, and the parameters become the values with that push applied, bit for bit,
// every variable split over both PS (each shard received into its rows of the whole value).
TEST_F(ModuleVariablesTest, FusedPushAndPullAppliesTheGradientsAndPullsTheResult) {
  const OptimizerConfig adam = opt::Adam(0.01f);
  auto local = ps::UpdateRule::Create(adam);
  ASSERT_TRUE(local.ok());
  Net chief;
  ASSERT_TRUE(torch_bridge::CreateVariables(chief_->strategy(), *chief, adam, "net/").ok());
  std::map<std::string, std::vector<Tensor>> expected;  // name -> {var, m, v}
  for (const auto& p : chief->named_parameters()) {
    Tensor value = torch_bridge::FromTorch(p.value())->Clone();
    expected[p.key()] = {value, Tensor(DType::kF32, value.shape()), Tensor(DType::kF32, value.shape())};
  }

  Net worker;
  at::manual_seed(11);
  {
    StepContext ctx = Context();
    ASSERT_TRUE(torch_bridge::Pull(ctx, *worker, "net/").ok());
  }
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE(step);
    StepContext ctx = Context();
    at::Tensor loss = ::torch::nn::functional::cross_entropy(worker->forward(at::randn({8, 6})),
                                                             at::randint(0, 3, {8}, at::kLong));
    loss.backward();
    std::map<std::string, Tensor> grads;
    for (const auto& p : worker->named_parameters()) grads[p.key()] = torch_bridge::FromTorch(p.value().grad())->Clone();
    StepContext::PushAndRead fused = torch_bridge::PushGradientsAndPullAsync(ctx, *worker, "net/");
    for (const auto& p : worker->named_parameters()) EXPECT_FALSE(p.value().grad().defined()) << p.key();
    ASSERT_TRUE(fused.pushed.Get().ok());
    StepContext next = Context();
    ASSERT_TRUE(torch_bridge::FinishPull(next, std::move(fused.values), *worker, "net/").ok());
    EXPECT_EQ(next.versions().size(), 2 * expected.size());  // every shard's version, for the next push

    for (auto& [name, state] : expected) {
      SCOPED_TRACE(name);
      float* slots[] = {state[1].data<float>(), state[2].data<float>()};
      (*local)->Apply(state[0].data<float>(), grads[name].data<float>(), slots, state[0].num_elements(), step);
      EXPECT_TRUE(PsValue("net/" + name).Equals(state[0]));
      EXPECT_TRUE(SameBytes(worker->named_parameters()[name], state[0]));
      EXPECT_TRUE(worker->named_parameters()[name].requires_grad());
    }
  }
}

TEST_F(ModuleVariablesTest, MismatchedModuleIsRejectedAndLeftUnchanged) {
  Net chief;
  ASSERT_TRUE(torch_bridge::CreateVariables(chief_->strategy(), *chief, opt::SGD(0.1f)).ok());
  Net other(/*hidden=*/4);
  at::Tensor before = other->fc2->bias.clone();
  StepContext ctx = Context();
  absl::Status s = torch_bridge::Pull(ctx, *other);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("fc1.weight"), std::string::npos) << s;
  EXPECT_TRUE(at::equal(other->fc2->bias, before));
}

TEST_F(ModuleVariablesTest, ReadVariablesGivesTheChiefThePsValues) {
  Net chief;
  ASSERT_TRUE(torch_bridge::CreateVariables(chief_->strategy(), *chief, opt::SGD(0.1f)).ok());
  auto bias = chief_->strategy().GetVariable("fc2.bias");
  ASSERT_TRUE(bias.ok());
  ASSERT_TRUE(bias->Assign(Tensor::FromVector<float>({3}, {1, 2, 3})).ok());
  Net reader;
  ASSERT_TRUE(torch_bridge::ReadVariables(chief_->strategy(), *reader).ok());
  EXPECT_TRUE(at::equal(reader->fc2->bias, at::tensor({1.0f, 2.0f, 3.0f})));
}

}  // namespace
}  // namespace asyncps
