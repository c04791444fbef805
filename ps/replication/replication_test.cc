#include <atomic>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/optimizer_config.h"
#include "core/test_temp_dir.h"
#include "ps/checkpoint_wire.h"
#include "ps/ps_wire.h"
#include "ps/read_wire_testing.h"
#include "ps/replication/backup_stream.h"
#include "ps/replication/local_ps_cluster_testing.h"
#include "ps/replication/logged_write.h"

namespace asyncps::ps {
namespace {

using ::testing::HasSubstr;

wire::Route::Builder SetRoute(wire::Route::Builder r, uint32_t group, uint64_t generation) {
  r.setGroup(group);
  r.setGeneration(generation);
  return r;
}

net::OutMessage CreateRequest(const std::string& name, const Shape& shape, const OptimizerConfig* optimizer,
                              uint32_t group, uint64_t generation) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::CreateVariableRequest>();
  body.setName(name);
  body.setDtype(static_cast<uint8_t>(DType::kF32));
  net::SetShape(body.initShape(static_cast<unsigned>(shape.size())), shape);
  InitializerSpec init;
  init.kind = "uniform";
  init.minval = -1;
  init.maxval = 1;
  init.seed = 7;
  init.full_shape = shape;
  InitializerToWire(init, req, body.initInitializer());
  OptimizerToWire(optimizer, body.initOptimizer());
  if (generation != 0) SetRoute(body.initRoute(), group, generation);
  return req;
}

// A push of `gradient` to `name` (rows `ids` when given), tagged by `closure` when non-zero.
// With `bf16`, the gradient travels narrowed to bf16 (reduced-precision transport).
net::OutMessage PushRequest(const std::string& name, const Tensor& gradient, const std::optional<Tensor>& ids,
                            uint64_t closure, uint32_t group, uint64_t generation, bool bf16 = false) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::PushGradientsRequest>();
  if (closure != 0) {
    UpdateTag tag;
    tag.coordinator = 1;
    tag.closure = closure;
    tag.sequence = 1;
    tag.watermark = 1;
    UpdateTagToWire(tag, body.initTag());
  }
  auto g = body.initGradients(1)[0];
  g.setName(name);
  if (bf16) {
    req.AddTensorAsBf16(gradient, g.initValue());
  } else {
    req.AddTensor(gradient, g.initValue());
  }
  if (ids) {
    g.setHasIds(true);
    req.AddTensor(*ids, g.initIds());
  }
  if (generation != 0) SetRoute(body.initRoute(), group, generation);
  return req;
}

Tensor Filled(const Shape& shape, float start) {
  Tensor t(DType::kF32, shape);
  auto f = t.flat<float>();
  for (size_t i = 0; i < f.size(); ++i) f[i] = start + 0.001f * static_cast<float>(i % 97);
  return t;
}

// Every byte a copy holds: each variable's value, slots and step counter, and its update window.
std::string CopyBytes(const GroupCopy& copy) {
  std::string out;
  auto vars = copy.state.store->List();
  std::sort(vars.begin(), vars.end(), [](const auto& a, const auto& b) { return a->name() < b->name(); });
  for (const auto& v : vars) {
    Variable::State s = v->CheckpointState();
    out += v->name() + ":" + std::to_string(s.iterations) + ":" + std::to_string(v->restores()) + ":";
    out.append(static_cast<const char*>(s.value.raw_data()), s.value.num_bytes());
    for (const Tensor& slot : s.slots) out.append(static_cast<const char*>(slot.raw_data()), slot.num_bytes());
  }
  auto spaces = copy.state.dedup->Export();
  std::sort(spaces.begin(), spaces.end(), [](const auto& a, const auto& b) { return a.coordinator < b.coordinator; });
  for (const auto& s : spaces) {
    out += "|" + std::to_string(s.coordinator) + "@" + std::to_string(s.watermark);
    for (const auto& k : s.keys) out += "," + std::to_string(k.closure) + "/" + std::to_string(k.sequence);
  }
  return out;
}

std::string CopyBytes(LocalPsCluster& c, int ps, uint32_t group) {
  auto copy = c.replicated(ps).CopyOf(group);
  return copy == nullptr ? "<no copy>" : CopyBytes(*copy);
}

// Whether PS `a` and `b` hold the same bytes for `group` (a short failure message: the bytes
// themselves are too long to print).
::testing::AssertionResult SameCopies(LocalPsCluster& c, int a, int b, uint32_t group) {
  const std::string x = CopyBytes(c, a, group);
  const std::string y = CopyBytes(c, b, group);
  if (x == y) return ::testing::AssertionSuccess();
  size_t at = 0;
  while (at < x.size() && at < y.size() && x[at] == y[at]) ++at;
  return ::testing::AssertionFailure() << "copies of group " << group << " on ps " << a << " and " << b
                                       << " differ: " << x.size() << " vs " << y.size() << " bytes, first at "
                                       << at << " (after '" << x.substr(at > 16 ? at - 16 : 0, 16) << "')";
}

CopyRole RoleOf(LocalPsCluster& c, int ps, uint32_t group) {
  auto copy = c.replicated(ps).CopyOf(group);
  if (copy == nullptr) return CopyRole::kNeedsRebuild;
  MutexLock lock(&copy->mu);
  return copy->role;
}

absl::StatusOr<wire::ReplicaStatusResponse::Reader> Status(LocalPsCluster& c, int ps, net::InMessage* holder) {
  net::OutMessage req;
  req.InitRequestBody<wire::Empty>();
  auto resp = c.Call(ps, "chief", "ps.ReplicaStatus", std::move(req));
  if (!resp.ok()) return resp.status();
  *holder = *std::move(resp);
  return holder->ResponseBody<wire::ReplicaStatusResponse>();
}

// Waits (up to a minute) until `pred` holds, polling.
template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

class ReplicationTest : public ::testing::Test {
 protected:
  void Start(int num_ps, int k, ReplicatedPs::Options options = ReplicatedPs::Options()) {
    options.replicas = 2;
    cluster_ = std::make_unique<LocalPsCluster>(num_ps, options);
    ASSERT_TRUE(cluster_->started());
    if (k > 0) {
      auto map = ShardMap::Initial(num_ps, k);
      ASSERT_TRUE(map.ok());
      map_ = *map;
      ASSERT_TRUE(cluster_->SetMapEverywhere(map_).ok());
    }
  }

  absl::Status CreateAdam(int ps, const std::string& name, const Shape& shape, uint32_t group, uint64_t gen) {
    OptimizerConfig adam = opt::Adam(0.01f);
    return cluster_->Call(ps, "chief", "ps.CreateVariable", CreateRequest(name, shape, &adam, group, gen)).status();
  }

  absl::StatusOr<uint32_t> Push(int ps, const std::string& name, const Tensor& g, std::optional<Tensor> ids,
                                uint64_t closure, uint32_t group, uint64_t gen) {
    auto resp = cluster_->Call(ps, "worker", "ps.PushGradients", PushRequest(name, g, ids, closure, group, gen));
    if (!resp.ok()) return resp.status();
    return resp->ResponseBody<wire::UpdateResponse>().getAlreadyApplied();
  }

  std::unique_ptr<LocalPsCluster> cluster_;
  ShardMap map_;
};

TEST_F(ReplicationTest, WriteIsOnTheBackupBeforeItIsAcked) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "dense", {64, 8}, 0, 1).ok());
  ASSERT_TRUE(CreateAdam(0, "table", {1000, 4}, 0, 1).ok());
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
  for (uint64_t closure = 1; closure <= 20; ++closure) {
    auto dense = Push(0, "dense", Filled({64, 8}, 0.1f * closure), std::nullopt, closure, 0, 1);
    ASSERT_TRUE(dense.ok()) << dense.status();
    Tensor ids = Tensor::FromVector<int64_t>({3}, {static_cast<int64_t>(closure), 999, 5});
    auto sparse = Push(0, "table", Filled({3, 4}, 1.0f), ids, closure + 100, 0, 1);
    ASSERT_TRUE(sparse.ok()) << sparse.status();
    // Acknowledged: the backup applied it, so every byte already matches.
    ASSERT_TRUE(SameCopies(*cluster_, 0, 1, 0)) << "after closure " << closure;
  }
  EXPECT_THAT(CopyBytes(*cluster_, 1, 0), HasSubstr("|1@1,1/1"));
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup);
}

// A bf16 gradient (reduced-precision transport) is forwarded as it came and widened alike on
// every copy: dense and by row, the copies stay identical.
TEST_F(ReplicationTest, Bf16PushesAreReplicatedAsSent) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "dense", {64, 8}, 0, 1).ok());
  ASSERT_TRUE(CreateAdam(0, "table", {1000, 4}, 0, 1).ok());
  for (uint64_t closure = 1; closure <= 5; ++closure) {
    auto dense = cluster_->Call(0, "worker", "ps.PushGradients",
                                PushRequest("dense", Filled({64, 8}, 0.1f * closure), std::nullopt, closure, 0, 1,
                                            /*bf16=*/true));
    ASSERT_TRUE(dense.ok()) << dense.status();
    Tensor ids = Tensor::FromVector<int64_t>({3}, {static_cast<int64_t>(closure), 999, 5});
    auto sparse = cluster_->Call(0, "worker", "ps.PushGradients",
                                 PushRequest("table", Filled({3, 4}, 1.0f), ids, closure + 100, 0, 1, /*bf16=*/true));
    ASSERT_TRUE(sparse.ok()) << sparse.status();
    ASSERT_TRUE(SameCopies(*cluster_, 0, 1, 0)) << "after closure " << closure;
  }
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup) << "the stream was taken";
}

// A write the backup does not acknowledge is answered Unavailable at the write deadline (the
// primary's answers are deferred, not waited for on a thread), applied on the primary; once
// the backup takes the stream again, the retried tagged write is applied once everywhere.
TEST_F(ReplicationTest, UnacknowledgedWriteIsAnsweredUnavailableAtItsDeadline) {
  ReplicatedPs::Options options;
  options.write_timeout = absl::Milliseconds(300);
  Start(2, 2, options);
  ASSERT_TRUE(CreateAdam(0, "dense", {8, 4}, 0, 1).ok());
  // Generation 2 reaches only the primary: the backup answers its stream "not yet", so the
  // primary keeps resending and nothing is acknowledged.
  ShardMap next = map_;
  next.generation = 2;
  for (auto& g : next.groups) g.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(0, next).ok());
  auto stalled = Push(0, "dense", Filled({8, 4}, 0.5f), std::nullopt, 7, 0, 2);
  ASSERT_FALSE(stalled.ok());
  EXPECT_EQ(stalled.status().code(), absl::StatusCode::kUnavailable) << stalled.status();
  EXPECT_THAT(stalled.status().message(), HasSubstr("not acknowledged in time by ps 1"));
  // A second write queues behind it, and is refused the same way.
  auto second = Push(0, "dense", Filled({8, 4}, 0.25f), std::nullopt, 8, 0, 2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  ASSERT_TRUE(cluster_->SetMap(1, next).ok());
  auto retried = Push(0, "dense", Filled({8, 4}, 0.5f), std::nullopt, 7, 0, 2);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, 1u);  // applied once, before the deadline answer
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
}

// PS 0's stream to PS 1 in group 0, as PS 0's ReplicaStatus lists it (all false and 0 when it
// lists none, or does not answer).
struct StreamView {
  bool in_sync = false;
  bool needs_rebuild = false;
  uint64_t transfer_bytes = 0;
};
StreamView StreamFromPs0ToPs1(LocalPsCluster& c) {
  net::InMessage holder;
  auto status = Status(c, 0, &holder);
  if (!status.ok()) return {};
  for (auto copy : status->getCopies()) {
    for (auto b : copy.getBackups()) {
      if (copy.getGroup() == 0 && b.getPs() == 1) {
        return {b.getInSync(), b.getNeedsRebuild(), b.getTransferBytesTotal()};
      }
    }
  }
  return {};
}

// The backup's view of its stream: (in sync, needs rebuild).
std::pair<bool, bool> StreamToPs1(LocalPsCluster& c) {
  const StreamView s = StreamFromPs0ToPs1(c);
  return {s.in_sync, s.needs_rebuild};
}

// Pushes are forwarded before the primary applies them (ForwardsBeforeApply): one the primary
// refuses is refused by the backup alike, answered with the primary's refusal, and costs no
// rebuild; the stream goes on.
TEST_F(ReplicationTest, RefusedPushIsRefusedOnEveryCopyWithoutARebuild) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {8, 4}, 0, 1).ok());
  ASSERT_TRUE(Push(0, "v", Filled({8, 4}, 0.5f), std::nullopt, 1, 0, 1).ok());
  auto wrong_shape = Push(0, "v", Filled({3}, 0.5f), std::nullopt, 2, 0, 1);
  ASSERT_FALSE(wrong_shape.ok());
  EXPECT_EQ(wrong_shape.status().code(), absl::StatusCode::kInvalidArgument) << wrong_shape.status();
  auto unknown = Push(0, "nope", Filled({8, 4}, 0.5f), std::nullopt, 3, 0, 1);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup);
  auto after = Push(0, "v", Filled({8, 4}, 0.25f), std::nullopt, 4, 0, 1);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(StreamToPs1(*cluster_), std::make_pair(true, false));
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
}

// Hostile writes in a replicated group (the push forwarded before the primary applies it): a
// baseVersion below -1, bf16 ids, a bf16 ps.Update, a bf16 gradient with NaN, and a bf16
// payload of the wrong size are each refused with InvalidArgument, on every copy alike, and cost
// no rebuild: the copies stay identical and the stream goes on.
TEST_F(ReplicationTest, HostileBf16AndVersionWritesAreRefusedOnEveryCopyWithoutARebuild) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {8, 4}, 0, 1).ok());
  ASSERT_TRUE(Push(0, "v", Filled({8, 4}, 0.5f), std::nullopt, 1, 0, 1).ok());
  const std::string before = CopyBytes(*cluster_, 0, 0);
  std::vector<std::pair<std::string, net::OutMessage>> hostile;
  {
    net::OutMessage req = PushRequest("v", Filled({8, 4}, 0.5f), std::nullopt, 2, 0, 1, /*bf16=*/true);
    req.envelope().getRequest().getBody().getAs<wire::PushGradientsRequest>().getGradients()[0].setBaseVersion(-7);
    hostile.emplace_back("ps.PushGradients", std::move(req));
  }
  {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    SetRoute(body.initRoute(), 0, 1);
    auto g = body.initGradients(1)[0];
    g.setName("v");
    g.setHasIds(true);
    req.AddTensorAsBf16(Filled({1, 4}, 1.0f), g.initValue());
    req.AddTensorAsBf16(Tensor::FromVector<float>({1}, {2}), g.initIds());
    hostile.emplace_back("ps.PushGradients", std::move(req));
  }
  {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::UpdateRequest>();
    SetRoute(body.initRoute(), 0, 1);
    auto u = body.initUpdates(1)[0];
    u.setName("v");
    u.setKind(wire::UpdateKind::ASSIGN);
    req.AddTensorAsBf16(Filled({8, 4}, 3.0f), u.initValue());
    hostile.emplace_back("ps.Update", std::move(req));
  }
  {
    Tensor nan = Filled({8, 4}, 0.5f);
    nan.data<float>()[17] = std::numeric_limits<float>::quiet_NaN();
    hostile.emplace_back("ps.PushGradients", PushRequest("v", nan, std::nullopt, 3, 0, 1, /*bf16=*/true));
  }
  {
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::PushGradientsRequest>();
    SetRoute(body.initRoute(), 0, 1);
    auto g = body.initGradients(1)[0];
    g.setName("v");
    req.AddBf16(Tensor::FromVector<uint8_t>({63}, std::vector<uint8_t>(63, 0x3f)), {8, 4}, g.initValue());
    hostile.emplace_back("ps.PushGradients", std::move(req));
  }
  for (auto& [method, req] : hostile) {
    auto resp = cluster_->Call(0, "worker", method, std::move(req));
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << resp.status();
    EXPECT_EQ(CopyBytes(*cluster_, 0, 0), before) << resp.status();
  }
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup);
  ASSERT_TRUE(Push(0, "v", Filled({8, 4}, 0.25f), std::nullopt, 4, 0, 1).ok());
  EXPECT_NE(CopyBytes(*cluster_, 0, 0), before);
  EXPECT_EQ(StreamToPs1(*cluster_), std::make_pair(true, false));
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
}

// A push the primary applies but its backup refuses shows copies that diverged: the stream
// stops (the backup needs a rebuild) and the write is never acknowledged.
TEST_F(ReplicationTest, PushAppliedOnlyAtThePrimaryStopsTheStream) {
  ReplicatedPs::Options options;
  options.write_timeout = absl::Milliseconds(300);
  Start(2, 2, options);
  ASSERT_TRUE(CreateAdam(0, "v", {8, 4}, 0, 1).ok());
  // A variable only the primary's copy holds (what no request can make): the copies differ.
  OptimizerConfig adam = opt::Adam(0.01f);
  auto only_here = Variable::Create("only_here", Tensor(DType::kF32, {4}), &adam);
  ASSERT_TRUE(only_here.ok());
  ASSERT_TRUE(cluster_->replicated(0).CopyOf(0)->state.store->Insert(*std::move(only_here)).ok());
  auto diverged = Push(0, "only_here", Filled({4}, 0.5f), std::nullopt, 1, 0, 1);
  ASSERT_FALSE(diverged.ok());
  EXPECT_EQ(diverged.status().code(), absl::StatusCode::kUnavailable) << diverged.status();
  EXPECT_TRUE(Eventually([&] { return StreamToPs1(*cluster_).second; }));
}

// The copies' windows of applied updates disagree (what a window received in a state transfer
// with keys its copy never computes did: every repeat of an update applied before the transfer
// was skipped by the primary and applied by the copy): the stream compares each write's
// "already applied" count, stops at the first difference, and the copy needs a rebuild. Both
// ways: a key only the backup holds, and one only the primary holds.
TEST_F(ReplicationTest, CopiesWhoseWindowsDecideARepeatDifferentlyStopTheStream) {
  for (int planted_on : {1, 0}) {
    SCOPED_TRACE(planted_on == 1 ? "key only on the backup" : "key only on the primary");
    ReplicatedPs::Options options;
    options.write_timeout = absl::Milliseconds(300);
    Start(2, 2, options);
    ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());
    ASSERT_TRUE(Push(0, "v", Filled({4}, 0.5f), std::nullopt, 1, 0, 1).ok());
    ASSERT_EQ(StreamToPs1(*cluster_), std::make_pair(true, false));
    // Closure 5's push to "v", recorded as applied in one copy's window only.
    UpdateDedup& window = *cluster_->replicated(planted_on).CopyOf(0)->state.dedup;
    std::vector<UpdateDedup::ExportedSpace> spaces = window.Export();
    ASSERT_EQ(spaces.size(), 1u);
    spaces[0].keys.push_back({5, 1, UpdateDedup::VariableKey("v", 0)});
    window.Import(spaces);
    auto pushed = Push(0, "v", Filled({4}, 0.5f), std::nullopt, 5, 0, 1);
    EXPECT_FALSE(pushed.ok()) << "acknowledged by copies that hold different values";
    EXPECT_TRUE(Eventually([&] { return StreamToPs1(*cluster_).second; })) << "the stream did not stop";
    EXPECT_FALSE(StreamToPs1(*cluster_).first);
    cluster_.reset();
  }
}

// Writers on several connections at once: batches go out while earlier ones are acknowledged
// (the stream's fast path), every write is acknowledged once, and the copies end identical.
TEST_F(ReplicationTest, ConcurrentWritersAreEachAcknowledgedAndCopiesAgree) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {16}, 0, 1).ok());
  constexpr int kThreads = 4;
  constexpr int kPushes = 150;
  std::atomic<int> failed{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([this, t, &failed] {
      // A connection of its own (a role per thread), so that writes overlap on the primary.
      const std::string role = t % 2 == 0 ? "worker" : "chief";
      net::RpcClient::Options co;
      co.address = "127.0.0.1:" + std::to_string(cluster_->port(0));
      co.role = role;
      co.token = LocalPsCluster::kToken;
      net::EventLoop loop;
      net::RpcClient client(loop, co);
      for (int i = 0; i < kPushes; ++i) {
        const uint64_t closure = static_cast<uint64_t>(t * kPushes + i + 1);
        auto r = client.Call("ps.PushGradients", PushRequest("v", Filled({16}, 0.01f), std::nullopt, closure, 0, 1),
                             absl::Seconds(60));
        if (!r.ok() || r->ResponseBody<wire::UpdateResponse>().getAlreadyApplied() != 0) ++failed;
      }
    });
  }
  for (auto& w : writers) w.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
  EXPECT_EQ(StreamToPs1(*cluster_), std::make_pair(true, false));
}

TEST_F(ReplicationTest, UnroutedRequestsWithoutAMapServeAsBefore) {
  Start(2, 0);
  ASSERT_TRUE(CreateAdam(1, "v", {4}, 0, 0).ok());
  auto pushed = Push(1, "v", Filled({4}, 1), std::nullopt, 0, 0, 0);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  auto read = cluster_->Call(1, "worker", "ps.Read", ReadRequestFor({"v"}));
  ASSERT_TRUE(read.ok()) << read.status();
  // The default copy is the one PsService alone serves.
  EXPECT_EQ(cluster_->replicated(1).CopyOf(1)->state.store->List().size(), 1u);
  auto routed = Push(1, "v", Filled({4}, 1), std::nullopt, 0, 1, 1);
  EXPECT_TRUE(IsStaleShardMap(routed.status())) << routed.status();
}

TEST_F(ReplicationTest, RetriedTaggedPushAfterPromotionAppliesOnce) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {16}, 0, 1).ok());
  ASSERT_TRUE(Push(0, "v", Filled({16}, 1), std::nullopt, 7, 0, 1).ok());
  const std::string before = CopyBytes(*cluster_, 1, 0);
  // PS 0 is lost: its backup is promoted at generation 2.
  ShardMap promoted = map_;
  promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
  promoted.groups[1] = GroupEntry{1, 2, 1, {}, {}};
  promoted.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  auto retried = Push(1, "v", Filled({16}, 1), std::nullopt, 7, 0, 2);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, 1u);
  EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == before);
  auto fresh = Push(1, "v", Filled({16}, 1), std::nullopt, 8, 0, 2);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(*fresh, 0u);
  EXPECT_FALSE(CopyBytes(*cluster_, 1, 0) == before);
}

TEST_F(ReplicationTest, StaleGenerationIsRefusedWithTheExactText) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());
  ShardMap promoted = map_;
  promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
  promoted.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  auto stale = Push(1, "v", Filled({4}, 1), std::nullopt, 0, 0, 1);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.status().message(), "stale shard map: group 0 generation 1 sent, generation 2 held; primary is ps 1");
  // An older map is refused too.
  EXPECT_EQ(cluster_->SetMap(1, map_).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReplicationTest, StalledPrimaryIsFencedByItsBackup) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());
  ShardMap promoted = map_;
  promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
  promoted.generation = 2;
  // Only the backup learns the new map (PS 0 was stopped meanwhile).
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  const std::string promoted_bytes = CopyBytes(*cluster_, 1, 0);
  auto write = Push(0, "v", Filled({4}, 1), std::nullopt, 3, 0, 1);
  EXPECT_TRUE(IsStaleShardMap(write.status())) << write.status();
  EXPECT_EQ(RoleOf(*cluster_, 0, 0), CopyRole::kFenced);
  auto read = cluster_->Call(0, "worker", "ps.Read", ReadRequestFor({"v"}));
  EXPECT_TRUE(IsStaleShardMap(read.status())) << read.status();
  EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == promoted_bytes);
}

TEST_F(ReplicationTest, GapInTheStreamIsRefusedAndNeedsRebuild) {
  for (const uint64_t first : {uint64_t{5}, uint64_t{1}}) {  // a gap; a repeat (out of order)
    SCOPED_TRACE(first);
    Start(2, 2);
    ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());  // sequence 1 on both copies
    const std::string before = CopyBytes(*cluster_, 1, 0);
    net::OutMessage req;
    auto body = req.InitRequestBody<wire::ReplicateRequest>();
    body.setGroup(0);
    body.setGeneration(1);
    body.setFirstSequence(first);
    body.setFromPs(0);
    auto entry = body.initEntries(1)[0];
    entry.setMethod("ps.PushGradients");
    auto push = entry.getBody().initAs<wire::PushGradientsRequest>();
    auto g = push.initGradients(1)[0];
    g.setName("v");
    req.AddTensor(Filled({4}, 1), g.initValue());
    auto resp = cluster_->Call(1, "ps", "ps.Replicate", std::move(req));
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(resp.status().message(), HasSubstr(first == 5 ? "a gap" : "out of order"));
    EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kNeedsRebuild);
    EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == before);
    net::InMessage holder;
    auto status = Status(*cluster_, 1, &holder);
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->getCopies()[0].getRole(), wire::CopyRole::NEEDS_REBUILD);
  }
}

TEST_F(ReplicationTest, ShardMapAndStreamsOnlyFromTheirRoles) {
  Start(2, 0);
  auto map = *ShardMap::Initial(2, 2);
  EXPECT_EQ(cluster_->SetMap(0, map, "worker").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->SetMap(0, map, "ps").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->replicated(0).map().generation, 0u);
  net::OutMessage req;
  req.InitRequestBody<wire::ReplicateRequest>();
  EXPECT_EQ(cluster_->Call(0, "chief", "ps.Replicate", std::move(req)).status().code(),
            absl::StatusCode::kPermissionDenied);
  net::OutMessage bad;
  auto body = bad.InitRequestBody<wire::SetShardMapRequest>().initMap();
  body.setGeneration(1);
  body.setReplicas(2);
  body.initGroups(1)[0].setGroup(5);
  net::OutMessage get;
  get.InitRequestBody<wire::Empty>();
  EXPECT_EQ(cluster_->Call(0, "chief", "ps.SetShardMap", std::move(bad)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto got = cluster_->Call(0, "worker", "ps.GetShardMap", std::move(get));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->ResponseBody<wire::GetShardMapResponse>().getMap().getGeneration(), 0u);
}

TEST_F(ReplicationTest, TransferCutOffLeavesACopyThatNeverServes) {
  Start(2, 0);
  ShardMap map = *ShardMap::Initial(2, 2);
  map.groups[0].backups = {};
  map.groups[0].rebuilding = {1};
  map.groups[0].primary = 0;
  ASSERT_TRUE(cluster_->SetMap(1, map).ok());
  // The first chunk of a transfer arrives, then the primary is gone.
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::InstallStateRequest>();
  body.setGroup(0);
  body.setGeneration(1);
  body.setTransfer(42);
  body.setChunk(0);
  body.setSequence(9);
  body.setBytesTotal(4096);
  auto v = body.initVariables(1)[0];
  v.setName("v");
  v.setDtype(static_cast<uint8_t>(DType::kF32));
  net::SetShape(v.initShape(1), {8});
  OptimizerToWire(nullptr, v.initOptimizer());
  v.setRowBegin(0);
  req.AddTensor(Filled({4}, 1), v.initValue());
  ASSERT_TRUE(cluster_->Call(1, "ps", "ps.InstallState", std::move(req)).ok());
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kRebuilding);
  // Even made primary, a copy without the whole state serves nothing.
  ShardMap promoted = map;
  promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
  promoted.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  net::OutMessage read;
  auto rb = read.InitRequestBody<wire::ReadRequest>();
  rb.initNames(1).set(0, "v");
  SetRoute(rb.initRoute(), 0, 2);
  auto r = cluster_->Call(1, "worker", "ps.Read", std::move(read));
  EXPECT_TRUE(IsStaleShardMap(r.status())) << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr("rebuilding copy"));
  auto w = Push(1, "v", Filled({8}, 1), std::nullopt, 0, 0, 2);
  EXPECT_TRUE(IsStaleShardMap(w.status())) << w.status();
}

TEST_F(ReplicationTest, WholeVariableWhoseSlotsNameItsValuePayloadIsCopiedNotShared) {
  Start(2, 0);
  ShardMap map = *ShardMap::Initial(2, 2);
  map.groups[0].backups = {};
  map.groups[0].rebuilding = {1};
  ASSERT_TRUE(cluster_->SetMap(1, map).ok());
  // A whole variable alone in its chunk is taken from the frame without a copy, unless its
  // arrays are not distinct payloads: here both Adam slots name the value's payload.
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::InstallStateRequest>();
  body.setGroup(0);
  body.setGeneration(1);
  body.setTransfer(7);
  body.setChunk(0);
  body.setSequence(0);
  body.setBytesTotal(96);
  body.setLast(true);
  auto v = body.initVariables(1)[0];
  v.setName("v");
  v.setDtype(static_cast<uint8_t>(DType::kF32));
  net::SetShape(v.initShape(1), {8});
  const OptimizerConfig adam = opt::Adam(0.01f);
  OptimizerToWire(&adam, v.initOptimizer());
  v.setRowBegin(0);
  req.AddTensor(Filled({8}, 1), v.initValue());
  auto slots = v.initSlots(2);
  for (unsigned j = 0; j < 2; ++j) {
    slots[j].setDtype(static_cast<uint8_t>(DType::kF32));
    net::SetShape(slots[j].initShape(1), {8});
    slots[j].setPayload(0);
  }
  ASSERT_TRUE(cluster_->Call(1, "ps", "ps.InstallState", std::move(req)).ok());
  auto variable = cluster_->replicated(1).CopyOf(0)->state.store->Find("v");
  ASSERT_TRUE(variable.ok()) << variable.status();
  ASSERT_TRUE((*variable)->ApplyGradient(Filled({8}, 0.5f)).ok());
  const Variable::State state = (*variable)->CheckpointState();
  ASSERT_EQ(state.slots.size(), 2u);
  // Each array its own: Adam moved the value, and its two slots (m, v) differ from it and
  // from each other.
  EXPECT_FALSE(state.value.Equals(Filled({8}, 1)));
  EXPECT_FALSE(state.slots[0].Equals(state.value));
  EXPECT_FALSE(state.slots[1].Equals(state.value));
  EXPECT_FALSE(state.slots[0].Equals(state.slots[1]));
}

TEST_F(ReplicationTest, StateTransferWhileWritesContinue) {
  ReplicatedPs::Options options;
  options.transfer_chunk_bytes = 4096;  // many chunks
  // "dense" (24 KiB with its slots) goes whole, received without a copy; the others in pieces.
  options.transfer_whole_max_bytes = 64 << 10;
  Start(2, 0, options);
  ShardMap alone = *ShardMap::Initial(2, 2);
  alone.groups[0].backups = {};
  ASSERT_TRUE(cluster_->SetMapEverywhere(alone).ok());
  ASSERT_TRUE(CreateAdam(0, "dense", {256, 8}, 0, 1).ok());
  ASSERT_TRUE(CreateAdam(0, "table", {2000, 4}, 0, 1).ok());
  // Large enough that the transfer's snapshot shares its value (copy-on-write) instead of
  // copying it: the writes below must not reach the bytes being sent.
  const Shape large{static_cast<int64_t>(Variable::kSharedReadBytes / 16), 4};
  ASSERT_TRUE(CreateAdam(0, "large", large, 0, 1).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> closures{0};
  std::thread writer([&] {
    for (uint64_t closure = 1; !stop.load(); ++closure) {
      Tensor ids = Tensor::FromVector<int64_t>({2}, {static_cast<int64_t>(closure % 2000), 7});
      auto p = Push(0, "table", Filled({2, 4}, 0.5f), ids, closure, 0, 0);
      auto d = Push(0, "dense", Filled({256, 8}, 0.1f), std::nullopt, 0, 0, 0);
      // The large one by rows and whole, alternately (both kinds of write copy a shared value).
      Tensor large_ids = Tensor::FromVector<int64_t>({2}, {static_cast<int64_t>(closure * 31 % large[0]), 5});
      auto l = closure % 2 == 0 ? Push(0, "large", Filled({2, 4}, 0.2f), large_ids, 0, 0, 0)
                                : Push(0, "large", Filled(large, 0.3f), std::nullopt, 0, 0, 0);
      if (!p.ok() || !d.ok() || !l.ok()) ADD_FAILURE() << p.status() << d.status() << l.status();
      closures.store(closure);
    }
  });
  ASSERT_TRUE(Eventually([&] { return closures.load() >= 5; }));
  ShardMap rebuild = alone;
  rebuild.groups[0].generation = 2;
  rebuild.groups[0].rebuilding = {1};
  rebuild.generation = 2;
  ASSERT_TRUE(cluster_->SetMap(1, rebuild).ok());
  ASSERT_TRUE(cluster_->SetMap(0, rebuild).ok());
  auto in_sync = [&] {
    const StreamView s = StreamFromPs0ToPs1(*cluster_);
    return s.in_sync && s.transfer_bytes > 0;
  };
  ASSERT_TRUE(Eventually(in_sync));
  ShardMap rebuilt = rebuild;
  rebuilt.groups[0].generation = 3;
  rebuilt.groups[0].backups = {1};
  rebuilt.groups[0].rebuilding = {};
  rebuilt.generation = 3;
  ASSERT_TRUE(cluster_->SetMap(1, rebuilt).ok());
  ASSERT_TRUE(cluster_->SetMap(0, rebuilt).ok());
  const uint64_t at = closures.load();
  ASSERT_TRUE(Eventually([&] { return closures.load() >= at + 5; }));
  stop = true;
  writer.join();
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup);
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
  EXPECT_GT(cluster_->replicated(1).CopyOf(0)->state.store->List().size(), 1u);
}

TEST_F(ReplicationTest, CheckpointFromThePrimaryRestoredOnEveryCopy) {
  Start(2, 2);
  testutil::TestDir dir("replication_ckpt");
  ASSERT_TRUE(CreateAdam(0, "v", {32, 2}, 0, 1).ok());
  ASSERT_TRUE(Push(0, "v", Filled({32, 2}, 1), std::nullopt, 1, 0, 1).ok());
  const std::string saved_bytes = CopyBytes(*cluster_, 1, 0);
  net::OutMessage save;
  auto sb = save.InitRequestBody<wire::SaveCheckpointRequest>();
  sb.setDirectory(dir.path());
  sb.setFileName("g0.ckpt");
  sb.initNames(1).set(0, "v");
  sb.setStep(1);
  SetRoute(sb.initRoute(), 0, 1);
  auto saved_reply = cluster_->Call(0, "chief", "ps.SaveCheckpoint", std::move(save));
  ASSERT_TRUE(saved_reply.ok()) << saved_reply.status();
  auto saved = SavedFileFromWire(saved_reply->ResponseBody<wire::SaveCheckpointResponse>());
  ASSERT_TRUE(saved.ok()) << saved.status();
  ASSERT_TRUE(Push(0, "v", Filled({32, 2}, 2), std::nullopt, 2, 0, 1).ok());
  ASSERT_FALSE(CopyBytes(*cluster_, 1, 0) == saved_bytes);

  RestorePlan plan;
  plan.directory = dir.path();
  plan.files.push_back({saved->file_name, saved->digest});
  for (const SavedShard& s : saved->shards) {
    RestoreShard r;
    r.name = s.name;
    r.dtype = s.dtype;
    r.shape = s.shape;
    r.optimizer = s.optimizer;
    r.iterations = s.iterations;
    r.pieces.push_back({0, s.tensor, s.slot_names, s.slot_tensors, 0, s.shape[0], 0});
    plan.shards.push_back(std::move(r));
  }
  net::OutMessage restore;
  auto rb = restore.InitRequestBody<wire::RestoreCheckpointRequest>();
  RestorePlanToWire(plan, rb);
  SetRoute(rb.initRoute(), 0, 1);
  auto restored = cluster_->Call(0, "chief", "ps.RestoreCheckpoint", std::move(restore));
  ASSERT_TRUE(restored.ok()) << restored.status();
  // The restore reached the backup before the answer, and both copies now hold the saved values.
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
  auto copy = cluster_->replicated(1).CopyOf(0);
  ASSERT_NE(copy, nullptr);
  auto v = copy->state.store->Find("v");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->restores(), 1u);

  // Restored again, now saying which closures have finished (the coordinator's watermark): a
  // zombie attempt of closure 2, finished before the restore, whose update the restore undid,
  // must not apply to the restored values; a closure above the watermark applies once.
  net::OutMessage again;
  auto ab = again.InitRequestBody<wire::RestoreCheckpointRequest>();
  RestorePlanToWire(plan, ab);
  SetRoute(ab.initRoute(), 0, 1);
  auto finished = ab.initClosures();
  finished.setCoordinator(1);
  finished.setWatermark(3);
  ASSERT_TRUE(cluster_->Call(0, "chief", "ps.RestoreCheckpoint", std::move(again)).ok());
  const std::string restored_bytes = CopyBytes(*cluster_, 0, 0);
  auto zombie = Push(0, "v", Filled({32, 2}, 2), std::nullopt, 2, 0, 1);
  ASSERT_TRUE(zombie.ok()) << zombie.status();
  EXPECT_EQ(*zombie, 1u) << "a closure below the restore's watermark was applied";
  EXPECT_TRUE(CopyBytes(*cluster_, 0, 0) == restored_bytes);
  auto fresh = Push(0, "v", Filled({32, 2}, 2), std::nullopt, 3, 0, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, 0u);
  EXPECT_TRUE(SameCopies(*cluster_, 0, 1, 0));
}

// A ps.Replicate with `values` as PushGradients entries of "v" ([4] each), from `first`.
net::OutMessage ReplicateRequestFor(uint64_t first, const std::vector<float>& values) {
  net::OutMessage req;
  auto body = req.InitRequestBody<wire::ReplicateRequest>();
  body.setGroup(0);
  body.setGeneration(1);
  body.setFirstSequence(first);
  body.setFromPs(0);
  auto entries = body.initEntries(static_cast<unsigned>(values.size()));
  for (unsigned i = 0; i < values.size(); ++i) {
    entries[i].setMethod("ps.PushGradients");
    auto g = entries[i].getBody().initAs<wire::PushGradientsRequest>().initGradients(1)[0];
    g.setName("v");
    req.AddTensor(Filled({4}, values[i]), g.initValue());
  }
  return req;
}

uint64_t AppliedSequence(const absl::StatusOr<net::InMessage>& reply) {
  return reply.ok() ? reply->ResponseBody<wire::ReplicateResponse>().getAppliedSequence() : 0;
}

// A batch resent after its reply was lost repeats sequences the backup applied: acknowledged,
// not applied again, and not a reason to rebuild; entries past them (the batch grew while it
// was resent) are applied once. A different write at an applied sequence is still refused.
TEST_F(ReplicationTest, ResentReplicateAfterALostReplyIsAcknowledgedOnce) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());  // sequence 1 on both copies
  auto first = cluster_->Call(1, "ps", "ps.Replicate", ReplicateRequestFor(2, {1.0f}));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(AppliedSequence(first), 2u);
  const std::string once = CopyBytes(*cluster_, 1, 0);
  auto resent = cluster_->Call(1, "ps", "ps.Replicate", ReplicateRequestFor(2, {1.0f}));
  ASSERT_TRUE(resent.ok()) << resent.status();
  EXPECT_EQ(AppliedSequence(resent), 2u);
  EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == once) << "the repeat was applied again";
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kBackup);

  auto grown = cluster_->Call(1, "ps", "ps.Replicate", ReplicateRequestFor(2, {1.0f, 2.0f}));
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(AppliedSequence(grown), 3u);
  EXPECT_FALSE(CopyBytes(*cluster_, 1, 0) == once) << "sequence 3 was not applied";
  const std::string twice = CopyBytes(*cluster_, 1, 0);

  auto forged = cluster_->Call(1, "ps", "ps.Replicate", ReplicateRequestFor(3, {5.0f}));
  EXPECT_EQ(forged.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(forged.status().message(), HasSubstr("out of order"));
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kNeedsRebuild);
  EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == twice);
}

// A group that lost every copy: its primary in a restore_pending map starts empty, refuses
// workers' writes and reads (RestorePendingError, which clients do not ride out), takes the
// chief's creation, and serves again once a map clears restore_pending.
TEST_F(ReplicationTest, RestoringPrimaryServesOnlyTheChiefsRestore) {
  Start(2, 2);
  ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());
  ShardMap lost = map_;
  lost.groups[0] = GroupEntry{0, 2, 0, {}, {1}, /*restore_pending=*/true};
  lost.generation = 2;
  ASSERT_TRUE(cluster_->SetMapEverywhere(lost).ok());
  EXPECT_EQ(RoleOf(*cluster_, 0, 0), CopyRole::kRestoring);
  EXPECT_TRUE(cluster_->replicated(0).CopyOf(0)->state.store->List().empty()) << "a restoring copy starts empty";
  auto push = Push(0, "v", Filled({4}, 1), std::nullopt, 1, 0, 2);
  EXPECT_TRUE(IsRestorePending(push.status())) << push.status();
  net::OutMessage read = ReadRequestFor({"v"});
  SetRoute(read.envelope().getRequest().getBody().getAs<wire::ReadRequest>().initRoute(), 0, 2);
  auto refused_read = cluster_->Call(0, "worker", "ps.Read", std::move(read));
  EXPECT_TRUE(IsRestorePending(refused_read.status())) << refused_read.status();
  net::InMessage holder;
  auto status = Status(*cluster_, 0, &holder);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->getCopies()[0].getRole(), wire::CopyRole::RESTORING);

  ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 2).ok()) << "the chief restores";
  EXPECT_EQ(cluster_->replicated(0).CopyOf(0)->state.store->List().size(), 1u);
  // The rebuilding copy follows the restoring primary.
  EXPECT_TRUE(Eventually([&] { return static_cast<bool>(SameCopies(*cluster_, 0, 1, 0)); }));

  ShardMap restored = lost;
  restored.groups[0] = GroupEntry{0, 3, 0, {}, {1}};
  restored.generation = 3;
  ASSERT_TRUE(cluster_->SetMapEverywhere(restored).ok());
  EXPECT_EQ(RoleOf(*cluster_, 0, 0), CopyRole::kPrimary);
  auto serves = Push(0, "v", Filled({4}, 1), std::nullopt, 1, 0, 3);
  EXPECT_TRUE(serves.ok()) << serves.status();
}

// A copy rebuilt by a state transfer and reported in sync (so the chief lists it as a backup)
// is promoted before its PS installed the map that listed it as one (maps reach a PS in any
// order; the older is then refused): it holds every acknowledged write and serves as the
// group's primary. (Left rebuilding, the group would have no primary that serves.)
TEST_F(ReplicationTest, RebuiltCopyPromotedBeforeItLearnedItIsABackupServes) {
  Start(2, 0);
  ShardMap rebuild = *ShardMap::Initial(2, 2);
  rebuild.groups[0].backups = {};
  rebuild.groups[0].rebuilding = {1};
  ASSERT_TRUE(cluster_->SetMapEverywhere(rebuild).ok());
  ASSERT_TRUE(CreateAdam(0, "v", {64, 4}, 0, 1).ok());
  auto in_sync = [&] { return StreamFromPs0ToPs1(*cluster_).in_sync; };
  ASSERT_TRUE(Eventually(in_sync));
  for (uint64_t closure = 1; closure <= 5; ++closure) {
    auto pushed = Push(0, "v", Filled({64, 4}, 0.1f), std::nullopt, closure, 0, 1);
    ASSERT_TRUE(pushed.ok()) << pushed.status();  // acknowledged by the rebuilt copy too
  }
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kRebuilding);
  const std::string primary_bytes = CopyBytes(*cluster_, 0, 0);
  // PS 0 is lost; the chief had listed PS 1 as a backup (generation 2), then promoted it
  // (generation 3): only the latter reaches PS 1.
  ShardMap promoted = rebuild;
  promoted.groups[0] = GroupEntry{0, 3, 1, {}, {}};
  promoted.groups[1].backups = {};
  promoted.groups[1].generation = 3;
  promoted.generation = 3;
  ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
  EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kPrimary);
  EXPECT_TRUE(CopyBytes(*cluster_, 1, 0) == primary_bytes) << "the promoted copy lacks acknowledged writes";
  auto again = Push(1, "v", Filled({64, 4}, 0.1f), std::nullopt, 5, 0, 3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 1u) << "the retried closure was applied once, before the failover";
  auto serves = Push(1, "v", Filled({64, 4}, 0.1f), std::nullopt, 6, 0, 3);
  ASSERT_TRUE(serves.ok()) << serves.status();
  EXPECT_EQ(*serves, 0u);
}

// A copy that refused its stream (needs rebuild) and was then made primary serves nothing and
// says so at the map's generation (which the chief acts on: coordinator/ps_monitor.h); it
// starts over when the chief's next map makes it the restoring primary (every copy lost) or a
// rebuilding copy of a new primary.
TEST_F(ReplicationTest, BrokenCopyMadePrimaryServesNothingUntilTheMapRestoresOrRebuildsIt) {
  for (const bool restore : {true, false}) {
    SCOPED_TRACE(restore ? "restore" : "rebuild");
    Start(3, 2);  // group 0: primary 0, backup 1
    ASSERT_TRUE(CreateAdam(0, "v", {4}, 0, 1).ok());
    net::OutMessage gap;
    auto body = gap.InitRequestBody<wire::ReplicateRequest>();
    body.setGroup(0);
    body.setGeneration(1);
    body.setFirstSequence(7);
    body.setFromPs(0);
    body.initEntries(1)[0].setMethod("ps.PushGradients");
    ASSERT_FALSE(cluster_->Call(1, "ps", "ps.Replicate", std::move(gap)).ok());
    ASSERT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kNeedsRebuild);
    // Promoted (PS 0 lost) before the chief heard of it.
    ShardMap promoted = map_;
    promoted.groups[0] = GroupEntry{0, 2, 1, {}, {}};
    promoted.generation = 2;
    ASSERT_TRUE(cluster_->SetMap(1, promoted).ok());
    EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kNeedsRebuild);
    auto refused = Push(1, "v", Filled({4}, 1), std::nullopt, 0, 0, 2);
    EXPECT_TRUE(IsStaleShardMap(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("needs_rebuild copy"));
    {
      net::InMessage holder;
      auto status = Status(*cluster_, 1, &holder);
      ASSERT_TRUE(status.ok());
      bool reported = false;
      for (auto c : status->getCopies()) {
        if (c.getGroup() != 0) continue;
        reported = true;
        EXPECT_EQ(c.getRole(), wire::CopyRole::NEEDS_REBUILD);
        EXPECT_EQ(c.getGeneration(), 2u);
      }
      EXPECT_TRUE(reported);
    }
    ShardMap next = promoted;
    next.generation = 3;
    if (restore) {
      // No backup: every copy lost, PS 1 the empty primary that takes the restore.
      next.groups[0] = GroupEntry{0, 3, 1, {}, {}, /*restore_pending=*/true};
      ASSERT_TRUE(cluster_->SetMap(1, next).ok());
      EXPECT_EQ(RoleOf(*cluster_, 1, 0), CopyRole::kRestoring);
      EXPECT_TRUE(cluster_->replicated(1).CopyOf(0)->state.store->List().empty()) << "starts over empty";
    } else {
      // PS 0 came back as primary (a backup at the time), PS 1 rebuilds from it.
      next.groups[0] = GroupEntry{0, 3, 0, {}, {1}};
      ASSERT_TRUE(cluster_->SetMapEverywhere(next).ok());
      EXPECT_NE(RoleOf(*cluster_, 1, 0), CopyRole::kNeedsRebuild);
      EXPECT_TRUE(Eventually([&] { return static_cast<bool>(SameCopies(*cluster_, 0, 1, 0)); }));
      auto pushed = Push(0, "v", Filled({4}, 1), std::nullopt, 1, 0, 3);
      EXPECT_TRUE(pushed.ok()) << pushed.status();
    }
  }
}

// A PS that restarted empty gets, as its first map, one the cluster has changed since it
// started (generation > 1) that still names it primary of its own group and backup of another
// (the chief has not seen the restart yet). Its copies hold nothing of those groups: none
// serves (its own group's default copy would serve empty and stream to the group's backups,
// whose sequences it does not hold), and each says it needs a rebuild.
TEST_F(ReplicationTest, PsRestartedEmptyServesNothingFromItsFirstMap) {
  Start(2, 0);
  ShardMap later = *ShardMap::Initial(2, 2);
  later.groups[1].generation = 3;
  later.generation = 3;
  ASSERT_TRUE(cluster_->SetMap(0, later).ok());
  EXPECT_EQ(RoleOf(*cluster_, 0, 0), CopyRole::kNeedsRebuild) << "its own group";
  EXPECT_EQ(RoleOf(*cluster_, 0, 1), CopyRole::kNeedsRebuild) << "a group it backs up";
  auto refused = CreateAdam(0, "v", {4}, 0, 1);
  EXPECT_TRUE(IsStaleShardMap(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("needs_rebuild copy"));
  net::InMessage holder;
  auto status = Status(*cluster_, 0, &holder);
  ASSERT_TRUE(status.ok());
  for (auto c : status->getCopies()) EXPECT_EQ(c.getRole(), wire::CopyRole::NEEDS_REBUILD) << c.getGroup();
  // Made rebuilding by the chief, it takes a state transfer as usual.
  ShardMap seen = later;
  seen.groups[0] = GroupEntry{0, 4, 1, {}, {0}};
  seen.generation = 4;
  ASSERT_TRUE(cluster_->SetMap(0, seen).ok());
  EXPECT_EQ(RoleOf(*cluster_, 0, 0), CopyRole::kRebuilding);
}

// --ps_max_variable_bytes is per process: the copies a PS holds share its cap. Each PS holds a
// copy of both groups (k = 2 of 2), so a variable that fits a group alone is refused once the
// PS holds another group's copy that fills the rest.
TEST_F(ReplicationTest, CopiesOfAPsShareItsByteCap) {
  const uint64_t cap = 100'000;
  ReplicatedPs::Options options;
  options.replicas = 2;
  cluster_ = std::make_unique<LocalPsCluster>(2, options, /*with_tables=*/false, cap);
  ASSERT_TRUE(cluster_->started());
  map_ = *ShardMap::Initial(2, 2);
  ASSERT_TRUE(cluster_->SetMapEverywhere(map_).ok());
  // Adam: value and two slots, about 60 KB; on both PS (group 0: PS 0, backup PS 1).
  ASSERT_TRUE(CreateAdam(0, "a", {5000}, 0, 1).ok());
  // Another 60 KB in group 1 would put PS 1 (and PS 0) past the cap.
  const absl::Status refused = CreateAdam(1, "b", {5000}, 1, 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("--ps_max_variable_bytes"));
  EXPECT_TRUE(CreateAdam(1, "c", {1000}, 1, 1).ok()) << "what fits the rest is taken";
  EXPECT_EQ(RoleOf(*cluster_, 0, 1), CopyRole::kBackup) << "the backup took it too";
}

}  // namespace
}  // namespace asyncps::ps
