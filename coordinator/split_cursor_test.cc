#include "coordinator/split_cursor.h"

#include <algorithm>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace asyncps {
namespace {

// What a worker finds when it reads a binding over a source of `records` records, batched by
// `batch_size`: the records of the batch, or that it lies past its split (or the data).
struct FakeSource {
  int64_t records;
  int64_t batch_size;

  int64_t SplitRecords(const SplitBinding& b) const {
    return std::max<int64_t>(0, std::min(b.end, records) - b.begin);
  }
  int64_t Batches(const SplitBinding& b) const { return (SplitRecords(b) + batch_size - 1) / batch_size; }
  bool PastEnd(const SplitBinding& b) const { return b.batch >= Batches(b); }
  bool BeyondSource(const SplitBinding& b) const { return b.begin >= records; }
  bool Last(const SplitBinding& b) const { return b.batch == Batches(b) - 1; }
  std::vector<int64_t> Read(const SplitBinding& b) const {
    std::vector<int64_t> out;
    const int64_t first = b.begin + b.batch * batch_size;
    for (int64_t r = first; r < std::min({first + batch_size, b.end, records}); ++r) out.push_back(r);
    return out;
  }
};

// Runs closures on `workers` workers until the cursor says the data ended; each closure is
// bound and completed (or found past its split's end and bound again). Returns how often
// each record was read.
std::map<int64_t, int> RunEpoch(SplitCursor& cursor, const FakeSource& source, int workers, bool report_last,
                                uint64_t* next_closure, int max_closures = 1 << 30) {
  std::map<int64_t, int> reads;
  std::mt19937 rng(42);
  for (int n = 0; n < max_closures; ++n) {
    const uint64_t closure = (*next_closure)++;
    const int worker = static_cast<int>(rng() % workers);
    while (true) {
      absl::StatusOr<SplitBinding> b = cursor.Bind(closure, worker);
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), absl::StatusCode::kOutOfRange) << b.status();
        return reads;
      }
      if (source.PastEnd(*b)) {
        cursor.PastEnd(closure, source.BeyondSource(*b));
        continue;
      }
      for (int64_t r : source.Read(*b)) ++reads[r];
      cursor.Complete(closure, report_last && source.Last(*b));
      break;
    }
  }
  return reads;
}

void ExpectEveryRecordOnce(const std::map<int64_t, int>& reads, int64_t records) {
  ASSERT_EQ(static_cast<int64_t>(reads.size()), records);
  for (const auto& [record, n] : reads) EXPECT_EQ(n, 1) << "record " << record;
}

TEST(SplitCursorTest, EveryBatchIsHandedOutOnceAndTheEpochEnds) {
  for (bool report_last : {true, false}) {
    for (int64_t records : {0, 1, 99, 100, 101, 1000}) {
      SplitCursor cursor(/*epoch=*/0, /*records_per_split=*/20);
      uint64_t closure = 1;
      auto reads = RunEpoch(cursor, {records, 7}, 3, report_last, &closure);
      ExpectEveryRecordOnce(reads, records);
      EXPECT_TRUE(cursor.Finished());
      EXPECT_EQ(cursor.in_flight(), 0u);
      EXPECT_EQ(cursor.Bind(closure, 0).status().code(), absl::StatusCode::kOutOfRange);
    }
  }
}

TEST(SplitCursorTest, AWorkerKeepsReadingItsOwnSplit) {
  SplitCursor cursor(0, 100);
  auto a0 = cursor.Bind(1, /*worker=*/0);
  auto b0 = cursor.Bind(2, /*worker=*/1);
  auto a1 = cursor.Bind(3, /*worker=*/0);
  ASSERT_TRUE(a0.ok() && b0.ok() && a1.ok());
  EXPECT_EQ(a0->split, 0);
  EXPECT_EQ(b0->split, 1);
  EXPECT_EQ(a1->split, 0);
  EXPECT_EQ(a1->batch, 1);
  EXPECT_EQ(a0->begin, 0);
  EXPECT_EQ(a0->end, 100);
  EXPECT_EQ(b0->begin, 100);
}

TEST(SplitCursorTest, AClosureRunAgainGetsTheSameBatch) {
  SplitCursor cursor(0, 10);
  auto first = cursor.Bind(7, /*worker=*/0);
  ASSERT_TRUE(first.ok());
  // Worker 0 died; the closure is re-run on worker 1, after other closures were bound.
  ASSERT_TRUE(cursor.Bind(8, 1).ok());
  auto rerun = cursor.Bind(7, /*worker=*/1);
  ASSERT_TRUE(rerun.ok());
  EXPECT_EQ(*rerun, *first);
  cursor.Complete(7, false);
  // Once completed, the id is free: a new binding (not the old batch) would follow.
  auto after = cursor.Bind(7, 1);
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(*after == *first);
}

TEST(SplitCursorTest, AReleasedBatchGoesToTheNextClosure) {
  SplitCursor cursor(0, 10);
  auto lost = cursor.Bind(1, 0);
  ASSERT_TRUE(lost.ok());
  cursor.Release(1);
  auto next = cursor.Bind(2, 1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, *lost);
}

TEST(SplitCursorTest, FailuresAndReleasesStillReadEveryRecordOnce) {
  const FakeSource source{503, 8};
  SplitCursor cursor(3, 40);
  std::mt19937 rng(7);
  std::map<int64_t, int> reads;
  std::vector<uint64_t> failed;  // closures whose worker died: re-run later
  uint64_t next = 1;
  for (int round = 0; round < 10000; ++round) {
    uint64_t closure;
    if (!failed.empty() && rng() % 2 == 0) {
      closure = failed.back();
      failed.pop_back();
    } else {
      closure = next++;
    }
    absl::StatusOr<SplitBinding> b = cursor.Bind(closure, static_cast<int>(rng() % 4));
    if (!b.ok()) {
      if (failed.empty()) break;
      continue;
    }
    EXPECT_EQ(b->epoch, 3);
    if (source.PastEnd(*b)) {
      cursor.PastEnd(closure, source.BeyondSource(*b));
      continue;
    }
    switch (rng() % 4) {
      case 0:  // the worker died before answering: run it again later
        failed.push_back(closure);
        break;
      case 1:  // cancelled: the batch goes back
        cursor.Release(closure);
        break;
      default:
        for (int64_t r : source.Read(*b)) ++reads[r];
        cursor.Complete(closure, source.Last(*b));
    }
  }
  EXPECT_TRUE(failed.empty());
  ExpectEveryRecordOnce(reads, source.records);
  EXPECT_TRUE(cursor.Finished());
}

TEST(SplitCursorTest, CheckpointRoundTripContinuesTheEpoch) {
  const FakeSource source{1000, 10};
  SplitCursor cursor(5, 50);
  uint64_t closure = 1;
  std::map<int64_t, int> reads = RunEpoch(cursor, source, 3, true, &closure, /*max_closures=*/37);
  // Two batches in flight at save time: recorded as not done.
  auto in_flight_a = cursor.Bind(closure++, 0);
  auto in_flight_b = cursor.Bind(closure++, 1);
  ASSERT_TRUE(in_flight_a.ok() && in_flight_b.ok());
  const std::string state = cursor.SaveState();

  auto restored = SplitCursor::FromState(state);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->epoch(), 5);
  EXPECT_EQ((*restored)->records_per_split(), 50);
  EXPECT_EQ((*restored)->batches_completed(), 37);
  EXPECT_EQ((*restored)->SaveState(), state);
  // The restarted coordinator's closures (fresh ids) read the rest, the two lost batches too.
  for (const auto& [record, n] : RunEpoch(**restored, source, 2, true, &closure)) reads[record] += n;
  ExpectEveryRecordOnce(reads, source.records);
  EXPECT_TRUE((*restored)->Finished());
}

TEST(SplitCursorTest, EpochsAreIndependent) {
  const FakeSource source{95, 10};
  uint64_t closure = 1;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    SplitCursor cursor(epoch, 30);
    auto b = cursor.Bind(closure, 0);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->epoch, epoch);
    cursor.Release(closure);
    ExpectEveryRecordOnce(RunEpoch(cursor, source, 2, true, &closure), source.records);
  }
}

TEST(SplitCursorTest, MalformedStateIsInvalidArgument) {
  for (const char* bad : {"", "[]", "{}", "not json",
                          R"({"epoch":0,"records_per_split":0,"next_split":0,"num_splits":-1,"open":[],"pending":[],"batches_completed":0})",
                          R"({"epoch":0,"records_per_split":5,"next_split":1,"num_splits":-1,"open":[[3,0,-1]],"pending":[],"batches_completed":0})",
                          R"({"epoch":0,"records_per_split":5,"next_split":1,"num_splits":-1,"open":[],"pending":[[0]],"batches_completed":0})"}) {
    EXPECT_EQ(SplitCursor::FromState(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SplitCursorTest, ConcurrentDispatchersReadEveryRecordOnce) {
  const FakeSource source{5000, 16};
  SplitCursor cursor(0, 200);
  std::vector<std::map<int64_t, int>> reads(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      uint64_t closure = static_cast<uint64_t>(w) << 40;
      while (true) {
        ++closure;
        absl::StatusOr<SplitBinding> b = cursor.Bind(closure, w);
        if (!b.ok()) return;
        while (b.ok() && source.PastEnd(*b)) {
          cursor.PastEnd(closure, source.BeyondSource(*b));
          b = cursor.Bind(closure, w);
        }
        if (!b.ok()) return;
        for (int64_t r : source.Read(*b)) ++reads[w][r];
        cursor.Complete(closure, source.Last(*b));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::map<int64_t, int> all;
  for (const auto& m : reads) {
    for (const auto& [r, n] : m) all[r] += n;
  }
  ExpectEveryRecordOnce(all, source.records);
}

// Elastic membership: a worker that leaves mid-split leaves its split to the others, who take
// it up before opening new splits, and every record is still read exactly once.
TEST(SplitCursorTest, SplitsOfAWorkerThatLeftAreHandedOutFirst) {
  SplitCursor cursor(0, 100);
  // Worker 1 reads the first batch of split 0; worker 2 that of split 1.
  absl::StatusOr<SplitBinding> a = cursor.Bind(1, 1);
  absl::StatusOr<SplitBinding> b = cursor.Bind(2, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->split, 0);
  ASSERT_EQ(b->split, 1);
  cursor.Complete(1, false);
  cursor.Complete(2, false);
  cursor.Disown(1);
  // Worker 3 (new) takes worker 1's split where it stopped, not a fresh split 2.
  absl::StatusOr<SplitBinding> c = cursor.Bind(3, 3);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->split, 0);
  EXPECT_EQ(c->batch, 1);
  cursor.Complete(3, false);
  // Worker 2 stays on its own split.
  absl::StatusOr<SplitBinding> d = cursor.Bind(4, 2);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->split, 1);
  cursor.Complete(4, false);
  // The rest of the epoch by two workers: every record read exactly once.
  const FakeSource source{1000, 25};
  uint64_t next = 5;
  std::map<int64_t, int> reads = RunEpoch(cursor, source, 2, true, &next);
  for (const SplitBinding& done : {*a, *b, *c, *d}) {
    for (int64_t r : source.Read(done)) ++reads[r];
  }
  ASSERT_EQ(reads.size(), 1000u);
  for (const auto& [record, n] : reads) ASSERT_EQ(n, 1) << "record " << record;
  EXPECT_TRUE(cursor.Finished());
  EXPECT_EQ(cursor.batches_completed(), 1000 / 25);
}

}  // namespace
}  // namespace asyncps
