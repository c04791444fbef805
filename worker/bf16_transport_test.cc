// Reduced-precision transport (PsClient::Options::transport = kBf16) against real PsServices:
// reads come back as the PS's f32 values rounded to bf16 (sharded ones received in place too),
// pushes apply exactly the f32 push of the rounded gradients (dense and by row), the fused
// push-and-read answers the rounded values after the push, and a PS that predates valuesAs
// (answering f32) is read as it answers.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "gtest/gtest.h"
#include "core/bf16.h"
#include "core/optimizer_config.h"
#include "net/method_table.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "worker/local_ps_services_testing.h"
#include "worker/ps_client.h"

namespace asyncps {
namespace bf16_transport_test_internal {
namespace {

constexpr char kToken[] = "bf16-transport-test";

// Values bf16 cannot hold exactly (every one rounds), distinct per element.
Tensor Inexact(const Shape& shape, float scale) {
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (1.0f + 0.00390625f * 0.3f + static_cast<float>(i) * 0.01f);
  return Tensor::FromVector<float>(shape, absl::MakeConstSpan(v));
}

// `t` narrowed to bf16 and widened back: what bf16 transport delivers of it.
std::vector<uint32_t> RoundTrippedBits(const Tensor& t) {
  std::vector<uint16_t> narrow(static_cast<size_t>(t.num_elements()));
  NarrowToBf16(t.data<float>(), narrow.data(), narrow.size());
  std::vector<uint32_t> out(narrow.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint32_t>(narrow[i]) << 16;
  return out;
}

std::vector<uint32_t> Bits(const Tensor& t) {
  std::vector<uint32_t> out(static_cast<size_t>(t.num_elements()));
  std::memcpy(out.data(), t.raw_data(), out.size() * 4);
  return out;
}

Tensor Negated(const std::vector<uint32_t>& bits, const Shape& shape) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t b = bits[i] ^ 0x80000000u;
    std::memcpy(&v[i], &b, 4);
  }
  return Tensor::FromVector<float>(shape, absl::MakeConstSpan(v));
}

// Two PsServices (SGD, learning rate 1: a gradient g moves a value by -g); `table` [4, 2] split
// in two shards, one per PS; `bias` [3] on PS 1. `exact_` is the PsClient of f32 transport,
// `bf16_` one of bf16 over the same connections. With `old_ps`, every PS serves ps.Read as one
// from before valuesAs: f32 answers whatever is asked.
class Bf16TransportTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(/*old_ps=*/false); }

  void Start(bool old_ps) {
    auto customize = [old_ps](int, ps::PsService& service, net::MethodTable& methods) {
      if (!old_ps) return;
      methods.Register<wire::ReadRequest>(
          "ps.Read", net::PsReaders(),
          [&service](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
            capnp::MallocMessageBuilder copy;
            copy.setRoot(req.RequestBody<wire::ReadRequest>());
            auto body = copy.getRoot<wire::ReadRequest>();
            body.setValuesAs(0);
            return service.ReadIn(service.default_state(), body.asReader(), resp);
          });
    };
    auto ps = LocalPsServices::Start(2, kToken, customize);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    exact_ = &ps_->client();
    PsClient::Options options;
    options.transport = WirePrecision::kBf16;
    bf16_ = std::make_unique<PsClient>(exact_->connections(), ps_->directory(), options);
    VariablePlacement table;
    table.name = "table";
    table.dtype = DType::kF32;
    table.shape = {4, 2};
    table.shards = {{"table/part_0", 0, 0, 2}, {"table/part_1", 1, 2, 4}};
    ASSERT_TRUE(ps_->Create(table, opt::SGD(1.0f)).ok());
    ASSERT_TRUE(ps_->Create(PlainPlacement("bias", {3}, 1), opt::SGD(1.0f)).ok());
  }

  Tensor Exact(const std::string& name) {
    auto read = exact_->Read({name});
    EXPECT_TRUE(read.ok()) << read.status();
    return read.ok() ? (*read)[0] : Tensor();
  }

  std::unique_ptr<LocalPsServices> ps_;
  PsClient* exact_ = nullptr;
  std::unique_ptr<PsClient> bf16_;
};

TEST_F(Bf16TransportTest, ReadsAnswerTheValuesRoundedToBf16) {
  const Tensor table = Inexact({4, 2}, 3), bias = Inexact({3}, -0.02f);
  ASSERT_TRUE(exact_->Update({{"table", UpdateKind::kAssign, table, std::nullopt},
                              {"bias", UpdateKind::kAssign, bias, std::nullopt}})
                  .ok());
  ASSERT_NE(RoundTrippedBits(table), Bits(table)) << "the test needs values bf16 rounds";
  for (int i = 0; i < 2; ++i) {  // the second read reuses the whole value's block
    auto read = bf16_->ReadVersioned({"table", "bias"});
    ASSERT_TRUE(read.ok()) << read.status();
    ASSERT_EQ(read->values.size(), 2u);
    EXPECT_EQ(read->values[0].dtype(), DType::kF32);
    EXPECT_EQ(read->values[0].shape(), (Shape{4, 2}));
    EXPECT_EQ(Bits(read->values[0]), RoundTrippedBits(table)) << "sharded: widened into its rows";
    EXPECT_EQ(Bits(read->values[1]), RoundTrippedBits(bias)) << "one shard: widened into its own value";
    EXPECT_EQ(read->versions, (ShardVersions{{"table/part_0", 1}, {"table/part_1", 1}, {"bias", 1}}));
  }
  EXPECT_EQ(Bits(Exact("table")), Bits(table)) << "the PS keeps f32";
}

TEST_F(Bf16TransportTest, PushesApplyTheGradientsRoundedToBf16) {
  const Tensor dense = Inexact({4, 2}, 0.5f);
  const Tensor bias_rows = Tensor::FromVector<float>({2}, {0.3f, -0.7f});
  // Dense over both shards of `table`; rows 2 and 0 of `bias` (ids: duplicates summed on the PS).
  ASSERT_TRUE(bf16_->PushGradients({{"table", dense, std::nullopt},
                                    {"bias", bias_rows, Tensor::FromVector<int64_t>({2, 0})}})
                  .ok());
  EXPECT_EQ(Bits(Exact("table")), Bits(Negated(RoundTrippedBits(dense), {4, 2})));
  const std::vector<uint32_t> g = RoundTrippedBits(bias_rows);
  EXPECT_EQ(Bits(Exact("bias")), (std::vector<uint32_t>{g[1] ^ 0x80000000u, 0, g[0] ^ 0x80000000u}));
}

TEST_F(Bf16TransportTest, TheFusedReadAnswersTheRoundedValuesAfterThePush) {
  const Tensor g = Inexact({4, 2}, 0.125f);
  auto r = bf16_->PushGradientsAndReadAsync({{"table", g, std::nullopt}}, {"table", "bias"}).Get();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->values.size(), 2u);
  const Tensor now = Exact("table");
  EXPECT_EQ(Bits(now), Bits(Negated(RoundTrippedBits(g), {4, 2})));
  EXPECT_EQ(Bits(r->values[0]), RoundTrippedBits(now));
  EXPECT_EQ(Bits(r->values[1]), std::vector<uint32_t>(3, 0));
  EXPECT_EQ(r->versions.at("table/part_0"), 1);
}

TEST_F(Bf16TransportTest, APsThatAnswersF32IsReadAsItAnswers) {
  bf16_.reset();
  ps_.reset();
  Start(/*old_ps=*/true);
  const Tensor table = Inexact({4, 2}, 3);
  ASSERT_TRUE(exact_->Update({{"table", UpdateKind::kAssign, table, std::nullopt}}).ok());
  auto read = bf16_->Read({"table", "bias"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(Bits((*read)[0]), Bits(table)) << "f32 answered: exact";
}

}  // namespace
}  // namespace bf16_transport_test_internal
}  // namespace asyncps
