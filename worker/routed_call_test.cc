#include "worker/routed_call.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps.capnp.h"
#include "ps/replication/shard_map.h"
#include "worker/ps_client.h"
#include "worker/shard_map_cache.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace routed_call_test_internal {
namespace {

constexpr char kToken[] = "routed-call-test";

// Group 0 at generation 1 on ps 0; at generation 2 on ps 1 (ps 0 failed over).
ps::ShardMap MapAt(uint64_t generation) {
  ps::ShardMap map;
  map.replicas = 2;
  map.generation = generation;
  ps::GroupEntry g;
  g.group = 0;
  g.generation = generation;
  g.primary = generation == 1 ? 0 : 1;
  if (generation == 1) g.backups = {1};
  map.groups.push_back(g);
  ps::GroupEntry g1;
  g1.group = 1;
  g1.generation = 1;
  g1.primary = 1;
  map.groups.push_back(g1);
  return map;
}

// Two fake PS that hold the map at generation 2: ps 0 refuses every routed read as a stale
// shard map (it was the primary at generation 1), ps 1 answers reads routed at generation 2
// with a one-element tensor and refuses others. Both answer ps.GetShardMap.
class RoutedCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      net::RpcServer::Options o;
      o.role = "ps";
      o.token = kToken;
      servers_.push_back(std::make_unique<net::RpcServer>(loop_, o));
      auto& methods = servers_.back()->methods();
      methods.Register<wire::Empty>("ps.GetShardMap", net::PsReaders(),
                                    [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* out) {
                                      ++map_fetches_;
                                      ps::ShardMapToWire(MapAt(2), out->InitResponseBody<wire::GetShardMapResponse>().initMap());
                                      return absl::OkStatus();
                                    });
      methods.Register<wire::ReadRequest>(
          "ps.Read", net::PsReaders(),
          [this, i](const net::RequestContext&, const net::InMessage& in, net::OutMessage* out) {
            auto route = in.RequestBody<wire::ReadRequest>().getRoute();
            reads_[i] += 1;
            if (i == 0 || route.getGeneration() != 2 || route.getGroup() != 0) {
              return ps::StaleShardMapError(route.getGroup(), route.getGeneration(), 2, 1);
            }
            auto tensors = out->InitResponseBody<wire::ReadResponse>().initTensors(1);
            out->AddTensor(Tensor::FromVector<float>({1}, {42.0f}), tensors[0]);
            return absl::OkStatus();
          });
      ASSERT_TRUE(servers_.back()->Start().ok());
      net::RpcClient::Options c;
      c.address = "127.0.0.1:" + std::to_string(servers_.back()->port());
      c.role = "worker";
      c.token = kToken;
      clients_.push_back(std::make_unique<net::RpcClient>(client_loop_, c));
    }
    std::vector<net::RpcClient*> ptrs = {clients_[0].get(), clients_[1].get()};
    cache_ = std::make_unique<ShardMapCache>(ptrs, ShardMapCache::Options());
    PsClient::Options options;
    options.timeout = absl::Seconds(20);
    options.shard_map = cache_.get();
    client_ = std::make_unique<PsClient>(ptrs, directory_, options);
    VariablePlacement p;
    p.name = "v";
    p.dtype = DType::kF32;
    p.shape = {1};
    p.shards.push_back({"v", 0, 0, 1});  // group 0
    directory_.Add(p);
  }

  void TearDown() override {
    client_.reset();
    cache_.reset();
    clients_.clear();
    servers_.clear();
  }

  net::EventLoop loop_;
  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<net::RpcServer>> servers_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::unique_ptr<ShardMapCache> cache_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
  std::atomic<int> map_fetches_{0};
  std::atomic<int> reads_[2] = {0, 0};
};

TEST_F(RoutedCallTest, StaleRefusalFetchesTheMapAndRetriesAtTheNewPrimary) {
  ASSERT_TRUE(cache_->Install(MapAt(1)));
  auto value = client_->Read({"v"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0].data<float>()[0], 42.0f);
  EXPECT_EQ(reads_[0], 1) << "the old primary was asked once";
  EXPECT_EQ(reads_[1], 1);
  EXPECT_GE(map_fetches_, 1);
  EXPECT_EQ(cache_->Lookup(0).primary, 1);
  EXPECT_EQ(cache_->Lookup(0).generation, 2u);
}

TEST_F(RoutedCallTest, WithoutAMapTheFirstCallFetchesOne) {
  EXPECT_EQ(cache_->Lookup(0).generation, 0u);
  auto value = client_->Read({"v"});
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(reads_[0], 0) << "nothing sent before a map was known";
  EXPECT_EQ(reads_[1], 1);
}

TEST_F(RoutedCallTest, OlderMapIsNotInstalled) {
  ASSERT_TRUE(cache_->Install(MapAt(2)));
  EXPECT_FALSE(cache_->Install(MapAt(1)));
  EXPECT_EQ(cache_->Lookup(0).primary, 1);
}

TEST_F(RoutedCallTest, RefusedUntilTheDeadlineReturnsTheRefusal) {
  // Only ps 0 is ever primary here, and it refuses: the call ends at its deadline with the
  // refusal, not before and not with something else.
  PsClient::Options options;
  // Long enough for two tries on a loaded 2-core machine (300 ms once left room for one, and
  // "tried again" failed); the call still ends at this deadline, whatever it is.
  options.timeout = absl::Seconds(2);
  ps::ShardMap stuck = MapAt(3);
  stuck.groups[0].primary = 0;
  stuck.groups[0].backups = {1};
  ASSERT_TRUE(cache_->Install(stuck));
  options.shard_map = cache_.get();
  PsClient client({clients_[0].get(), clients_[1].get()}, directory_, options);
  auto value = client.Read({"v"});
  EXPECT_TRUE(ps::IsStaleShardMap(value.status())) << value.status();
  EXPECT_GE(reads_[0], 2) << "it tried again before giving up";
}

// Two fake PS, each on a loop of its own. PS 0, group 0's primary at generation 1, goes silent
// once it has taken a request: its I/O thread holds that request until the test releases it,
// so nothing else sent to it is answered either (a partition, as a client sees one). PS 1
// answers ps.Read and ps.Update routed to it at generation 2, and ps.GetShardMap with
// generation 1 until the test fails group 0 over (FailOver), generation 2 after.
class SilentPrimaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      loops_.push_back(std::make_unique<net::EventLoop>());
      net::RpcServer::Options o;
      o.role = "ps";
      o.token = kToken;
      servers_.push_back(std::make_unique<net::RpcServer>(*loops_.back(), o));
      auto& methods = servers_.back()->methods();
      methods.Register<wire::Empty>(
          "ps.GetShardMap", net::PsReaders(),
          [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* out) {
            ps::ShardMapToWire(MapAt(failed_over_ ? 2 : 1), out->InitResponseBody<wire::GetShardMapResponse>().initMap());
            return absl::OkStatus();
          },
          net::Dispatch::kInline);
      auto answer = [this, i](uint32_t group, uint64_t generation) -> absl::Status {
        if (i == 0) {
          // Silent from here on: the loop thread waits, so PS 0 answers nothing else.
          ++taken_[0];
          MutexLock lock(&mu_);
          mu_.Await(absl::Condition(&released_));
          return absl::OkStatus();
        }
        ++taken_[1];
        if (generation != 2 || group != 0) return ps::StaleShardMapError(group, generation, 2, 1);
        return absl::OkStatus();
      };
      methods.Register<wire::ReadRequest>(
          "ps.Read", net::PsReaders(),
          [answer](const net::RequestContext&, const net::InMessage& in, net::OutMessage* out) {
            auto route = in.RequestBody<wire::ReadRequest>().getRoute();
            RETURN_IF_ERROR(answer(route.getGroup(), route.getGeneration()));
            auto tensors = out->InitResponseBody<wire::ReadResponse>().initTensors(1);
            out->AddTensor(Tensor::FromVector<float>({1}, {42.0f}), tensors[0]);
            return absl::OkStatus();
          },
          net::Dispatch::kInline);
      methods.Register<wire::UpdateRequest>(
          "ps.Update", net::PsCallers(),
          [answer](const net::RequestContext&, const net::InMessage& in, net::OutMessage* out) {
            auto route = in.RequestBody<wire::UpdateRequest>().getRoute();
            RETURN_IF_ERROR(answer(route.getGroup(), route.getGeneration()));
            out->InitResponseBody<wire::UpdateResponse>();
            return absl::OkStatus();
          },
          net::Dispatch::kInline);
      ASSERT_TRUE(servers_.back()->Start().ok());
      net::RpcClient::Options c;
      c.address = "127.0.0.1:" + std::to_string(servers_.back()->port());
      c.role = "worker";
      c.token = kToken;
      clients_.push_back(std::make_unique<net::RpcClient>(client_loop_, c));
    }
    std::vector<net::RpcClient*> ptrs = {clients_[0].get(), clients_[1].get()};
    ShardMapCache::Options cache_options;
    cache_options.watch_after = absl::Milliseconds(100);
    cache_options.poll_interval = absl::Milliseconds(20);
    cache_options.fetch_timeout = absl::Milliseconds(500);
    cache_ = std::make_unique<ShardMapCache>(ptrs, cache_options);
    ASSERT_TRUE(cache_->Install(MapAt(1)));
    PsClient::Options options;
    // Far beyond the test's own waits: a call still held by the silent PS when the test gives
    // up on it has not been moved.
    options.timeout = absl::Seconds(120);
    options.shard_map = cache_.get();
    client_ = std::make_unique<PsClient>(ptrs, directory_, options);
    VariablePlacement p;
    p.name = "v";
    p.dtype = DType::kF32;
    p.shape = {1};
    p.shards.push_back({"v", 0, 0, 1});  // group 0
    directory_.Add(p);
  }

  void TearDown() override {
    Release();
    client_.reset();
    cache_.reset();
    clients_.clear();
    servers_.clear();
    loops_.clear();
  }

  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
  }

  // Waits (with a deadline) until PS 0 holds a request.
  bool AwaitSilence() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (taken_[0] == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));  // polling
    return taken_[0] > 0;
  }

  static std::vector<VariableUpdate> AddOne() {
    return {{"v", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1.0f}), std::nullopt}};
  }

  std::vector<std::unique_ptr<net::EventLoop>> loops_;
  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<net::RpcServer>> servers_;
  std::vector<std::unique_ptr<net::RpcClient>> clients_;
  std::unique_ptr<ShardMapCache> cache_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
  std::atomic<bool> failed_over_{false};
  std::atomic<int> taken_[2] = {0, 0};
  Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

// A read held by a silent primary: once the group fails over (learned by fetching the map from
// the PS that answers, while the silent one's fetch waits), the read goes to the new primary
// and is answered there, long before its own deadline; the silent PS is not asked again.
TEST_F(SilentPrimaryTest, ReadHeldByASilentPrimaryMovesToTheNewPrimary) {
  PsFuture<std::vector<Tensor>> read = client_->ReadAsync({"v"});
  ASSERT_TRUE(AwaitSilence());
  failed_over_ = true;
  ASSERT_TRUE(read.WaitFor(absl::Seconds(60))) << "still waiting on the silent primary";
  absl::StatusOr<std::vector<Tensor>> value = read.Get();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ((*value)[0].data<float>()[0], 42.0f);
  EXPECT_EQ(taken_[0], 1);
  EXPECT_EQ(taken_[1], 1);
  EXPECT_EQ(cache_->moved(), 1);
  EXPECT_EQ(cache_->Lookup(0).primary, 1);
}

// A tagged write (a closure's) held by a silent primary is sent to the new primary once the map
// moves: its dedup window applies it once even if the old primary had applied it too.
TEST_F(SilentPrimaryTest, TaggedWriteHeldByASilentPrimaryIsSentToTheNewPrimary) {
  PsFuture<void> update = client_->UpdateAsync(AddOne(), ps::UpdateTag{7, 9, 1, 7});
  ASSERT_TRUE(AwaitSilence());
  failed_over_ = true;
  ASSERT_TRUE(cache_->Install(MapAt(2)));  // as the chief's own cache learns it
  ASSERT_TRUE(update.WaitFor(absl::Seconds(60))) << "still waiting on the silent primary";
  const absl::Status status = update.Get();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(taken_[1], 1);
  EXPECT_EQ(cache_->moved(), 1);
}

// An untagged write may have been applied by the primary that holds it: it is not sent anywhere
// else when the group moves, and its answer is the one that primary gives.
TEST_F(SilentPrimaryTest, UntaggedWriteIsNotResentWhenTheGroupMoves) {
  PsFuture<void> update = client_->UpdateAsync(AddOne());
  ASSERT_TRUE(AwaitSilence());
  failed_over_ = true;
  ASSERT_TRUE(cache_->Install(MapAt(2)));
  EXPECT_FALSE(update.WaitFor(absl::Milliseconds(300))) << "answered without its primary";
  Release();
  ASSERT_TRUE(update.WaitFor(absl::Seconds(60)));
  const absl::Status status = update.Get();
  EXPECT_TRUE(status.ok()) << "the silent primary's own answer: " << status;
  EXPECT_EQ(taken_[1], 0) << "never sent to the new primary";
  EXPECT_EQ(cache_->moved(), 0);
}

// A try answered before anything moves leaves no watch behind: a later failover calls nothing.
TEST_F(SilentPrimaryTest, AnsweredTryLeavesNoWatch) {
  ASSERT_TRUE(cache_->Install(MapAt(2)));
  ASSERT_TRUE(client_->Read({"v"}).ok());
  ASSERT_EQ(taken_[1], 1);
  ps::ShardMap back = MapAt(3);
  back.groups[0].primary = 1;
  back.groups[0].backups = {0};
  ASSERT_TRUE(cache_->Install(back));
  EXPECT_EQ(cache_->moved(), 0);
}

TEST(CopyOutMessageTest, CopyKeepsEnvelopeAndPayloads) {
  net::OutMessage m;
  auto body = m.InitRequestBody<wire::ReadResponse>();
  auto tensors = body.initTensors(2);
  m.AddTensor(Tensor::FromVector<float>({1}, {1.0f}), tensors[0]);
  m.AddTensor(Tensor::FromVector<float>({2}, {2.0f, 3.0f}), tensors[1]);
  net::OutMessage copy = CopyOutMessage(m);
  ASSERT_EQ(copy.payloads().size(), 2u);
  EXPECT_EQ(copy.payloads()[1].data<float>()[1], 3.0f);
  auto copied = copy.envelope().getRequest().getBody().getAs<wire::ReadResponse>().getTensors();
  ASSERT_EQ(copied.size(), 2u);
  EXPECT_EQ(copied[1].getPayload(), 1u);
  EXPECT_EQ(copied[1].getShape()[0], 2);
}

}  // namespace
}  // namespace routed_call_test_internal
}  // namespace asyncps
