// Versions and staleness on the PS (docs/staleness.md): Variable versions, StalenessGate, and
// ps.Read / ps.Gather / ps.PushGradients through a real RPC server.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/bf16.h"
#include "core/stale_gradient.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "net/envelope.capnp.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/ps_wire.h"
#include "ps/read_wire_testing.h"
#include "ps/staleness_gate.h"
#include "ps/update_rule.h"
#include "ps/variable.h"

namespace asyncps::ps {
namespace {

constexpr char kToken[] = "staleness-test-token";
constexpr uint64_t kCoordinator = 1 << 20;

OptimizerConfig Sgd(float lr) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = lr;
  return c;
}

std::unique_ptr<Variable> MakeVariable(const OptimizerConfig& config, int64_t n = 2) {
  auto v = Variable::Create(
      "w", Tensor::FromVector(std::vector<float>(static_cast<size_t>(n), 0.0f)), &config);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? std::move(*v) : nullptr;
}

TEST(VariableVersionTest, CountsEveryAppliedUpdateAndRestoreSetsIt) {
  auto v = MakeVariable(Sgd(1.0f));
  EXPECT_EQ(v->version(), 0);
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1})).ok());
  ASSERT_TRUE(v->Update(UpdateKind::kAdd, Tensor::FromVector<float>({2}, {1, 1})).ok());
  ASSERT_TRUE(v->UpdateRows(UpdateKind::kAdd, Tensor::FromVector<int64_t>({1}, {0}),
                            Tensor::FromVector<float>({1}, {1}))
                  .ok());
  ASSERT_TRUE(v->ApplyRowGradients(Tensor::FromVector<int64_t>({1}, {1}),
                                   Tensor::FromVector<float>({1}, {1}))
                  .ok());
  EXPECT_EQ(v->version(), 4);
  EXPECT_EQ(v->iterations(), 2);
  // A failed update changes nothing, the version included.
  EXPECT_FALSE(v->ApplyGradient(Tensor::FromVector<float>({3}, {1, 1, 1})).ok());
  EXPECT_EQ(v->version(), 4);
  int64_t read_version = -1;
  v->ReadVersioned(&read_version);
  EXPECT_EQ(read_version, 4);
  ASSERT_TRUE(v->GatherVersioned(Tensor::FromVector<int64_t>({1}, {0}), &read_version).ok());
  EXPECT_EQ(read_version, 4);
  EXPECT_EQ(v->StalenessOf(1), 3);
  EXPECT_EQ(v->StalenessOf(9), 0) << "a version from before a restore is not taken for stale";
  Variable::State state = v->CheckpointState();
  state.iterations = 7;
  ASSERT_TRUE(v->RestoreState(state).ok());
  EXPECT_EQ(v->version(), 7);
}

// A restored step counter is bounded (Variable::kMaxIterations): at INT64_MAX the next update
// wrapped the version negative, after which every base version counted as fresh and
// max_staleness no longer held. The largest counter taken still checks and decays soundly.
TEST(VariableVersionTest, RestoredStepCounterIsBounded) {
  auto v = MakeVariable(opt::MaxStaleness(opt::CosineDecay(Sgd(1.0f), 4, 0.5f), 0));
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1})).ok());
  const Tensor before = v->Read();
  Variable::State state = v->CheckpointState();
  for (int64_t iterations : {int64_t{-1}, Variable::kMaxIterations + 1, std::numeric_limits<int64_t>::max()}) {
    state.iterations = iterations;
    const absl::Status restored = v->RestoreState(state);
    EXPECT_EQ(restored.code(), absl::StatusCode::kInvalidArgument) << restored;
    EXPECT_NE(restored.message().find("step counter"), std::string::npos) << restored;
    EXPECT_EQ(v->version(), 1);
    EXPECT_EQ(v->iterations(), 1);
    EXPECT_TRUE(v->Read().Equals(before));
    OptimizerConfig config = opt::MaxStaleness(Sgd(1.0f), 0);
    auto created = Variable::CreateFromState("w", state, &config);
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
  }
  state.iterations = Variable::kMaxIterations;
  ASSERT_TRUE(v->RestoreState(state).ok());
  StalenessGate stale;
  EXPECT_TRUE(IsStaleGradientError(stale.Enter({{v.get(), true, Variable::kMaxIterations - 1}})));
  StalenessGate fresh;
  ASSERT_TRUE(fresh.Enter({{v.get(), true, Variable::kMaxIterations}}).ok());
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1}), fresh.lr_scale(0)).ok());
  EXPECT_EQ(v->version(), Variable::kMaxIterations + 1);
  EXPECT_FLOAT_EQ(v->Read().data<float>()[0], before.data<float>()[0] - 0.5f) << "decayed to its floor";
}

TEST(StalenessGateTest, BoundZeroRefusesAnOlderVersionAndAdmitsTheCurrentOne) {
  OptimizerConfig config = opt::MaxStaleness(Sgd(1.0f), 0);
  auto v = MakeVariable(config);
  {
    StalenessGate gate;
    ASSERT_TRUE(gate.Enter({{v.get(), true, 0}}).ok());
    EXPECT_EQ(gate.staleness(0), 0);
    ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1}), gate.lr_scale(0)).ok());
  }
  StalenessGate gate;
  absl::Status refused = gate.Enter({{v.get(), true, 0}});
  EXPECT_TRUE(IsStaleGradientError(refused)) << refused;
  EXPECT_EQ(refused.code(), absl::StatusCode::kAborted);
  // Entries the dedup window answers "already applied", and gradients naming no version, pass.
  StalenessGate repeat;
  EXPECT_TRUE(repeat.Enter({{v.get(), false, 0}}).ok());
  StalenessGate unversioned;
  EXPECT_TRUE(unversioned.Enter({{v.get(), true, std::nullopt}}).ok());
  EXPECT_EQ(unversioned.staleness(0), -1);
}

TEST(StalenessGateTest, OneStaleEntryRefusesTheWholeRequest) {
  auto bounded = MakeVariable(opt::MaxStaleness(Sgd(1.0f), 1));
  auto free = MakeVariable(Sgd(1.0f));
  ASSERT_TRUE(bounded->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1})).ok());
  ASSERT_TRUE(bounded->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1})).ok());
  StalenessGate gate;
  EXPECT_TRUE(IsStaleGradientError(gate.Enter({{free.get(), true, 0}, {bounded.get(), true, 0}})));
  StalenessGate within;
  ASSERT_TRUE(within.Enter({{free.get(), true, 0}, {bounded.get(), true, 1}}).ok());
  EXPECT_EQ(within.staleness(1), 1);
}

// An entry applied after earlier entries of its variable in the same request is that many
// versions staler, whether the request is short enough to be scanned or long enough to be
// counted in a map.
TEST(StalenessGateTest, RepeatedEntriesCountTheEarlierOnesInShortAndLongRequests) {
  auto repeated = MakeVariable(opt::StalenessAwareLr(Sgd(1.0f)));
  std::vector<std::unique_ptr<Variable>> others;
  for (size_t n : {size_t{7}, StalenessGate::kScannedEntries + 5}) {
    std::vector<StalenessGate::Entry> entries;
    std::vector<int64_t> expected;
    int64_t seen = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i % 3 == 0) {
        // The exactly-once window's "already applied" entries do not count.
        const bool applies = i != 3;
        entries.push_back({repeated.get(), applies, repeated->version()});
        expected.push_back(applies ? seen++ : -1);
      } else {
        others.push_back(MakeVariable(Sgd(1.0f)));
        entries.push_back({others.back().get(), true, 0});
        expected.push_back(0);
      }
    }
    StalenessGate gate;
    ASSERT_TRUE(gate.Enter(entries).ok()) << n;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(gate.staleness(i), expected[i]) << "entry " << i << " of " << n;
    EXPECT_GE(seen, 2) << "the request must repeat the variable";
  }
}

// The property max_staleness = 0 promises, under concurrency: threads read (value, version)
// and push a gradient naming that version as fast as they can; every push the gate admits is
// applied at exactly the version it names (its staleness is 0 when applied), so the applied
// pushes name the versions 0, 1, 2, ... each once.
TEST(StalenessGateTest, BoundZeroNeverAppliesAStaleUpdateUnderConcurrency) {
  auto v = MakeVariable(opt::MaxStaleness(Sgd(1.0f), 0), 1);
  constexpr int kThreads = 4;
  constexpr int kPushesEach = 200;
  std::vector<std::vector<int64_t>> applied(kThreads);
  std::atomic<int> refused{0};
  std::atomic<int> stale_applied{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPushesEach; ++i) {
        int64_t base = 0;
        v->ReadVersioned(&base);
        StalenessGate gate;
        if (!gate.Enter({{v.get(), true, base}}).ok()) {
          refused.fetch_add(1);
          continue;
        }
        if (v->version() != base) stale_applied.fetch_add(1);
        ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {-1})).ok());
        applied[static_cast<size_t>(t)].push_back(base);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(stale_applied.load(), 0);
  std::vector<int64_t> all;
  for (const auto& a : applied) all.insert(all.end(), a.begin(), a.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(static_cast<int64_t>(all.size()), v->version());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int64_t>(i));
  EXPECT_EQ(static_cast<int>(all.size()) + refused.load(), kThreads * kPushesEach);
  EXPECT_EQ(v->Read().data<float>()[0], static_cast<float>(all.size()));
}

TEST(StalenessGateTest, AwareLearningRateDividesByStaleness) {
  auto v = MakeVariable(opt::StalenessAwareLr(Sgd(1.0f)), 1);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {0})).ok());
  StalenessGate gate;
  ASSERT_TRUE(gate.Enter({{v.get(), true, 0}}).ok());
  EXPECT_EQ(gate.staleness(0), 4);
  EXPECT_EQ(gate.lr_scale(0), 0.25f);
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {8}), gate.lr_scale(0)).ok());
  EXPECT_EQ(v->Read().data<float>()[0], -2.0f);
}

// Cosine learning-rate decay keyed on the variable's version (OptimizerConfig::decay_steps):
// the step an SGD update takes at version v is lr * UpdateRule::DecayScale(config, v).
double CosineDecayFormula(int64_t version, int64_t decay_steps, double alpha) {
  const double p = static_cast<double>(std::min(version, decay_steps)) / static_cast<double>(decay_steps);
  return (1.0 - alpha) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * p)) + alpha;
}

TEST(VariableDecayTest, AppliedStepFollowsTheCosineOfTheVersion) {
  const OptimizerConfig config = opt::CosineDecay(Sgd(1.0f), 8, 0.25f);
  for (bool rows : {false, true}) {
    auto v = MakeVariable(config, 1);
    for (int64_t version = 0; version <= 10; ++version) {
      ASSERT_EQ(v->version(), version);
      const float before = v->Read().data<float>()[0];
      if (rows) {
        ASSERT_TRUE(v->ApplyRowGradients(Tensor::FromVector<int64_t>({1}, {0}), Tensor::FromVector<float>({1}, {1}))
                        .ok());
      } else {
        ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {1})).ok());
      }
      const float step = before - v->Read().data<float>()[0];
      EXPECT_NEAR(step, CosineDecayFormula(version, 8, 0.25), 1e-5) << "version " << version << " rows " << rows;
    }
  }
  // Versions 0, decay_steps / 2, decay_steps and beyond, exactly as the formula puts them.
  EXPECT_EQ(UpdateRule::DecayScale(config, 0), 1.0f);
  EXPECT_NEAR(UpdateRule::DecayScale(config, 4), 0.625f, 1e-7f);
  EXPECT_NEAR(UpdateRule::DecayScale(config, 8), 0.25f, 1e-7f);
  EXPECT_NEAR(UpdateRule::DecayScale(config, 80), 0.25f, 1e-7f);
}

// The version, not the optimizer's step counter, keys the decay: writes (ps.Update) advance it.
TEST(VariableDecayTest, WritesAdvanceTheDecayAsTheyAdvanceTheVersion) {
  auto v = MakeVariable(opt::CosineDecay(Sgd(1.0f), 4, 0.0f), 1);
  ASSERT_TRUE(v->Update(UpdateKind::kAssign, Tensor::FromVector<float>({1}, {0})).ok());
  ASSERT_TRUE(v->Update(UpdateKind::kAssign, Tensor::FromVector<float>({1}, {0})).ok());
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {1})).ok());
  EXPECT_NEAR(v->Read().data<float>()[0], -0.5f, 1e-7f) << "applied at version 2 of 4: half the rate";
}

// docs/semantics.md: a push refused as too stale (or as a bad gradient) applies nothing and
// consumes no step of the schedule; the next admitted push is applied at the version after the
// last applied one.
TEST(VariableDecayTest, RefusedPushesConsumeNoStepOfTheSchedule) {
  auto v = MakeVariable(opt::MaxStaleness(opt::CosineDecay(Sgd(1.0f), 4, 0.0f), 0), 1);
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {0})).ok());  // version 0 -> 1
  for (int i = 0; i < 3; ++i) {
    StalenessGate stale;
    EXPECT_TRUE(IsStaleGradientError(stale.Enter({{v.get(), true, 0}})));
    EXPECT_FALSE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1, 1})).ok()) << "wrong shape";
  }
  ASSERT_EQ(v->version(), 1);
  StalenessGate fresh;
  ASSERT_TRUE(fresh.Enter({{v.get(), true, 1}}).ok());
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {1}), fresh.lr_scale(0)).ok());
  EXPECT_NEAR(v->Read().data<float>()[0], -CosineDecayFormula(1, 4, 0.0), 1e-6f)
      << "applied at version 1 of 4, not at 1 + the refusals";
}

TEST(VariableDecayTest, ComposesWithTheStalenessAwareRate) {
  auto v = MakeVariable(opt::StalenessAwareLr(opt::CosineDecay(Sgd(1.0f), 4, 0.0f)), 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {0})).ok());
  StalenessGate gate;
  ASSERT_TRUE(gate.Enter({{v.get(), true, 0}}).ok());
  ASSERT_EQ(gate.lr_scale(0), 0.5f);
  ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({1}, {1}), gate.lr_scale(0)).ok());
  EXPECT_NEAR(v->Read().data<float>()[0], -0.25f, 1e-7f) << "staleness 2 halves, version 2 of 4 halves";
}

// FTRL divides by its learning rate (TF's kernels refuse lr <= 0): a cosine decay down to a floor
// of 0 (decay_alpha 0, the default) wrote NaN into the value and slots from version decay_steps
// on. Refused at creation; with a floor above 0 the value stays finite past decay_steps.
TEST(VariableDecayTest, FtrlRefusesADecayToARateOfZero) {
  // A floor of 0, and one whose f32 product with the rate underflows to 0.
  for (float alpha : {0.0f, 1e-45f}) {
    const OptimizerConfig to_zero = opt::CosineDecay(opt::Ftrl(0.1f), 2, alpha);
    auto refused = Variable::Create("w", Tensor::FromVector<float>({2}, {0.5f, -0.5f}), &to_zero);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find("decay_alpha"), std::string::npos) << refused.status();
  }
  for (float alpha : {0.01f, 1.0f}) {
    auto v = MakeVariable(opt::StalenessAwareLr(opt::CosineDecay(opt::Ftrl(0.1f), 2, alpha)));
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({2}, {1.0f, -2.0f}), i % 2 == 0 ? 1.0f : 0.25f).ok());
    }
    for (const auto& [name, t] : v->Snapshot()) {
      for (int64_t k = 0; k < t.num_elements(); ++k) {
        EXPECT_TRUE(std::isfinite(t.data<float>()[k])) << name << "[" << k << "] alpha " << alpha;
      }
    }
  }
}

// With decay_steps 0 (the default) the variable applies exactly what the rule applies alone;
// decay_alpha 1 (a floor of the full rate) likewise, bit for bit.
TEST(VariableDecayTest, NoDecayIsBitIdenticalToThePlainRule) {
  for (const OptimizerConfig& config : {opt::Adam(1e-3f), opt::CosineDecay(opt::Adam(1e-3f), 5, 1.0f)}) {
    auto v = MakeVariable(config, 3);
    auto rule = UpdateRule::Create(opt::Adam(1e-3f));
    ASSERT_TRUE(rule.ok());
    std::vector<float> var(3, 0.0f), m(3, 0.0f), s(3, 0.0f);
    std::vector<float*> slots = {m.data(), s.data()};
    for (int64_t step = 1; step <= 8; ++step) {
      const std::vector<float> g = {0.5f * static_cast<float>(step), -1.25f, 3.0f / static_cast<float>(step)};
      ASSERT_TRUE(v->ApplyGradient(Tensor::FromVector<float>({3}, g)).ok());
      (*rule)->Apply(var.data(), g.data(), slots, 3, step);
    }
    const Tensor got = v->Read();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got.data<float>()[i], var[static_cast<size_t>(i)]) << i;
  }
}

// Through the service: ps.Read and ps.Gather answer versions, and a refused closure push is
// not recorded as applied by the exactly-once window, so its re-run applies it once.
class StalenessServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = std::make_unique<VariableStore>(uint64_t{1} << 30);
    PsService::Options options;
    options.metrics = ps_metrics_.get();
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

  // ps.CreateVariable of an f32 [2] variable with `optimizer`, as it crosses the wire.
  absl::Status CreateOverWire(const std::string& name, const OptimizerConfig& optimizer) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::CreateVariableRequest>();
    body.setName(name);
    body.setDtype(static_cast<uint8_t>(DType::kF32));
    net::SetShape(body.initShape(1), Shape{2});
    InitializerToWire(InitializerSpec(), req, body.initInitializer());
    OptimizerToWire(&optimizer, body.initOptimizer());
    return client_->Call("ps.CreateVariable", std::move(req), absl::Seconds(60)).status();
  }

  void Create(const std::string& name, const OptimizerConfig& optimizer) {
    ASSERT_TRUE(CreateOverWire(name, optimizer).ok());
  }

  int64_t ReadVersion(const std::string& name) {
    auto resp = client_->Call("ps.Read", ReadRequestFor({name}), absl::Seconds(60));
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return -1;
    auto versions = resp->ResponseBody<wire::ReadResponse>().getVersions();
    return versions.size() == 1 ? versions[0] : -1;
  }

  int64_t GatherVersion(const std::string& name) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::GatherRequest>().initLookups(1);
    list[0].setName(name);
    req.AddTensor(Tensor::FromVector<int64_t>({1}, {1}), list[0].initIds());
    auto resp = client_->Call("ps.Gather", std::move(req), absl::Seconds(60));
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return -1;
    auto versions = resp->ResponseBody<wire::GatherResponse>().getVersions();
    return versions.size() == 1 ? versions[0] : -1;
  }

  // Pushes gradient {1, 1} to `name` naming `base` (-1: none); already_applied_ and
  // staleness_ receive the answer's fields.
  absl::Status Push(const std::string& name, int64_t base, const UpdateTag& tag = {}) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    if (tag.tagged()) UpdateTagToWire(tag, body.initTag());
    auto list = body.initGradients(1);
    list[0].setName(name);
    req.AddTensor(Tensor::FromVector<float>({2}, {1, 1}), list[0].initValue());
    if (base >= 0) list[0].setBaseVersion(base);
    auto resp = client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60));
    if (!resp.ok()) return resp.status();
    already_applied_ = resp->ResponseBody<wire::UpdateResponse>().getAlreadyApplied();
    staleness_ = resp->ResponseBody<wire::UpdateResponse>().getStaleness();
    return absl::OkStatus();
  }

  net::EventLoop loop_;
  std::unique_ptr<metrics::ProcessMetrics> metrics_ =
      std::move(metrics::ProcessMetrics::Create("ps", 0, /*listen_address=*/"")).value();
  std::unique_ptr<PsMetrics> ps_metrics_ = std::make_unique<PsMetrics>(*metrics_);
  std::unique_ptr<VariableStore> store_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> client_;
  int64_t already_applied_ = -1;
  int64_t staleness_ = -2;
};

TEST_F(StalenessServiceTest, ReadAndGatherAnswerTheVersion) {
  Create("w", Sgd(1.0f));
  EXPECT_EQ(ReadVersion("w"), 0);
  ASSERT_TRUE(Push("w", -1).ok());
  EXPECT_EQ(staleness_, -1) << "a push naming no version has no staleness";
  ASSERT_TRUE(Push("w", 0).ok());
  EXPECT_EQ(staleness_, 1);
  EXPECT_EQ(ReadVersion("w"), 2);
  EXPECT_EQ(GatherVersion("w"), 2);
  net::OutMessage list;
  list.InitRequestBody<wire::Empty>();
  auto listed = client_->Call("ps.ListVariables", std::move(list), absl::Seconds(60));
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto infos = listed->ResponseBody<wire::ListVariablesResponse>().getVariables();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].getVersion(), 2);
  const std::string text = metrics_->Serialize();
  EXPECT_NE(text.find("asyncps_ps_gradient_staleness_count"), std::string::npos);
  EXPECT_NE(text.find("asyncps_ps_gradient_staleness_bucket{role=\"ps\",task=\"0\",le=\"1\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(StalenessServiceTest, RefusedClosurePushIsAppliedOnceByItsReRun) {
  Create("w", opt::MaxStaleness(Sgd(1.0f), 0));
  ASSERT_TRUE(Push("w", 0).ok());  // another closure moved w to version 1
  const UpdateTag call{kCoordinator, kCoordinator + 1, 1, kCoordinator};
  absl::Status refused = Push("w", 0, call);
  EXPECT_TRUE(IsStaleGradientError(refused)) << refused;
  EXPECT_EQ(ReadVersion("w"), 1) << "a refused push applies nothing";
  // The closure's re-run (same tag) reads afresh and pushes again: applied, once.
  ASSERT_TRUE(Push("w", ReadVersion("w"), call).ok());
  EXPECT_EQ(already_applied_, 0);
  EXPECT_EQ(staleness_, 0);
  ASSERT_TRUE(Push("w", 0, call).ok());
  EXPECT_EQ(already_applied_, 1) << "a repeat is answered as applied, not refused as stale";
  EXPECT_EQ(ReadVersion("w"), 2);
  EXPECT_NE(metrics_->Serialize().find("reason=\"stale_gradient\"} 1"), std::string::npos);
}

TEST_F(StalenessServiceTest, OptimizerStalenessSettingsCrossTheWire) {
  OptimizerConfig bad = Sgd(1.0f);
  bad.max_staleness = -5;
  const absl::Status created = CreateOverWire("bad", bad);
  EXPECT_EQ(created.code(), absl::StatusCode::kInvalidArgument) << created;
  Create("w", opt::StalenessAwareLr(opt::MaxStaleness(Sgd(1.0f), 3)));
  auto w = store_->Find("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->max_staleness(), 3);
  EXPECT_TRUE((*w)->optimizer_config()->staleness_aware_lr);
}

TEST_F(StalenessServiceTest, OptimizerDecaySettingsCrossTheWire) {
  for (const auto& [steps, alpha] : {std::pair<int64_t, float>{-1, 0.0f}, {10, 1.5f}}) {
    const absl::Status created = CreateOverWire("bad", opt::CosineDecay(Sgd(1.0f), steps, alpha));
    EXPECT_EQ(created.code(), absl::StatusCode::kInvalidArgument) << created;
  }
  Create("w", opt::CosineDecay(Sgd(1.0f), 4690, 0.125f));
  Create("plain", Sgd(1.0f));
  auto w = store_->Find("w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->optimizer_config()->decay_steps, 4690);
  EXPECT_EQ((*w)->optimizer_config()->decay_alpha, 0.125f);
  auto plain = store_->Find("plain");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->optimizer_config()->decay_steps, 0) << "absent on the wire: no decay";
}

// Hostile and odd requests around versions, the fused readAfter, bf16 gradients and the decay
// settings: each is refused with a status that names the problem, leaves the variable as it was
// (bit for bit, version included), and the server serves a good request afterwards.
class HostilePushTest : public StalenessServiceTest {
 protected:
  // The variable's value and version as the store holds them.
  std::pair<Tensor, int64_t> Snapshot(const std::string& name) {
    auto v = store_->Find(name);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return {Tensor(), -1};
    int64_t version = -1;
    Tensor value = (*v)->ReadVersioned(&version);
    return {value, version};
  }

  // Refused with `code` and a message holding `needle`; `name` unchanged; a good push applies.
  void ExpectRefusedAndUnchanged(const std::string& name, const absl::Status& status, absl::StatusCode code,
                                 const std::string& needle, const std::pair<Tensor, int64_t>& before) {
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), needle)) << status << " lacks '" << needle << "'";
    const auto after = Snapshot(name);
    EXPECT_TRUE(after.first.Equals(before.first)) << after.first.DebugString() << " vs " << before.first.DebugString();
    EXPECT_EQ(after.second, before.second) << "a refused request changes no version";
  }

  // One gradient per entry of `values` (a bf16 payload when its second is set: the bytes given,
  // as bf16 of `shape`), naming `readAfter` (absent when null) and answering it as `read_as`.
  absl::StatusOr<net::InMessage> PushRaw(const std::string& name, int64_t base, const Tensor& value, bool as_bf16,
                                         const std::vector<std::string>* read_after = nullptr,
                                         uint8_t read_as = 0) {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    auto list = body.initGradients(1);
    list[0].setName(name);
    list[0].setBaseVersion(base);
    req.AddTensorAs(value, as_bf16, list[0].initValue());
    if (read_after != nullptr) {
      auto names = body.initReadAfter(static_cast<unsigned>(read_after->size()));
      for (unsigned i = 0; i < read_after->size(); ++i) names.set(i, (*read_after)[i]);
    }
    body.setReadAfterAs(read_as);
    return client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60));
  }
};

// The wire says baseVersion -1 means "unknown"; any other negative value is no version at all.
// Taking it for "unknown" let a push skip max_staleness by sending, say, -2.
TEST_F(HostilePushTest, NegativeBaseVersionsOtherThanUnknownAreRefused) {
  Create("w", opt::MaxStaleness(Sgd(1.0f), 0));
  ASSERT_TRUE(Push("w", 0).ok());
  ASSERT_TRUE(Push("w", 1).ok());
  const auto before = Snapshot("w");
  ASSERT_EQ(before.second, 2);
  for (int64_t base : {int64_t{-2}, int64_t{-1000}, std::numeric_limits<int64_t>::min()}) {
    auto resp = PushRaw("w", base, Tensor::FromVector<float>({2}, {1, 1}), false);
    ExpectRefusedAndUnchanged("w", resp.status(), absl::StatusCode::kInvalidArgument, "baseVersion", before);
    EXPECT_TRUE(absl::StrContains(resp.status().message(), "'w'")) << resp.status();
  }
  // -1 (unknown) is still taken, unchecked; a current version is checked and applied.
  ASSERT_TRUE(PushRaw("w", -1, Tensor::FromVector<float>({2}, {1, 1}), false).ok());
  ASSERT_TRUE(Push("w", 3).ok());
  EXPECT_EQ(staleness_, 0);
  EXPECT_EQ(Snapshot("w").second, 4);
}

// A base version ahead of the variable (a read from before a restore rolled it back, or a lie)
// counts as fresh: staleness 0, full rate, no overflow at INT64_MAX (docs/staleness.md).
TEST_F(HostilePushTest, FutureBaseVersionsCountAsFreshWithoutOverflow) {
  Create("w", opt::StalenessAwareLr(opt::MaxStaleness(Sgd(1.0f), 0)));
  for (int64_t base : {int64_t{1}, int64_t{1} << 62, std::numeric_limits<int64_t>::max()}) {
    const float before = Snapshot("w").first.data<float>()[0];
    ASSERT_TRUE(Push("w", base).ok()) << base;
    EXPECT_EQ(staleness_, 0) << base;
    EXPECT_EQ(Snapshot("w").first.data<float>()[0], before - 1.0f) << "full rate at base " << base;
  }
  EXPECT_EQ(Snapshot("w").second, 3);
}

// Two gradients for one variable in one push, both naming the current version: the second is
// applied after the first, one version later, so its staleness is one more. Under max_staleness
// 0 the push is refused whole (the gate used to admit both at staleness 0); with the
// staleness-aware rate each is scaled by its own staleness.
TEST_F(HostilePushTest, RepeatedVariableInOnePushCountsTheEarlierEntries) {
  Create("bounded", opt::MaxStaleness(Sgd(1.0f), 0));
  Create("aware", opt::StalenessAwareLr(Sgd(1.0f)));
  auto push_twice = [&](const std::string& name, int64_t base) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(2);
    for (unsigned i = 0; i < 2; ++i) {
      list[i].setName(name);
      list[i].setBaseVersion(base);
      req.AddTensor(Tensor::FromVector<float>({2}, {6, 6}), list[i].initValue());
    }
    auto resp = client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60));
    if (resp.ok()) staleness_ = resp->ResponseBody<wire::UpdateResponse>().getStaleness();
    return resp.status();
  };
  const auto before = Snapshot("bounded");
  const absl::Status refused = push_twice("bounded", 0);
  EXPECT_TRUE(IsStaleGradientError(refused)) << refused;
  EXPECT_TRUE(Snapshot("bounded").first.Equals(before.first));
  EXPECT_EQ(Snapshot("bounded").second, 0);
  // Versions 0 and 1 named by one gradient each: both applied at staleness 0.
  ASSERT_TRUE(Push("aware", 0).ok());
  ASSERT_TRUE(Push("aware", 1).ok());
  ASSERT_TRUE(push_twice("aware", 0).ok());
  EXPECT_EQ(staleness_, 3) << "the second entry is applied at version 3";
  // -2 from the two pushes, then 6 / 2 (staleness 2) and 6 / 3 (staleness 3).
  EXPECT_TRUE(Snapshot("aware").first.Equals(Tensor::FromVector<float>({2}, {-7, -7})))
      << Snapshot("aware").first.DebugString();
}

TEST_F(HostilePushTest, ReadAfterOddCombinations) {
  Create("w", Sgd(1.0f));
  Create("other", Sgd(1.0f));
  const Tensor grad = Tensor::FromVector<float>({2}, {0.5f, -0.25f});
  {  // An unknown name refuses the push before anything is applied.
    const auto before = Snapshot("w");
    const std::vector<std::string> names = {"w", "missing"};
    auto resp = PushRaw("w", -1, grad, false, &names);
    ExpectRefusedAndUnchanged("w", resp.status(), absl::StatusCode::kNotFound, "missing", before);
  }
  {  // An answer dtype that is neither 0 nor bf16 refuses the push before anything is applied.
    const auto before = Snapshot("w");
    const std::vector<std::string> names = {"w"};
    auto resp = PushRaw("w", -1, grad, false, &names, /*read_as=*/static_cast<uint8_t>(DType::kF64));
    ExpectRefusedAndUnchanged("w", resp.status(), absl::StatusCode::kInvalidArgument, "readAfterAs", before);
  }
  {  // Duplicates, a variable not pushed, an empty name list; every answer after the apply.
    const std::vector<std::string> names = {"other", "w", "w"};
    auto resp = PushRaw("w", -1, grad, false, &names);
    ASSERT_TRUE(resp.ok()) << resp.status();
    auto body = resp->ResponseBody<wire::UpdateResponse>();
    ASSERT_EQ(body.getValues().size(), 3u);
    ASSERT_EQ(body.getVersions().size(), 3u);
    EXPECT_EQ(body.getVersions()[0], 0);
    EXPECT_EQ(body.getVersions()[1], 1);
    EXPECT_EQ(body.getVersions()[2], 1);
    auto other = resp->TensorAt(body.getValues()[0]);
    auto w1 = resp->TensorAt(body.getValues()[1]);
    auto w2 = resp->TensorAt(body.getValues()[2]);
    ASSERT_TRUE(other.ok() && w1.ok() && w2.ok());
    EXPECT_TRUE(other->Equals(Tensor::FromVector<float>({2}, {0, 0})));
    EXPECT_TRUE(w1->Equals(Tensor::FromVector<float>({2}, {-0.5f, 0.25f})));
    EXPECT_TRUE(w2->Equals(*w1));
    const std::vector<std::string> none;
    auto empty = PushRaw("w", -1, grad, false, &none);
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_EQ(empty->ResponseBody<wire::UpdateResponse>().getValues().size(), 0u);
    EXPECT_EQ(Snapshot("w").second, 2);
  }
  {  // bf16 in and out: the answer is the stored f32 value narrowed, the stored value stays f32.
    const std::vector<std::string> names = {"w"};
    auto resp = PushRaw("w", 2, Tensor::FromVector<float>({2}, {1.0f, 1.0f}), true, &names, kBf16WireCode);
    ASSERT_TRUE(resp.ok()) << resp.status();
    auto values = resp->ResponseBody<wire::UpdateResponse>().getValues();
    ASSERT_EQ(values.size(), 1u);
    EXPECT_TRUE(net::InMessage::IsBf16(values[0]));
    auto widened = resp->WidenedTensorAt(values[0]);
    ASSERT_TRUE(widened.ok()) << widened.status();
    EXPECT_TRUE(widened->Equals(Tensor::FromVector<float>({2}, {-2.0f, -0.5f}))) << widened->DebugString();
    EXPECT_EQ(Snapshot("w").first.dtype(), DType::kF32);
  }
}

// bf16 gradients that do not fit: each refused before anything of the push is applied.
TEST_F(HostilePushTest, MalformedBf16GradientsChangeNothing) {
  Create("w", Sgd(1.0f));
  ASSERT_TRUE(Push("w", -1).ok());
  const auto before = Snapshot("w");
  auto push_bytes = [&](std::vector<uint16_t> bits, Shape shape, size_t byte_count) {
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(1);
    list[0].setName("w");
    std::vector<uint8_t> bytes(byte_count, 0);
    std::memcpy(bytes.data(), bits.data(), std::min(byte_count, bits.size() * sizeof(uint16_t)));
    req.AddBf16(Tensor::FromVector<uint8_t>({static_cast<int64_t>(byte_count)}, bytes), shape, list[0].initValue());
    return client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60)).status();
  };
  const uint16_t one = FloatToBf16(1.0f);
  // An odd byte count; a payload of the wrong size for its shape; a shape of the wrong size for
  // the variable; a negative dimension.
  ExpectRefusedAndUnchanged("w", push_bytes({one, one}, {2}, 3), absl::StatusCode::kInvalidArgument, "payload has 3",
                            before);
  ExpectRefusedAndUnchanged("w", push_bytes({one, one, one}, {2}, 6), absl::StatusCode::kInvalidArgument,
                            "payload has 6", before);
  ExpectRefusedAndUnchanged("w", push_bytes({one, one, one}, {3}, 6), absl::StatusCode::kInvalidArgument,
                            "is bf16[3]; it must be f32[2]", before);
  ExpectRefusedAndUnchanged("w", push_bytes({one, one}, {-2}, 4), absl::StatusCode::kInvalidArgument, "'w'", before);
  // A payload far larger than the variable is refused by its shape before it is widened (the
  // f32 copy would have cost twice the payload); by rows, likewise against the ids.
  ExpectRefusedAndUnchanged("w", push_bytes({}, {int64_t{1} << 22}, size_t{2} << 22),
                            absl::StatusCode::kInvalidArgument, "is bf16[4194304]; it must be f32[2]", before);
  {
    net::OutMessage req;
    auto g = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(1)[0];
    g.setName("w");
    g.setHasIds(true);
    req.AddTensorAsBf16(Tensor::FromVector<float>({3}, {1, 1, 1}), g.initValue());
    req.AddTensor(Tensor::FromVector<int64_t>({2}, {0, 1}), g.initIds());
    ExpectRefusedAndUnchanged("w", client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60)).status(),
                              absl::StatusCode::kInvalidArgument, "is bf16[3]; it must be f32[2]", before);
  }
  // Non-finite bf16 values (NaN, +Inf, -Inf, a NaN with only low payload bits): refused after widening.
  for (uint16_t bad : {uint16_t{0x7fc0}, uint16_t{0x7f80}, uint16_t{0xff80}, uint16_t{0x7f81}}) {
    ExpectRefusedAndUnchanged("w", push_bytes({one, bad}, {2}, 4), absl::StatusCode::kInvalidArgument,
                              "NaN or Inf", before);
  }
  // bf16 is a gradient encoding only: not for ps.Update, not for ids.
  {
    net::OutMessage req;
    auto u = req.InitRequestBody<wire::UpdateRequest>().initUpdates(1)[0];
    u.setName("w");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensorAsBf16(Tensor::FromVector<float>({2}, {7, 7}), u.initValue());
    ExpectRefusedAndUnchanged("w", client_->Call("ps.Update", std::move(req), absl::Seconds(60)).status(),
                              absl::StatusCode::kInvalidArgument, "variable 'w': unknown dtype code 7", before);
  }
  {
    net::OutMessage req;
    auto g = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(1)[0];
    g.setName("w");
    g.setHasIds(true);
    req.AddTensorAsBf16(Tensor::FromVector<float>({1}, {1}), g.initValue());
    req.AddTensorAsBf16(Tensor::FromVector<float>({1}, {0}), g.initIds());
    ExpectRefusedAndUnchanged("w", client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60)).status(),
                              absl::StatusCode::kInvalidArgument, "variable 'w': unknown dtype code 7", before);
  }
  {  // A good bf16 gradient first, a bad one second: neither is applied.
    Create("v", Sgd(1.0f));
    const auto v_before = Snapshot("v");
    net::OutMessage req;
    auto list = req.InitRequestBody<wire::PushGradientsRequest>().initGradients(2);
    list[0].setName("v");
    req.AddTensorAsBf16(Tensor::FromVector<float>({2}, {1, 1}), list[0].initValue());
    list[1].setName("w");
    req.AddTensorAsBf16(Tensor::FromVector<float>({2}, {1, std::numeric_limits<float>::infinity()}),
                        list[1].initValue());
    ExpectRefusedAndUnchanged("w", client_->Call("ps.PushGradients", std::move(req), absl::Seconds(60)).status(),
                              absl::StatusCode::kInvalidArgument, "NaN or Inf", before);
    EXPECT_TRUE(Snapshot("v").first.Equals(v_before.first));
    EXPECT_EQ(Snapshot("v").second, 0);
  }
  // A read asking for an unknown answer dtype is refused; the server still serves.
  {
    net::OutMessage req = ReadRequestFor({"w"});
    req.envelope().getRequest().getBody().getAs<wire::ReadRequest>().setValuesAs(255);
    const absl::Status read = client_->Call("ps.Read", std::move(req), absl::Seconds(60)).status();
    EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument) << read;
    EXPECT_TRUE(absl::StrContains(read.message(), "valuesAs 255")) << read;
  }
  auto good = PushRaw("w", -1, Tensor::FromVector<float>({2}, {1, 1}), true);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(Snapshot("w").first.Equals(Tensor::FromVector<float>({2}, {-2, -2})));
}

// Decay settings at their edges: NaN, Inf and out-of-range floors and negative step counts are
// refused at creation; the largest step count is taken and decays without overflow or NaN.
TEST_F(HostilePushTest, DecaySettingsAtTheEdges) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [steps, alpha] : std::vector<std::pair<int64_t, float>>{
           {10, nan}, {10, inf}, {10, -inf}, {10, -1e-30f}, {10, 1.0000001f},
           {std::numeric_limits<int64_t>::min(), 0.0f}}) {
    const absl::Status created = CreateOverWire("bad", opt::CosineDecay(Sgd(1.0f), steps, alpha));
    EXPECT_EQ(created.code(), absl::StatusCode::kInvalidArgument) << steps << " " << alpha << ": " << created;
    EXPECT_TRUE(absl::StrContains(created.message(), "decay_")) << created;
  }
  EXPECT_FALSE(store_->Find("bad").ok()) << "a refused create leaves nothing behind";
  // A create of a variable that exists (idempotent) checks the optimizer it names all the same.
  Create("exists", Sgd(1.0f));
  const absl::Status again = CreateOverWire("exists", opt::CosineDecay(Sgd(1.0f), 10, nan));
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument) << again;
  EXPECT_TRUE(absl::StrContains(again.message(), "decay_alpha")) << again;
  EXPECT_TRUE(CreateOverWire("exists", Sgd(1.0f)).ok());
  // The staleness-aware rate composed with the decay at its largest staleness and step count.
  Create("w", opt::StalenessAwareLr(opt::CosineDecay(Sgd(1.0f), std::numeric_limits<int64_t>::max(), 0.0f)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Push("w", i).ok());
  ASSERT_TRUE(Push("w", 0).ok());
  EXPECT_EQ(staleness_, 3);
  const Tensor value = Snapshot("w").first;
  EXPECT_TRUE(std::isfinite(value.data<float>()[0]));
  EXPECT_FLOAT_EQ(value.data<float>()[0], -(3.0f + 1.0f / 3.0f)) << "no measurable decay over 4 of 2^63 versions";
}

}  // namespace
}  // namespace asyncps::ps
