#include "data_service/element_server.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace asyncps::data_service {
namespace {

using ::testing::HasSubstr;

// Dataset 1 is Range(0, n) batched by `batch`; anything else is unknown.
ElementServer MakeServer(int64_t n, int64_t batch, ElementServer::Options options = {}) {
  return ElementServer(
      options,
      [n, batch](const std::string& name, const std::map<std::string, std::string>&, int, int,
                 bool) -> absl::StatusOr<data::Dataset> {
        if (name == "repeat") return data::Dataset::Range(0, n).Batch(batch).Repeat();
        if (name != "range") return absl::NotFoundError(absl::StrCat("no dataset '", name, "'"));
        return data::Dataset::Range(0, n).Batch(batch);
      },
      [](int64_t id) -> absl::StatusOr<DatasetDef> {
        if (id == 1) return DatasetDef{1, "range", {}};
        if (id == 2) return DatasetDef{2, "missing", {}};
        if (id == 3) return DatasetDef{3, "repeat", {}};
        return absl::NotFoundError(absl::StrCat("unknown dataset id ", id));
      });
}

ElementServer::Request Bound(int64_t begin, int64_t end, int64_t position, int64_t acked) {
  ElementServer::Request r;
  r.dataset_id = 1;
  r.mode = ProcessingMode::kDynamic;
  r.bound = true;
  r.begin = begin;
  r.end = end;
  r.position = position;
  r.acked = acked;
  return r;
}

int64_t First(const ElementServer::Result& r) { return r.element.at(0).data<int64_t>()[0]; }

TEST(ElementServerTest, BoundReadsAreTheSplitsElementsInAnyOrder) {
  ElementServer server = MakeServer(100, 4);
  // A consumer fetching ahead asks for 2 before 1: both come from one pass.
  auto e2 = server.Get(Bound(10, 30, 2, 0));
  auto e1 = server.Get(Bound(10, 30, 1, 0));
  auto e0 = server.Get(Bound(10, 30, 0, 0));
  ASSERT_TRUE(e0.ok() && e1.ok() && e2.ok()) << e2.status();
  EXPECT_EQ(First(*e0), 10);
  EXPECT_EQ(First(*e1), 14);
  EXPECT_EQ(First(*e2), 18);
  EXPECT_EQ(server.pipelines_built(), 1);
  auto last = server.Get(Bound(10, 30, 4, 4));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(First(*last), 26);
  auto end = server.Get(Bound(10, 30, 5, 5));
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->end_of_sequence);
  EXPECT_FALSE(end->beyond_source);
  // Another data worker (a fresh server) gives the same element for the same position.
  ElementServer other = MakeServer(100, 4);
  auto again = other.Get(Bound(10, 30, 3, 0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(First(*again), 22);
  auto beyond = other.Get(Bound(200, 220, 0, 0));
  ASSERT_TRUE(beyond.ok());
  EXPECT_TRUE(beyond->end_of_sequence);
  EXPECT_TRUE(beyond->beyond_source);
}

// Two consumers far apart in one split (two trainers sharing it at an epoch's end) each
// advance a pipeline of their own: reading in turns builds two, not one per turn.
TEST(ElementServerTest, ConsumersFarApartInASplitDoNotReplayEachOther) {
  ElementServer server = MakeServer(1000, 1);
  for (int64_t p = 0; p < 40; ++p) {
    auto ahead = server.Get(Bound(0, 100, 50 + p, 50 + p));
    auto behind = server.Get(Bound(0, 100, p, p));
    ASSERT_TRUE(ahead.ok() && behind.ok());
    EXPECT_EQ(First(*ahead), 50 + p);
    EXPECT_EQ(First(*behind), p);
  }
  EXPECT_EQ(server.pipelines_built(), 2);
}

TEST(ElementServerTest, MemoryStaysBoundedWhenNothingIsAcknowledged) {
  ElementServer::Options options;
  options.max_streams = 3;
  options.max_kept_per_stream = 4;
  ElementServer server = MakeServer(100'000, 1, options);
  for (int64_t split = 0; split < 20; ++split) {
    for (int64_t p = 0; p < 50; ++p) ASSERT_TRUE(server.Get(Bound(split * 100, split * 100 + 100, p, 0)).ok());
  }
  EXPECT_LE(server.open_streams(), 3u);
  EXPECT_LE(server.kept_elements(), 12u);
  // A dropped element is produced again when asked for.
  auto again = server.Get(Bound(0, 100, 7, 0));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(First(*again), 7);
}

TEST(ElementServerTest, BadRequestsGetClearErrors) {
  ElementServer server = MakeServer(100, 4);
  ElementServer::Request unknown = Bound(0, 10, 0, 0);
  unknown.dataset_id = 7;
  EXPECT_EQ(server.Get(unknown).status().code(), absl::StatusCode::kNotFound);
  ElementServer::Request missing = Bound(0, 10, 0, 0);
  missing.dataset_id = 2;
  auto m = server.Get(missing);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("'missing'"));
  ElementServer::Request big = Bound(0, 10, 0, 0);
  big.max_element_bytes = 8;  // a batch of 4 int64 is 32 bytes
  auto b = server.Get(big);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("32 bytes, over the limit of 8"));
  // The server keeps serving.
  EXPECT_TRUE(server.Get(Bound(0, 10, 1, 0)).ok());
}

TEST(ElementServerTest, JobsShareOnePassAndDataShardsByIndex) {
  ElementServer::Options options;
  options.index = 1;
  options.count = 3;
  ElementServer server = MakeServer(10, 1, options);
  ElementServer::Request off;
  off.dataset_id = 1;
  off.job_id = 5;
  std::vector<int64_t> seen;
  while (true) {
    auto r = server.Get(off);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->end_of_sequence) break;
    seen.push_back(First(*r));
  }
  EXPECT_EQ(seen.size(), 10u);
  ElementServer::Request data = off;
  data.job_id = 6;
  data.mode = ProcessingMode::kData;
  seen.clear();
  while (true) {
    auto r = server.Get(data);
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->end_of_sequence) break;
    seen.push_back(First(*r));
  }
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 4, 7}));
}

ElementServer::Request Coordinated(int64_t dataset_id, int32_t consumer, int64_t round) {
  ElementServer::Request r;
  r.dataset_id = dataset_id;
  r.job_id = 9;
  r.num_consumers = 2;
  r.consumer_index = consumer;
  r.round = round;
  return r;
}

TEST(ElementServerTest, CoordinatedConsumersGetDisjointRounds) {
  ElementServer::Options options;
  options.max_kept_per_stream = 2;
  ElementServer server = MakeServer(7, 1, options);  // 0..6, repeated
  // Consumer i gets element i of each round of 2, whichever consumer asks first.
  std::vector<int64_t> got[2];
  for (int64_t round = 0; round < 6; ++round) {
    for (int32_t consumer :
         {static_cast<int32_t>(round % 2), static_cast<int32_t>(1 - round % 2)}) {
      auto r = server.Get(Coordinated(3, consumer, round));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_FALSE(r->end_of_sequence);
      got[consumer].push_back(First(*r));
    }
  }
  EXPECT_EQ(got[0], (std::vector<int64_t>{0, 2, 4, 6, 1, 3}));
  EXPECT_EQ(got[1], (std::vector<int64_t>{1, 3, 5, 0, 2, 4}));
  EXPECT_EQ(server.pipelines_built(), 1);
}

TEST(ElementServerTest, CoordinatedRoundsWaitForTheSlowestConsumer) {
  ElementServer::Options options;
  options.max_kept_per_stream = 2;
  ElementServer server = MakeServer(100, 1, options);
  ASSERT_TRUE(server.Get(Coordinated(3, 0, 0)).ok());
  ASSERT_TRUE(server.Get(Coordinated(3, 0, 1)).ok());
  // Consumer 1 has taken nothing: a third round held for it is refused until it reads.
  auto ahead = server.Get(Coordinated(3, 0, 2));
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kUnavailable) << ahead.status();
  // Asking again for a kept round gives the same element (a reply lost on the way).
  auto again = server.Get(Coordinated(3, 0, 1));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(First(*again), 2);
  auto slow = server.Get(Coordinated(3, 1, 0));
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(First(*slow), 1);
  auto now = server.Get(Coordinated(3, 0, 2));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(First(*now), 4);
  // Round 0 was taken by both and dropped.
  EXPECT_EQ(server.Get(Coordinated(3, 1, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ElementServerTest, CoordinatedReadsRefuseMisuse) {
  ElementServer server = MakeServer(3, 1);  // dataset 1 ends after 3 elements
  ASSERT_TRUE(server.Get(Coordinated(1, 0, 0)).ok());
  auto ended = server.Get(Coordinated(1, 0, 1));
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ended.status().message(), HasSubstr("Repeat()"));

  ElementServer::Request other = Coordinated(3, 0, 0);
  other.job_id = 10;
  ASSERT_TRUE(server.Get(other).ok());
  other.num_consumers = 3;  // the job is read by 2
  EXPECT_EQ(server.Get(other).status().code(), absl::StatusCode::kInvalidArgument);
  other.num_consumers = 0;  // first come first served on a coordinated job
  EXPECT_EQ(server.Get(other).status().code(), absl::StatusCode::kInvalidArgument);
  other.num_consumers = 2;
  other.consumer_index = 2;
  EXPECT_EQ(server.Get(other).status().code(), absl::StatusCode::kInvalidArgument);
  // The server keeps serving.
  other.consumer_index = 1;
  auto r = server.Get(other);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(First(*r), 1);
}

// Reads job `job_id` (kOff) of dataset 1 to its end; the number of elements read.
int64_t ReadJobToEnd(ElementServer& server, int64_t job_id, uint64_t generation = 0) {
  ElementServer::Request r;
  r.dataset_id = 1;
  r.job_id = job_id;
  r.generation = generation;
  int64_t n = 0;
  while (true) {
    auto e = server.Get(r);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok() || e->end_of_sequence) return n;
    ++n;
  }
}

// A consumer that reads many jobs, or leaves them unfinished, cannot grow the data worker's
// records: ended jobs keep only their ids, in a bounded number of ranges, and unfinished ones
// past the bound go least recently read first.
TEST(ElementServerTest, JobRecordsStayBounded) {
  ElementServer::Options options;
  options.max_jobs = 4;
  options.max_ended_ranges = 3;
  ElementServer server = MakeServer(5, 1, options);
  for (int64_t job = 2; job <= 40; job += 2) {  // ids apart: one range each
    EXPECT_EQ(ReadJobToEnd(server, job), 5) << job;
    EXPECT_EQ(server.job_records(), 0u);
    EXPECT_LE(server.ended_job_ranges(), 3u);
  }
  EXPECT_EQ(server.ended_job_ranges(), 3u);
  // The latest ended job still ends at once, without building a pipeline.
  const int64_t built = server.pipelines_built();
  EXPECT_EQ(ReadJobToEnd(server, 40), 0);
  EXPECT_EQ(server.pipelines_built(), built);
  // The oldest was forgotten: it is read again from the start (as after a restart).
  EXPECT_EQ(ReadJobToEnd(server, 2), 5);
  // Consecutive ids share one range.
  for (int64_t job = 100; job < 200; ++job) ASSERT_EQ(ReadJobToEnd(server, job), 5) << job;
  EXPECT_LE(server.ended_job_ranges(), 3u);
  EXPECT_EQ(ReadJobToEnd(server, 150), 0);
  // Jobs left after one element each: at most 4 kept, the most recently read among them.
  for (int64_t job = 300; job < 310; ++job) {
    ElementServer::Request r;
    r.dataset_id = 1;
    r.job_id = job;
    ASSERT_TRUE(server.Get(r).ok());
    EXPECT_LE(server.job_records(), 4u);
  }
  EXPECT_EQ(server.job_records(), 4u);
  EXPECT_EQ(ReadJobToEnd(server, 309), 4);  // kept: its pass goes on
}

// A dispatcher that restarted without its journal gives job ids out again: a newer generation
// drops what the old ids named, and reads of the old generation are refused.
TEST(ElementServerTest, NewerDispatcherGenerationDropsJobs) {
  ElementServer server = MakeServer(5, 1);
  EXPECT_EQ(ReadJobToEnd(server, 1, /*generation=*/10), 5);
  EXPECT_EQ(server.generation(), 10u);
  EXPECT_EQ(ReadJobToEnd(server, 1, 10), 0);  // the same job: ended
  EXPECT_EQ(ReadJobToEnd(server, 1, 11), 5);  // job 1 of the new dispatcher: a new pass
  EXPECT_EQ(server.generation(), 11u);
  ElementServer::Request old;
  old.dataset_id = 1;
  old.job_id = 1;
  old.generation = 10;
  auto refused = server.Get(old);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("restarted without its journal"));
  EXPECT_FALSE(server.AdoptGeneration(11));
  ElementServer::Request unchecked = old;
  unchecked.generation = 0;  // no generation: not checked
  EXPECT_TRUE(server.Get(unchecked).ok());
  EXPECT_TRUE(server.AdoptGeneration(12));  // from a heartbeat: drops everything
  EXPECT_EQ(server.job_records(), 0u);
  EXPECT_EQ(server.ended_job_ranges(), 0u);
}

}  // namespace
}  // namespace asyncps::data_service
