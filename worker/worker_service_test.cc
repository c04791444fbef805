// WorkerService on its own: requests enter through the server's real protocol code
// (net::ServerSession: handshake, role check, complete body check, dispatch to a thread pool)
// over an in-memory transport, so each test picks the chief incarnation it speaks as and
// sends what a well-behaved coordinator never would. The parameter servers behind the
// worker's PsClient are an empty in-process PsService (a PS that lost its variables) and an
// address nobody listens on (an unreachable PS).
#include "worker/worker_service.h"

#include <capnp/any.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/incarnation.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/frame_codec.h"
#include "net/handshake.h"
#include "net/message.h"
#include "net/raw_client_testing.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "net/server_session.h"
#include "ps/ps_service.h"
#include "ps/variable_store.h"
#include "worker/program.h"
#include "worker/ps_client.h"
#include "worker/step_context.h"
#include "worker/variable_directory.h"
#include "worker/worker.capnp.h"

namespace asyncps {
namespace worker_service_test_internal {
namespace {

constexpr char kToken[] = "worker-service-test";
constexpr uint64_t kChiefA = 0xA1;
constexpr uint64_t kChiefB = 0xB2;
constexpr uint64_t kChiefC = 0xC3;
constexpr absl::Duration kWait = absl::Seconds(30);

const std::string& Nonce() {
  static const std::string* nonce = new std::string(net::kNonceBytes, 'N');
  return *nonce;
}

absl::StatusOr<net::InMessage> Decode(const std::string& bytes) {
  return net::FrameDecoder::DecodeAll(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      net::FrameLimits(), nullptr);
}

// What the session sends, decoded; answers are waited for by request id.
class RecordingTransport : public net::SessionTransport {
 public:
  void Send(net::OutMessage message) override {
    absl::StatusOr<net::InMessage> frame = Decode(net::EncodeFrameToString(message));
    MutexLock lock(&mu_);
    if (!frame.ok()) {
      ++undecodable_;
      return;
    }
    if (frame->envelope().which() == wire::Envelope::RESPONSE) {
      const uint64_t id = frame->envelope().getRequestId();
      responses_.insert_or_assign(id, *std::move(frame));
    }
  }
  void Close(const absl::Status&) override {
    MutexLock lock(&mu_);
    closed_ = true;
  }
  void SetLimits(const net::FrameLimits&) override {}

  // The answer to request `id`, waiting up to kWait for it.
  absl::StatusOr<net::InMessage> Await(uint64_t id) {
    MutexLock lock(&mu_);
    std::pair<std::map<uint64_t, net::InMessage>*, uint64_t> want(&responses_, id);
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](std::pair<std::map<uint64_t, net::InMessage>*, uint64_t>* w) {
                                    return w->first->count(w->second) > 0;
                                  },
                                  &want),
                              kWait)) {
      return absl::DeadlineExceededError(absl::StrCat("no answer to request ", id));
    }
    net::InMessage frame = std::move(responses_[id]);
    responses_.erase(id);
    return frame;
  }

  bool closed() {
    MutexLock lock(&mu_);
    return closed_;
  }
  int undecodable() {
    MutexLock lock(&mu_);
    return undecodable_;
  }

 private:
  Mutex mu_;
  std::map<uint64_t, net::InMessage> responses_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int undecodable_ ABSL_GUARDED_BY(mu_) = 0;
};

// One authenticated connection of a chief process (incarnation `incarnation`) to the worker.
// Send and Call run the session on the calling thread; pooled handlers answer from the pool.
class ChiefConnection {
 public:
  ChiefConnection(const net::SessionConfig& config, const net::MethodTable& methods,
                  ThreadPool& pool, uint64_t incarnation, const std::string& role = "chief") {
    auto transport = std::make_unique<RecordingTransport>();
    transport_ = transport.get();
    session_ = std::make_shared<net::ServerSession>(
        &config, &methods, [&pool](std::function<void()> fn) { pool.Submit(std::move(fn)); },
        std::move(transport), "test-" + role, Nonce());
    session_->Start();
    Deliver(net::testutil::HelloFrame(kToken, Nonce(), role, 0, incarnation));
  }

  bool authenticated() const { return session_->authenticated(); }
  bool closed() { return transport_->closed(); }

  void Deliver(const std::string& bytes) {
    absl::StatusOr<net::InMessage> frame = Decode(bytes);
    ASSERT_TRUE(frame.ok()) << frame.status();
    session_->OnFrame(*std::move(frame));
  }

  // Sends `request` as `method`; the answer comes from Await.
  uint64_t Send(const std::string& method, net::OutMessage request) {
    const uint64_t id = next_id_++;
    Deliver(net::testutil::RequestFrame(std::move(request), id, method));
    return id;
  }

  // The answer to `id`: its body when the RPC status is OK, that status otherwise.
  absl::StatusOr<net::InMessage> Await(uint64_t id) {
    absl::StatusOr<net::InMessage> frame = transport_->Await(id);
    if (!frame.ok()) return frame.status();
    auto response = frame->envelope().getResponse();
    if (response.getCode() != 0) {
      return absl::Status(static_cast<absl::StatusCode>(response.getCode()),
                          response.getMessage().cStr());
    }
    return frame;
  }

  absl::StatusOr<net::InMessage> Call(const std::string& method, net::OutMessage request) {
    return Await(Send(method, std::move(request)));
  }

  absl::Status CallStatus(const std::string& method, net::OutMessage request) {
    return Call(method, std::move(request)).status();
  }

 private:
  RecordingTransport* transport_;
  std::shared_ptr<net::ServerSession> session_;
  uint64_t next_id_ = 1;
};

// A closure argument: a tensor or the id of a per-worker resource.
using Arg = std::variant<Tensor, uint64_t>;

net::OutMessage RunRequest(const std::string& function, uint64_t closure_id,
                           const std::vector<Arg>& args = {}, uint64_t worker_incarnation = 0) {
  net::OutMessage m;
  auto body = m.InitRequestBody<wire::RunRequest>();
  body.setFunction(function);
  body.setClosureId(closure_id);
  body.setIncarnation(worker_incarnation);
  auto list = body.initArgs(static_cast<unsigned>(args.size()));
  for (unsigned i = 0; i < args.size(); ++i) {
    if (const Tensor* t = std::get_if<Tensor>(&args[i])) {
      m.AddTensor(*t, list[i].initTensor());
    } else {
      list[i].setResource(std::get<uint64_t>(args[i]));
    }
  }
  return m;
}

net::OutMessage CreateResourceRequest(uint64_t id, const std::string& factory) {
  net::OutMessage m;
  auto body = m.InitRequestBody<wire::CreateResourceRequest>();
  body.setId(id);
  body.setFactory(factory);
  auto args = body.initArgs(1);
  args[0].setName("origin");
  args[0].setValue("test");
  return m;
}

net::OutMessage DeleteResourceRequest(uint64_t id) {
  net::OutMessage m;
  m.InitRequestBody<wire::DeleteResourceRequest>().setId(id);
  return m;
}

net::OutMessage CancelRequest(std::vector<uint64_t> ids) {
  net::OutMessage m;
  auto list =
      m.InitRequestBody<wire::CancelRequest>().initClosureIds(static_cast<unsigned>(ids.size()));
  for (unsigned i = 0; i < ids.size(); ++i) list.set(i, ids[i]);
  return m;
}

net::OutMessage HeartbeatRequest() {
  net::OutMessage m;
  m.InitRequestBody<wire::Empty>();
  return m;
}

struct Placement {
  std::string name;
  uint8_t dtype = static_cast<uint8_t>(DType::kF32);
  Shape shape;
  struct Shard {
    std::string name;
    int ps;
    int64_t begin, end;
  };
  std::vector<Shard> shards;
};

net::OutMessage SetDirectoryRequest(uint64_t version, const std::vector<Placement>& placements) {
  net::OutMessage m;
  auto body = m.InitRequestBody<wire::SetDirectoryRequest>();
  body.setVersion(version);
  auto vars = body.initVariables(static_cast<unsigned>(placements.size()));
  for (unsigned i = 0; i < placements.size(); ++i) {
    vars[i].setName(placements[i].name);
    vars[i].setDtype(placements[i].dtype);
    net::SetShape(vars[i].initShape(static_cast<unsigned>(placements[i].shape.size())),
                  placements[i].shape);
    auto shards = vars[i].initShards(static_cast<unsigned>(placements[i].shards.size()));
    for (unsigned s = 0; s < placements[i].shards.size(); ++s) {
      shards[s].setName(placements[i].shards[s].name);
      shards[s].setPs(placements[i].shards[s].ps);
      shards[s].setRowBegin(placements[i].shards[s].begin);
      shards[s].setRowEnd(placements[i].shards[s].end);
    }
  }
  return m;
}

// A closure's outcome as the worker reported it.
struct RunResult {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;
  wire::ErrorSource source = wire::ErrorSource::FUNCTION;
  std::vector<Tensor> values;
};

absl::StatusOr<RunResult> ParseRun(absl::StatusOr<net::InMessage> answer) {
  if (!answer.ok()) return answer.status();
  RunResult r;
  auto body = answer->ResponseBody<wire::RunResponse>();
  r.code = static_cast<absl::StatusCode>(body.getCode());
  r.message = body.getMessage().cStr();
  r.source = body.getErrorSource();
  for (auto ref : body.getValues()) {
    absl::StatusOr<Tensor> t = answer->TensorAt(ref);
    if (!t.ok()) return t.status();
    r.values.push_back(*std::move(t));
  }
  return r;
}

struct Heartbeat {
  uint64_t incarnation = 0;
  uint64_t directory_version = 0;
  std::set<uint64_t> resources;
  std::vector<int64_t> ps_silence_micros;
};

absl::StatusOr<Heartbeat> ParseHeartbeat(absl::StatusOr<net::InMessage> answer) {
  if (!answer.ok()) return answer.status();
  auto body = answer->ResponseBody<wire::HeartbeatResponse>();
  Heartbeat h;
  h.incarnation = body.getIncarnation();
  h.directory_version = body.getDirectoryVersion();
  for (uint64_t id : body.getResources()) h.resources.insert(id);
  for (int64_t micros : body.getPsSilenceMicros()) h.ps_silence_micros.push_back(micros);
  return h;
}

class Counter : public Resource {
 public:
  int64_t Next() { return ++value_; }

 private:
  std::atomic<int64_t> value_{0};
};

class WorkerServiceTest : public ::testing::Test {
 protected:
  static constexpr int kThreads = 4;

  void SetUp() override {
    // PS 0: a real PS that holds nothing (every variable the directory names was "lost");
    // PS 1: an address nobody listens on.
    net::RpcServer::Options server_options;
    server_options.role = "ps";
    server_options.token = kToken;
    ps_server_ = std::make_unique<net::RpcServer>(ps_loop_, server_options);
    ps_service_.RegisterWith(ps_server_->methods());
    ASSERT_TRUE(ps_server_->Start().ok());
    for (const std::string& address :
         {"127.0.0.1:" + std::to_string(ps_server_->port()), std::string("127.0.0.1:1")}) {
      net::RpcClient::Options o;
      o.address = address;
      o.role = "worker";
      o.token = kToken;
      ps_rpc_.push_back(std::make_unique<net::RpcClient>(client_loop_, o));
    }
    ps_client_ = std::make_unique<PsClient>(
        std::vector<net::RpcClient*>{ps_rpc_[0].get(), ps_rpc_[1].get()}, directory_);

    BuildProgram();
    service_ = std::make_unique<WorkerService>(program_, /*worker_index=*/3, /*num_workers=*/4,
                                               *ps_client_, directory_);
    service_->RegisterWith(methods_);
    config_.role = "worker";
    config_.task_index = 3;
    config_.incarnation = ProcessIncarnation();
    config_.token = kToken;
    config_.handshake_limits = net::HandshakeFrameLimits();
    pool_ = std::make_unique<ThreadPool>(2 * kThreads);
  }

  void TearDown() override {
    ReleaseAll();
    connections_.clear();
    pool_.reset();  // finishes every handler still running
    service_.reset();
    ps_client_.reset();
    ps_rpc_.clear();
    ps_server_.reset();
  }

  ChiefConnection& Connect(uint64_t incarnation, const std::string& role = "chief") {
    connections_.push_back(
        std::make_unique<ChiefConnection>(config_, methods_, *pool_, incarnation, role));
    EXPECT_TRUE(connections_.back()->authenticated());
    return *connections_.back();
  }

  void BuildProgram() {
    program_.AddFunction("echo", [](StepContext& ctx) -> absl::StatusOr<Values> {
      Values out;
      for (size_t i = 0; i < ctx.num_args(); ++i) {
        absl::StatusOr<Tensor> t = ctx.arg(i);
        if (!t.ok()) return t.status();
        out.push_back(*t);
      }
      return out;
    });
    // Says that it ran (a closure's effect a test can see).
    program_.AddFunction("mark", [this](StepContext&) -> absl::StatusOr<Values> {
      ran_.fetch_add(1);
      return Values{};
    });
    program_.AddFunction("fail", [](StepContext&) -> absl::StatusOr<Values> {
      return absl::DataLossError("closure failed on purpose");
    });
    program_.AddFunction(
        "throw", [](StepContext&) -> absl::StatusOr<Values> { throw std::runtime_error("boom"); });
    program_.AddFunction("throw_int", [](StepContext&) -> absl::StatusOr<Values> { throw 42; });
    program_.AddFunction("count", [](StepContext& ctx) -> absl::StatusOr<Values> {
      absl::StatusOr<Counter*> counter = ctx.resource<Counter>(0);
      if (!counter.ok()) return counter.status();
      return Values{Tensor::Scalar<int64_t>((*counter)->Next())};
    });
    program_.AddFunction("read", [](StepContext& ctx) -> absl::StatusOr<Values> {
      absl::StatusOr<Tensor> t = ctx.arg(0);
      if (!t.ok()) return t.status();
      const std::string name(static_cast<const char*>(t->raw_data()), t->num_bytes());
      absl::StatusOr<Tensor> value = ctx.Read(name);
      if (!value.ok()) return value.status();
      return Values{*value};
    });
    // Runs until cancelled (or the test ends), saying when it started.
    program_.AddFunction("wait_for_cancel", [this](StepContext& ctx) -> absl::StatusOr<Values> {
      MutexLock lock(&mu_);
      ++started_;
      const absl::Time deadline = absl::Now() + kWait;
      // The flag is an atomic the coordinator's Cancel sets; no notification comes with it, so
      // the wait re-checks it between short waits for the test's own release.
      while (!ctx.cancelled() && !released_ && absl::Now() < deadline) {
        mu_.AwaitWithTimeout(absl::Condition(&released_), absl::Milliseconds(2));
      }
      if (ctx.cancelled()) return absl::CancelledError("cancelled while running");
      return absl::DeadlineExceededError("never cancelled");
    });
    // Returns only once kThreads closures run at the same time.
    program_.AddFunction("barrier", [this](StepContext&) -> absl::StatusOr<Values> {
      MutexLock lock(&mu_);
      ++at_barrier_;
      if (!mu_.AwaitWithTimeout(absl::Condition(
                                    +[](int* n) { return *n >= kThreads; }, &at_barrier_),
                                kWait)) {
        return absl::DeadlineExceededError("closures did not run concurrently");
      }
      return Values{};
    });
    program_.AddResource(
        "counter", [this](const ResourceContext& ctx) -> absl::StatusOr<std::unique_ptr<Resource>> {
          factory_calls_.fetch_add(1);
          if (ctx.worker_index() != 3 || ctx.num_workers() != 4 ||
              ctx.Arg("origin").value_or("") != "test") {
            return absl::InvalidArgumentError("the factory was given the wrong context");
          }
          return std::make_unique<Counter>();
        });
    // Builds a counter once the test lets it (so a chief can be replaced meanwhile).
    program_.AddResource(
        "gated", [this](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
          MutexLock lock(&mu_);
          ++started_;
          if (!mu_.AwaitWithTimeout(absl::Condition(&released_), kWait))
            return absl::DeadlineExceededError("gate");
          return std::make_unique<Counter>();
        });
    program_.AddResource("failing",
                         [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
                           return absl::PermissionDeniedError("no access to the data");
                         });
    program_.AddResource("throwing",
                         [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
                           throw std::runtime_error("factory blew up");
                         });
    program_.AddResource(
        "throwing_int",
        [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> { throw 7; });
    program_.AddResource("null",
                         [](const ResourceContext&) -> absl::StatusOr<std::unique_ptr<Resource>> {
                           return std::unique_ptr<Resource>();
                         });
  }

  void AwaitStarted(int n) {
    MutexLock lock(&mu_);
    std::pair<int*, int> want(&started_, n);
    ASSERT_TRUE(mu_.AwaitWithTimeout(
        absl::Condition(
            +[](std::pair<int*, int>* w) { return *w->first >= w->second; }, &want),
        kWait));
  }

  // Runs `takeover` once, on the thread serving the first call of `method` (a replaced chief's),
  // after that call was admitted and before its effect: the worst moment for a takeover.
  void TakeOverBeforeEffectOf(const std::string& method, std::function<void()> takeover) {
    service_->SetBeforeEffectHookForTesting([this, method, takeover](absl::string_view m) {
      if (m != method || hook_fired_.exchange(true)) return;  // the successor's own calls pass
      takeover();
    });
  }

  void ReleaseAll() {
    MutexLock lock(&mu_);
    released_ = true;
  }

  static Tensor Text(const std::string& s) {
    Tensor t(DType::kU8, {static_cast<int64_t>(s.size())});
    std::memcpy(t.raw_data(), s.data(), s.size());
    return t;
  }

  Program program_;
  net::EventLoop ps_loop_;
  net::EventLoop client_loop_;
  ps::VariableStore ps_store_;
  ps::PsService ps_service_{ps_store_};
  std::unique_ptr<net::RpcServer> ps_server_;
  std::vector<std::unique_ptr<net::RpcClient>> ps_rpc_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> ps_client_;
  std::unique_ptr<WorkerService> service_;
  net::MethodTable methods_;
  net::SessionConfig config_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<ChiefConnection>> connections_;

  Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  int at_barrier_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> factory_calls_{0};
  std::atomic<int> ran_{0};
  std::atomic<bool> hook_fired_{false};
};

TEST_F(WorkerServiceTest, RunsARegisteredClosureAndReturnsItsValues) {
  ChiefConnection& chief = Connect(kChiefA);
  const Tensor a = Tensor::FromVector<float>({2, 2}, {1, 2, 3, 4});
  const Tensor b = Tensor::FromVector(std::vector<int64_t>{7, 8, 9});
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("echo", 1, {a, b})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kOk) << run->message;
  ASSERT_EQ(run->values.size(), 2u);
  EXPECT_TRUE(run->values[0].Equals(a));
  EXPECT_TRUE(run->values[1].Equals(b));
  // The worker incarnation the coordinator prepared, when named, must be this process's.
  run = ParseRun(chief.Call("worker.Run", RunRequest("echo", 2, {a}, ProcessIncarnation())));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kOk);
  EXPECT_EQ(
      chief.CallStatus("worker.Run", RunRequest("echo", 3, {a}, ProcessIncarnation() + 1)).code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerServiceTest, AnUnknownFunctionIsNotFoundInsideAnOkAnswer) {
  ChiefConnection& chief = Connect(kChiefA);
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("no_such_function", 1)));
  ASSERT_TRUE(run.ok()) << run.status();  // the worker is fine; the function is unknown
  EXPECT_EQ(run->code, absl::StatusCode::kNotFound);
  EXPECT_NE(run->message.find("'no_such_function'"), std::string::npos) << run->message;
  EXPECT_TRUE(run->values.empty());
}

TEST_F(WorkerServiceTest, FailingClosureReturnsItsStatusAsFunctionError) {
  ChiefConnection& chief = Connect(kChiefA);
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("fail", 1)));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kDataLoss);
  EXPECT_EQ(run->message, "closure failed on purpose");
  EXPECT_EQ(run->source, wire::ErrorSource::FUNCTION);
  run = ParseRun(chief.Call("worker.Run", RunRequest("throw", 2)));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kInternal);
  EXPECT_NE(run->message.find("boom"), std::string::npos) << run->message;
  EXPECT_EQ(run->source, wire::ErrorSource::FUNCTION);
  // Whatever it throws is the function's error, not the worker failing (an RPC error would
  // make the coordinator take the worker down and retry the closure elsewhere).
  run = ParseRun(chief.Call("worker.Run", RunRequest("throw_int", 4)));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kInternal);
  EXPECT_EQ(run->source, wire::ErrorSource::FUNCTION);
  // A closure given the wrong kind of argument fails as the function's error.
  run = ParseRun(chief.Call("worker.Run", RunRequest("count", 3, {Tensor::Scalar(1.0f)})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerServiceTest, PsFailuresInsideAClosureAreReportedAsPsFailures) {
  ChiefConnection& chief = Connect(kChiefA);
  ASSERT_TRUE(chief
                  .CallStatus("worker.SetDirectory",
                              SetDirectoryRequest(1, {{"lost", 1, {2}, {{"lost", 0, 0, 2}}},
                                                      {"far", 1, {2}, {{"far", 1, 0, 2}}}}))
                  .ok());
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("read", 1, {Text("far")})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kUnavailable) << run->message;
  EXPECT_EQ(run->source, wire::ErrorSource::PS);
  run = ParseRun(chief.Call("worker.Run", RunRequest("read", 2, {Text("lost")})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kUnavailable) << run->message;
  EXPECT_EQ(run->source, wire::ErrorSource::PS_STATE_LOST);
  // A variable the directory does not name is the function's mistake, not a PS failure.
  run = ParseRun(chief.Call("worker.Run", RunRequest("read", 3, {Text("unknown")})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kNotFound) << run->message;
  EXPECT_EQ(run->source, wire::ErrorSource::FUNCTION);
}

TEST_F(WorkerServiceTest, ResourceCreationIsIdempotentAndShared) {
  ChiefConnection& chief = Connect(kChiefA);
  ASSERT_TRUE(chief.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter")).ok());
  ASSERT_TRUE(chief.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter")).ok());
  EXPECT_EQ(factory_calls_.load(), 1);
  for (int64_t expected = 1; expected <= 3; ++expected) {
    auto run = ParseRun(chief.Call("worker.Run", RunRequest("count", expected, {uint64_t{7}})));
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_EQ(run->code, absl::StatusCode::kOk) << run->message;
    EXPECT_EQ(run->values.at(0).data<int64_t>()[0], expected);
  }
  auto heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->resources, (std::set<uint64_t>{7}));
  EXPECT_EQ(heartbeat->incarnation, ProcessIncarnation());

  ASSERT_TRUE(chief.CallStatus("worker.DeleteResource", DeleteResourceRequest(7)).ok());
  // A missing resource is the worker's state, not the function's error: an RPC error.
  absl::Status missing = chief.CallStatus("worker.Run", RunRequest("count", 4, {uint64_t{7}}));
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition) << missing;
  heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_TRUE(heartbeat->resources.empty());
}

// The heartbeat's answer says, per PS, how long it has owed this worker an answer: what the
// chief needs to fail over a primary the workers cannot reach though the chief can. PS 0
// answers; PS 1 (nobody listens) owes a call that waits for it to come up.
TEST_F(WorkerServiceTest, HeartbeatTellsHowLongEachPsHasOwedThisWorkerAnAnswer) {
  ChiefConnection& chief = Connect(kChiefA);
  auto heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->ps_silence_micros, (std::vector<int64_t>{0, 0})) << "nothing owed yet";
  // Cancelled by TearDown (the connection's destruction).
  ps_rpc_[1]->CallAsync("ps.Health", net::OutMessage(), net::RpcClient::CallOptions{absl::Seconds(60), true},
                        [](absl::StatusOr<net::InMessage>) {});
  const int64_t owed = absl::ToInt64Microseconds(absl::Milliseconds(100));
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  do {
    heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
    ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
    ASSERT_EQ(heartbeat->ps_silence_micros.size(), 2u);
    if (heartbeat->ps_silence_micros[1] >= owed) break;
    absl::SleepFor(absl::Milliseconds(10));  // polling the report, not synchronising
  } while (absl::Now() < deadline);
  EXPECT_GE(heartbeat->ps_silence_micros[1], owed) << "PS 1 owes an answer";
  EXPECT_EQ(heartbeat->ps_silence_micros[0], 0) << "PS 0 owes nothing";
}

TEST_F(WorkerServiceTest, FactoryErrorsKeepTheirCodeAndAreMarkedAsTheFactorys) {
  ChiefConnection& chief = Connect(kChiefA);
  absl::Status s = chief.CallStatus("worker.CreateResource", CreateResourceRequest(1, "failing"));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(IsResourceFactoryError(s)) << s;
  EXPECT_NE(s.message().find("no access to the data"), std::string::npos) << s;
  s = chief.CallStatus("worker.CreateResource", CreateResourceRequest(2, "throwing"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(IsResourceFactoryError(s)) << s;
  s = chief.CallStatus("worker.CreateResource", CreateResourceRequest(5, "throwing_int"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(IsResourceFactoryError(s)) << s;
  s = chief.CallStatus("worker.CreateResource", CreateResourceRequest(3, "null"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(IsResourceFactoryError(s)) << s;
  s = chief.CallStatus("worker.CreateResource", CreateResourceRequest(4, "no_such_factory"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_TRUE(IsResourceFactoryError(s)) << s;
  auto heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_TRUE(heartbeat->resources.empty());
}

TEST_F(WorkerServiceTest, ANewChiefDropsItsPredecessorsResourcesAndDirectory) {
  ChiefConnection& a = Connect(kChiefA);
  ASSERT_TRUE(
      a.CallStatus("worker.SetDirectory", SetDirectoryRequest(5, {{"w", 1, {2}, {{"w", 0, 0, 2}}}}))
          .ok());
  ASSERT_TRUE(a.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter")).ok());
  auto run = ParseRun(a.Call("worker.Run", RunRequest("count", 1, {uint64_t{7}})));
  ASSERT_TRUE(run.ok() && run->code == absl::StatusCode::kOk);
  auto heartbeat = ParseHeartbeat(a.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_EQ(heartbeat->directory_version, 5u);

  ChiefConnection& b = Connect(kChiefB);
  heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->directory_version, 0u);
  EXPECT_TRUE(heartbeat->resources.empty());
  EXPECT_FALSE(directory_.Find("w").ok());
  EXPECT_EQ(b.CallStatus("worker.Run", RunRequest("count", 2, {uint64_t{7}})).code(),
            absl::StatusCode::kFailedPrecondition);
  // Rebuilt on request, as a new instance.
  ASSERT_TRUE(b.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter")).ok());
  EXPECT_EQ(factory_calls_.load(), 2);
  run = ParseRun(b.Call("worker.Run", RunRequest("count", 3, {uint64_t{7}})));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->code, absl::StatusCode::kOk) << run->message;
  EXPECT_EQ(run->values.at(0).data<int64_t>()[0], 1);
}

TEST_F(WorkerServiceTest, ReplacedChiefIsRefusedAndChangesNothing) {
  ChiefConnection& a = Connect(kChiefA);
  ASSERT_TRUE(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(b.CallStatus("worker.SetDirectory", SetDirectoryRequest(9, {})).ok());
  ASSERT_TRUE(b.CallStatus("worker.CreateResource", CreateResourceRequest(1, "counter")).ok());

  for (const absl::Status& s :
       {a.CallStatus("worker.Heartbeat", HeartbeatRequest()),
        a.CallStatus("worker.Run", RunRequest("echo", 1)),
        a.CallStatus("worker.CreateResource", CreateResourceRequest(2, "counter")),
        a.CallStatus("worker.DeleteResource", DeleteResourceRequest(1)),
        a.CallStatus("worker.SetDirectory", SetDirectoryRequest(3, {})),
        a.CallStatus("worker.Cancel", CancelRequest({1}))}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  EXPECT_EQ(factory_calls_.load(), 1);
  auto heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->directory_version, 9u);
  EXPECT_EQ(heartbeat->resources, (std::set<uint64_t>{1}));

  // A third chief: both predecessors are refused from then on.
  ChiefConnection& c = Connect(kChiefC);
  ASSERT_TRUE(c.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  EXPECT_EQ(b.CallStatus("worker.Heartbeat", HeartbeatRequest()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).code(),
            absl::StatusCode::kFailedPrecondition);
  // Only a chief drives a worker at all.
  ChiefConnection& peer = Connect(kChiefC, "worker");
  EXPECT_EQ(peer.CallStatus("worker.Run", RunRequest("echo", 2)).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(WorkerServiceTest, ResourceOfAReplacedChiefIsNotKeptForSuccessor) {
  ChiefConnection& a = Connect(kChiefA);
  const uint64_t create = a.Send("worker.CreateResource", CreateResourceRequest(7, "gated"));
  AwaitStarted(1);  // the factory runs for chief A...
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(b.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());  // ...when B takes over
  ReleaseAll();
  absl::Status created = a.Await(create).status();
  EXPECT_EQ(created.code(), absl::StatusCode::kFailedPrecondition) << created;
  // B never asked for resource 7: the worker must not report (or run closures with) A's.
  auto heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_TRUE(heartbeat->resources.empty());
  EXPECT_EQ(b.CallStatus("worker.Run", RunRequest("count", 1, {uint64_t{7}})).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The takeover lands while a call of the replaced chief is between its admission and its effect
// (TakeOverBeforeEffectOf): the call is refused and its effect never lands, one test per method.

TEST_F(WorkerServiceTest, RunAdmittedBeforeATakeoverDoesNotStartAfterIt) {
  ChiefConnection& a = Connect(kChiefA);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  absl::Status takeover = absl::UnknownError("no takeover");
  TakeOverBeforeEffectOf("worker.Run",
                         [&] { takeover = b.CallStatus("worker.Heartbeat", HeartbeatRequest()); });
  absl::Status run = a.CallStatus("worker.Run", RunRequest("mark", 1));
  ASSERT_TRUE(takeover.ok()) << takeover;
  EXPECT_EQ(run.code(), absl::StatusCode::kFailedPrecondition) << run;
  // Started after the takeover's CancelAll, it would have run uncancelled for a replaced chief.
  EXPECT_EQ(ran_.load(), 0);
  // The successor's closures run.
  auto mine = ParseRun(b.Call("worker.Run", RunRequest("mark", 1)));
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->code, absl::StatusCode::kOk) << mine->message;
  EXPECT_EQ(ran_.load(), 1);
}

TEST_F(WorkerServiceTest, SetDirectoryAdmittedBeforeATakeoverDoesNotReplaceTheSuccessors) {
  ChiefConnection& a = Connect(kChiefA);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  absl::Status takeover = absl::UnknownError("no takeover");
  TakeOverBeforeEffectOf("worker.SetDirectory", [&] {
    takeover = b.CallStatus("worker.SetDirectory",
                            SetDirectoryRequest(9, {{"b", 1, {2}, {{"b", 0, 0, 2}}}}));
  });
  absl::Status set = a.CallStatus("worker.SetDirectory",
                                  SetDirectoryRequest(5, {{"a", 1, {2}, {{"a", 1, 0, 2}}}}));
  ASSERT_TRUE(takeover.ok()) << takeover;
  EXPECT_EQ(set.code(), absl::StatusCode::kFailedPrecondition) << set;
  auto heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->directory_version, 9u);
  EXPECT_TRUE(directory_.Find("b").ok());
  EXPECT_FALSE(directory_.Find("a").ok());
}

TEST_F(WorkerServiceTest, DeleteAdmittedBeforeATakeoverLeavesTheSuccessorsResource) {
  ChiefConnection& a = Connect(kChiefA);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(a.CallStatus("worker.CreateResource", CreateResourceRequest(1, "counter")).ok());
  absl::Status takeover = absl::UnknownError("no takeover");
  // The successor builds its own resource under the same id (ids are each chief's own).
  TakeOverBeforeEffectOf("worker.DeleteResource", [&] {
    takeover = b.CallStatus("worker.CreateResource", CreateResourceRequest(1, "counter"));
  });
  absl::Status deleted = a.CallStatus("worker.DeleteResource", DeleteResourceRequest(1));
  ASSERT_TRUE(takeover.ok()) << takeover;
  EXPECT_EQ(deleted.code(), absl::StatusCode::kFailedPrecondition) << deleted;
  EXPECT_EQ(factory_calls_.load(), 2);
  auto heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_EQ(heartbeat->resources, (std::set<uint64_t>{1}));
  auto run = ParseRun(b.Call("worker.Run", RunRequest("count", 1, {uint64_t{1}})));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->code, absl::StatusCode::kOk) << run->message;
  EXPECT_EQ(run->values.at(0).data<int64_t>()[0], 1);
}

TEST_F(WorkerServiceTest, CancelAdmittedBeforeATakeoverSparesTheSuccessorsClosure) {
  ChiefConnection& a = Connect(kChiefA);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  uint64_t successors_run = 0;
  // The successor runs its own closure 60 (closure ids are each chief's own) before the
  // replaced chief's cancel of its closure 60 would take effect.
  TakeOverBeforeEffectOf("worker.Cancel", [&] {
    successors_run = b.Send("worker.Run", RunRequest("wait_for_cancel", 60));
    AwaitStarted(1);
  });
  absl::Status cancel = a.CallStatus("worker.Cancel", CancelRequest({60}));
  ASSERT_NE(successors_run, 0u);
  EXPECT_EQ(cancel.code(), absl::StatusCode::kFailedPrecondition) << cancel;
  ReleaseAll();
  auto result = ParseRun(b.Await(successors_run));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->message, "never cancelled");
  EXPECT_NE(result->code, absl::StatusCode::kCancelled);
}

TEST_F(WorkerServiceTest, ResourceBuiltWhenATakeoverLandsBeforeItIsKeptIsDropped) {
  ChiefConnection& a = Connect(kChiefA);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(a.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  absl::Status takeover = absl::UnknownError("no takeover");
  TakeOverBeforeEffectOf("worker.CreateResource",
                         [&] { takeover = b.CallStatus("worker.Heartbeat", HeartbeatRequest()); });
  absl::Status created = a.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter"));
  ASSERT_TRUE(takeover.ok()) << takeover;
  EXPECT_EQ(created.code(), absl::StatusCode::kFailedPrecondition) << created;
  auto heartbeat = ParseHeartbeat(b.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.status();
  EXPECT_TRUE(heartbeat->resources.empty());
  EXPECT_EQ(b.CallStatus("worker.Run", RunRequest("count", 1, {uint64_t{7}})).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(WorkerServiceTest, CancelStopsARunningClosure) {
  ChiefConnection& chief = Connect(kChiefA);
  const uint64_t run = chief.Send("worker.Run", RunRequest("wait_for_cancel", 42));
  AwaitStarted(1);
  ASSERT_TRUE(chief.CallStatus("worker.Cancel", CancelRequest({41, 42})).ok());
  auto result = ParseRun(chief.Await(run));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->code, absl::StatusCode::kCancelled) << result->message;
  EXPECT_EQ(result->source, wire::ErrorSource::CANCELLED);
}

TEST_F(WorkerServiceTest, ACancelThatOvertakesItsRunCancelsItFromTheStart) {
  ChiefConnection& chief = Connect(kChiefA);
  ASSERT_TRUE(chief.CallStatus("worker.Cancel", CancelRequest({43})).ok());
  auto result = ParseRun(chief.Call("worker.Run", RunRequest("wait_for_cancel", 43)));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->code, absl::StatusCode::kCancelled) << result->message;
  EXPECT_EQ(result->source, wire::ErrorSource::CANCELLED);
  // Another closure is not affected.
  auto other = ParseRun(chief.Call("worker.Run", RunRequest("echo", 44, {Tensor::Scalar(1.0f)})));
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->code, absl::StatusCode::kOk);
}

TEST_F(WorkerServiceTest, NewChiefCancelsItsPredecessorsClosures) {
  ChiefConnection& a = Connect(kChiefA);
  const uint64_t first = a.Send("worker.Run", RunRequest("wait_for_cancel", 50));
  const uint64_t second = a.Send("worker.Run", RunRequest("wait_for_cancel", 51));
  AwaitStarted(2);
  ChiefConnection& b = Connect(kChiefB);
  ASSERT_TRUE(b.CallStatus("worker.Heartbeat", HeartbeatRequest()).ok());
  for (uint64_t id : {first, second}) {
    auto result = ParseRun(a.Await(id));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->code, absl::StatusCode::kCancelled) << result->message;
    EXPECT_EQ(result->source, wire::ErrorSource::CANCELLED);
  }
}

TEST_F(WorkerServiceTest, SetDirectoryRefusesMisfitsAndKeepsTheOldOne) {
  ChiefConnection& chief = Connect(kChiefA);
  ASSERT_TRUE(
      chief
          .CallStatus("worker.SetDirectory",
                      SetDirectoryRequest(
                          3, {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}, {"t/part_1", 1, 2, 4}}},
                              {"s", 4, {}, {{"s", 1, 0, 1}}}}))
          .ok());
  const std::vector<std::vector<Placement>> bad = {
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}, {"t/part_1", 2, 2, 4}}}},   // PS 2 of 2
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}, {"t/part_1", -1, 2, 4}}}},  // PS -1
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}, {"t/part_1", 1, 3, 4}}}},   // a gap
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 3}, {"t/part_1", 1, 2, 4}}}},   // an overlap
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}}}},                          // rows left over
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 4}, {"t/part_1", 1, 4, 5}}}},   // rows past the end
      {{"t", 1, {4, 2}, {{"t/part_0", 0, 0, 2}, {"t/part_1", 1, 2, 1}}}},   // a reversed range
      {{"t", 1, {4, 2}, {}}},                                               // no shards
      {{"t", 99, {4, 2}, {{"t", 0, 0, 4}}}},                                // unknown dtype
      {{"t", 1, {-4, 2}, {{"t", 0, 0, -4}}}},                               // negative dimension
      {{"t",
        1,
        {int64_t{1} << 40, int64_t{1} << 40},
        {{"t", 0, 0, int64_t{1} << 40}}}},                                   // too large
      {{"ok", 1, {2}, {{"ok", 0, 0, 2}}}, {"t", 1, {4}, {{"t", 5, 0, 4}}}},  // the second is bad
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    absl::Status s = chief.CallStatus("worker.SetDirectory", SetDirectoryRequest(100 + i, bad[i]));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "case " << i << ": " << s;
  }
  // Nothing of a refused directory was applied.
  auto heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_EQ(heartbeat->directory_version, 3u);
  auto t = directory_.Find("t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->shards.size(), 2u);
  EXPECT_EQ((*t)->shards[1].ps, 1);
  EXPECT_FALSE(directory_.Find("ok").ok());
  auto s = directory_.Find("s");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->dtype, DType::kI64);
}

TEST_F(WorkerServiceTest, MalformedBodiesAreRefusedAndServiceKeepsServing) {
  ChiefConnection& chief = Connect(kChiefA);
  std::vector<std::pair<std::string, net::OutMessage>> bad;
  {  // the function name is a struct
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::RunRequest>();
    net::testutil::PointerField(body, "function").initAs<wire::Empty>();
    bad.emplace_back("worker.Run", std::move(m));
  }
  {  // the argument list is text
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::RunRequest>();
    body.setFunction("echo");
    net::testutil::PointerField(body, "args").setAs<capnp::Text>("not arguments");
    bad.emplace_back("worker.Run", std::move(m));
  }
  {  // a tensor argument that names a payload the frame does not carry
    net::OutMessage m = RunRequest("echo", 1, {Tensor::Scalar(1.0f)});
    auto args = m.envelope().getRequest().getBody().getAs<wire::RunRequest>().getArgs();
    args[0].getTensor().setPayload(5);
    bad.emplace_back("worker.Run", std::move(m));
  }
  {  // a tensor argument whose shape needs more bytes than its payload has
    net::OutMessage m = RunRequest("echo", 1, {Tensor::Scalar(1.0f)});
    auto args = m.envelope().getRequest().getBody().getAs<wire::RunRequest>().getArgs();
    net::SetShape(args[0].getTensor().initShape(2), {1 << 20, 1 << 10});
    bad.emplace_back("worker.Run", std::move(m));
  }
  {  // a tensor argument of an unknown dtype
    net::OutMessage m = RunRequest("echo", 1, {Tensor::Scalar(1.0f)});
    m.envelope().getRequest().getBody().getAs<wire::RunRequest>().getArgs()[0].getTensor().setDtype(
        77);
    bad.emplace_back("worker.Run", std::move(m));
  }
  {  // a directory whose variable list holds text
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::SetDirectoryRequest>();
    net::testutil::PointerField(body, "variables").setAs<capnp::Text>("variables");
    bad.emplace_back("worker.SetDirectory", std::move(m));
  }
  {  // resource arguments that are a struct, not a list
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::CreateResourceRequest>();
    body.setFactory("counter");
    net::testutil::PointerField(body, "args").initAs<wire::Empty>();
    bad.emplace_back("worker.CreateResource", std::move(m));
  }
  {  // closure ids that are a struct
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::CancelRequest>();
    net::testutil::PointerField(body, "closureIds").initAs<wire::Empty>();
    bad.emplace_back("worker.Cancel", std::move(m));
  }
  {  // a body of the wrong type altogether: text where a struct belongs
    net::OutMessage m;
    m.envelope().initRequest().getBody().setAs<capnp::Text>("hello");
    bad.emplace_back("worker.Run", std::move(m));
  }
  for (auto& [method, request] : bad) {
    const std::string name = method;
    absl::Status s = chief.CallStatus(name, std::move(request));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
  }
  EXPECT_FALSE(chief.closed());
  EXPECT_EQ(factory_calls_.load(), 0);
  // The same connection and the service go on.
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("echo", 9, {Tensor::Scalar(2.0f)})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->code, absl::StatusCode::kOk);
  EXPECT_TRUE(run->values.at(0).Equals(Tensor::Scalar(2.0f)));
  auto heartbeat = ParseHeartbeat(chief.Call("worker.Heartbeat", HeartbeatRequest()));
  ASSERT_TRUE(heartbeat.ok());
  EXPECT_TRUE(heartbeat->resources.empty());
}

TEST_F(WorkerServiceTest, SplitBindingWithoutIteratorArgIsInvalidArgument) {
  ChiefConnection& chief = Connect(kChiefA);
  ASSERT_TRUE(chief.CallStatus("worker.CreateResource", CreateResourceRequest(7, "counter")).ok());
  auto with_split = [](uint64_t bound) {
    net::OutMessage m = RunRequest("count", 1, {uint64_t{7}});
    auto split = m.envelope().getRequest().getBody().getAs<wire::RunRequest>().initSplit();
    split.setResource(bound);
    split.setEnd(10);
    return m;
  };
  // The bound resource is an argument, but not a dynamically sharded iterator.
  absl::Status s = chief.CallStatus("worker.Run", with_split(7));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // The bound resource is not an argument of the closure at all.
  s = chief.CallStatus("worker.Run", with_split(8));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Neither ran the closure: the counter's first value is still 1.
  auto run = ParseRun(chief.Call("worker.Run", RunRequest("count", 2, {uint64_t{7}})));
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->code, absl::StatusCode::kOk) << run->message;
  EXPECT_EQ(run->values.at(0).data<int64_t>()[0], 1);
}

TEST_F(WorkerServiceTest, ConcurrentClosuresEachGetTheirOwnResult) {
  constexpr int kCallsPerThread = 50;
  std::vector<ChiefConnection*> chiefs;
  for (int t = 0; t < kThreads; ++t) chiefs.push_back(&Connect(kChiefA));
  ASSERT_TRUE(
      chiefs[0]->CallStatus("worker.CreateResource", CreateResourceRequest(1, "counter")).ok());
  std::atomic<int> wrong{0};
  std::atomic<int> failed{0};
  std::vector<std::vector<int64_t>> counts(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ChiefConnection& chief = *chiefs[t];
      // Every thread's first closure waits for all the others': they must run side by side.
      auto barrier = ParseRun(chief.Call("worker.Run", RunRequest("barrier", 1000 + t)));
      if (!barrier.ok() || barrier->code != absl::StatusCode::kOk) failed.fetch_add(1);
      for (int i = 0; i < kCallsPerThread; ++i) {
        const float mine = static_cast<float>(t * 1000 + i);
        const uint64_t echo =
            chief.Send("worker.Run", RunRequest("echo", t * 1000 + i, {Tensor::Scalar(mine)}));
        const uint64_t count =
            chief.Send("worker.Run", RunRequest("count", 100000 + t * 1000 + i, {uint64_t{1}}));
        auto e = ParseRun(chief.Await(echo));
        auto c = ParseRun(chief.Await(count));
        if (!e.ok() || e->code != absl::StatusCode::kOk || !c.ok() ||
            c->code != absl::StatusCode::kOk) {
          failed.fetch_add(1);
          continue;
        }
        if (!e->values.at(0).Equals(Tensor::Scalar(mine))) wrong.fetch_add(1);
        counts[t].push_back(c->values.at(0).data<int64_t>()[0]);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  // The shared counter handed out 1..N, each value once.
  std::set<int64_t> all;
  for (const auto& c : counts) all.insert(c.begin(), c.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kCallsPerThread));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kCallsPerThread);
  EXPECT_EQ(factory_calls_.load(), 1);
}

}  // namespace
}  // namespace worker_service_test_internal
}  // namespace asyncps
