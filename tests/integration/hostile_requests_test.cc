// Requests an attacker or an unlucky client could send a real asyncps_ps process after a
// proper handshake: arithmetic that would trap or overflow, shapes that are empty but huge,
// non-finite gradients, variables and answers far larger than the server should hold. Each
// must get a clear status while the process stays up, keeps serving, keeps its memory
// bounded, leaves its other variables bit-for-bit intact, and still stops promptly on SIGTERM.
#include <signal.h>
#include <stdlib.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "net/envelope.capnp.h"
#include "net/event_loop.h"
#include "ps/ps.capnp.h"
#include "net/rpc_client.h"
#include "ps/shard_initializer.h"
#include "core/optimizer_config.h"
#include "ps/ps_wire.h"
#include "ps/read_wire_testing.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;
using testutil::LocalCluster;

constexpr uint64_t kMiB = uint64_t{1} << 20;
// The cap the PS runs with here (set through its environment): small enough to pass with
// a few real variables, so the test needs no gigabytes.
constexpr uint64_t kVariableCap = 64 * kMiB;

// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM), or -1.
int64_t ProcStatusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

class HostileRequestsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The PS inherits the environment: a small variable cap; the response cap keeps its
    // default (512 MiB), which the amplification cases below are sized against.
    setenv("ASYNCPS_PS_MAX_VARIABLE_BYTES", std::to_string(kVariableCap).c_str(), 1);
  }
  static void TearDownTestSuite() { unsetenv("ASYNCPS_PS_MAX_VARIABLE_BYTES"); }

  void SetUp() override {
    LocalCluster::Options o;
    o.num_ps = 1;
    o.num_workers = 1;  // a cluster needs one; this test talks to the PS only
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    net::RpcClient::Options client;
    client.address = cluster_->chief_spec().ps()[0];
    client.role = "chief";
    client.token = cluster_->token();
    client_ = std::make_unique<net::RpcClient>(loop_, client);
  }

  void TearDown() override {
    client_.reset();
    cluster_.reset();
  }

  pid_t pid() { return cluster_->ps_process(0).pid(); }

  absl::StatusOr<net::InMessage> Call(const std::string& method, net::OutMessage request) {
    return client_->Call(method, std::move(request), absl::Seconds(30));
  }

  absl::Status Create(const std::string& name, DType dtype, const Shape& shape,
                      const ps::InitializerSpec& init = ps::InitializerSpec(),
                      const OptimizerConfig* optimizer = nullptr) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::CreateVariableRequest>();
    body.setName(name);
    body.setDtype(static_cast<uint8_t>(dtype));
    net::SetShape(body.initShape(static_cast<unsigned>(shape.size())), shape);
    ps::InitializerToWire(init, req, body.initInitializer());
    ps::OptimizerToWire(optimizer, body.initOptimizer());
    return Call("ps.CreateVariable", std::move(req)).status();
  }

  absl::Status CreateFrom(const std::string& name, const Tensor& value,
                          const OptimizerConfig* optimizer = nullptr) {
    ps::InitializerSpec init;
    init.kind = "tensor";
    init.tensor = value;
    return Create(name, value.dtype(), value.shape(), init, optimizer);
  }

  absl::StatusOr<std::vector<Tensor>> Read(const std::vector<std::string>& names) {
    auto resp = Call("ps.Read", ps::ReadRequestFor(names));
    if (!resp.ok()) return resp.status();
    return ps::ReadResponseTensors(*resp);
  }

  Tensor ReadOne(const std::string& name) {
    auto r = Read({name});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->size() == 1 ? (*r)[0] : Tensor();
  }

  absl::Status Update(const std::string& name, UpdateKind kind, const Tensor& value,
                      std::optional<Tensor> ids = std::nullopt) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1);
    list[0].setName(name);
    list[0].setKind(ps::UpdateKindToWire(kind));
    req.AddTensor(value, list[0].initValue());
    if (ids) {
      list[0].setHasIds(true);
      req.AddTensor(*ids, list[0].initIds());
    }
    return Call("ps.Update", std::move(req)).status();
  }

  absl::Status Push(const std::string& name, const Tensor& gradient, std::optional<Tensor> ids = std::nullopt) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(1);
    list[0].setName(name);
    req.AddTensor(gradient, list[0].initValue());
    if (ids) {
      list[0].setHasIds(true);
      req.AddTensor(*ids, list[0].initIds());
    }
    return Call("ps.PushGradients", std::move(req)).status();
  }

  absl::Status Gather(const std::string& name, const Tensor& ids) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::GatherRequest>().initLookups(1);
    list[0].setName(name);
    req.AddTensor(ids, list[0].initIds());
    return Call("ps.Gather", std::move(req)).status();
  }

  absl::Status Health() {
    net::OutMessage req;
    req.InitRequestBody<wire::Empty>();
    return client_->Call("ps.Health", std::move(req), absl::Seconds(5)).status();
  }

  // The PS is alive and serving.
  void ExpectServing() {
    EXPECT_EQ(kill(pid(), 0), 0) << "the PS process is gone";
    EXPECT_TRUE(cluster_->ps_process(0).running());
    EXPECT_TRUE(Health().ok());
  }

  // SIGTERM ends the PS, promptly and cleanly, with 128 + SIGTERM (retryable under Kubeflow's
  // ExitCode restart policy: a preempted PS is restarted).
  void ExpectStopsOnSigterm() {
    cluster_->ps_process(0).Signal(SIGTERM);
    auto code = cluster_->ps_process(0).Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << "the PS did not stop within 10 s of SIGTERM: " << code.status();
    EXPECT_EQ(*code, 128 + SIGTERM) << cluster_->ps_process(0).output();
  }

  net::EventLoop loop_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<net::RpcClient> client_;
};

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.flat<T>().begin(), t.flat<T>().end());
}

// Item 2: integer arithmetic never traps and wraps; constants must fit their dtype.
TEST_F(HostileRequestsTest, IntegerArithmeticWrapsAndNeverKillsThePs) {
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  ASSERT_TRUE(CreateFrom("i32", Tensor::FromVector<int32_t>({4}, {kMin32, kMax32, 7, 0})).ok());
  ASSERT_TRUE(CreateFrom("i64", Tensor::FromVector<int64_t>({2, 1}, {kMin64, 5})).ok());
  ASSERT_TRUE(CreateFrom("u8", Tensor::FromVector<uint8_t>({2}, {255, 0})).ok());

  // MIN / -1 once raised SIGFPE in the PS: dense, and by rows.
  ASSERT_TRUE(Update("i32", UpdateKind::kDiv, Tensor::FromVector<int32_t>({4}, {-1, -1, -1, -1})).ok());
  EXPECT_EQ(Values<int32_t>(ReadOne("i32")), (std::vector<int32_t>{kMin32, -kMax32, -7, 0}));
  ASSERT_TRUE(Update("i64", UpdateKind::kDiv, Tensor::FromVector<int64_t>({1, 1}, {-1}),
                     Tensor::FromVector<int64_t>({1}, {0}))
                  .ok());
  EXPECT_EQ(Values<int64_t>(ReadOne("i64")), (std::vector<int64_t>{kMin64, 5}));
  // Overflowing add/sub/mul wrap.
  ASSERT_TRUE(Update("i64", UpdateKind::kSub, Tensor::FromVector<int64_t>({2, 1}, {1, 0})).ok());
  EXPECT_EQ(Values<int64_t>(ReadOne("i64"))[0], std::numeric_limits<int64_t>::max());
  ASSERT_TRUE(Update("i32", UpdateKind::kMul, Tensor::FromVector<int32_t>({4}, {2, 2, 2, 2})).ok());
  EXPECT_EQ(Values<int32_t>(ReadOne("i32")), (std::vector<int32_t>{0, 2, -14, 0}));
  ASSERT_TRUE(Update("u8", UpdateKind::kAdd, Tensor::FromVector<uint8_t>({2}, {1, 0})).ok());
  EXPECT_EQ(Values<uint8_t>(ReadOne("u8")), (std::vector<uint8_t>{0, 0}));
  // Division by zero is refused at every integer dtype.
  EXPECT_EQ(Update("u8", UpdateKind::kDiv, Tensor::FromVector<uint8_t>({2}, {1, 0})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Update("i32", UpdateKind::kDiv, Tensor::FromVector<int32_t>({1}, {0}),
                   Tensor::FromVector<int32_t>({1}, {3}))
                .code(),
            absl::StatusCode::kInvalidArgument);

  // A constant the dtype cannot hold is refused, naming the variable.
  ps::InitializerSpec big;
  big.kind = "constant";
  big.value = 4294967296.0;
  absl::Status s = Create("counter", DType::kI32, {8}, big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'counter'"));
  big.value = std::numeric_limits<double>::infinity();
  EXPECT_EQ(Create("counter", DType::kI64, {8}, big).code(), absl::StatusCode::kInvalidArgument);

  ExpectServing();
  ExpectStopsOnSigterm();
}

// Item 3: a shape that is empty but huge is refused or costs nothing; the PS never wedges.
TEST_F(HostileRequestsTest, EmptyButHugeShapesDoNotWedgeThePs) {
  ps::InitializerSpec random;
  random.kind = "truncated_normal";
  random.seed = 3;
  ASSERT_TRUE(Create("keeper", DType::kF32, {1000, 64}, random).ok());
  const Tensor keeper = ReadOne("keeper");

  // Row size 2^80: refused (its row arithmetic would overflow).
  absl::Status s = Create("hollow", DType::kF32, {0, int64_t{1} << 40, int64_t{1} << 40}, random);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'hollow'"));
  // 2^36 empty rows: valid, and built at once (a per-row initializer would spin for hours
  // while ps.Health kept answering).
  ASSERT_TRUE(Create("empty_rows", DType::kF32, {int64_t{1} << 36, 0}, random).ok());
  ASSERT_TRUE(Create("empty_cols", DType::kF32, {0, int64_t{1} << 36}, random).ok());
  auto empty = Read({"empty_rows", "empty_cols"});
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ((*empty)[0].num_elements(), 0);
  EXPECT_EQ((*empty)[1].num_elements(), 0);

  ExpectServing();
  EXPECT_TRUE(ReadOne("keeper").Equals(keeper));
  ExpectStopsOnSigterm();
}

// Item 6: NaN/Inf gradients are refused by default, naming the variable, applying nothing.
TEST_F(HostileRequestsTest, NonfiniteGradientsAreRefused) {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  ASSERT_TRUE(CreateFrom("w", Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4}), &adam).ok());
  const Tensor before = ReadOne("w");
  absl::Status s = Push("w", Tensor::FromVector<float>({2, 2}, {0, std::numeric_limits<float>::quiet_NaN(), 0, 0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'w'"));
  s = Push("w", Tensor::FromVector<float>({1, 2}, {std::numeric_limits<float>::infinity(), 0}),
           Tensor::FromVector<int64_t>({1}, {1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ReadOne("w").Equals(before));
  ASSERT_TRUE(Push("w", Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1})).ok());
  EXPECT_FALSE(ReadOne("w").Equals(before));
  ExpectServing();
}

// Item 4: variables past the PS's byte cap, and answers past its response cap (a few KB of
// request asking for gigabytes), are refused before anything is allocated: the process's
// peak resident memory does not move.
TEST_F(HostileRequestsTest, OversizedVariablesAndAnswersAreRefused) {
  ps::InitializerSpec random;
  random.kind = "uniform";
  random.seed = 11;
  ASSERT_TRUE(Create("keeper", DType::kF32, {1000, 64}, random).ok());
  // [4, 256 Ki] f32: four rows of 1 MiB.
  ASSERT_TRUE(Create("wide", DType::kF32, {4, 256 * 1024}, random).ok());
  // 40 MiB of the 64 MiB cap.
  ASSERT_TRUE(Create("table", DType::kF32, {10 * 1024, 1024}).ok());
  const Tensor keeper = ReadOne("keeper");
  const Tensor wide = ReadOne("wide");
  const int64_t peak_before = ProcStatusKiB(pid(), "VmHWM");
  ASSERT_GT(peak_before, 0);

  // A second 40 MiB table does not fit; neither does a 1 TiB one.
  absl::Status s = Create("table2", DType::kF32, {10 * 1024, 1024});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("'table2'"));
  EXPECT_THAT(s.message(), HasSubstr(std::to_string(kVariableCap)));
  s = Create("tebibyte", DType::kU8, {int64_t{1} << 40});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  // Optimizer slots are charged too: 10 MiB with Adam's two slots is 30 MiB.
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  EXPECT_EQ(Create("adam_table", DType::kF32, {10 * 256, 1024}, ps::InitializerSpec(), &adam).code(),
            absl::StatusCode::kResourceExhausted);

  // 1,024 copies of a 1 MiB row: a 4 KB request for a 1 GiB answer (default cap 512 MiB).
  s = Gather("wide", Tensor::FromVector(std::vector<int32_t>(1024, 0)));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--ps_max_response_bytes"));
  // The same 4 MiB variable named 200 times: 800 MiB.
  EXPECT_EQ(Read(std::vector<std::string>(200, "wide")).status().code(), absl::StatusCode::kResourceExhausted);

  ExpectServing();
  const int64_t peak_after = ProcStatusKiB(pid(), "VmHWM");
  const int64_t rss_after = ProcStatusKiB(pid(), "VmRSS");
  // Nothing near the refused sizes (40 MiB to 1 GiB) was ever resident.
  EXPECT_LT(peak_after - peak_before, 16 * 1024) << "peak RSS grew from " << peak_before << " KiB to " << peak_after;
  EXPECT_LT(rss_after, peak_before + 16 * 1024);
  EXPECT_TRUE(ReadOne("keeper").Equals(keeper));
  EXPECT_TRUE(ReadOne("wide").Equals(wide));
  // Legitimate requests within the caps still work.
  EXPECT_TRUE(Gather("wide", Tensor::FromVector(std::vector<int32_t>{3, 2, 1, 0})).ok());
  ExpectStopsOnSigterm();
}

}  // namespace
}  // namespace asyncps
