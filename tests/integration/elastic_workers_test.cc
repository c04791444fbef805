// Elastic membership (issue 37) with real worker processes and the test as an --elastic chief:
// a worker that was not in the starting cluster joins by registering, is admitted once its
// per-worker dataset is built, and reads batches; a worker leaves by SIGTERM (it asks the chief
// to drain it, then exits 0) and a worker killed while it drains: every id of a dynamically
// sharded epoch is counted exactly once, and both leavings are departures, not failures.
// Bad registrations (a wrong token, an index that is taken) are refused and change nothing.
#include <signal.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "coordinator/chief_process.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/membership_service.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/status_macros.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"
#include "metrics/status_board.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/replicated_cluster.h"

namespace asyncps {
namespace {

using testutil::LocalCluster;
using testutil::WaitFor;

constexpr int64_t kIds = 6'000;
constexpr int64_t kBatch = 50;
constexpr int64_t kRecordsPerSplit = 500;
constexpr absl::Duration kTimeout = absl::Seconds(60);

class ElasticWorkersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = 2;
    o.num_ps = 1;
    // The starting workers run --elastic too: they register (a no-op) and leave on SIGTERM.
    o.extra_env = {{"ASYNCPS_ELASTIC", "1"}, {"ASYNCPS_LOG_LEVEL", "info"}};
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    ChiefProcess::Options chief_options = cluster_->ChiefOptions();
    chief_options.process.elastic = true;
    auto process = ChiefProcess::Create(cluster_->chief_spec(), chief_options);
    ASSERT_TRUE(process.ok()) << process.status();
    chief_ = std::make_unique<testutil::TestChief>(std::move(*process), *FixedShardsPartitioner::Create(1));
    auto counts = chief_->strategy().CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
    ASSERT_TRUE(counts.ok()) << counts.status();
    counts_ = std::make_unique<ShardedVariable>(*counts);
    coordinator_ =
        std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, testutil::FastFailureDetection());
    ASSERT_GT(coordinator_->membership_port(), 0) << "--elastic: the membership service is not serving";
  }

  void TearDown() override {
    coordinator_.reset();
    counts_.reset();
    chief_.reset();
    for (auto& p : extra_) p.reset();
    cluster_.reset();
  }

  // Starts worker `index` at a new address, not in the starting cluster, with `token`.
  absl::StatusOr<Subprocess*> StartJoiner(int index, const std::string& token) {
    ASSIGN_OR_RETURN(std::vector<int> ports, PickUnusedPorts(1));
    const ClusterSpec& spec = cluster_->chief_spec();
    std::map<TaskType, std::vector<std::string>> jobs;
    jobs[TaskType::kChief].push_back(spec.chief());
    jobs[TaskType::kPs] = spec.ps();
    jobs[TaskType::kWorker] = spec.workers();
    while (static_cast<int>(jobs[TaskType::kWorker].size()) <= index) {
      jobs[TaskType::kWorker].push_back(absl::StrCat("127.0.0.1:", ports[0]));
    }
    jobs[TaskType::kWorker][static_cast<size_t>(index)] = absl::StrCat("127.0.0.1:", ports[0]);
    ASSIGN_OR_RETURN(ClusterSpec joiner, ClusterSpec::Create(jobs, TaskType::kWorker, index));
    Subprocess::Options o;
    o.argv = {LocalCluster::BinaryPath("asyncps_test_program")};
    o.env = {{"TF_CONFIG", joiner.ToTfConfig(TaskType::kWorker, index)},
             {"ASYNCPS_CLUSTER_TOKEN", token},
             {"ASYNCPS_METRICS_PORT", "-1"},
             {"ASYNCPS_ELASTIC", "1"},
             {"ASYNCPS_LOG_LEVEL", "info"}};
    ASSIGN_OR_RETURN(auto process, Subprocess::Start(std::move(o)));
    extra_.push_back(std::move(process));
    return extra_.back().get();
  }

  double Metric(const std::string& name) {
    const std::string text = chief_->process().process_metrics().Serialize();
    const size_t at = text.find(name + "{");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(text.find("} ", at) + 2));
  }

  // The board's members of role worker: index -> {address, state}.
  std::map<int, std::pair<std::string, std::string>> BoardWorkers() {
    std::map<int, std::pair<std::string, std::string>> out;
    const auto doc = nlohmann::json::parse(chief_->process().status_board().Json());
    for (const auto& m : doc["members"]) {
      if (m["role"] == "worker") out[m["index"].get<int>()] = {m["address"], m["state"]};
    }
    return out;
  }

  std::vector<int64_t> Counts() {
    auto value = counts_->Read();
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) return {};
    return std::vector<int64_t>(value->data<int64_t>(), value->data<int64_t>() + kIds);
  }

  absl::StatusOr<PerWorkerValues> DynamicIterator() {
    auto dataset = coordinator_->CreatePerWorkerDataset(
        "ids", {{"n", std::to_string(kIds)}, {"batch", std::to_string(kBatch)}}, ShardingPolicy::kDynamic,
        kRecordsPerSplit);
    if (!dataset.ok()) return dataset.status();
    return dataset->MakeIterator();
  }

  // Runs count_ids over `iterator` until the epoch ends, in rounds of 16 closures; `between`
  // runs after each round but the last with its number. Returns the workers that counted.
  std::set<int64_t> RunEpoch(const PerWorkerValues& iterator, int64_t linger_ms,
                             const std::function<void(int)>& between) {
    std::set<int64_t> counted_on;
    for (int round = 0; round < 1000; ++round) {
      std::vector<RemoteValue> values;
      for (int i = 0; i < 16; ++i) {
        auto v = coordinator_->Schedule("count_ids", {iterator, Tensor::Scalar<int64_t>(linger_ms)});
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) values.push_back(*v);
      }
      const absl::Status joined = coordinator_->Join();
      for (const RemoteValue& v : values) {
        auto r = v.Fetch();
        if (r.ok() && r->at(1).data<int64_t>()[0] > 0) counted_on.insert(r->at(0).data<int64_t>()[0]);
      }
      if (absl::IsOutOfRange(joined)) return counted_on;
      EXPECT_TRUE(joined.ok()) << joined;
      if (!joined.ok()) return counted_on;
      if (between) between(round + 1);
    }
    ADD_FAILURE() << "the epoch did not end";
    return counted_on;
  }

  void ExpectEveryIdOnce() {
    const std::vector<int64_t> counts = Counts();
    ASSERT_EQ(counts.size(), static_cast<size_t>(kIds));
    int wrong = 0;
    for (int64_t id = 0; id < kIds; ++id) {
      if (counts[static_cast<size_t>(id)] != 1 && ++wrong <= 5) {
        ADD_FAILURE() << "id " << id << " counted " << counts[static_cast<size_t>(id)] << " times";
      }
    }
    EXPECT_EQ(wrong, 0);
  }

  Program program_ = testutil::MakeTestProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> counts_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> extra_;
};

// 2 -> 3 -> 2 -> 1 workers within one epoch: worker 2 joins and reads batches, then leaves by
// SIGTERM (drained, exit 0), then starting worker 1 leaves the same way.
TEST_F(ElasticWorkersTest, WorkersJoinAndLeaveMidEpochExactlyOnce) {
  auto iterator = DynamicIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  Subprocess* joiner = nullptr;
  const std::set<int64_t> counted_on = RunEpoch(*iterator, 2, [&](int round) {
    if (round == 1) {
      auto started = StartJoiner(2, cluster_->token());
      ASSERT_TRUE(started.ok()) << started.status();
      joiner = *started;
      // Admitted once its dataset and iterator are built on it.
      ASSERT_TRUE(WaitFor([&] { return coordinator_->workers_up() == 3; }, kTimeout)) << joiner->output();
      EXPECT_EQ(coordinator_->num_workers(), 3);
    } else if (round == 3) {
      joiner->Signal(SIGTERM);
      auto code = joiner->Wait(kTimeout);
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 0) << joiner->output();
      EXPECT_NE(joiner->output().find("worker 2 left the job: drained"), std::string::npos) << joiner->output();
      EXPECT_EQ(coordinator_->num_workers(), 2);
    } else if (round == 5) {
      cluster_->SignalWorker(1, SIGTERM);
      ASSERT_TRUE(WaitFor([&] { return coordinator_->num_workers() == 1; }, kTimeout));
      ASSERT_TRUE(WaitFor([&] { return !cluster_->worker_running(1); }, kTimeout));
    }
  });
  ExpectEveryIdOnce();
  EXPECT_TRUE(counted_on.count(2)) << "the joined worker counted nothing";
  EXPECT_EQ(Metric("asyncps_coordinator_worker_joins_total"), 1);
  EXPECT_EQ(Metric("asyncps_coordinator_worker_departures_total"), 2);
  EXPECT_EQ(Metric("asyncps_coordinator_worker_failures_total"), 0);
  const auto board = BoardWorkers();
  EXPECT_EQ(board.at(2).second, "left");
  EXPECT_EQ(board.at(1).second, "left");
  EXPECT_EQ(board.at(0).second, "up");
}

// A worker SIGKILLed while its drain waits for its closure: the closure goes back to the queue
// with its batch and runs on worker 0; the drain ends as a departure, and the epoch is exact.
TEST_F(ElasticWorkersTest, WorkerKilledWhileDrainingStaysExact) {
  auto iterator = DynamicIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  bool drained = false;
  RunEpoch(*iterator, 1, [&](int round) {
    if (round != 2) return;
    // One long closure per worker, so worker 1 is surely busy when its drain starts.
    std::vector<RemoteValue> slow;
    for (int i = 0; i < 2; ++i) {
      auto v = coordinator_->Schedule("count_ids", {*iterator, Tensor::Scalar<int64_t>(2000)});
      ASSERT_TRUE(v.ok()) << v.status();
      slow.push_back(*v);
    }
    ASSERT_TRUE(WaitFor(
        [&] {
          const auto doc = nlohmann::json::parse(chief_->process().status_board().Json());
          return doc["values"]["closures_in_flight"].get<double>() == 2;
        },
        kTimeout));
    absl::StatusOr<int> requeued = absl::UnknownError("not run");
    std::thread drain([&] { requeued = coordinator_->DrainWorker(1, absl::Seconds(30)); });
    ASSERT_TRUE(WaitFor([&] { return BoardWorkers()[1].second == "draining"; }, kTimeout));
    ASSERT_TRUE(cluster_->KillWorker(1).ok());
    drain.join();
    ASSERT_TRUE(requeued.ok()) << requeued.status();
    EXPECT_EQ(*requeued, 1);
    drained = true;
    EXPECT_TRUE(coordinator_->Join().ok());
    for (const RemoteValue& v : slow) EXPECT_TRUE(v.Fetch().ok());
  });
  ASSERT_TRUE(drained);
  ExpectEveryIdOnce();
  EXPECT_EQ(coordinator_->num_workers(), 1);
  EXPECT_EQ(Metric("asyncps_coordinator_worker_departures_total"), 1);
  EXPECT_EQ(Metric("asyncps_coordinator_worker_failures_total"), 0);
  EXPECT_EQ(BoardWorkers()[1].second, "left");
  const std::string board = chief_->process().status_board().Json();
  EXPECT_NE(board.find("\"worker_lost_while_draining\""), std::string::npos) << board;
  EXPECT_NE(board.find("\"worker_left\""), std::string::npos) << board;
}

// A new coordinator (as a chief restarted from its checkpoint builds) knows only the starting
// workers; a worker that joined the old one registers again by itself and is admitted.
TEST_F(ElasticWorkersTest, JoinedWorkerRegistersAgainWithANewCoordinator) {
  auto joiner = StartJoiner(2, cluster_->token());
  ASSERT_TRUE(joiner.ok()) << joiner.status();
  ASSERT_TRUE(WaitFor([&] { return coordinator_->workers_up() == 3; }, kTimeout)) << (*joiner)->output();
  coordinator_.reset();
  coordinator_ =
      std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, testutil::FastFailureDetection());
  ASSERT_GT(coordinator_->membership_port(), 0);
  EXPECT_LE(coordinator_->num_workers(), 3);
  ASSERT_TRUE(WaitFor([&] { return coordinator_->workers_up() == 3; }, kTimeout)) << (*joiner)->output();
  std::set<int64_t> seen;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto v = coordinator_->Schedule("whoami");
        auto r = v.ok() ? v->Fetch() : absl::StatusOr<Values>(v.status());
        if (r.ok()) seen.insert(r->at(0).data<int64_t>()[0]);
        return seen.count(2) > 0;
      },
      kTimeout));
}

// Refused with a clear error, nothing changed: a join with a wrong token (the handshake), a
// join under an index that is a member elsewhere, bad requests to the coordinator itself.
TEST_F(ElasticWorkersTest, BadJoinsAreRefusedAndChangeNothing) {
  ASSERT_TRUE(WaitFor([&] { return coordinator_->workers_up() == 2; }, kTimeout));
  const auto before = BoardWorkers();

  auto wrong_token = StartJoiner(2, "not-the-token");
  ASSERT_TRUE(wrong_token.ok()) << wrong_token.status();
  auto code = (*wrong_token)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_NE((*wrong_token)->output().find("the chief refused its registration"), std::string::npos)
      << (*wrong_token)->output();
  EXPECT_NE((*wrong_token)->output().find("wrong cluster token"), std::string::npos) << (*wrong_token)->output();

  auto duplicate = StartJoiner(1, cluster_->token());
  ASSERT_TRUE(duplicate.ok()) << duplicate.status();
  code = (*duplicate)->Wait(kTimeout);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
  EXPECT_NE((*duplicate)->output().find("worker 1 is already a member"), std::string::npos) << (*duplicate)->output();

  EXPECT_EQ(coordinator_->JoinWorker(-1, "127.0.0.1:1").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->JoinWorker(MembershipService::kMaxWorkerIndex, "127.0.0.1:1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->JoinWorker(3, "no port").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coordinator_->DrainWorker(7, absl::Seconds(1)).status().code(), absl::StatusCode::kNotFound);
  // A starting worker registering again is a no-op.
  auto again = coordinator_->JoinWorker(0, cluster_->chief_spec().workers()[0]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_member);

  EXPECT_EQ(coordinator_->num_workers(), 2);
  EXPECT_EQ(coordinator_->workers_up(), 2);
  EXPECT_EQ(BoardWorkers(), before);
  EXPECT_EQ(Metric("asyncps_coordinator_worker_joins_total"), 0);
  // And the job still runs on both.
  auto v = coordinator_->Schedule("whoami");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->Fetch().ok());
}

}  // namespace
}  // namespace asyncps
