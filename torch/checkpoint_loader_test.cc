#include "torch/checkpoint_loader.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ps/checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/tensor_bridge.h"

namespace asyncps {
namespace checkpoint_loader_test_internal {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testutil::Iota;

// A layer and a loose parameter, as a user's module would have.
struct NetImpl : ::torch::nn::Module {
  explicit NetImpl(int64_t in = 4, int64_t scale = 3)
      : fc(register_module("fc", ::torch::nn::Linear(in, 3))),
        scale(register_parameter("scale", ::torch::ones({scale}))) {}
  ::torch::nn::Linear fc;
  ::torch::Tensor scale;
};
TORCH_MODULE(Net);

class CheckpointLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    adam_ = testutil::AdamConfig();
    // As CreateVariables and a partitioner would have placed them: the weight split over 2 PS.
    cluster_.Add("fc.weight", Iota({3, 4}, 1), {2, 1}, {0, 1}, &adam_);
    cluster_.Add("fc.bias", Iota({3}, -1), {3}, {1}, &adam_);
    cluster_.Add("scale", Iota({3}, 5), {3}, {0}, &adam_);
    cluster_.Add("other_model.w", Iota({2}, 9), {2}, {0}, nullptr);
    ASSERT_TRUE(cluster_.Save(dir_, 10).ok());
    ASSERT_TRUE(cluster_.Shard("fc.weight/part_1")->ApplyGradient(Iota({1, 4}, 1)).ok());
    auto saved = cluster_.Save(dir_, 20);
    ASSERT_TRUE(saved.ok()) << saved.status();
    ckpt_ = *saved;
  }

  bool Equals(const ::torch::Tensor& param, const std::string& variable) {
    auto expected = torch_bridge::ToTorch(cluster_.Logical(variable));
    return expected.ok() && ::torch::equal(param.detach(), *expected);
  }

  testutil::TestDir temp_{"torch_ckpt"};
  const std::string dir_ = temp_.path();
  std::string ckpt_;
  OptimizerConfig adam_;
  testutil::FakeCluster cluster_{2};
};

TEST_F(CheckpointLoaderTest, CopiesEveryParameterIntoItsOwnStorage) {
  Net net;
  const void* weight_storage = net->fc->weight.data_ptr();
  auto step = torch_bridge::LoadCheckpoint(ckpt_, *net);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 20);
  EXPECT_TRUE(Equals(net->fc->weight, "fc.weight"));  // both shards, after the later update
  EXPECT_TRUE(Equals(net->fc->bias, "fc.bias"));
  EXPECT_TRUE(Equals(net->scale, "scale"));
  // Copied into the module's own tensors (an optimizer holding them sees the values), and
  // still trainable.
  EXPECT_EQ(net->fc->weight.data_ptr(), weight_storage);
  EXPECT_TRUE(net->fc->weight.requires_grad());
}

TEST_F(CheckpointLoaderTest, LatestSkipsTheTornNewestCheckpoint) {
  // A save that died before its manifest: not a checkpoint.
  fs::create_directories(dir_ + "/ckpt-30");
  std::ofstream(dir_ + "/ckpt-30/ps-0-of-2.safetensors") << "partial";
  Net net;
  auto step = torch_bridge::LoadLatestCheckpoint(dir_, *net);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 20);
  EXPECT_TRUE(Equals(net->fc->weight, "fc.weight"));
  EXPECT_EQ(torch_bridge::LoadLatestCheckpoint(dir_ + "/nothing_here", *net).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CheckpointLoaderTest, PrefixNamesTheVariables) {
  testutil::FakeCluster prefixed(1);
  prefixed.Add("student/fc.weight", Iota({3, 4}, 2), {3}, {0}, nullptr);
  prefixed.Add("student/fc.bias", Iota({3}, 3), {3}, {0}, nullptr);
  prefixed.Add("student/scale", Iota({3}, 4), {3}, {0}, nullptr);
  auto saved = prefixed.Save(dir_ + "/prefixed", 7);
  ASSERT_TRUE(saved.ok()) << saved.status();
  Net net;
  ASSERT_TRUE(torch_bridge::LoadCheckpoint(*saved, *net, "student/").ok());
  auto bias = torch_bridge::ToTorch(prefixed.Logical("student/fc.bias"));
  ASSERT_TRUE(bias.ok());
  EXPECT_TRUE(::torch::equal(net->fc->bias.detach(), *bias));
}

TEST_F(CheckpointLoaderTest, MissingParameterIsNotFoundAndModuleUnchanged) {
  Net net;
  const ::torch::Tensor before = net->fc->weight.detach().clone();
  auto step = torch_bridge::LoadCheckpoint(ckpt_, *net, "encoder/");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("has no variable 'encoder/scale'"));
  EXPECT_TRUE(::torch::equal(net->fc->weight.detach(), before));
}

TEST_F(CheckpointLoaderTest, ShapeMismatchNamesBothAndChangesNothing) {
  // "scale" (LibTorch lists a module's own parameters before its children's) matches; fc's
  // weight ([3, 5] here, [3, 4] saved) does not: nothing loads.
  Net net(/*in=*/5);
  const ::torch::Tensor before = net->scale.detach().clone();
  auto step = torch_bridge::LoadCheckpoint(ckpt_, *net);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("'fc.weight'"));
  EXPECT_THAT(std::string(step.status().message()), HasSubstr(ShapeString({3, 4})));
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("[3, 5]"));
  EXPECT_TRUE(::torch::equal(net->scale.detach(), before));
}

TEST_F(CheckpointLoaderTest, DtypeMismatchIsRejected) {
  Net net;
  net->to(::torch::kFloat64);
  auto step = torch_bridge::LoadCheckpoint(ckpt_, *net);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("f32"));
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("Double"));
}

TEST_F(CheckpointLoaderTest, CorruptFileIsDataLossNamingIt) {
  const std::string file = ckpt_ + "/ps-0-of-2.safetensors";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 16u);
  bytes[bytes.size() - 5] ^= 0x40;  // a value byte: same size, valid header, wrong CRC-32
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  Net net;
  const ::torch::Tensor before = net->scale.detach().clone();
  auto step = torch_bridge::LoadCheckpoint(ckpt_, *net);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kDataLoss) << step.status();
  EXPECT_THAT(std::string(step.status().message()), HasSubstr("ps-0-of-2.safetensors"));
  EXPECT_TRUE(::torch::equal(net->scale.detach(), before));
}

}  // namespace
}  // namespace checkpoint_loader_test_internal
}  // namespace asyncps
