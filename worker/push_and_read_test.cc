// The fused push-and-read (issue 23): PsClient::PushGradientsAndReadAsync and
// StepContext::PushGradientsAndReadAsync against real PsServices: the values answered are those
// after the push is applied, a retried push is applied once and still answers them, a refused
// push answers its error and no values, and a PS that predates readAfter is read afterwards.
#include <atomic>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/optimizer_config.h"
#include "core/stale_gradient.h"
#include "net/method_table.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "worker/local_ps_services_testing.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"

namespace asyncps {
namespace push_and_read_test_internal {
namespace {

constexpr char kToken[] = "push-and-read-test";

VariablePlacement Plain(const std::string& name, Shape shape, int ps = 0) { return PlainPlacement(name, shape, ps); }

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.flat<float>().begin(), t.flat<float>().end()); }

Tensor Filled(Shape shape, float value) {
  return Tensor::FromVector<float>(shape, std::vector<float>(static_cast<size_t>(NumElements(shape)), value));
}

// Two PsServices (SGD, learning rate 1: a gradient g moves a value by -g) on real RpcServers;
// `table` [4, 2] is split in two shards, one per PS; `counter` [1] lives on PS 0, `bias` [2] on
// PS 1. With `old_ps1`, PS 1 serves ps.PushGradients as a PS from before readAfter did: it
// applies the push and answers no values.
class PushAndReadTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(/*old_ps1=*/false); }

  void Start(bool old_ps1) {
    // Registering again replaces the method (MethodTable::Register): ps.Read counted.
    auto customize = [this, old_ps1](int i, ps::PsService& service, net::MethodTable& methods) {
      methods.Register<wire::ReadRequest>(
          "ps.Read", net::PsReaders(),
          [this, i, &service](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
            ++reads_[i];
            return service.ReadIn(service.default_state(), req.RequestBody<wire::ReadRequest>(), resp);
          });
      if (i == 1 && old_ps1) {
        methods.Register<wire::PushGradientsRequest>(
            "ps.PushGradients", net::PsCallers(),
            [&service](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
              return service.PushGradientsIn(service.default_state(), req,
                                             req.RequestBody<wire::PushGradientsRequest>(), resp,
                                             /*answer_read_after=*/false);
            });
      }
    };
    auto ps = LocalPsServices::Start(2, kToken, customize);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    client_ = &ps_->client();
    VariablePlacement table;
    table.name = "table";
    table.dtype = DType::kF32;
    table.shape = {4, 2};
    table.shards = {{"table/part_0", 0, 0, 2}, {"table/part_1", 1, 2, 4}};
    Create(table, opt::SGD(1.0f));
    Create(Plain("counter", {1}), opt::SGD(1.0f));
    Create(Plain("bias", {2}, 1), opt::SGD(1.0f));
  }

  void Create(const VariablePlacement& p, const OptimizerConfig& optimizer) {
    ASSERT_TRUE(ps_->Create(p, optimizer).ok());
  }

  std::vector<float> Value(const std::string& name) {
    auto read = client_->Read({name});
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? Floats((*read)[0]) : std::vector<float>();
  }

  std::atomic<int> reads_[2] = {0, 0};  // ps.Read requests each PS served
  std::unique_ptr<LocalPsServices> ps_;
  PsClient* client_ = nullptr;  // ps_'s
};

TEST_F(PushAndReadTest, AnswersTheValuesWithThePushApplied) {
  // `table` is pushed on both PS; `bias` (PS 1) and `counter` (PS 0) are only read.
  auto r = client_->PushGradientsAndReadAsync({{"table", Filled({4, 2}, 1.0f), std::nullopt}},
                                              {"table", "counter", "bias"})
               .Get();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->values.size(), 3u);
  EXPECT_EQ(Floats(r->values[0]), std::vector<float>(8, -1.0f));
  EXPECT_EQ(r->values[0].shape(), (Shape{4, 2}));
  EXPECT_EQ(Floats(r->values[1]), std::vector<float>({0.0f}));
  EXPECT_EQ(Floats(r->values[2]), std::vector<float>({0.0f, 0.0f}));
  EXPECT_EQ(r->versions, (ShardVersions{{"table/part_0", 1}, {"table/part_1", 1}, {"counter", 0}, {"bias", 0}}));
  EXPECT_EQ(reads_[0].load() + reads_[1].load(), 0);  // the values came with the push
  EXPECT_EQ(Value("table"), std::vector<float>(8, -1.0f));
}

// Each shard of `table` is received straight into its rows of the whole value (the fused
// answer shares ps.Read's reassembly): every row distinct, so a shard placed at the wrong rows,
// or a step that saw another step's block, shows.
TEST_F(PushAndReadTest, ShardedValuesAreReceivedIntoTheirRowsStepAfterStep) {
  std::vector<float> expected(8, 0.0f);
  for (int step = 1; step <= 3; ++step) {
    std::vector<float> gradient(8);
    for (int i = 0; i < 8; ++i) gradient[i] = static_cast<float>(step * 10 + i);
    auto r = client_->PushGradientsAndReadAsync({{"table", Tensor::FromVector<float>({4, 2}, gradient), std::nullopt}},
                                                {"bias", "table"})
                 .Get();
    ASSERT_TRUE(r.ok()) << r.status();
    for (int i = 0; i < 8; ++i) expected[i] -= gradient[i];
    ASSERT_EQ(r->values.size(), 2u);
    EXPECT_EQ(r->values[1].shape(), (Shape{4, 2}));
    EXPECT_EQ(Floats(r->values[1]), expected) << "step " << step;
    EXPECT_EQ(Floats(r->values[1]), Value("table")) << "step " << step;
    EXPECT_EQ(r->versions.at("table/part_0"), step);
    EXPECT_EQ(r->versions.at("table/part_1"), step);
  }
}

TEST_F(PushAndReadTest, ARetriedTaggedPushIsAppliedOnceAndAnswersTheValuesAgain) {
  ps::UpdateTag tag;
  tag.coordinator = 100;
  tag.closure = 100;
  tag.sequence = 1;
  tag.watermark = 100;
  const std::vector<GradientUpdate> grad = {{"counter", Filled({1}, 2.0f), std::nullopt},
                                            {"bias", Filled({2}, 1.0f), std::nullopt}};
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto r = client_->PushGradientsAndReadAsync(grad, {"counter", "bias"}, tag).Get();
    ASSERT_TRUE(r.ok()) << "attempt " << attempt << ": " << r.status();
    EXPECT_EQ(Floats(r->values[0]), std::vector<float>({-2.0f})) << "attempt " << attempt;
    EXPECT_EQ(Floats(r->values[1]), std::vector<float>({-1.0f, -1.0f})) << "attempt " << attempt;
    EXPECT_EQ(r->versions, (ShardVersions{{"counter", 1}, {"bias", 1}})) << "attempt " << attempt;
  }
  EXPECT_EQ(Value("counter"), std::vector<float>({-2.0f}));
}

TEST_F(PushAndReadTest, AStalePushIsRefusedWithNoValuesAndNothingApplied) {
  Create(Plain("w", {2}), opt::MaxStaleness(opt::SGD(1.0f), 0));
  ASSERT_TRUE(client_->PushGradients({{"w", Filled({2}, 1.0f), std::nullopt}}).ok());  // w at version 1
  bool pushed_called = false;
  absl::Status pushed_status;
  auto [future, complete] = PsFuture<VersionedValues>::Make();
  client_->PushGradientsAndReadAsync(
      {{"w", Filled({2}, 1.0f), std::nullopt}, {"counter", Filled({1}, 1.0f), std::nullopt}}, {"w", "counter"},
      [&](absl::Status s) {
        pushed_called = true;
        pushed_status = std::move(s);
      },
      std::move(complete), ps::UpdateTag(), ShardVersions{{"w", 0}});
  absl::StatusOr<VersionedValues> r = future.Get();
  EXPECT_TRUE(IsStaleGradientError(r.status())) << r.status();
  EXPECT_TRUE(pushed_called);
  EXPECT_TRUE(IsStaleGradientError(pushed_status)) << pushed_status;
  // The whole request to PS 0 was refused: `counter`, in the same request, is unchanged too.
  EXPECT_EQ(Value("w"), std::vector<float>({-1.0f, -1.0f}));
  EXPECT_EQ(Value("counter"), std::vector<float>({0.0f}));
}

TEST_F(PushAndReadTest, ANonFiniteGradientIsRefusedWithNoValues) {
  auto r = client_->PushGradientsAndReadAsync({{"counter", Filled({1}, std::nanf("")), std::nullopt}}, {"counter"})
               .Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(Value("counter"), std::vector<float>({0.0f}));
}

TEST_F(PushAndReadTest, AReadOfAVariableThePsLacksAppliesNothingOfThatPs) {
  ps_->directory().Add(Plain("ghost", {1}));  // in the directory, never created on PS 0
  auto r = client_->PushGradientsAndReadAsync({{"counter", Filled({1}, 1.0f), std::nullopt}}, {"ghost"}).Get();
  EXPECT_TRUE(IsPsStateLost(r.status())) << r.status();
  EXPECT_EQ(Value("counter"), std::vector<float>({0.0f}));
}

TEST_F(PushAndReadTest, StepContextCountsThePushAsOneUpdateAndLeavesTheVersionsToTheNextStep) {
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  StepContext ctx(0, {}, *client_, cancelled);
  StepContext::PushAndRead fused =
      ctx.PushGradientsAndReadAsync({{"bias", Filled({2}, 3.0f), std::nullopt}}, {"bias", "counter"});
  EXPECT_TRUE(fused.pushed.Get().ok());
  auto values = fused.values.Get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(Floats(values->values[0]), std::vector<float>({-3.0f, -3.0f}));
  EXPECT_EQ(values->versions, (ShardVersions{{"bias", 1}, {"counter", 0}}));
  EXPECT_TRUE(ctx.versions().empty());
  cancelled->store(true);
  StepContext::PushAndRead late = ctx.PushGradientsAndReadAsync({{"bias", Filled({2}, 3.0f), std::nullopt}}, {"bias"});
  ASSERT_TRUE(late.pushed.ready());
  ASSERT_TRUE(late.values.ready());
  EXPECT_EQ(late.pushed.Get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(late.values.Get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Value("bias"), std::vector<float>({-3.0f, -3.0f}));
}

class OldPsTest : public PushAndReadTest {
 protected:
  void SetUp() override { Start(/*old_ps1=*/true); }
};

// A PS from before readAfter applies the push and ignores the names: its values are read with
// ps.Read once the push is answered, so the caller still sees them with the push applied.
TEST_F(OldPsTest, APsThatAnswersNoValuesIsReadAfterThePush) {
  const std::vector<float> gradient = {1, 2, 3, 4, 5, 6, 7, 8};
  auto r = client_->PushGradientsAndReadAsync({{"table", Tensor::FromVector<float>({4, 2}, gradient), std::nullopt}},
                                              {"table", "bias"})
               .Get();
  ASSERT_TRUE(r.ok()) << r.status();
  // Both shards read again into the whole value, each at its rows.
  EXPECT_EQ(Floats(r->values[0]), std::vector<float>({-1, -2, -3, -4, -5, -6, -7, -8}));
  EXPECT_EQ(Floats(r->values[1]), std::vector<float>({0.0f, 0.0f}));
  EXPECT_EQ(r->versions, (ShardVersions{{"table/part_0", 1}, {"table/part_1", 1}, {"bias", 0}}));
  EXPECT_EQ(reads_[1].load(), 1);
  EXPECT_EQ(Value("table"), std::vector<float>({-1, -2, -3, -4, -5, -6, -7, -8}));  // applied once
}

}  // namespace
}  // namespace push_and_read_test_internal
}  // namespace asyncps
