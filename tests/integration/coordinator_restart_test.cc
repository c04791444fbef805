// A chief restarted while the ps and worker processes keep running, with a real worker
// process: the worker sees a new coordinator incarnation in the handshake and drops what its
// predecessor set up (per-worker resources, the variable directory, running closures); the
// new chief prepares the worker afresh and its closures run; the replaced chief is refused.
//
// The predecessor here is a raw client that completes the real handshake as "chief" with an
// incarnation of its own choosing (the test process's ClusterCoordinator is the successor).
// The whole restart, with a real chief process SIGKILLed and started again, is
// fmnist_resume_test.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/incarnation.h"
#include "core/sync.h"
#include "core/test_temp_dir.h"
#include "gtest/gtest.h"
#include "net/frame_codec.h"
#include "net/raw_client_testing.h"
#include "worker/worker.capnp.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using net::InMessage;
using net::OutMessage;
using net::testutil::RawClient;

int PortOf(const std::string& address) {
  int port = 0;
  EXPECT_TRUE(absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port));
  return port;
}

// A chief that speaks raw frames: the predecessor whose state the worker must drop.
class RawChief {
 public:
  RawChief(int port, const std::string& token, uint64_t incarnation) : raw_(port) {
    auto nonce = raw_.ReadChallenge();
    EXPECT_TRUE(nonce.ok()) << nonce.status();
    if (!nonce.ok()) return;
    raw_.Write(net::testutil::HelloFrame(token, *nonce, "chief", 0, incarnation));
    auto ack = raw_.ReadFrame();
    ok_ = ack.ok() && ack->envelope().getHelloAck().getOk();
  }
  bool ok() const { return ok_; }

  void Send(OutMessage request, const std::string& method) {
    raw_.Write(net::testutil::RequestFrame(std::move(request), ++next_id_, method));
  }
  absl::StatusOr<InMessage> Read() { return raw_.ReadFrame(absl::Seconds(30)); }
  // Sends and reads the answer; the RPC status code (0: OK).
  absl::StatusOr<InMessage> Call(OutMessage request, const std::string& method) {
    Send(std::move(request), method);
    return Read();
  }

 private:
  RawClient raw_;
  bool ok_ = false;
  uint64_t next_id_ = 0;
};

int Code(const InMessage& response) { return response.envelope().getResponse().getCode(); }

std::vector<uint64_t> Resources(const InMessage& heartbeat) {
  std::vector<uint64_t> ids;
  for (uint64_t id : heartbeat.ResponseBody<wire::HeartbeatResponse>().getResources())
    ids.push_back(id);
  return ids;
}

OutMessage HeartbeatRequest() {
  OutMessage m;
  m.InitRequestBody<wire::Empty>();
  return m;
}

TEST(CoordinatorRestartTest, WorkerDropsThePredecessorsStateAndRefusesIt) {
  testutil::LocalCluster::Options o;
  o.num_ps = 1;
  o.num_workers = 1;
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const int port = PortOf((*cluster)->chief_spec().workers()[0]);

  // The predecessor: a resource, a directory (version 1, as the successor's will be, but
  // with a placement that does not exist), and a closure that runs for minutes unless
  // cancelled.
  const uint64_t old_incarnation = ProcessIncarnation() ^ 0x5a5a5a5a5a5a5a5aull;
  RawChief old_chief(port, (*cluster)->token(), old_incarnation);
  ASSERT_TRUE(old_chief.ok());
  {
    OutMessage m;
    auto body = m.InitRequestBody<wire::CreateResourceRequest>();
    body.setId(77);
    body.setFactory("counter");
    auto r = old_chief.Call(std::move(m), "worker.CreateResource");
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(Code(*r), 0);
  }
  {
    OutMessage m;
    auto body = m.InitRequestBody<wire::SetDirectoryRequest>();
    body.setVersion(1);
    auto v = body.initVariables(1)[0];
    v.setName("iterations");
    v.setDtype(static_cast<uint8_t>(DType::kI64));
    auto shard = v.initShards(1)[0];
    shard.setName("no_such_shard");
    shard.setPs(0);
    shard.setRowBegin(0);
    shard.setRowEnd(1);
    auto r = old_chief.Call(std::move(m), "worker.SetDirectory");
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(Code(*r), 0);
  }
  {
    auto r = old_chief.Call(HeartbeatRequest(), "worker.Heartbeat");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(Resources(*r), std::vector<uint64_t>{77});
    EXPECT_EQ(r->ResponseBody<wire::HeartbeatResponse>().getDirectoryVersion(), 1u);
  }
  {
    OutMessage m;
    auto body = m.InitRequestBody<wire::RunRequest>();
    body.setFunction("slow_increment");
    body.setClosureId(5);
    m.AddTensor(Tensor::Scalar<int64_t>(10 * 60 * 1000), body.initArgs(1)[0].initTensor());
    old_chief.Send(std::move(m), "worker.Run");
  }

  // The successor: this process's coordinator (another incarnation).
  auto chief = (*cluster)->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  ASSERT_TRUE(strategy.CreateVariable("iterations", init::Zeros({}, DType::kI64)).ok());
  const Program program = testutil::MakeTestProgram();
  ClusterCoordinator coordinator(strategy, program, testutil::FastFailureDetection());
  // Runs only if the worker took the successor's directory, not the predecessor's of the
  // same version.
  auto incremented = coordinator.Schedule("increment");
  ASSERT_TRUE(incremented.ok()) << incremented.status();
  ASSERT_TRUE(coordinator.Join().ok());
  ASSERT_TRUE(incremented->Fetch().ok()) << incremented->Fetch().status();
  auto counter = coordinator.CreatePerWorkerResource("counter");
  ASSERT_TRUE(counter.ok()) << counter.status();
  auto used = coordinator.Schedule("use_counter", {*counter});
  ASSERT_TRUE(used.ok()) << used.status();
  ASSERT_TRUE(coordinator.Join().ok());

  // The predecessor's closure was stopped (cancelled while running, or refused if it had not
  // started yet), not left running for ten minutes.
  auto run = old_chief.Read();
  ASSERT_TRUE(run.ok()) << run.status();
  if (Code(*run) == 0) {
    EXPECT_EQ(run->ResponseBody<wire::RunResponse>().getErrorSource(),
              wire::ErrorSource::CANCELLED);
  } else {
    EXPECT_EQ(Code(*run), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  }
  // Its resource is gone (the successor's counter is the only one), and it is refused.
  auto hb = old_chief.Call(HeartbeatRequest(), "worker.Heartbeat");
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(Code(*hb), static_cast<int>(absl::StatusCode::kFailedPrecondition));
  RawChief successor_view(port, (*cluster)->token(), ProcessIncarnation());
  ASSERT_TRUE(successor_view.ok());
  auto now = successor_view.Call(HeartbeatRequest(), "worker.Heartbeat");
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(Code(*now), 0);
  EXPECT_EQ(Resources(*now), std::vector<uint64_t>{counter->id()});
  // The worker logs after acting, and its output reaches us through a pipe: wait for both lines.
  const auto logged_both = [&](const std::string& text) {
    return text.find("a new coordinator (incarnation") != std::string::npos &&
           text.find("dropped its predecessor's 1 per-worker resource(s)") != std::string::npos;
  };
  std::string log = (*cluster)->worker_output(0);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!logged_both(log) && absl::Now() < deadline) {
    Notification().WaitForNotificationWithTimeout(absl::Milliseconds(10));  // poll pacing
    log = (*cluster)->worker_output(0);
  }
  EXPECT_NE(log.find("a new coordinator (incarnation"), std::string::npos) << log;
  EXPECT_NE(log.find("dropped its predecessor's 1 per-worker resource(s)"), std::string::npos)
      << log;
}

// The chief's side of a restart, with the library calls a program makes: the new chief
// creates its variables again (idempotent: the running PS keep theirs, trained past the
// checkpoint), RestoreLatest rolls them back to the checkpoint's step, and training goes on
// from there.
TEST(CoordinatorRestartTest, NewChiefRestoresVariablesAndContinues) {
  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 1;
  auto cluster = testutil::LocalCluster::Start(o);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  testutil::TestDir temp("coordinator_restart");
  const std::string dir = temp.path() + "/ckpt";  // made by the first chief
  const Program program = testutil::MakeTestProgram();
  auto iterations = [](ParameterServerStrategy& strategy) -> int64_t {
    auto values = strategy.process().ps().Read({"iterations"});
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? (*values)[0].data<int64_t>()[0] : -1;
  };
  auto increment = [&](ClusterCoordinator& coordinator, int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(coordinator.Schedule("increment").ok());
    ASSERT_TRUE(coordinator.Join().ok());
  };
  {
    auto chief = (*cluster)->MakeChief();
    ASSERT_TRUE(chief.ok()) << chief.status();
    ParameterServerStrategy& strategy = (*chief)->strategy();
    ASSERT_TRUE(strategy.CreateVariable("iterations", init::Zeros({}, DType::kI64)).ok());
    ClusterCoordinator coordinator(strategy, program, testutil::FastFailureDetection());
    CheckpointManager checkpoints(strategy, dir, 2);
    increment(coordinator, 5);
    ASSERT_TRUE(checkpoints.Save(5).ok());
    increment(coordinator, 3);  // lost with the chief: after the last checkpoint
    ASSERT_EQ(iterations(strategy), 8);
  }
  auto chief = (*cluster)->MakeChief();
  ASSERT_TRUE(chief.ok()) << chief.status();
  ParameterServerStrategy& strategy = (*chief)->strategy();
  ASSERT_TRUE(strategy.CreateVariable("iterations", init::Zeros({}, DType::kI64)).ok());
  EXPECT_EQ(iterations(strategy), 8) << "creating it again must not reset the PS's variable";
  CheckpointManager checkpoints(strategy, dir, 2);
  auto step = checkpoints.RestoreLatest();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 5);
  EXPECT_EQ(iterations(strategy), 5);
  ClusterCoordinator coordinator(strategy, program, testutil::FastFailureDetection());
  increment(coordinator, 1);
  EXPECT_EQ(iterations(strategy), 6);
}

}  // namespace
}  // namespace asyncps
