#include "worker/ps_client.h"

#include <atomic>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "core/optimizer_config.h"
#include "core/stale_gradient.h"
#include "core/sync.h"
#include "net/event_loop.h"
#include "ps/ps.capnp.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "worker/local_ps_services_testing.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace ps_client_test_internal {
namespace {

constexpr char kToken[] = "ps-client-test";

VariablePlacement Plain(const std::string& name, Shape shape) { return PlainPlacement(name, shape); }

// Two real PsServices on real RpcServers; `table` [8, 2] is split in two shards, one per PS,
// so row operations cross both PS.
class PsClientAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ps = LocalPsServices::Start(2, kToken);
    ASSERT_TRUE(ps.ok()) << ps.status();
    ps_ = std::move(*ps);
    client_ = &ps_->client();
    VariablePlacement table;
    table.name = "table";
    table.shape = {8, 2};
    table.shards = {{"table/part_0", 0, 0, 4}, {"table/part_1", 1, 4, 8}};
    Create(table);
    Create(Plain("counter", {1}));
  }

  void Create(const VariablePlacement& p) { ASSERT_TRUE(ps_->Create(p, opt::SGD(1.0f)).ok()); }

  std::unique_ptr<LocalPsServices> ps_;
  PsClient* client_ = nullptr;  // ps_'s
};

TEST_F(PsClientAsyncTest, ManyUpdatesInFlightFromOneThreadAllApply) {
  constexpr int kCalls = 200;
  std::vector<PsFuture<void>> futures;
  for (int i = 0; i < kCalls; ++i) {
    futures.push_back(client_->UpdateAsync(
        {{"counter", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}}));
  }
  for (auto& f : futures) ASSERT_TRUE(f.Get().ok());
  auto value = client_->Read({"counter"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0].data<float>()[0], static_cast<float>(kCalls));
}

TEST_F(PsClientAsyncTest, EachResultGoesToItsOwnCallWhateverTheCompletionOrder) {
  // Row r of the table holds (r, -r); gathers of different rows, all in flight at once over
  // both PS, must each get their own rows however the answers interleave.
  std::vector<float> values;
  for (int r = 0; r < 8; ++r) {
    values.push_back(static_cast<float>(r));
    values.push_back(static_cast<float>(-r));
  }
  ASSERT_TRUE(client_->Update({{"table", UpdateKind::kAssign,
                                Tensor::FromVector<float>({8, 2}, absl::MakeConstSpan(values)), std::nullopt}})
                  .ok());
  constexpr int kCalls = 64;
  std::vector<PsFuture<Tensor>> futures;
  std::vector<std::vector<int64_t>> asked;
  for (int i = 0; i < kCalls; ++i) {
    asked.push_back({(i * 5) % 8, (i * 3 + 1) % 8, i % 8});
    futures.push_back(client_->GatherAsync("table", Tensor::FromVector(asked.back())));
  }
  // The callback form too: each callback sees its own row.
  struct Count {
    Mutex mu;
    int called ABSL_GUARDED_BY(mu) = 0;
    int right ABSL_GUARDED_BY(mu) = 0;
  };
  auto count = std::make_shared<Count>();
  for (int i = 0; i < kCalls; ++i) {
    client_->GatherAsync("table", Tensor::FromVector(std::vector<int64_t>{i % 8}),
                         [count, i](absl::StatusOr<Tensor> rows) {
                           MutexLock lock(&count->mu);
                           ++count->called;
                           if (rows.ok() && rows->data<float>()[0] == static_cast<float>(i % 8)) ++count->right;
                         });
  }
  for (int i = 0; i < kCalls; ++i) {
    absl::StatusOr<Tensor> rows = futures[i].Get();
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->dim(0), 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(rows->data<float>()[2 * k], static_cast<float>(asked[i][k])) << "call " << i;
      EXPECT_EQ(rows->data<float>()[2 * k + 1], static_cast<float>(-asked[i][k])) << "call " << i;
    }
  }
  MutexLock lock(&count->mu);
  ASSERT_TRUE(count->mu.AwaitWithTimeout(
      absl::Condition(+[](int* called) { return *called == kCalls; }, &count->called), absl::Seconds(30)));
  EXPECT_EQ(count->right, kCalls);
}

TEST_F(PsClientAsyncTest, GradientsPushedAsyncApplyThroughTheOptimizer) {
  std::vector<PsFuture<void>> futures;
  for (int i = 0; i < 10; ++i) {
    futures.push_back(client_->PushGradientsAsync(
        {{"table", Tensor::FromVector<float>({2, 2}, {1, 1, 2, 2}), Tensor::FromVector(std::vector<int64_t>{1, 6})}}));
  }
  for (auto& f : futures) ASSERT_TRUE(f.Get().ok());
  auto rows = client_->GatherAsync("table", Tensor::FromVector(std::vector<int64_t>{1, 6})).Get();
  ASSERT_TRUE(rows.ok()) << rows.status();
  // SGD with learning rate 1 from zeros: -10 * gradient.
  EXPECT_EQ(rows->data<float>()[0], -10.0f);
  EXPECT_EQ(rows->data<float>()[3], -20.0f);
}

TEST_F(PsClientAsyncTest, ErrorsBeforeSendingCompleteOnTheCallingThread) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  absl::Status status;
  client_->UpdateAsync({{"missing", UpdateKind::kAssign, Tensor::Scalar(1.0f), std::nullopt}},
                       [&](absl::Status s) {
                         ran_on = std::this_thread::get_id();
                         status = s;
                       });
  EXPECT_EQ(ran_on, caller);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);

  auto out_of_range = client_->GatherAsync("table", Tensor::FromVector(std::vector<int64_t>{8}));
  ASSERT_TRUE(out_of_range.ready());
  EXPECT_EQ(out_of_range.Get().status().code(), absl::StatusCode::kOutOfRange);

  auto wrong_shape = client_->PushGradientsAsync({{"counter", Tensor::FromVector<float>({2}, {1, 2}), std::nullopt}});
  EXPECT_EQ(wrong_shape.Get().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PsClientAsyncTest, ErrorsFromThePsArriveThroughTheFuture) {
  // A NaN gradient passes the client's checks; the PS refuses it and applies nothing.
  auto nan = client_->PushGradientsAsync(
      {{"counter", Tensor::FromVector<float>({1}, {std::numeric_limits<float>::quiet_NaN()}), std::nullopt}});
  absl::Status status = nan.Get();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_FALSE(IsPsUnreachable(status));
  auto value = client_->Read({"counter"});
  ASSERT_TRUE(value.ok());
  EXPECT_EQ((*value)[0].data<float>()[0], 0.0f);
}

TEST_F(PsClientAsyncTest, AVariableTheAnsweringPsLostIsPsStateLost) {
  // The directory knows a variable no PS holds: what a PS that restarted empty answers.
  ps_->directory().Add(Plain("ghost", {1}));
  absl::StatusOr<std::vector<Tensor>> read = client_->ReadAsync({"ghost"}).Get();
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(IsPsStateLost(read.status())) << read.status();
  EXPECT_EQ(LostPs(read.status()), 0);
}

TEST_F(PsClientAsyncTest, StepContextPullsWhileItPushesAndStopsOnceCancelled) {
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  StepContext ctx(0, {}, *client_, cancelled);
  PsFuture<void> push =
      ctx.PushGradientsAsync({{"counter", Tensor::FromVector<float>({1}, {-2.0f}), std::nullopt}});
  ASSERT_TRUE(push.Get().ok());
  PsFuture<std::vector<Tensor>> pull = ctx.ReadManyAsync({"counter"});
  auto values = pull.Get();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].data<float>()[0], 2.0f);
  EXPECT_FALSE(ctx.ps_unreachable());
  cancelled->store(true);
  PsFuture<Tensor> gather = ctx.GatherAsync("table", Tensor::FromVector(std::vector<int64_t>{0}));
  ASSERT_TRUE(gather.ready());
  EXPECT_EQ(gather.Get().status().code(), absl::StatusCode::kCancelled);
}

// Staleness (docs/staleness.md): reads answer each shard's version, a step remembers the
// versions it read and its push names them, so a bounded variable refuses it once moved.
TEST_F(PsClientAsyncTest, StepPushNamesTheVersionsItReadAndAStaleOneIsRefused) {
  const OptimizerConfig bounded = opt::MaxStaleness(opt::SGD(1.0f), 0);
  VariablePlacement w = Plain("w", {2});
  ASSERT_TRUE(client_->CreateVariable(w, ps::InitializerSpec(), &bounded, false).ok());
  ps_->directory().Add(w);
  ASSERT_TRUE(client_->PushGradients({{"table", Tensor::FromVector<float>({8, 2}, std::vector<float>(16, 1.0f)),
                                       std::nullopt}}).ok());
  auto read = client_->ReadVersioned({"table", "w"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->versions, (ShardVersions{{"table/part_0", 1}, {"table/part_1", 1}, {"w", 0}}));
  auto rows = client_->GatherVersioned("table", Tensor::FromVector(std::vector<int64_t>{5}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->versions, (ShardVersions{{"table/part_1", 1}}));

  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  StepContext first(0, {}, *client_, cancelled);
  StepContext second(0, {}, *client_, cancelled);
  ASSERT_TRUE(first.Read("w").ok());
  ASSERT_TRUE(second.Read("w").ok());
  EXPECT_EQ(first.versions(), (ShardVersions{{"w", 0}}));
  const std::vector<GradientUpdate> grad = {{"w", Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}};
  ASSERT_TRUE(first.PushGradients(grad).ok());
  absl::Status stale = second.PushGradients(grad);
  EXPECT_TRUE(IsStaleGradientError(stale)) << stale;
  EXPECT_FALSE(second.ps_unreachable());
  // A push naming no version (a client that read nothing) is never checked.
  ASSERT_TRUE(client_->PushGradients(grad).ok());
  auto after = client_->ReadVersioned({"w"});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->versions.at("w"), 2);
  EXPECT_EQ(after->values[0].data<float>()[0], -2.0f);
}

// A PS whose ps.PushGradients handler holds every request until released: calls stay in
// flight for as long as a test needs.
class GatedPsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.token = kToken;
    server_options.handler_threads = 2;
    server_ = std::make_unique<net::RpcServer>(server_loop_, server_options);
    server_->Register<wire::PushGradientsRequest>(
        "ps.PushGradients", net::PsCallers(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* response) {
          response->InitResponseBody<wire::Empty>();
          MutexLock lock(&mu_);
          ++arrived_;
          mu_.Await(absl::Condition(&released_));
          return absl::OkStatus();
        });
    ASSERT_TRUE(server_->Start().ok());
    net::RpcClient::Options client_options;
    client_options.address = "127.0.0.1:" + std::to_string(server_->port());
    client_options.role = "worker";
    client_options.token = kToken;
    rpc_ = std::make_unique<net::RpcClient>(client_loop_, client_options);
    directory_.Add(Plain("v", {1}));
    client_ = std::make_unique<PsClient>(std::vector<net::RpcClient*>{rpc_.get()}, directory_);
  }

  void TearDown() override {
    Release();
    client_.reset();
    rpc_.reset();
    server_.reset();
  }

  PsFuture<void> Push() {
    return client_->PushGradientsAsync({{"v", Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}});
  }

  // Waits until `n` requests reached the handler (two at a time run; the rest queue).
  void AwaitArrived(int n) {
    MutexLock lock(&mu_);
    std::pair<int*, int> want(&arrived_, n);
    ASSERT_TRUE(mu_.AwaitWithTimeout(
        absl::Condition(+[](std::pair<int*, int>* a) { return *a->first >= a->second; }, &want),
        absl::Seconds(30)));
  }

  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
  }

  Mutex mu_;
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  net::EventLoop server_loop_;
  net::EventLoop client_loop_;
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> rpc_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(GatedPsTest, CancelCompletesAtOnceAndTheLateAnswerIsDropped) {
  PsFuture<void> cancelled = Push();
  PsFuture<void> kept = Push();
  AwaitArrived(2);
  EXPECT_FALSE(cancelled.ready());
  cancelled.Cancel();
  ASSERT_TRUE(cancelled.ready());
  EXPECT_FALSE(kept.ready());
  Release();
  EXPECT_TRUE(kept.Get().ok());
  EXPECT_EQ(cancelled.Get().code(), absl::StatusCode::kCancelled);
  // Cancelling a completed future keeps its result.
  PsFuture<void> done = Push();
  ASSERT_TRUE(done.WaitFor(absl::Seconds(30)));
  done.Cancel();
  EXPECT_TRUE(done.Get().ok());
}

TEST_F(GatedPsTest, ADroppedConnectionFailsEveryCallInFlightAsUnreachable) {
  constexpr int kCalls = 16;
  std::vector<PsFuture<void>> futures;
  for (int i = 0; i < kCalls; ++i) futures.push_back(Push());
  AwaitArrived(2);
  rpc_->Disconnect();
  for (auto& f : futures) {
    absl::Status s = f.Get();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_TRUE(IsPsUnreachable(s));
    EXPECT_NE(s.message().find("ps 0 ("), std::string::npos) << s;
  }
  Release();
  // The next call reconnects.
  EXPECT_TRUE(Push().Get().ok());
}

TEST_F(GatedPsTest, StepContextCountsAnUnreachablePsWhenTheAsyncResultArrives) {
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  StepContext ctx(0, {}, *client_, cancelled);
  PsFuture<void> push = ctx.PushGradientsAsync({{"v", Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}});
  AwaitArrived(1);
  EXPECT_FALSE(ctx.ps_unreachable());
  rpc_->Disconnect();
  EXPECT_TRUE(IsPsUnreachable(push.Get()));
  EXPECT_TRUE(ctx.ps_unreachable());
}

TEST_F(GatedPsTest, DestroyingTheRpcClientCancelsCallsInFlight) {
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 4; ++i) {
    client_->PushGradientsAsync({{"v", Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}},
                                [&cancelled](absl::Status s) {
                                  if (s.code() == absl::StatusCode::kCancelled) ++cancelled;
                                });
  }
  AwaitArrived(2);
  client_.reset();  // calls in flight do not need the PsClient
  rpc_.reset();     // fails every pending call before returning
  EXPECT_EQ(cancelled.load(), 4);
}

}  // namespace
}  // namespace ps_client_test_internal
}  // namespace asyncps
