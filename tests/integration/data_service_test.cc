// The tf.data service with real processes: a dispatcher (with a work_dir journal), 3 data
// workers and 2 training workers running data_service_test_program, the test process as chief.
// DYNAMIC: a range of 20,000 ids read through the service under the coordinator's split
// cursor, a step adding 1 to row `id` of a PS counter, while data workers and training workers
// are SIGKILLed and restarted and the dispatcher is SIGKILLed and restarted from its work_dir:
// every row ends at exactly 1. OFF with a shared job: every id is counted once per data worker.
// Coordinated reads: two consumers of a named job get the two elements of each round.
// Bad input gets clear errors and the service keeps serving.
#include <signal.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/subprocess.h"
#include "core/sync.h"
#include "core/test_temp_dir.h"
#include "data/tfrecord_writer.h"
#include "data_service/service_client.h"
#include "data_service/service_dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/http_test_client.h"
#include "metrics/process_metrics.h"
#include "partitioners/partitioner.h"
#include "tests/integration/test_functions.h"
#include "tests/testutil/local_cluster.h"
#include "tests/testutil/output_text.h"
#include "tests/testutil/worker_killer.h"

namespace asyncps {
namespace {

using ::testing::HasSubstr;
using testutil::LocalCluster;

constexpr int kTrainers = 2;
constexpr int kDataWorkers = 3;
constexpr int64_t kIds = 20'000;
constexpr int64_t kBatch = 50;
constexpr int64_t kRecordsPerSplit = 1'000;
constexpr char kProgram[] = "data_service_test_program";

// The first rows of `rows` (up to 10) that are not `expected`, as " row I=V" each.
std::string Mismatches(const std::vector<int64_t>& rows, int64_t expected) {
  std::string out;
  int shown = 0;
  for (size_t i = 0; i < rows.size() && shown < 10; ++i) {
    if (rows[i] != expected) absl::StrAppend(&out, " row ", i, "=", rows[i]), ++shown;
  }
  return out;
}

class DataServiceTest : public ::testing::Test {
 protected:
  // The variants below: the dispatcher in the chief (no dispatcher task), and the chief's and
  // the data workers' metrics endpoints served.
  virtual bool DispatcherInChief() const { return false; }
  virtual bool ServeMetrics() const { return false; }

  void SetUp() override {
    LocalCluster::Options o;
    o.num_workers = kTrainers;
    o.num_ps = 1;
    o.worker_binary = kProgram;
    auto cluster = LocalCluster::Start(o);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);

    // The service's tasks join the training cluster's spec.
    auto ports = PickUnusedPorts(1 + kDataWorkers);
    ASSERT_TRUE(ports.ok()) << ports.status();
    std::map<TaskType, std::vector<std::string>> jobs = {{TaskType::kChief, {cluster_->chief_spec().chief()}},
                                                         {TaskType::kPs, cluster_->chief_spec().ps()},
                                                         {TaskType::kWorker, cluster_->chief_spec().workers()}};
    if (!DispatcherInChief()) jobs[TaskType::kDispatcher] = {absl::StrCat("127.0.0.1:", (*ports)[0])};
    for (int i = 0; i < kDataWorkers; ++i) {
      jobs[TaskType::kDataWorker].push_back(absl::StrCat("127.0.0.1:", (*ports)[1 + i]));
      // Each start takes an ephemeral metrics port and says which (Launch reads it): a port
      // picked here and released could be taken by another test's process before the data
      // worker binds it, and a data worker that cannot bind exits.
      if (ServeMetrics()) data_worker_metrics_ports_.push_back(0);
    }
    auto spec = ClusterSpec::Create(jobs, TaskType::kChief, 0);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    const absl::Status chief = StartChief();
    ASSERT_TRUE(chief.ok()) << chief;
    auto counts = chief_->strategy().CreateVariable("counts", init::Zeros({kIds}, DType::kI64));
    ASSERT_TRUE(counts.ok()) << counts.status();
    counts_ = std::make_unique<ShardedVariable>(*counts);
    coordinator_ = std::make_unique<ClusterCoordinator>(chief_->strategy(), program_, testutil::FastFailureDetection());

    if (!DispatcherInChief()) {
      ASSERT_TRUE(RestartDispatcher().ok());
    }
    data_workers_.resize(kDataWorkers);
    for (int i = 0; i < kDataWorkers; ++i) {
      const absl::Status started = RestartDataWorker(i);
      ASSERT_TRUE(started.ok()) << started;
    }
    service_.dispatcher = spec_.data_service_dispatcher();
    service_.token = cluster_->token();
    service_.role = "chief";
  }

  void TearDown() override {
    coordinator_.reset();
    counts_.reset();
    chief_.reset();
    data_workers_.clear();
    dispatcher_.reset();
    cluster_.reset();
  }

  // The in-process chief on spec_ (which lists the service's tasks), so that with no
  // dispatcher task it runs the dispatcher; journaled in chief_work_dir_ when set.
  absl::Status StartChief() {
    ChiefProcess::Options options = cluster_->ChiefOptions();
    options.process.metrics_port = ServeMetrics() ? 0 : -1;
    options.process.dispatcher_work_dir = chief_work_dir_;
    auto process = ChiefProcess::Create(spec_, options);
    if (!process.ok()) return process.status();
    auto partitioner = FixedShardsPartitioner::Create(1);
    if (!partitioner.ok()) return partitioner.status();
    chief_ = std::make_unique<testutil::TestChief>(std::move(*process), std::move(*partitioner));
    return absl::OkStatus();
  }

  // The chief (and with it the dispatcher it runs) stopped and started again.
  absl::Status RestartChief() {
    coordinator_.reset();
    counts_.reset();
    chief_.reset();
    return StartChief();
  }

  absl::StatusOr<std::unique_ptr<Subprocess>> Launch(TaskType type, int index, const std::string& ready) {
    Subprocess::Options o;
    o.argv = {LocalCluster::BinaryPath(kProgram)};
    const bool metrics = type == TaskType::kDataWorker && !data_worker_metrics_ports_.empty();
    o.env = {{"TF_CONFIG", spec_.ToTfConfig(type, index)},
             {"ASYNCPS_CLUSTER_TOKEN", cluster_->token()},
             {"ASYNCPS_METRICS_PORT", metrics ? "0" : "-1"},
             {"ASYNCPS_DISPATCHER_WORK_DIR", work_dir_.path()}};
    auto process = Subprocess::Start(std::move(o));
    if (!process.ok()) return process.status();
    auto line = (*process)->WaitForLine(ready, absl::Seconds(60));
    if (!line.ok()) return absl::Status(line.status().code(), (*process)->output());
    if (metrics) {
      auto bound = (*process)->WaitForLine("(metrics on port ", absl::Seconds(60));
      if (!bound.ok()) return absl::Status(bound.status().code(), (*process)->output());
      const int64_t port = testutil::NumberAfter(*bound, "(metrics on port ");
      if (port <= 0) return absl::InternalError(absl::StrCat("no metrics port in: ", *bound));
      data_worker_metrics_ports_[static_cast<size_t>(index)] = static_cast<int>(port);
    }
    return process;
  }

  absl::Status RestartDispatcher() {
    dispatcher_.reset();  // SIGKILL
    auto p = Launch(TaskType::kDispatcher, 0, "ready on");
    if (!p.ok()) return p.status();
    dispatcher_ = std::move(*p);
    return absl::OkStatus();
  }

  absl::Status RestartDataWorker(int i) {
    data_workers_[i].reset();  // SIGKILL
    auto p = Launch(TaskType::kDataWorker, i, "registered with dispatcher");
    if (!p.ok()) return p.status();
    data_workers_[i] = std::move(*p);
    return absl::OkStatus();
  }

  // Waits until the dispatcher lists `n` data workers (it drops one a few seconds after its
  // last heartbeat, and lists one from its first).
  absl::Status WaitForDataWorkersListed(size_t n) {
    data_service::ServiceClient client(service_);
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    size_t listed = 0;
    while (absl::Now() < deadline) {
      auto workers = client.Workers(/*refresh=*/true);
      if (workers.ok()) {
        listed = workers->size();
        if (listed == n) return absl::OkStatus();
      }
      absl::SleepFor(absl::Milliseconds(100));  // polling the dispatcher's list, not synchronising
    }
    return absl::DeadlineExceededError(absl::StrCat("the dispatcher lists ", listed, " data workers, not ", n));
  }

  std::vector<int64_t> Counts() {
    auto value = counts_->Read();
    EXPECT_TRUE(value.ok()) << value.status();
    if (!value.ok()) return {};
    return std::vector<int64_t>(value->data<int64_t>(), value->data<int64_t>() + kIds);
  }

  absl::StatusOr<int64_t> Register(const std::string& name, std::map<std::string, std::string> args) {
    return data_service::RegisterDataset(service_, name, args);
  }

  // `outstanding` 0: ReadOptions' default (fetch-ahead on).
  std::map<std::string, std::string> ReadArgs(int64_t id, const std::string& mode, const std::string& job = "",
                                              int outstanding = 0) {
    std::map<std::string, std::string> args = {
        {"dispatcher", spec_.data_service_dispatcher()}, {"id", absl::StrCat(id)}, {"mode", mode}, {"job", job}};
    if (outstanding > 0) args["outstanding"] = absl::StrCat(outstanding);
    return args;
  }

  // Runs "count_ids" closures in rounds until Join says OutOfRange (the epoch is over); returns
  // the ids they reported. `after_round` runs at each join point.
  int64_t RunDynamicEpoch(const PerWorkerValues& iterator, const std::function<void(int)>& after_round) {
    int64_t counted = 0;
    for (int round = 0; round < 1000; ++round) {
      std::vector<RemoteValue> values;
      for (int i = 0; i < 16; ++i) {
        auto v = coordinator_->Schedule("count_ids", {iterator, Tensor::Scalar<int64_t>(10)});
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) values.push_back(*v);
      }
      const absl::Status joined = coordinator_->Join();
      for (const RemoteValue& v : values) {
        auto r = v.Fetch();
        if (r.ok()) counted += r->at(1).data<int64_t>()[0];
      }
      if (absl::IsOutOfRange(joined)) return counted;
      EXPECT_TRUE(joined.ok()) << joined;
      if (!joined.ok()) return counted;
      after_round(round + 1);
    }
    ADD_FAILURE() << "the epoch did not end";
    return counted;
  }

  // One DYNAMIC epoch of the 20,000 ids through the service, each iterator with `outstanding`
  // reads of its split in flight, a data worker SIGKILLed and restarted every other round:
  // every id is counted once and every row of the counter ends at exactly 1.
  void DynamicEpochWithDataWorkerRestarts(int outstanding) {
    auto id = Register("svc_ids", {{"n", absl::StrCat(kIds)}, {"batch", absl::StrCat(kBatch)}});
    ASSERT_TRUE(id.ok()) << id.status();
    auto dataset = coordinator_->CreatePerWorkerDataset("from_service", ReadArgs(*id, "dynamic", "", outstanding),
                                                        ShardingPolicy::kDynamic, kRecordsPerSplit);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    auto iterator = dataset->MakeIterator();
    ASSERT_TRUE(iterator.ok()) << iterator.status();
    int data_worker_kills = 0;
    const int64_t counted = RunDynamicEpoch(*iterator, [&](int round) {
      if (round % 2 == 1) {
        const absl::Status restarted = RestartDataWorker(round % kDataWorkers);
        ASSERT_TRUE(restarted.ok()) << restarted;
        ++data_worker_kills;
      }
    });
    EXPECT_EQ(counted, kIds);
    EXPECT_GE(data_worker_kills, 1);
    ASSERT_EQ(Mismatches(Counts(), 1), "");
  }

  // The chief's Program names what the workers' programs hold (the coordinator checks names).
  static Program ChiefProgram() {
    Program program = testutil::MakeTestProgram();
    program.AddDataset("from_service", [](const DatasetContext&) -> absl::StatusOr<data::Dataset> {
      return absl::UnimplementedError("built on the training workers");
    });
    return program;
  }

  testutil::TestDir work_dir_{"data_service_work_dir"};
  std::string chief_work_dir_;  // the dispatcher's in the chief ("": in memory)
  std::vector<int> data_worker_metrics_ports_;  // by data worker; empty: no endpoints
  Program program_ = ChiefProgram();
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<testutil::TestChief> chief_;
  std::unique_ptr<ShardedVariable> counts_;
  std::unique_ptr<ClusterCoordinator> coordinator_;
  ClusterSpec spec_;
  std::unique_ptr<Subprocess> dispatcher_;
  std::vector<std::unique_ptr<Subprocess>> data_workers_;
  data_service::ServiceOptions service_;
};

// The workers read with ReadOptions' defaults: fetch-ahead on (several positions of each split
// in flight), so exactly-once holds with it under every kind of kill.
TEST_F(DataServiceTest, DynamicEveryRowOnceWhileEverythingIsKilled) {
  ASSERT_GT(data_service::ReadOptions{}.max_outstanding_requests, 1);
  auto id = Register("svc_ids", {{"n", absl::StrCat(kIds)}, {"batch", absl::StrCat(kBatch)}});
  ASSERT_TRUE(id.ok()) << id.status();
  auto again = Register("svc_ids", {{"n", absl::StrCat(kIds)}, {"batch", absl::StrCat(kBatch)}});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *id);
  auto dataset =
      coordinator_->CreatePerWorkerDataset("from_service", ReadArgs(*id, "dynamic"), ShardingPolicy::kDynamic,
                                           kRecordsPerSplit);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto iterator = dataset->MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  std::mt19937 rng(7);
  int data_worker_kills = 0;
  bool dispatcher_restarted = false;
  int64_t counted = 0;
  {
    testutil::WorkerKiller killer(*cluster_, kTrainers, absl::Milliseconds(700), 5);
    counted = RunDynamicEpoch(*iterator, [&](int round) {
      // A data worker SIGKILLed and restarted every other round; the dispatcher once.
      if (round % 2 == 0) {
        const absl::Status restarted = RestartDataWorker(static_cast<int>(rng() % kDataWorkers));
        ASSERT_TRUE(restarted.ok()) << restarted;
        ++data_worker_kills;
      }
      if (round == 5) {
        ASSERT_TRUE(RestartDispatcher().ok());
        dispatcher_restarted = true;
      }
    });
    EXPECT_TRUE(killer.error().ok()) << killer.error();
    EXPECT_GE(killer.kills(), 1);
  }
  EXPECT_EQ(counted, kIds);
  EXPECT_GE(data_worker_kills, 3);
  EXPECT_TRUE(dispatcher_restarted);
  ASSERT_EQ(Mismatches(Counts(), 1), "");
  // The restarted dispatcher recovered the registration from its journal.
  auto after = Register("svc_ids", {{"n", absl::StrCat(kIds)}, {"batch", absl::StrCat(kBatch)}});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *id);
}

// One read at a time (ReadOptions::max_outstanding_requests 1, no fetch-ahead); with data
// workers SIGKILLed and restarted, every row is still exactly 1.
TEST_F(DataServiceTest, DynamicOneReadAtATimeEveryRowOnce) { DynamicEpochWithDataWorkerRestarts(/*outstanding=*/1); }

// DATA mode read by one consumer in this process with four reads in flight over the three
// data workers: every id exactly once (each data worker produces its own third).
TEST_F(DataServiceTest, DataModeFetchAheadReadsEachIdOnce) {
  auto id = Register("svc_ids", {{"n", "3000"}, {"batch", "1"}});
  ASSERT_TRUE(id.ok()) << id.status();
  data_service::ReadOptions read;
  read.mode = data_service::ProcessingMode::kData;
  read.max_outstanding_requests = 4;
  auto it = data_service::FromDatasetId(service_, *id, read).MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  std::vector<int64_t> seen(3000);
  int64_t rows = 0;
  while (true) {
    auto e = (*it)->Next();
    if (data::IsEndOfData(e.status())) break;
    ASSERT_TRUE(e.ok()) << e.status();
    for (int64_t i = 0; i < e->at(0).dim(0); ++i) {
      const int64_t v = e->at(0).data<int64_t>()[i];
      ASSERT_TRUE(v >= 0 && v < 3000) << v;
      ++seen[static_cast<size_t>(v)];
      ++rows;
    }
  }
  EXPECT_EQ(rows, 3000);
  EXPECT_EQ(Mismatches(seen, 1), "");
  data_service::ReadOptions none = read;
  none.max_outstanding_requests = 0;
  auto refused = data_service::FromDatasetId(service_, *id, none).MakeIterator();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

TEST_F(DataServiceTest, OffCountsEachIdOncePerDataWorker) {
  auto id = Register("svc_ids", {{"n", "3000"}, {"batch", "50"}});
  ASSERT_TRUE(id.ok()) << id.status();
  auto dataset = coordinator_->CreatePerWorkerDataset("from_service", ReadArgs(*id, "off", "shared"),
                                                      ShardingPolicy::kOff);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  auto iterator = dataset->MakeIterator();
  ASSERT_TRUE(iterator.ok()) << iterator.status();
  int64_t counted = 0;
  std::set<int64_t> ended;
  for (int round = 0; round < 200 && static_cast<int>(ended.size()) < kTrainers; ++round) {
    std::vector<RemoteValue> values;
    for (int i = 0; i < 16; ++i) {
      auto v = coordinator_->Schedule("count_ids", {*iterator, Tensor::Scalar<int64_t>(0)});
      ASSERT_TRUE(v.ok()) << v.status();
      values.push_back(*v);
    }
    ASSERT_TRUE(coordinator_->Join().ok());
    for (const RemoteValue& v : values) {
      auto r = v.Fetch();
      ASSERT_TRUE(r.ok()) << r.status();
      counted += r->at(1).data<int64_t>()[0];
      if (r->at(1).data<int64_t>()[0] == 0) ended.insert(r->at(0).data<int64_t>()[0]);
    }
  }
  ASSERT_EQ(static_cast<int>(ended.size()), kTrainers);
  EXPECT_EQ(counted, 3000 * kDataWorkers);
  std::vector<int64_t> rows = Counts();
  rows.resize(3000);
  EXPECT_EQ(Mismatches(rows, kDataWorkers), "");
}

// Reads one element in this process (a consumer like any trainer).
absl::StatusOr<data::Element> ReadOne(const data::Dataset& dataset) {
  auto it = dataset.MakeIterator();
  if (!it.ok()) return it.status();
  return (*it)->Next();
}

// FILE mode over six TFRecord files and three data workers: every record is read once, and all
// records of a file come from one data worker (the program tags each with its index). Two
// files for three data workers is the guide's error.
TEST_F(DataServiceTest, FileModeReadsEachFileOnOneDataWorker) {
  constexpr int kFiles = 6, kRecords = 40;
  testutil::TestDir dir("data_service_files");
  std::vector<std::string> paths;
  for (int f = 0; f < kFiles; ++f) {
    paths.push_back(absl::StrCat(dir.path(), "/part-", f, ".tfrecord"));
    auto writer = data::TFRecordWriter::Open(paths.back());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int r = 0; r < kRecords; ++r) ASSERT_TRUE((*writer)->Write(absl::StrCat(f, ":", r)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto id = Register("svc_records", {{"files", absl::StrJoin(paths, ",")}});
  ASSERT_TRUE(id.ok()) << id.status();
  data_service::ReadOptions read;
  read.mode = data_service::ProcessingMode::kFile;
  read.max_outstanding_requests = 2;
  auto it = data_service::FromDatasetId(service_, *id, read).MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  std::map<std::string, int> seen;
  std::map<int, std::set<int64_t>> readers;  // file -> data workers that produced its records
  while (true) {
    auto e = (*it)->Next();
    if (data::IsEndOfData(e.status())) break;
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_EQ(e->size(), 2u);
    const std::string record(reinterpret_cast<const char*>(e->at(0).raw_data()), e->at(0).num_bytes());
    ++seen[record];
    readers[std::stoi(record.substr(0, record.find(':')))].insert(e->at(1).data<int64_t>()[0]);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kFiles * kRecords);
  for (const auto& [record, n] : seen) EXPECT_EQ(n, 1) << record;
  ASSERT_EQ(static_cast<int>(readers.size()), kFiles);
  std::set<int64_t> all;
  for (const auto& [file, workers] : readers) {
    EXPECT_EQ(workers.size(), 1u) << "file " << file;
    all.insert(workers.begin(), workers.end());
  }
  EXPECT_EQ(static_cast<int>(all.size()), kDataWorkers);  // each data worker had its share

  auto few = Register("svc_records", {{"files", absl::StrCat(paths[0], ",", paths[1])}});
  ASSERT_TRUE(few.ok()) << few.status();
  auto refused = ReadOne(data_service::FromDatasetId(service_, *few, read));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("2 files for 3 data workers (fewer files than data workers)"));
}

TEST_F(DataServiceTest, BadInputGetsClearErrorsAndTheServiceKeepsServing) {
  service_.timeout_ms = 20'000;
  data_service::ReadOptions off;
  off.job_name = "off_job";
  auto unknown = ReadOne(data_service::FromDatasetId(service_, 999, off));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown dataset id 999"));

  auto id = Register("svc_ids", {{"n", "100"}, {"batch", "10"}});
  ASSERT_TRUE(id.ok()) << id.status();
  auto good = ReadOne(data_service::FromDatasetId(service_, *id, off));
  ASSERT_TRUE(good.ok()) << good.status();
  data_service::ReadOptions data_mode = off;
  data_mode.mode = data_service::ProcessingMode::kData;
  auto reused = ReadOne(data_service::FromDatasetId(service_, *id, data_mode));
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kInvalidArgument) << reused.status();
  EXPECT_THAT(reused.status().message(), HasSubstr("job 'off_job'"));

  auto missing = Register("no_such_dataset", {});
  ASSERT_TRUE(missing.ok()) << missing.status();
  off.job_name = "";
  auto lacks = ReadOne(data_service::FromDatasetId(service_, *missing, off));
  EXPECT_EQ(lacks.status().code(), absl::StatusCode::kNotFound) << lacks.status();
  EXPECT_THAT(lacks.status().message(), HasSubstr("no dataset 'no_such_dataset'"));

  auto big = Register("svc_big", {});
  ASSERT_TRUE(big.ok()) << big.status();
  data_service::ReadOptions small = off;
  small.max_element_bytes = 1024;
  auto over = ReadOne(data_service::FromDatasetId(service_, *big, small));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument) << over.status();
  EXPECT_THAT(over.status().message(), HasSubstr("32768 bytes, over the limit of 1024"));

  // Still serving: a fresh anonymous job reads the whole dataset.
  auto it = data_service::FromDatasetId(service_, *id, off).MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  int64_t rows = 0;
  while (true) {
    auto e = (*it)->Next();
    if (data::IsEndOfData(e.status())) break;
    ASSERT_TRUE(e.ok()) << e.status();
    rows += e->at(0).dim(0);
  }
  EXPECT_EQ(rows, 100 * kDataWorkers);
  for (int i = 0; i < kDataWorkers; ++i) EXPECT_TRUE(data_workers_[i]->running());
  EXPECT_TRUE(dispatcher_->running());
}

// The guide's coordinated reads: 2 consumers of job "rounds" (num_consumers 2) read in
// lockstep, each round from one data worker, consumer i taking element i of the round's 2
// consecutive elements. Each data worker's pass over 0..5, repeated, is cut into rounds
// (0, 1), (2, 3), (4, 5), (0, 1), ...: within every round the consumers get 2k and 2k + 1.
TEST_F(DataServiceTest, CoordinatedConsumersGetDisjointElementsInRounds) {
  auto id = Register("svc_repeat", {{"n", "6"}});
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr int kRounds = 4 * kDataWorkers;
  std::vector<int64_t> got[2];
  absl::Status failed[2];
  std::vector<std::thread> consumers;
  for (int c = 0; c < 2; ++c) {
    consumers.emplace_back([&, c] {
      data_service::ReadOptions read;
      read.job_name = "rounds";
      read.num_consumers = 2;
      read.consumer_index = c;
      auto it = data_service::FromDatasetId(service_, *id, read).MakeIterator();
      if (!it.ok()) {
        failed[c] = it.status();
        return;
      }
      for (int r = 0; r < kRounds; ++r) {
        auto e = (*it)->Next();
        if (!e.ok()) {
          failed[c] = e.status();
          return;
        }
        got[c].push_back(e->at(0).data<int64_t>()[0]);
      }
    });
  }
  for (std::thread& t : consumers) t.join();
  ASSERT_TRUE(failed[0].ok()) << failed[0];
  ASSERT_TRUE(failed[1].ok()) << failed[1];
  ASSERT_EQ(got[0].size(), static_cast<size_t>(kRounds));
  ASSERT_EQ(got[1].size(), static_cast<size_t>(kRounds));
  for (int r = 0; r < kRounds; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(got[0][r] % 2, 0);
    EXPECT_EQ(got[1][r], got[0][r] + 1);
  }
  // Round r is the (r / data workers)-th round of one data worker's pass.
  for (int r = 0; r < kRounds; ++r) EXPECT_EQ(got[0][r], 2 * ((r / kDataWorkers) % 3)) << r;

  // A dataset that ends breaks the lockstep: the guide's rule, as InvalidArgument.
  auto finite = Register("svc_ids", {{"n", "3"}, {"batch", "1"}});
  ASSERT_TRUE(finite.ok()) << finite.status();
  data_service::ReadOptions one;
  one.job_name = "finite_rounds";
  one.num_consumers = 1;
  auto it = data_service::FromDatasetId(service_, *finite, one).MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  absl::Status end = absl::OkStatus();
  for (int i = 0; i <= 3 * kDataWorkers && end.ok(); ++i) end = (*it)->Next().status();
  EXPECT_EQ(end.code(), absl::StatusCode::kInvalidArgument) << end;
  EXPECT_THAT(end.message(), HasSubstr("Repeat()"));
  for (int i = 0; i < kDataWorkers; ++i) EXPECT_TRUE(data_workers_[i]->running());
}

// FILE mode started while one of the three data workers is not registered: the read waits for
// it instead of ending after the other two's files (each data worker holds its own files).
TEST_F(DataServiceTest, FileModeWaitsForEveryListedDataWorker) {
  constexpr int kFiles = 6, kRecords = 40;
  testutil::TestDir dir("data_service_late_files");
  std::vector<std::string> paths;
  for (int f = 0; f < kFiles; ++f) {
    paths.push_back(absl::StrCat(dir.path(), "/part-", f, ".tfrecord"));
    auto writer = data::TFRecordWriter::Open(paths.back());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int r = 0; r < kRecords; ++r) ASSERT_TRUE((*writer)->Write(absl::StrCat(f, ":", r)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto id = Register("svc_records", {{"files", absl::StrJoin(paths, ",")}});
  ASSERT_TRUE(id.ok()) << id.status();
  // Data worker 2 gone, and no longer listed by the dispatcher.
  data_workers_[2].reset();
  ASSERT_EQ(WaitForDataWorkersListed(2), absl::OkStatus());

  Mutex mu;
  std::map<std::string, int> seen;
  int64_t read = 0;
  bool done = false;
  absl::Status failed;
  std::thread consumer([&] {
    data_service::ReadOptions options;
    options.mode = data_service::ProcessingMode::kFile;
    auto it = data_service::FromDatasetId(service_, *id, options).MakeIterator();
    absl::Status status = it.status();
    while (status.ok()) {
      auto e = (*it)->Next();
      if (data::IsEndOfData(e.status())) break;
      status = e.status();
      if (!status.ok()) break;
      MutexLock lock(&mu);
      ++seen[std::string(reinterpret_cast<const char*>(e->at(0).raw_data()), e->at(0).num_bytes())];
      ++read;
    }
    MutexLock lock(&mu);
    failed = status;
    done = true;
  });
  {
    // Data workers 0 and 1 hold files 0, 3 and 1, 4.
    MutexLock lock(&mu);
    auto two_shares = [&]() { return done || read >= 4 * kRecords; };
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&two_shares), absl::Seconds(60)));
  }
  const absl::Status restarted = RestartDataWorker(2);
  ASSERT_TRUE(restarted.ok()) << restarted;
  consumer.join();
  ASSERT_TRUE(failed.ok()) << failed;
  EXPECT_EQ(read, kFiles * kRecords);
  EXPECT_EQ(static_cast<int>(seen.size()), kFiles * kRecords);
  for (const auto& [record, n] : seen) EXPECT_EQ(n, 1) << record;
}

// The tf.data service in the chief's /status.json and on its page, and the service's metrics:
// the dispatcher's (in the chief's registry) and each data worker's.
class DataServiceStatusTest : public DataServiceTest {
 protected:
  bool DispatcherInChief() const override { return true; }
  bool ServeMetrics() const override { return true; }
};

std::string HttpBody(int port, const std::string& path) {
  const std::string response = metrics::test_client::Get("127.0.0.1", port, path);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

TEST_F(DataServiceStatusTest, StatusPageAndMetricsShowTheService) {
  auto id = Register("svc_ids", {{"n", "300"}, {"batch", "50"}});
  ASSERT_TRUE(id.ok()) << id.status();
  data_service::ReadOptions read;
  read.job_name = "shown";
  auto it = data_service::FromDatasetId(service_, *id, read).MakeIterator();
  ASSERT_TRUE(it.ok()) << it.status();
  ASSERT_TRUE((*it)->Next().ok());  // the job exists and is being read

  const int port = chief_->process().process_metrics().port();
  ASSERT_GT(port, 0);
  // The watch polls the dispatcher every second: wait for a view with every data worker up.
  nlohmann::json doc;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    doc = nlohmann::json::parse(HttpBody(port, "/status.json"), nullptr, /*allow_exceptions=*/false);
    if (doc.is_object() && doc.contains("data_service")) {
      int up = 0;
      int64_t jobs_kept = 0;
      for (const auto& w : doc["data_service"]["data_workers"]) {
        up += w["state"] == "up" ? 1 : 0;
        jobs_kept += w["jobs"].get<int64_t>();
      }
      // The job read above shows on the data workers it was read from (from their next
      // heartbeat; the iterator reads one element ahead).
      if (up == kDataWorkers && jobs_kept >= 1 && doc["data_service"]["num_jobs"].get<int64_t>() >= 1) break;
    }
    absl::SleepFor(absl::Milliseconds(200));  // polling a page, not synchronising
  }
  ASSERT_TRUE(doc.is_object() && doc.contains("data_service")) << doc.dump();
  const auto& ds = doc["data_service"];
  EXPECT_EQ(ds["dispatcher"], spec_.chief());
  EXPECT_EQ(ds["in_chief"], true);
  EXPECT_EQ(ds["state"], "up");
  EXPECT_EQ(ds["datasets"], 1);
  ASSERT_EQ(ds["data_workers"].size(), static_cast<size_t>(kDataWorkers)) << ds.dump();
  int64_t jobs_kept = 0;
  for (int i = 0; i < kDataWorkers; ++i) {
    jobs_kept += ds["data_workers"][i]["jobs"].get<int64_t>();
    EXPECT_EQ(ds["data_workers"][i]["state"], "up") << ds.dump();
    EXPECT_EQ(ds["data_workers"][i]["address"], spec_.data_workers()[static_cast<size_t>(i)]);
  }
  EXPECT_GE(jobs_kept, 1) << ds.dump();
  ASSERT_GE(ds["jobs"].size(), 1u);
  EXPECT_EQ(ds["jobs"].back()["name"], "shown");
  EXPECT_EQ(ds["jobs"].back()["mode"], "off");
  std::set<std::string> roles;
  for (const auto& m : doc["members"]) roles.insert(m["role"].get<std::string>());
  EXPECT_TRUE(roles.contains("dispatcher")) << doc["members"].dump();
  EXPECT_TRUE(roles.contains("data_worker")) << doc["members"].dump();
  EXPECT_NE(HttpBody(port, "/status").find("tf.data service"), std::string::npos);

  const std::string chief_metrics = HttpBody(port, "/metrics");
  EXPECT_THAT(chief_metrics, HasSubstr("asyncps_dispatcher_jobs"));
  EXPECT_THAT(chief_metrics, HasSubstr("asyncps_dispatcher_datasets"));
  for (int i = 0; i < kDataWorkers; ++i) {
    const std::string text = HttpBody(data_worker_metrics_ports_[static_cast<size_t>(i)], "/metrics");
    EXPECT_THAT(text, HasSubstr("asyncps_data_worker_jobs")) << i;
    EXPECT_THAT(text, HasSubstr("asyncps_data_worker_split_streams")) << i;
  }
}

// No dispatcher task: the chief runs the dispatcher on its own address, and the service works
// through it.
class DataServiceInChiefTest : public DataServiceTest {
 protected:
  bool DispatcherInChief() const override { return true; }
};

TEST_F(DataServiceInChiefTest, DynamicEveryRowOnceThroughTheChiefsDispatcher) {
  ASSERT_TRUE(spec_.dispatcher().empty());
  ASSERT_EQ(spec_.data_service_dispatcher(), spec_.chief());
  DynamicEpochWithDataWorkerRestarts(/*outstanding=*/2);
}

// Reads job `job` (OFF) of dataset `id` to its end in this process; the rows read.
absl::StatusOr<int64_t> ReadJobRows(const data_service::ServiceOptions& service, int64_t id, const std::string& job) {
  data_service::ReadOptions read;
  read.job_name = job;
  auto it = data_service::FromDatasetId(service, id, read).MakeIterator();
  if (!it.ok()) return it.status();
  int64_t rows = 0;
  while (true) {
    auto e = (*it)->Next();
    if (data::IsEndOfData(e.status())) return rows;
    if (!e.ok()) return e.status();
    rows += e->at(0).dim(0);
  }
}

// The chief, and with it its dispatcher, restarted without a journal: the new dispatcher gives
// the same ids out again (dataset 1, job 1) for what may be other data. Its new generation
// makes the data workers drop the old job 1 (which had ended): the new job 1 is read in full
// instead of ending at once.
TEST_F(DataServiceInChiefTest, ChiefRestartedWithoutJournalStartsANewGeneration) {
  auto id = Register("svc_ids", {{"n", "300"}, {"batch", "50"}});
  ASSERT_TRUE(id.ok()) << id.status();
  auto rows = ReadJobRows(service_, *id, "shared");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 300 * kDataWorkers);
  auto again = ReadJobRows(service_, *id, "shared");  // the same job: ended
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, 0);

  ASSERT_EQ(RestartChief(), absl::OkStatus());
  // OFF reads every data worker listed: wait until all heartbeat to the new dispatcher.
  ASSERT_EQ(WaitForDataWorkersListed(kDataWorkers), absl::OkStatus());
  auto id2 = Register("svc_ids", {{"n", "300"}, {"batch", "50"}});
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_EQ(*id2, *id);  // in memory: ids start over
  auto fresh = ReadJobRows(service_, *id2, "shared");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(*fresh, 300 * kDataWorkers);
  for (int i = 0; i < kDataWorkers; ++i) EXPECT_TRUE(data_workers_[i]->running());
}

// With --dispatcher_work_dir the chief's dispatcher journals: restarted, it keeps its
// registrations and its generation, and job "shared" is still the one that ended.
TEST_F(DataServiceInChiefTest, ChiefRestartedWithJournalKeepsItsJobs) {
  testutil::TestDir journal("data_service_chief_journal");
  chief_work_dir_ = journal.path();
  ASSERT_EQ(RestartChief(), absl::OkStatus());
  ASSERT_EQ(WaitForDataWorkersListed(kDataWorkers), absl::OkStatus());
  auto id = Register("svc_ids", {{"n", "300"}, {"batch", "50"}});
  ASSERT_TRUE(id.ok()) << id.status();
  auto unrelated = Register("svc_ids", {{"n", "7"}, {"batch", "1"}});
  ASSERT_TRUE(unrelated.ok()) << unrelated.status();
  auto rows = ReadJobRows(service_, *id, "shared");
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 300 * kDataWorkers);

  ASSERT_EQ(RestartChief(), absl::OkStatus());
  ASSERT_EQ(WaitForDataWorkersListed(kDataWorkers), absl::OkStatus());
  auto id2 = Register("svc_ids", {{"n", "7"}, {"batch", "1"}});
  ASSERT_TRUE(id2.ok()) << id2.status();
  EXPECT_EQ(*id2, *unrelated);  // recovered, not registered anew
  auto after = ReadJobRows(service_, *id, "shared");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, 0);  // the same job, ended on every data worker
}

}  // namespace
}  // namespace asyncps
