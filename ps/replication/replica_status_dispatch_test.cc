// ps.ReplicaStatus, the chief's heartbeat for a PS (coordinator/ps_monitor.cc), is answered on
// the PS's I/O thread (net::Dispatch::kInline), so a PS whose every pool thread is busy still
// answers it: here each pool thread is held inside a test method until the test releases it,
// and a write (ps.CreateVariable, always pooled) waits behind them. Were the heartbeat pooled,
// it would wait there too and the call would end at its deadline instead.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "core/sync.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/ps_wire.h"
#include "ps/replication/replicated_ps.h"
#include "ps/shard_initializer.h"
#include "ps/variable_store.h"

namespace asyncps::ps {
namespace replica_status_dispatch_test_internal {
namespace {

constexpr char kToken[] = "replica-status-dispatch-test";
constexpr int kPoolThreads = 2;
// A bound on a failing run only: a call that answers at all answers at once.
constexpr absl::Duration kDeadline = absl::Seconds(30);

// One PS wired as ps_server wires it (PsService, then ReplicatedPs over it; no shard map, so no
// copies and no streams), on an RpcServer with kPoolThreads pool threads, plus the test method
// "test.HoldPoolThread" (pooled): it holds its pool thread until Release().
class ReplicaStatusDispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    replicated_ = std::make_unique<ReplicatedPs>(service_, ReplicatedPs::Options());
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.token = kToken;
    server_options.handler_threads = kPoolThreads;
    server_ = std::make_unique<net::RpcServer>(server_loop_, server_options);
    service_.RegisterWith(server_->methods());
    replicated_->RegisterWith(server_->methods());
    server_->Register<wire::Empty>(
        "test.HoldPoolThread", net::PsCallers(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* response) {
          response->InitResponseBody<wire::Empty>();
          MutexLock lock(&mu_);
          ++held_;
          mu_.Await(absl::Condition(&released_));
          return absl::OkStatus();
        },
        net::Dispatch::kPool);
    ASSERT_TRUE(server_->Start().ok());
    worker_ = Client("worker");
    chief_ = Client("chief");
  }

  void TearDown() override {
    Release();
    chief_.reset();
    worker_.reset();
    server_.reset();  // waits for the handlers still running
    replicated_.reset();
  }

  std::unique_ptr<net::RpcClient> Client(const std::string& role) {
    net::RpcClient::Options options;
    options.address = "127.0.0.1:" + std::to_string(server_->port());
    options.role = role;
    options.token = kToken;
    return std::make_unique<net::RpcClient>(client_loop_, options);
  }

  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
  }

  // Waits (with a deadline) until `*count` reaches `n`.
  bool AwaitCount(int* count, int n) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    std::pair<int*, int> want(count, n);
    return mu_.AwaitWithTimeout(
        absl::Condition(+[](std::pair<int*, int>* w) { return *w->first >= w->second; }, &want), kDeadline);
  }

  // ps.CreateVariable of a 4-float "w" (zeros, no optimizer).
  static net::OutMessage CreateRequest() {
    net::OutMessage request;
    auto body = request.InitRequestBody<wire::CreateVariableRequest>();
    body.setName("w");
    body.setDtype(static_cast<uint8_t>(DType::kF32));
    body.initShape(1).set(0, 4);
    InitializerToWire(InitializerSpec(), request, body.initInitializer());
    OptimizerToWire(nullptr, body.initOptimizer());
    return request;
  }

  VariableStore store_;
  PsService service_{store_};
  net::EventLoop server_loop_;
  net::EventLoop client_loop_;
  std::unique_ptr<ReplicatedPs> replicated_;
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> worker_;
  std::unique_ptr<net::RpcClient> chief_;

  Mutex mu_;
  int held_ ABSL_GUARDED_BY(mu_) = 0;   // pool threads inside test.HoldPoolThread
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  int answered_ ABSL_GUARDED_BY(mu_) = 0;  // calls of the worker's that completed
  absl::Status create_status_ ABSL_GUARDED_BY(mu_);
  bool create_done_ ABSL_GUARDED_BY(mu_) = false;
};

TEST_F(ReplicaStatusDispatchTest, AnsweredWhileEveryPoolThreadIsHeldAndAWriteIsQueued) {
  auto count_answer = [this](absl::StatusOr<net::InMessage> r) {
    EXPECT_TRUE(r.ok()) << r.status();
    MutexLock lock(&mu_);
    ++answered_;
  };
  for (int i = 0; i < kPoolThreads; ++i) {
    worker_->CallAsync("test.HoldPoolThread", net::OutMessage(), absl::InfiniteDuration(), count_answer);
  }
  ASSERT_TRUE(AwaitCount(&held_, kPoolThreads)) << "the pool threads were not all held";
  // A pooled write, queued behind the held threads.
  worker_->CallAsync("ps.CreateVariable", CreateRequest(), absl::InfiniteDuration(),
                     [this](absl::StatusOr<net::InMessage> r) {
                       MutexLock lock(&mu_);
                       create_status_ = r.status();
                       create_done_ = true;
                     });

  absl::StatusOr<net::InMessage> status = chief_->Call("ps.ReplicaStatus", net::OutMessage(), kDeadline);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->ResponseBody<wire::ReplicaStatusResponse>().getMapGeneration(), 0u);  // no map held
  {
    // The pool was busy throughout: its threads are still held (only Release() frees them),
    // so the write behind them has not run.
    MutexLock lock(&mu_);
    EXPECT_EQ(held_, kPoolThreads);
    EXPECT_EQ(answered_, 0);
    EXPECT_FALSE(create_done_);
  }

  // Once the pool is free, what waited runs.
  Release();
  ASSERT_TRUE(AwaitCount(&answered_, kPoolThreads));
  MutexLock lock(&mu_);
  ASSERT_TRUE(mu_.AwaitWithTimeout(absl::Condition(&create_done_), kDeadline));
  EXPECT_TRUE(create_status_.ok()) << create_status_;
}

}  // namespace
}  // namespace replica_status_dispatch_test_internal
}  // namespace asyncps::ps
