#include "coordinator/chief_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/parameter_server_strategy.h"
#include "coordinator/ps_monitor.h"
#include "core/sync.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/status_board.h"
#include "net/event_loop.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/replication/shard_map.h"
#include "ps/variable_store.h"

namespace asyncps {
namespace chief_process_test_internal {

constexpr char kToken[] = "chief-process-test";

// A chief's spec for a cluster whose PS are `ps`; the chief and worker addresses are never
// dialled (no coordinator here).
ClusterSpec ChiefSpec(std::vector<std::string> ps) {
  std::map<TaskType, std::vector<std::string>> jobs;
  jobs[TaskType::kChief] = {"127.0.0.1:1"};
  jobs[TaskType::kWorker] = {"127.0.0.1:2"};
  jobs[TaskType::kPs] = std::move(ps);
  auto spec = ClusterSpec::Create(jobs, TaskType::kChief, 0);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ClusterSpec();
}

ChiefProcess::Options NoMetrics(const std::string& token = kToken) {
  ChiefProcess::Options o;
  o.process.cluster_token = token;
  o.process.metrics_port = -1;
  o.rpc_timeout = absl::Seconds(20);
  return o;
}

// A real parameter server in this process: the ps.* service on an RpcServer of its own loop.
class InProcessPs {
 public:
  InProcessPs() : service_(store_) {
    net::RpcServer::Options o;
    o.host = "127.0.0.1";
    o.role = "ps";
    o.token = kToken;
    server_ = std::make_unique<net::RpcServer>(loop_, o);
    service_.RegisterWith(server_->methods());
    const absl::Status started = server_->Start();
    EXPECT_TRUE(started.ok()) << started;
  }
  ~InProcessPs() { server_.reset(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", server_->port()); }
  ps::VariableStore& store() { return store_; }

 private:
  net::EventLoop loop_;
  ps::VariableStore store_;
  ps::PsService service_;
  std::unique_ptr<net::RpcServer> server_;
};

// A parameter server as the chief's PsMonitor sees one with replicated shards, and no more: it
// reports and takes shard maps and answers heartbeats (ps.ReplicaStatus), holding no copies.
class HeartbeatOnlyPs {
 public:
  explicit HeartbeatOnlyPs(int index) : index_(index) {
    net::RpcServer::Options o;
    o.host = "127.0.0.1";
    o.role = "ps";
    o.token = kToken;
    server_ = std::make_unique<net::RpcServer>(loop_, o);
    server_->methods().Register<wire::Empty>(
        "ps.GetShardMap", net::ChiefOnly(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
          auto out = resp->InitResponseBody<wire::GetShardMapResponse>();
          ps::ShardMapToWire(ps::ShardMap(), out.initMap());  // none held yet
          out.setPsIndex(index_);
          out.setIncarnation(incarnation());
          return absl::OkStatus();
        });
    server_->methods().Register<wire::SetShardMapRequest>(
        "ps.SetShardMap", net::ChiefOnly(),
        [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage*) {
          MutexLock lock(&mu_);
          generation_ = req.RequestBody<wire::SetShardMapRequest>().getMap().getGeneration();
          return absl::OkStatus();
        });
    server_->methods().Register<wire::Empty>(
        "ps.ReplicaStatus", net::ChiefOnly(),
        [this](const net::RequestContext&, const net::InMessage&, net::OutMessage* resp) {
          auto out = resp->InitResponseBody<wire::ReplicaStatusResponse>();
          out.setPsIndex(index_);
          out.setIncarnation(incarnation());
          MutexLock lock(&mu_);
          out.setMapGeneration(generation_);
          return absl::OkStatus();
        });
    const absl::Status started = server_->Start();
    EXPECT_TRUE(started.ok()) << started;
  }
  ~HeartbeatOnlyPs() { server_.reset(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", server_->port()); }

 private:
  uint64_t incarnation() const { return 1000 + static_cast<uint64_t>(index_); }

  const int index_;
  net::EventLoop loop_;
  Mutex mu_;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::unique_ptr<net::RpcServer> server_;
};

// A TCP port that accepts connections (the kernel completes them into the backlog) but never
// answers: every call to it stays in flight until its deadline or its client is destroyed.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ChiefProcessTest, RejectsASpecThatIsNotTheChiefs) {
  std::map<TaskType, std::vector<std::string>> jobs = {{TaskType::kChief, {"127.0.0.1:1"}},
                                                       {TaskType::kPs, {"127.0.0.1:3"}},
                                                       {TaskType::kWorker, {"127.0.0.1:2"}}};
  auto worker = ClusterSpec::Create(jobs, TaskType::kWorker, 0);
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto chief = ChiefProcess::Create(*worker, NoMetrics());
  EXPECT_EQ(chief.status().code(), absl::StatusCode::kInvalidArgument) << chief.status();
  EXPECT_NE(chief.status().message().find("worker:0"), std::string::npos) << chief.status();
}

TEST(ChiefProcessTest, RejectsAnEmptySpec) {
  auto chief = ChiefProcess::Create(ClusterSpec(), NoMetrics());
  EXPECT_EQ(chief.status().code(), absl::StatusCode::kInvalidArgument) << chief.status();
}

// The port is taken: an error naming it, not a chief that silently runs without /metrics.
TEST(ChiefProcessTest, MetricsPortInUseIsAnError) {
  auto other = metrics::ProcessMetrics::Create("other", 0, "127.0.0.1:0");
  ASSERT_TRUE(other.ok()) << other.status();
  const int taken = (*other)->port();
  ASSERT_GT(taken, 0);
  ChiefProcess::Options o = NoMetrics();
  o.process.metrics_port = taken;
  auto chief = ChiefProcess::Create(ChiefSpec({"127.0.0.1:3"}), o);
  ASSERT_FALSE(chief.ok()) << "port " << taken << " is in use";
  EXPECT_EQ(chief.status().code(), absl::StatusCode::kUnavailable) << chief.status();
  EXPECT_NE(chief.status().message().find(std::to_string(taken)), std::string::npos) << chief.status();
}

TEST(ChiefProcessTest, ServesMetricsAndTheStatusPageItOwns) {
  ChiefProcess::Options o = NoMetrics();
  o.process.metrics_port = 0;  // a free port
  auto chief = ChiefProcess::Create(ChiefSpec({"127.0.0.1:3", "127.0.0.1:4"}), o);
  ASSERT_TRUE(chief.ok()) << chief.status();
  EXPECT_GT((*chief)->process_metrics().port(), 0);
  const std::string board = (*chief)->status_board().Json();
  EXPECT_NE(board.find("127.0.0.1:4"), std::string::npos) << board;
  EXPECT_NE(board.find("unwatched"), std::string::npos) << board;
  ASSERT_TRUE((*chief)->ReportScalar("loss", 7, 0.25).ok());
  EXPECT_FALSE((*chief)->ReportScalar("Not A Name", 7, 0.25).ok());
  const std::string text = (*chief)->process_metrics().Serialize();
  EXPECT_NE(text.find("asyncps_scalar{"), std::string::npos) << text;
  EXPECT_NE(text.find("asyncps_checkpoint_"), std::string::npos) << "checkpoint series exist at 0";

  auto quiet = ChiefProcess::Create(ChiefSpec({"127.0.0.1:3"}), NoMetrics());
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_EQ((*quiet)->process_metrics().port(), 0) << "metrics_port -1 serves nothing";
}

TEST(ChiefProcessTest, ReachesARealPsThroughItsConnectionsAndPsClient) {
  InProcessPs ps;
  auto chief = ChiefProcess::Create(ChiefSpec({ps.address()}), NoMetrics());
  ASSERT_TRUE(chief.ok()) << chief.status();
  ASSERT_TRUE((*chief)->ps().Health(0, absl::Seconds(20), /*wait_for_ready=*/true).ok());
  {
    ParameterServerStrategy strategy(**chief);
    auto v = strategy.CreateVariable("v", init::Scalar(2.5f));
    ASSERT_TRUE(v.ok()) << v.status();
  }
  // The variable outlives the strategy: the process's directory and the PS hold it.
  ASSERT_TRUE((*chief)->directory().Find("v").ok());
  auto values = (*chief)->ps().Read({"v"});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0].data<float>()[0], 2.5f);
  EXPECT_TRUE(ps.store().Find("v").ok()) << "created on the PS itself";
  EXPECT_NE((*chief)->ps_rpc(0).peer().incarnation, 0u) << "handshake done on the PS connection";
  const std::string text = (*chief)->process_metrics().Serialize();
  EXPECT_NE(text.find("asyncps_rpc_client"), std::string::npos) << text;
}

// The token comes from the options main passes, nothing else: a wrong one is refused.
TEST(ChiefProcessTest, PresentsTheTokenFromItsOptions) {
  InProcessPs ps;
  auto chief = ChiefProcess::Create(ChiefSpec({ps.address()}), NoMetrics("not-the-token"));
  ASSERT_TRUE(chief.ok()) << chief.status();
  const absl::Status health = (*chief)->ps().Health(0, absl::Seconds(20));
  EXPECT_FALSE(health.ok());
  EXPECT_NE(health.code(), absl::StatusCode::kDeadlineExceeded) << health;
}

// The PsMonitor's heartbeats do not wait for the chief's I/O loop, which every worker's
// closures and the chief's own PS traffic share: with that loop held (as a burst of work on it
// holds it) for longer than the heartbeat timeout, the monitor keeps hearing from both PS and
// declares neither lost. (With the heartbeats on that loop no answer came while it was held.)
TEST(ChiefProcessTest, PsMonitorKeepsBeatingWhileTheChiefsLoopIsHeld) {
  HeartbeatOnlyPs ps0(0);
  HeartbeatOnlyPs ps1(1);
  // Declared before the chief, so they outlive the task that waits on them on its loop.
  Notification held;
  Notification release;
  ChiefProcess::Options options = NoMetrics();
  options.process.ps_replicas = 2;
  options.process.ps_heartbeat_timeout = absl::Seconds(1);
  auto chief = ChiefProcess::Create(ChiefSpec({ps0.address(), ps1.address()}), options);
  ASSERT_TRUE(chief.ok()) << chief.status();
  PsMonitor* monitor = (*chief)->ps_monitor();
  ASSERT_NE(monitor, nullptr);

  (*chief)->loop().Post([&] {
    held.Notify();
    release.WaitForNotification();
  });
  held.WaitForNotification();
  // 30 more answers: 15 rounds of the 200 ms heartbeat interval from 2 PS, about 3 s, longer
  // than the 1 s heartbeat timeout, all while the chief's loop is held.
  const int64_t before = monitor->stats().heartbeats_answered;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (monitor->stats().heartbeats_answered < before + 30 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));  // polls the condition until the deadline
  }
  const PsMonitor::Stats stats = monitor->stats();
  release.Notify();
  EXPECT_GE(stats.heartbeats_answered, before + 30) << "the monitor stopped hearing from the PS";
  EXPECT_EQ(stats.ps_lost, 0) << "a live PS was declared lost";
}

// Operations still in flight when the process goes complete, each exactly once: those a real
// PS answered before with OK, the rest with Cancelled; nothing runs after the destructor.
TEST(ChiefProcessTest, DestructionCompletesOperationsInFlight) {
  InProcessPs ps;
  SilentListener silent;
  auto chief = ChiefProcess::Create(ChiefSpec({ps.address(), silent.address()}), NoMetrics());
  ASSERT_TRUE(chief.ok()) << chief.status();
  VariablePlacement counter;
  counter.name = "counter";
  counter.shape = {1};
  counter.shards = {{"counter", 0, 0, 1}};
  VariablePlacement stuck;  // on the PS that never answers
  stuck.name = "stuck";
  stuck.shape = {1};
  stuck.shards = {{"stuck", 1, 0, 1}};
  OptimizerConfig sgd;
  ASSERT_TRUE((*chief)->ps().CreateVariable(counter, ps::InitializerSpec(), &sgd, true).ok());
  (*chief)->directory().Add(counter);
  (*chief)->directory().Add(stuck);

  struct Count {
    Mutex mu;
    int calls ABSL_GUARDED_BY(mu) = 0;
    int ok ABSL_GUARDED_BY(mu) = 0;
    int cancelled ABSL_GUARDED_BY(mu) = 0;
    int other ABSL_GUARDED_BY(mu) = 0;
  };
  auto count = std::make_shared<Count>();
  auto record = [count](const absl::Status& s) {
    MutexLock lock(&count->mu);
    ++count->calls;
    if (s.ok()) {
      ++count->ok;
    } else if (absl::IsCancelled(s)) {
      ++count->cancelled;
    } else {
      ++count->other;
    }
  };
  constexpr int kUpdates = 200;
  for (int i = 0; i < kUpdates; ++i) {
    (*chief)->ps().UpdateAsync({{"counter", UpdateKind::kAdd, Tensor::FromVector<float>({1}, {1.0f}), {}}},
                               [record](absl::Status s) { record(s); });
  }
  (*chief)->ps().ReadAsync({"stuck"}, [record](absl::StatusOr<std::vector<Tensor>> r) { record(r.status()); });
  PsFuture<std::vector<Tensor>> stuck_read = (*chief)->ps().ReadAsync({"stuck"});

  chief->reset();  // on this thread, with all of that in flight

  absl::StatusOr<std::vector<Tensor>> stuck_result = stuck_read.Get();
  EXPECT_TRUE(absl::IsCancelled(stuck_result.status())) << stuck_result.status();
  MutexLock lock(&count->mu);
  EXPECT_EQ(count->calls, kUpdates + 1) << "every callback ran once, before the destructor returned";
  EXPECT_GE(count->cancelled, 1) << "the read of the silent PS";
  EXPECT_EQ(count->other, 0);
  EXPECT_EQ(count->ok + count->cancelled, kUpdates + 1);
}

}  // namespace chief_process_test_internal
}  // namespace asyncps
