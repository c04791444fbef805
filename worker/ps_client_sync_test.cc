// PsClient's blocking calls (Read, Update, PushGradients, Gather, CreateVariable) against
// parameter servers in this process: real ps::PsService instances on loopback RpcServers for
// routing, reassembly and error mapping, and a fake PS that answers what a correct PS never
// would (wrong counts, shapes, dtypes, payload references, bodies), which must give an error
// status and never a wrong value or an out-of-bounds copy.
#include <capnp/any.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/sync.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "net/event_loop.h"
#include "net/message.h"
#include "net/raw_client_testing.h"
#include "net/rpc_client.h"
#include "net/rpc_server.h"
#include "ps/ps.capnp.h"
#include "ps/ps_service.h"
#include "ps/variable.h"
#include "ps/variable_store.h"
#include "worker/ps_client.h"
#include "worker/variable_directory.h"

namespace asyncps {
namespace ps_client_sync_test_internal {
namespace {

constexpr char kToken[] = "ps-client-sync-test";

net::RpcClient::Options ClientOptions(int port) {
  net::RpcClient::Options o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.role = "worker";
  o.token = kToken;
  return o;
}

// f32 tensor of `shape` holding start, start + 1, ...
Tensor Iota(Shape shape, float start) {
  Tensor t(DType::kF32, std::move(shape));
  for (size_t i = 0; i < static_cast<size_t>(t.num_elements()); ++i) t.data<float>()[i] = start + i;
  return t;
}

std::vector<float> Floats(const Tensor& t) {
  const auto span = t.flat<float>();
  return std::vector<float>(span.begin(), span.end());
}

// Rows `rows` of the [n, width] f32 tensor `whole`, flattened.
std::vector<float> RowsOf(const Tensor& whole, const std::vector<int64_t>& rows) {
  const int64_t width = whole.row_elements();
  std::vector<float> out;
  for (int64_t r : rows) {
    for (int64_t k = 0; k < width; ++k) out.push_back(whole.data<float>()[r * width + k]);
  }
  return out;
}

// A real PS in this process that counts the requests it receives per method. Restart()
// replaces store, service and server on the same port: a PS that restarted empty.
class LoopbackPs {
 public:
  explicit LoopbackPs(net::EventLoop& loop) : loop_(loop) {}

  absl::Status Start(int port = 0) {
    store_ = std::make_unique<ps::VariableStore>();
    service_ = std::make_unique<ps::PsService>(*store_);
    net::RpcServer::Options o;
    o.role = "ps";
    o.token = kToken;
    o.port = port;
    server_ = std::make_unique<net::RpcServer>(loop_, o);
    service_->RegisterWith(server_->methods());
    Count<wire::ReadRequest>("ps.Read");
    Count<wire::UpdateRequest>("ps.Update");
    Count<wire::PushGradientsRequest>("ps.PushGradients");
    Count<wire::GatherRequest>("ps.Gather");
    absl::Status s = server_->Start();
    port_ = server_->port();
    return s;
  }

  void Stop() {
    server_.reset();
    service_.reset();
    store_.reset();
  }

  absl::Status Restart() {
    Stop();
    return Start(port_);
  }

  int port() const { return port_; }

  // Requests of `method` received so far.
  int calls(const std::string& method) {
    MutexLock lock(&mu_);
    return calls_[method];
  }

  // The value this PS holds under `name` (a shard's name); an empty tensor when it has none.
  Tensor Held(const std::string& name) {
    auto v = store_->Find(name);
    return v.ok() ? (*v)->Read() : Tensor();
  }

 private:
  template <typename Request>
  void Count(const std::string& method) {
    const net::MethodTable::Entry* entry = server_->methods().Find(method);
    ASSERT_NE(entry, nullptr) << method;
    net::Handler inner = entry->handler;
    const net::Dispatch dispatch = entry->dispatch;
    server_->methods().Register<Request>(
        method, net::PsCallers(),
        [this, inner, method](const net::RequestContext& ctx, const net::InMessage& request,
                              net::OutMessage* response) {
          {
            MutexLock lock(&mu_);
            ++calls_[method];
          }
          return inner(ctx, request, response);
        },
        dispatch);
  }

  net::EventLoop& loop_;
  int port_ = 0;
  std::unique_ptr<ps::VariableStore> store_;
  std::unique_ptr<ps::PsService> service_;
  std::unique_ptr<net::RpcServer> server_;
  Mutex mu_;
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
};

// Three PS. `table` [8, 2] has a shard on each (rows 0-2, 3-5, 6-7); `wide` [4, 3] has shards
// on PS 0 and PS 2; `bias` [2] lives whole on PS 1 and `steps` (a scalar) on PS 0. So PS 0
// holds three variables' pieces, and every row operation on `table` may cross all three PS.
class PsClientSyncTest : public ::testing::Test {
 protected:
  static constexpr int kNumPs = 3;

  void SetUp() override {
    for (int i = 0; i < kNumPs; ++i) {
      ps_.push_back(std::make_unique<LoopbackPs>(server_loop_));
      ASSERT_TRUE(ps_.back()->Start().ok());
      rpc_.push_back(
          std::make_unique<net::RpcClient>(client_loop_, ClientOptions(ps_.back()->port())));
    }
    std::vector<net::RpcClient*> clients;
    for (auto& c : rpc_) clients.push_back(c.get());
    client_ = std::make_unique<PsClient>(clients, directory_);

    table_.name = "table";
    table_.shape = {8, 2};
    table_.shards = {
        {"table/part_0", 0, 0, 3}, {"table/part_1", 1, 3, 6}, {"table/part_2", 2, 6, 8}};
    VariablePlacement wide;
    wide.name = "wide";
    wide.shape = {4, 3};
    wide.shards = {{"wide/part_0", 0, 0, 2}, {"wide/part_1", 2, 2, 4}};
    VariablePlacement bias;
    bias.name = "bias";
    bias.shape = {2};
    bias.shards = {{"bias", 1, 0, 2}};
    VariablePlacement steps;
    steps.name = "steps";
    steps.dtype = DType::kI64;
    steps.shards = {{"steps", 0, 0, 1}};
    for (const VariablePlacement& p : {table_, wide, bias, steps}) Create(p);
  }

  void TearDown() override {
    client_.reset();
    rpc_.clear();
    ps_.clear();
  }

  void Create(const VariablePlacement& p) {
    OptimizerConfig sgd;
    sgd.learning_rate = 1.0f;
    const OptimizerConfig* optimizer = p.dtype == DType::kF32 ? &sgd : nullptr;
    ASSERT_TRUE(client_->CreateVariable(p, ps::InitializerSpec(), optimizer, false).ok()) << p.name;
    directory_.Add(p);
  }

  // Requests of `method` received by each PS so far.
  std::vector<int> Calls(const std::string& method) {
    std::vector<int> out;
    for (auto& p : ps_) out.push_back(p->calls(method));
    return out;
  }

  std::vector<int> Delta(const std::vector<int>& before, const std::vector<int>& after) {
    std::vector<int> d;
    for (size_t i = 0; i < before.size(); ++i) d.push_back(after[i] - before[i]);
    return d;
  }

  void AssignTable(const Tensor& value) {
    ASSERT_TRUE(client_->Update({{"table", UpdateKind::kAssign, value, std::nullopt}}).ok());
  }

  net::EventLoop server_loop_;
  net::EventLoop client_loop_;
  std::vector<std::unique_ptr<LoopbackPs>> ps_;
  std::vector<std::unique_ptr<net::RpcClient>> rpc_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
  VariablePlacement table_;
};

TEST_F(PsClientSyncTest, DenseUpdateSendsEachShardItsOwnRowsInOneRequestPerPs) {
  const std::vector<int> before = Calls("ps.Update");
  const Tensor table = Iota({8, 2}, 0);
  const Tensor wide = Iota({4, 3}, 100);
  ASSERT_TRUE(
      client_
          ->Update({{"table", UpdateKind::kAssign, table, std::nullopt},
                    {"wide", UpdateKind::kAssign, wide, std::nullopt},
                    {"bias", UpdateKind::kAssign, Tensor::FromVector<float>({2}, {7, 8}),
                     std::nullopt},
                    {"steps", UpdateKind::kAssign, Tensor::Scalar<int64_t>(42), std::nullopt}})
          .ok());
  // Four variables, seven pieces, three PS: one request each.
  EXPECT_EQ(Delta(before, Calls("ps.Update")), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(Floats(ps_[0]->Held("table/part_0")), RowsOf(table, {0, 1, 2}));
  EXPECT_EQ(Floats(ps_[1]->Held("table/part_1")), RowsOf(table, {3, 4, 5}));
  EXPECT_EQ(Floats(ps_[2]->Held("table/part_2")), RowsOf(table, {6, 7}));
  EXPECT_EQ(Floats(ps_[0]->Held("wide/part_0")), RowsOf(wide, {0, 1}));
  EXPECT_EQ(Floats(ps_[2]->Held("wide/part_1")), RowsOf(wide, {2, 3}));
  EXPECT_EQ(Floats(ps_[1]->Held("bias")), (std::vector<float>{7, 8}));
  EXPECT_EQ(ps_[0]->Held("steps").data<int64_t>()[0], 42);
  // Nothing landed where it does not belong.
  EXPECT_EQ(ps_[1]->Held("table/part_0").num_elements(), 0);
  EXPECT_EQ(ps_[0]->Held("bias").num_elements(), 0);
}

TEST_F(PsClientSyncTest, ReadReassemblesEveryVariableInTheOrderAsked) {
  const Tensor table = Iota({8, 2}, 0);
  const Tensor wide = Iota({4, 3}, 100);
  AssignTable(table);
  ASSERT_TRUE(client_->Update({{"wide", UpdateKind::kAssign, wide, std::nullopt}}).ok());
  const std::vector<int> before = Calls("ps.Read");
  auto values = client_->Read({"wide", "table", "bias", "steps", "table"});
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(Delta(before, Calls("ps.Read")), (std::vector<int>{1, 1, 1}));
  ASSERT_EQ(values->size(), 5u);
  EXPECT_TRUE((*values)[0].Equals(wide)) << (*values)[0].DebugString(12);
  EXPECT_TRUE((*values)[1].Equals(table)) << (*values)[1].DebugString(16);
  EXPECT_EQ((*values)[2].shape(), (Shape{2}));
  EXPECT_EQ((*values)[3].dtype(), DType::kI64);
  EXPECT_EQ((*values)[3].rank(), 0);
  EXPECT_TRUE((*values)[4].Equals(table));
}

TEST_F(PsClientSyncTest, GatherRoutesIdsToTheirShardsAndReturnsRowsInIdOrder) {
  const Tensor table = Iota({8, 2}, 0);
  AssignTable(table);
  const std::vector<int64_t> ids = {7, 0, 4, 4, 2, 6, 3, 0};
  std::vector<int> before = Calls("ps.Gather");
  auto rows = client_->Gather("table", Tensor::FromVector(ids));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Delta(before, Calls("ps.Gather")), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(rows->shape(), (Shape{8, 2}));
  EXPECT_EQ(Floats(*rows), RowsOf(table, ids));

  // i32 ids, and only the PS holding the rows asked for are asked.
  before = Calls("ps.Gather");
  auto some = client_->Gather("table", Tensor::FromVector(std::vector<int32_t>{7, 1, 6}));
  ASSERT_TRUE(some.ok()) << some.status();
  EXPECT_EQ(Delta(before, Calls("ps.Gather")), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(Floats(*some), RowsOf(table, {7, 1, 6}));
}

TEST_F(PsClientSyncTest, RowUpdatesAndGradientsReachOnlyTheRowsNamed) {
  AssignTable(Iota({8, 2}, 0));
  // Rows 5, 0, 7, 5: three PS; row 5 twice (applied in order, so added twice).
  ASSERT_TRUE(client_
                  ->Update({{"table", UpdateKind::kAdd,
                             Tensor::FromVector<float>({4, 2}, {1, 1, 2, 2, 3, 3, 4, 4}),
                             Tensor::FromVector(std::vector<int64_t>{5, 0, 7, 5})}})
                  .ok());
  std::vector<float> expected = Floats(Iota({8, 2}, 0));
  auto add = [&](int row, float v) {
    expected[2 * row] += v;
    expected[2 * row + 1] += v;
  };
  add(5, 1);
  add(0, 2);
  add(7, 3);
  add(5, 4);
  auto read = client_->Read({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(Floats((*read)[0]), expected);

  // Row gradients through each shard's SGD (learning rate 1): duplicates summed.
  const std::vector<int> before = Calls("ps.PushGradients");
  ASSERT_TRUE(
      client_
          ->PushGradients({{"table", Tensor::FromVector<float>({3, 2}, {1, 1, 1, 1, 10, 10}),
                            Tensor::FromVector(std::vector<int64_t>{4, 4, 1})}})
          .ok());
  EXPECT_EQ(Delta(before, Calls("ps.PushGradients")), (std::vector<int>{1, 1, 0}));
  add(4, -2);
  add(1, -10);
  read = client_->Read({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(Floats((*read)[0]), expected);

  // A dense gradient is split like a dense update.
  ASSERT_TRUE(client_->PushGradients({{"table", Iota({8, 2}, 1), std::nullopt}}).ok());
  const std::vector<float> gradient = Floats(Iota({8, 2}, 1));
  for (size_t i = 0; i < expected.size(); ++i) expected[i] -= gradient[i];
  read = client_->Read({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(Floats((*read)[0]), expected);
}

TEST_F(PsClientSyncTest, BlockingCallsFromSeveralThreadsAllApply) {
  // Thread t adds to rows t (PS 0) and 7 - t (PS 1 or 2) and reads rows 3 and 4 (PS 1),
  // which no thread writes.
  constexpr int kThreads = 3;
  constexpr int kCalls = 50;
  const Tensor initial = Iota({8, 2}, 0);
  AssignTable(initial);
  std::atomic<int> failed{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        absl::Status s = client_->Update(
            {{"table", UpdateKind::kAdd, Tensor::FromVector<float>({2, 2}, {1, 1, 1, 1}),
              Tensor::FromVector(std::vector<int64_t>{t, 7 - t})}});
        if (!s.ok()) failed.fetch_add(1);
        auto rows = client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{3, 4}));
        if (!rows.ok()) {
          failed.fetch_add(1);
        } else if (Floats(*rows) != RowsOf(initial, {3, 4})) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  auto read = client_->Read({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<float> expected = Floats(initial);
  for (int t = 0; t < kThreads; ++t) {
    for (int row : {t, 7 - t}) {
      expected[2 * row] += kCalls;
      expected[2 * row + 1] += kCalls;
    }
  }
  EXPECT_EQ(Floats((*read)[0]), expected);
}

TEST_F(PsClientSyncTest, EmptyOperationsSendNothing) {
  const std::vector<int> reads = Calls("ps.Read");
  const std::vector<int> updates = Calls("ps.Update");
  const std::vector<int> gathers = Calls("ps.Gather");
  auto none = client_->Read({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(client_->Update({}).ok());
  auto no_rows = client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{}));
  ASSERT_TRUE(no_rows.ok()) << no_rows.status();
  EXPECT_EQ(no_rows->shape(), (Shape{0, 2}));
  EXPECT_EQ(Calls("ps.Read"), reads);
  EXPECT_EQ(Calls("ps.Update"), updates);
  EXPECT_EQ(Calls("ps.Gather"), gathers);
}

TEST_F(PsClientSyncTest, UnknownVariableIsNotFoundNamingItAndNothingIsSent) {
  const std::vector<int> reads = Calls("ps.Read");
  const std::vector<int> updates = Calls("ps.Update");
  auto read = client_->Read({"table", "nope"});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("'nope'"), std::string::npos) << read.status();
  EXPECT_FALSE(IsPsUnreachable(read.status()));
  absl::Status update =
      client_->Update({{"table", UpdateKind::kAssign, Iota({8, 2}, 1), std::nullopt},
                       {"nope", UpdateKind::kAssign, Tensor::Scalar(1.0f), std::nullopt}});
  EXPECT_EQ(update.code(), absl::StatusCode::kNotFound) << update;
  EXPECT_EQ(client_->PushGradients({{"nope", Tensor::Scalar(1.0f), std::nullopt}}).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Gather("nope", Tensor::FromVector(std::vector<int64_t>{0})).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Calls("ps.Read"), reads);
  EXPECT_EQ(Calls("ps.Update"), updates);
  // The valid half of the refused update was not applied either.
  EXPECT_EQ(Floats(ps_[0]->Held("table/part_0")), std::vector<float>(6, 0.0f));
}

TEST_F(PsClientSyncTest, BadValuesAndIdsAreRefusedBeforeAnyShardIsTouched) {
  const std::vector<int> updates = Calls("ps.Update");
  const std::vector<int> grads = Calls("ps.PushGradients");
  const Tensor ones =
      Tensor::FromVector<float>({8, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  auto update = [&](VariableUpdate second) {
    return client_->Update(
        {{"table", UpdateKind::kAssign, ones, std::nullopt}, std::move(second)});
  };
  // Wrong shape, wrong dtype: the first (valid) update of the call is not sent either.
  EXPECT_EQ(update({"bias", UpdateKind::kAssign, Tensor::FromVector<float>({3}, {1, 2, 3}),
                    std::nullopt})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      update({"bias", UpdateKind::kAssign, Tensor(DType::kI32, {2}), std::nullopt}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      update({"table", UpdateKind::kAssign, Tensor(DType::kF32, {7, 2}), std::nullopt}).code(),
      absl::StatusCode::kInvalidArgument);
  // Ids: not integers, not 1-D, out of range either way, or not matching the rows given.
  EXPECT_EQ(
      update({"table", UpdateKind::kAdd, Tensor(DType::kF32, {1, 2}), Tensor(DType::kF32, {1})})
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(update({"table", UpdateKind::kAdd, Tensor(DType::kF32, {1, 2}),
                    Tensor(DType::kI64, {1, 1})})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(update({"table", UpdateKind::kAdd, Tensor(DType::kF32, {2, 2}),
                    Tensor::FromVector(std::vector<int64_t>{0, 8})})
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(update({"table", UpdateKind::kAdd, Tensor(DType::kF32, {1, 2}),
                    Tensor::FromVector(std::vector<int64_t>{-1})})
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(update({"table", UpdateKind::kAdd, Tensor(DType::kF32, {3, 2}),
                    Tensor::FromVector(std::vector<int64_t>{0, 7})})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(update({"steps", UpdateKind::kAdd, Tensor::Scalar<int64_t>(1),
                    Tensor::FromVector(std::vector<int64_t>{0})})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_
                ->PushGradients({{"table", ones, std::nullopt},
                                 {"wide", Tensor(DType::kF32, {4, 2}), std::nullopt}})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Calls("ps.Update"), updates);
  EXPECT_EQ(Calls("ps.PushGradients"), grads);
  for (int i = 0; i < kNumPs; ++i) {
    EXPECT_EQ(Floats(ps_[i]->Held(table_.shards[i].name)), std::vector<float>(i == 2 ? 4 : 6, 0.0f))
        << i;
  }
  // Gather: a scalar has no rows; ids must be 1-D integers in range.
  EXPECT_EQ(client_->Gather("steps", Tensor::FromVector(std::vector<int64_t>{0})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Gather("table", Tensor(DType::kF32, {1})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{3, 8})).status().code(),
      absl::StatusCode::kOutOfRange);
}

TEST_F(PsClientSyncTest, APsThatIsDownIsUnavailableNamingItWhileTheOthersServe) {
  AssignTable(Iota({8, 2}, 0));
  ps_[2]->Stop();
  rpc_[2]->Disconnect();
  auto read = client_->Read({"table"});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
  EXPECT_TRUE(IsPsUnreachable(read.status()));
  EXPECT_FALSE(IsPsStateLost(read.status()));
  EXPECT_NE(read.status().message().find("ps 2 (127.0.0.1:"), std::string::npos) << read.status();
  EXPECT_TRUE(IsPsUnreachable(
      client_->Update({{"table", UpdateKind::kAssign, Iota({8, 2}, 0), std::nullopt}})));
  EXPECT_TRUE(IsPsUnreachable(
      client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{0, 7})).status()));
  EXPECT_FALSE(client_->Health(2, absl::Seconds(5)).ok());
  // Operations that need only the live PS go on.
  auto rows = client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{5, 0}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Floats(*rows), RowsOf(Iota({8, 2}, 0), {5, 0}));
  EXPECT_TRUE(client_->Read({"bias", "steps"}).ok());
  EXPECT_TRUE(client_->Health(0, absl::Seconds(5)).ok());
}

TEST_F(PsClientSyncTest, PsRestartedEmptyIsStateLostUntilShardsRecreated) {
  const Tensor table = Iota({8, 2}, 0);
  AssignTable(table);
  ASSERT_TRUE(client_
                  ->Update({{"bias", UpdateKind::kAssign,
                             Tensor::FromVector<float>({2}, {5, 6}), std::nullopt}})
                  .ok());
  ASSERT_TRUE(ps_[1]->Restart().ok());
  rpc_[1]->Disconnect();  // so the next call meets the new process, not the dropped connection
  auto read = client_->Read({"table"});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnavailable) << read.status();
  EXPECT_TRUE(IsPsStateLost(read.status())) << read.status();
  EXPECT_EQ(LostPs(read.status()), 1);
  absl::Status push =
      client_->PushGradients({{"bias", Tensor::FromVector<float>({2}, {1, 1}), std::nullopt}});
  EXPECT_TRUE(IsPsStateLost(push)) << push;
  EXPECT_EQ(LostPs(push), 1);
  // Rows on the PS that kept its state are still served.
  auto rows = client_->Gather("table", Tensor::FromVector(std::vector<int64_t>{7, 2}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(Floats(*rows), RowsOf(table, {7, 2}));
  // Recreating is idempotent where the shards exist and fills the restarted PS afresh.
  ASSERT_TRUE(client_->CreateVariable(table_, ps::InitializerSpec(), nullptr, false).ok());
  read = client_->Read({"table"});
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<float> expected = Floats(table);
  for (int i = 6; i < 12; ++i) expected[i] = 0;  // rows 3-5 restarted as zeros
  EXPECT_EQ(Floats((*read)[0]), expected);
  EXPECT_TRUE(IsPsStateLost(client_->Read({"bias"}).status()));
}

TEST_F(PsClientSyncTest, CreatingAVariableOnAPsThatIsDownIsUnavailable) {
  ps_[1]->Stop();
  rpc_[1]->Disconnect();
  VariablePlacement fresh;
  fresh.name = "fresh";
  fresh.shape = {4};
  fresh.shards = {{"fresh/part_0", 0, 0, 2}, {"fresh/part_1", 1, 2, 4}};
  absl::Status s =
      client_->CreateVariable(fresh, ps::InitializerSpec(), nullptr, /*wait_for_ready=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("ps 1 (127.0.0.1:"), std::string::npos) << s;
  // The PS that is up created its shard (creation is idempotent, so a retry completes it).
  EXPECT_EQ(ps_[0]->Held("fresh/part_0").num_elements(), 2);
  ASSERT_TRUE(ps_[1]->Start(ps_[1]->port()).ok());
  ASSERT_TRUE(
      client_->CreateVariable(fresh, ps::InitializerSpec(), nullptr, /*wait_for_ready=*/true).ok());
  EXPECT_EQ(ps_[1]->Held("fresh/part_1").num_elements(), 2);
}

TEST_F(PsClientSyncTest, PlacementOnAnUnknownPsIsAnErrorNotACrash) {
  VariablePlacement stray;
  stray.name = "stray";
  stray.shape = {4};
  stray.shards = {{"stray/part_0", 0, 0, 2}, {"stray/part_1", kNumPs, 2, 4}};
  directory_.Add(stray);
  const std::vector<int> reads = Calls("ps.Read");
  auto read = client_->Read({"stray"});
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << read.status();
  EXPECT_EQ(
      client_->Update({{"stray", UpdateKind::kAssign, Tensor(DType::kF32, {4}), std::nullopt}})
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Gather("stray", Tensor::FromVector(std::vector<int64_t>{3})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Calls("ps.Read"), reads);
}

// A PS whose answers each test writes. `v` [4, 2] lives whole on it; `t` [4, 2] has two shards,
// both on it (so Gather and Read of `t` reassemble).
class FakePsTest : public ::testing::Test {
 protected:
  using Answer = std::function<absl::Status(const net::InMessage&, net::OutMessage*)>;

  void SetUp() override {
    net::RpcServer::Options o;
    o.role = "ps";
    o.token = kToken;
    server_ = std::make_unique<net::RpcServer>(server_loop_, o);
    for (const char* method : {"ps.Read", "ps.Gather", "ps.Update", "ps.Health"}) Serve(method);
    ASSERT_TRUE(server_->Start().ok());
    rpc_ = std::make_unique<net::RpcClient>(client_loop_, ClientOptions(server_->port()));
    VariablePlacement v;
    v.name = "v";
    v.shape = {4, 2};
    v.shards = {{"v", 0, 0, 4}};
    directory_.Add(v);
    VariablePlacement t;
    t.name = "t";
    t.shape = {4, 2};
    t.shards = {{"t/part_0", 0, 0, 2}, {"t/part_1", 0, 2, 4}};
    directory_.Add(t);
    client_ = std::make_unique<PsClient>(std::vector<net::RpcClient*>{rpc_.get()}, directory_);
  }

  void TearDown() override {
    Release();
    client_.reset();
    rpc_.reset();
    server_.reset();
  }

  void Serve(const std::string& method) {
    auto handler = [this, method](const net::RequestContext&, const net::InMessage& request,
                                  net::OutMessage* response) -> absl::Status {
      Answer answer;
      {
        MutexLock lock(&mu_);
        auto it = answers_.find(method);
        if (it == answers_.end()) return absl::UnimplementedError(method);
        answer = it->second;
      }
      return answer(request, response);
    };
    if (method == "ps.Read") {
      server_->Register<wire::ReadRequest>(method, net::PsCallers(), handler);
    } else if (method == "ps.Gather") {
      server_->Register<wire::GatherRequest>(method, net::PsCallers(), handler);
    } else if (method == "ps.Update") {
      server_->Register<wire::UpdateRequest>(method, net::PsCallers(), handler);
    } else {
      server_->Register<wire::Empty>(method, net::PsCallers(), handler);
    }
  }

  void SetAnswer(const std::string& method, Answer answer) {
    MutexLock lock(&mu_);
    answers_[method] = std::move(answer);
  }

  // ps.Read answered with `tensors` (one TensorRef each), then `edit` run on the body.
  void AnswerReadWith(std::vector<Tensor> tensors,
                      std::function<void(wire::ReadResponse::Builder)> edit = nullptr) {
    SetAnswer("ps.Read", [tensors, edit](const net::InMessage&, net::OutMessage* response) {
      auto body = response->InitResponseBody<wire::ReadResponse>();
      auto list = body.initTensors(static_cast<unsigned>(tensors.size()));
      for (unsigned i = 0; i < tensors.size(); ++i) response->AddTensor(tensors[i], list[i]);
      if (edit) edit(body);
      return absl::OkStatus();
    });
  }

  // ps.Gather answered, for each lookup, with `make(number of ids asked)`.
  void AnswerGatherWith(std::function<Tensor(int64_t ids)> make) {
    SetAnswer("ps.Gather", [make](const net::InMessage& request, net::OutMessage* response) {
      auto lookups = request.RequestBody<wire::GatherRequest>().getLookups();
      auto values = response->InitResponseBody<wire::GatherResponse>().initValues(lookups.size());
      for (unsigned i = 0; i < lookups.size(); ++i) {
        absl::StatusOr<Tensor> ids = request.TensorAt(lookups[i].getIds());
        if (!ids.ok()) return ids.status();
        response->AddTensor(make(ids->num_elements()), values[i]);
      }
      return absl::OkStatus();
    });
  }

  // Makes every ps.Update wait until Release (or the test's end).
  void HoldUpdates() {
    SetAnswer("ps.Update", [this](const net::InMessage&, net::OutMessage* response) {
      response->InitResponseBody<wire::UpdateResponse>();
      MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&released_));
      return absl::OkStatus();
    });
  }

  void Release() {
    MutexLock lock(&mu_);
    released_ = true;
  }

  Mutex mu_;
  std::map<std::string, Answer> answers_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  net::EventLoop server_loop_;
  net::EventLoop client_loop_;
  std::unique_ptr<net::RpcServer> server_;
  std::unique_ptr<net::RpcClient> rpc_;
  VariableDirectory directory_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(FakePsTest, AWellFormedAnswerIsReturned) {
  AnswerReadWith({Iota({4, 2}, 0)});
  auto read = client_->Read({"v"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE((*read)[0].Equals(Iota({4, 2}, 0)));
  AnswerGatherWith([](int64_t n) { return Iota({n, 2}, 0); });
  auto rows = client_->Gather("t", Tensor::FromVector(std::vector<int64_t>{3, 0}));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape(), (Shape{2, 2}));
}

TEST_F(FakePsTest, ShardsOfAReadAreReassembledHoweverTheAnswerLaysOutItsPayloads) {
  // Each shard is received straight into its rows of the whole value where it can be, and
  // copied there where it cannot: here the answer's two shards share one payload.
  AnswerReadWith({Iota({2, 2}, 0), Iota({2, 2}, 4)});
  auto read = client_->Read({"t"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE((*read)[0].Equals(Iota({4, 2}, 0))) << (*read)[0].DebugString(8);
  AnswerReadWith({Iota({2, 2}, 0), Iota({2, 2}, 4)},
                 [](wire::ReadResponse::Builder body) { body.getTensors()[1].setPayload(0); });
  read = client_->Read({"t"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE((*read)[0].Equals(Concat({Iota({2, 2}, 0), Iota({2, 2}, 0)}).value())) << (*read)[0].DebugString(8);
  // Beside an unsharded variable in the same answer, which is returned as received.
  AnswerReadWith({Iota({4, 2}, 10), Iota({2, 2}, 0), Iota({2, 2}, 4)});
  read = client_->Read({"v", "t"});
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE((*read)[0].Equals(Iota({4, 2}, 10))) << (*read)[0].DebugString(8);
  EXPECT_TRUE((*read)[1].Equals(Iota({4, 2}, 0))) << (*read)[1].DebugString(8);
}

TEST_F(FakePsTest, ReadAnsweredWithTheWrongNumberOfTensorsIsAnError) {
  AnswerReadWith({});
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInternal);
  AnswerReadWith({Iota({4, 2}, 0), Iota({4, 2}, 0)});
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInternal);
  // `t` asks for two shards in one request; one answer is not enough.
  AnswerReadWith({Iota({2, 2}, 0)});
  EXPECT_EQ(client_->Read({"t"}).status().code(), absl::StatusCode::kInternal);
}

TEST_F(FakePsTest, ReadAnsweredWithAnotherShapeOrDtypeIsAnErrorNotTheValue) {
  AnswerReadWith({Iota({3, 2}, 0)});
  auto short_read = client_->Read({"v"});
  EXPECT_FALSE(short_read.ok()) << "returned " << short_read->at(0).DebugString(8);
  AnswerReadWith({Iota({8}, 0)});  // the right byte count in another shape
  EXPECT_FALSE(client_->Read({"v"}).ok());
  AnswerReadWith({Tensor(DType::kI32, {4, 2})});
  EXPECT_FALSE(client_->Read({"v"}).ok());
  // A sharded variable: each shard is checked, not only what concatenates.
  AnswerReadWith({Iota({1, 2}, 0), Iota({3, 2}, 0)});
  auto sharded = client_->Read({"t"});
  EXPECT_FALSE(sharded.ok()) << "returned " << sharded->at(0).DebugString(8);
  AnswerReadWith({Iota({2, 2}, 0), Iota({2, 3}, 0)});
  EXPECT_FALSE(client_->Read({"t"}).ok());
}

TEST_F(FakePsTest, ReadAnsweredWithBrokenTensorReferencesIsInvalidArgument) {
  // A reference to a payload the frame does not carry.
  AnswerReadWith({Iota({4, 2}, 0)},
                 [](wire::ReadResponse::Builder body) { body.getTensors()[0].setPayload(7); });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInvalidArgument);
  // A shape far larger than the payload's bytes.
  AnswerReadWith({Iota({4, 2}, 0)}, [](wire::ReadResponse::Builder body) {
    net::SetShape(body.getTensors()[0].initShape(2), {1 << 20, 2});
  });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInvalidArgument);
  // Negative dimensions, and an unknown dtype.
  AnswerReadWith({Iota({4, 2}, 0)}, [](wire::ReadResponse::Builder body) {
    net::SetShape(body.getTensors()[0].initShape(2), {-4, -2});
  });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInvalidArgument);
  AnswerReadWith({Iota({4, 2}, 0)},
                 [](wire::ReadResponse::Builder body) { body.getTensors()[0].setDtype(250); });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInvalidArgument);
}

// What PsClient answers for a PS answer it cannot use: Internal when it does not fit the
// request, InvalidArgument when it cannot be decoded (a wrong pointer kind may read as either:
// Cap'n Proto reads some as empty).
bool Refused(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInternal || s.code() == absl::StatusCode::kInvalidArgument;
}

TEST_F(FakePsTest, MalformedResponseBodiesAreErrors) {
  // The tensor list is text.
  SetAnswer("ps.Read", [](const net::InMessage&, net::OutMessage* response) {
    auto body = response->InitResponseBody<wire::ReadResponse>();
    net::testutil::PointerField(body, "tensors").setAs<capnp::Text>("not a list of tensors");
    return absl::OkStatus();
  });
  EXPECT_TRUE(Refused(client_->Read({"v"}).status())) << client_->Read({"v"}).status();
  // No body at all: read as an empty answer, which has the wrong count.
  SetAnswer("ps.Read", [](const net::InMessage&, net::OutMessage*) { return absl::OkStatus(); });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInternal);
  // Another message's body (a Gather answer where a Read answer belongs) of the wrong size.
  SetAnswer("ps.Read", [](const net::InMessage&, net::OutMessage* response) {
    response->InitResponseBody<wire::GatherResponse>().initValues(3);
    return absl::OkStatus();
  });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInternal);
  SetAnswer("ps.Gather", [](const net::InMessage&, net::OutMessage* response) {
    auto body = response->InitResponseBody<wire::GatherResponse>();
    net::testutil::PointerField(body, "values").setAs<capnp::Text>("rows");
    return absl::OkStatus();
  });
  const absl::Status gather =
      client_->Gather("t", Tensor::FromVector(std::vector<int64_t>{0, 3})).status();
  EXPECT_TRUE(Refused(gather)) << gather;
}

TEST_F(FakePsTest, GatherAnswerOfWrongShapeIsAnErrorAndNotCopied) {
  const Tensor ids = Tensor::FromVector(std::vector<int64_t>{3, 0, 2});
  // Rows narrower than the variable's: copying row_bytes per row would read past the payload.
  AnswerGatherWith([](int64_t n) { return Iota({n, 1}, 0); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  AnswerGatherWith([](int64_t n) { return Tensor(DType::kF32, {n, 0}); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  AnswerGatherWith([](int64_t n) { return Iota({n}, 0); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  // Wider rows, too few or too many rows, another dtype.
  AnswerGatherWith([](int64_t n) { return Iota({n, 3}, 0); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  AnswerGatherWith([](int64_t n) { return Iota({n - 1, 2}, 0); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  AnswerGatherWith([](int64_t n) { return Iota({n + 1, 2}, 0); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  AnswerGatherWith([](int64_t n) { return Tensor(DType::kF64, {n, 2}); });
  EXPECT_EQ(client_->Gather("t", ids).status().code(), absl::StatusCode::kInternal);
  // A plain variable's rows are handed on without a copy: the same checks apply.
  AnswerGatherWith([](int64_t n) { return Iota({n, 3}, 0); });
  auto plain = client_->Gather("v", ids);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kInternal)
      << "returned " << plain->DebugString(8);
  AnswerGatherWith([](int64_t n) { return Iota({n, 2, 1}, 0); });
  EXPECT_EQ(client_->Gather("v", ids).status().code(), absl::StatusCode::kInternal);
}

TEST_F(FakePsTest, ErrorsFromThePsKeepTheirCode) {
  SetAnswer("ps.Read", [](const net::InMessage&, net::OutMessage*) {
    return absl::ResourceExhaustedError("full");
  });
  absl::Status read = client_->Read({"v"}).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kResourceExhausted) << read;
  EXPECT_FALSE(IsPsUnreachable(read));
  SetAnswer("ps.Read", [](const net::InMessage&, net::OutMessage*) {
    return absl::InvalidArgumentError("bad name");
  });
  EXPECT_EQ(client_->Read({"v"}).status().code(), absl::StatusCode::kInvalidArgument);
  // NotFound for a variable the directory holds: the PS lost it.
  SetAnswer("ps.Read",
            [](const net::InMessage&, net::OutMessage*) { return absl::NotFoundError("no 'v'"); });
  read = client_->Read({"v"}).status();
  EXPECT_TRUE(IsPsStateLost(read)) << read;
  EXPECT_EQ(LostPs(read), 0);
  // A method the PS does not serve.
  EXPECT_EQ(client_->PushGradients({{"v", Iota({4, 2}, 0), std::nullopt}}).code(),
            absl::StatusCode::kUnimplemented);
}

TEST_F(FakePsTest, APsThatDoesNotAnswerInTimeIsDeadlineExceededNamingIt) {
  HoldUpdates();
  PsClient::Options options;
  options.timeout = absl::Milliseconds(200);
  PsClient impatient({rpc_.get()}, directory_, options);
  absl::Status s =
      impatient.Update({{"v", UpdateKind::kAssign, Iota({4, 2}, 0), std::nullopt}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_TRUE(IsPsUnreachable(s));
  EXPECT_NE(s.message().find("ps 0 (127.0.0.1:"), std::string::npos) << s;
  Release();
  // The connection stays usable: the next call is answered.
  EXPECT_TRUE(
      impatient.Update({{"v", UpdateKind::kAssign, Iota({4, 2}, 0), std::nullopt}}).ok());
}

}  // namespace
}  // namespace ps_client_sync_test_internal
}  // namespace asyncps
