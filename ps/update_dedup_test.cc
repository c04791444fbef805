#include "ps/update_dedup.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "metrics/process_metrics.h"

namespace asyncps::ps {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kCoordinator = 1000;

UpdateTag Tag(uint64_t closure, uint64_t sequence, uint64_t watermark = kCoordinator,
              uint64_t coordinator = kCoordinator) {
  return UpdateTag{coordinator, closure, sequence, watermark};
}

// Which of the request's variables an admission applies.
std::vector<bool> Applied(const UpdateDedup::Admission& a, size_t n) {
  std::vector<bool> out;
  for (size_t i = 0; i < n; ++i) out.push_back(a.apply(i));
  return out;
}

// Admits `names` under `tag` and commits (as the PS does once the update is applied);
// returns which were applied.
std::vector<bool> ApplyOnce(UpdateDedup& dedup, const UpdateTag& tag, std::vector<absl::string_view> names) {
  auto a = dedup.Admit(tag, names);
  EXPECT_TRUE(a.ok()) << a.status();
  if (!a.ok()) return {};
  std::vector<bool> applied = Applied(*a, names.size());
  a->Commit();
  return applied;
}

TEST(UpdateDedupTest, UntaggedUpdatesAreAlwaysAppliedAndLeaveNoTrace) {
  UpdateDedup dedup;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ApplyOnce(dedup, UpdateTag{}, {"w", "b"}), (std::vector<bool>{true, true}));
  }
  EXPECT_EQ(dedup.entries(), 0u);
  EXPECT_EQ(dedup.coordinators(), 0u);
}

TEST(UpdateDedupTest, RepeatOfTheSameCallIsAlreadyApplied) {
  UpdateDedup dedup;
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 1), {"w", "b"}), (std::vector<bool>{true, true}));
  auto again = dedup.Admit(Tag(kCoordinator + 5, 1), {"w", "b"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Applied(*again, 2), (std::vector<bool>{false, false}));
  EXPECT_EQ(again->already_applied(), 2u);
  EXPECT_FALSE(again->below_watermark());
  EXPECT_EQ(dedup.entries(), 2u);
}

// A window travels between processes (a state transfer sends it to a rebuilt copy), so its
// variable keys are a fixed function of the name and generation: these are the values every
// process and build computes. (A hash seeded per process, as absl::Hash is, fails this.)
TEST(UpdateDedupTest, VariableKeysAreTheSameInEveryProcess) {
  EXPECT_EQ(UpdateDedup::VariableKey("counts/part_0", 0), uint64_t{0x5d4e50a570e8b163});
  EXPECT_EQ(UpdateDedup::VariableKey("counts/part_0", 1), uint64_t{0xb906aae6c1bba1d9});
  EXPECT_EQ(UpdateDedup::VariableKey("", 0), uint64_t{0x57b74577e39d30be});
  EXPECT_EQ(UpdateDedup::VariableKey("w", 3), uint64_t{0xca698bc1d843d36b});
  EXPECT_NE(UpdateDedup::VariableKey("w", 0), UpdateDedup::VariableKey(std::string("w\0", 2), 0));
}

// A window received from another copy, with the keys that process computed, recognises the
// repeats of the updates it holds.
TEST(UpdateDedupTest, AWindowReceivedFromAnotherCopyRecognisesRepeats) {
  UpdateDedup::ExportedSpace space;
  space.coordinator = kCoordinator;
  space.watermark = kCoordinator;
  space.keys.push_back({kCoordinator + 5, 1, UpdateDedup::VariableKey("counts/part_0", 0)});
  UpdateDedup dedup;
  dedup.Import({space});
  auto again = dedup.Admit(Tag(kCoordinator + 5, 1), {"counts/part_0", "total"});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Applied(*again, 2), (std::vector<bool>{false, true}));
}

TEST(UpdateDedupTest, OtherCallsVariablesAndClosuresAreNotRepeats) {
  UpdateDedup dedup;
  ASSERT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 1), {"w"}), (std::vector<bool>{true}));
  // The step's second call to the same variable.
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 2), {"w"}), (std::vector<bool>{true}));
  // A variable the first call did not touch, beside one it did.
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 1), {"w", "w/part_1"}), (std::vector<bool>{false, true}));
  // Another closure.
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 6, 1), {"w"}), (std::vector<bool>{true}));
  // The same closure id under another coordinator is another closure.
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 1, 0, 1), {"w"}), (std::vector<bool>{true}));
  EXPECT_EQ(dedup.entries(), 5u);
  EXPECT_EQ(dedup.coordinators(), 2u);
}

TEST(UpdateDedupTest, AVariableRestoredSinceIsUpdatedAgain) {
  UpdateDedup dedup;
  const std::vector<UpdateDedup::Target> before = {{"w", 0}, {"b", 0}};
  auto first = dedup.Admit(Tag(kCoordinator, 1), before);
  ASSERT_TRUE(first.ok());
  first->Commit();
  // "w" was restored from a checkpoint meanwhile: its first update was undone, so the
  // closure's re-run applies it again; "b" was not.
  const std::vector<UpdateDedup::Target> after = {{"w", 1}, {"b", 0}};
  auto rerun = dedup.Admit(Tag(kCoordinator, 1), after);
  ASSERT_TRUE(rerun.ok());
  EXPECT_EQ(Applied(*rerun, 2), (std::vector<bool>{true, false}));
}

TEST(UpdateDedupTest, AVariableNamedTwiceInOneRequestIsOneUnit) {
  UpdateDedup dedup;
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator, 1), {"w", "w", "b"}), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(dedup.entries(), 2u);
  auto again = dedup.Admit(Tag(kCoordinator, 1), {"w", "w", "b"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Applied(*again, 3), (std::vector<bool>{false, false, false}));
  EXPECT_EQ(again->already_applied(), 3u);
}

TEST(UpdateDedupTest, AClaimNotCommittedIsReleasedForTheNextAttempt) {
  UpdateDedup dedup;
  {
    auto failed = dedup.Admit(Tag(kCoordinator, 1), {"w"});
    ASSERT_TRUE(failed.ok());
    EXPECT_TRUE(failed->apply(0));
    EXPECT_EQ(dedup.entries(), 1u);
    // Destroyed without Commit: the update was not applied.
  }
  EXPECT_EQ(dedup.entries(), 0u);
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator, 1), {"w"}), (std::vector<bool>{true}));
  // A moved-from admission releases nothing twice.
  auto a = dedup.Admit(Tag(kCoordinator, 2), {"w"});
  ASSERT_TRUE(a.ok());
  UpdateDedup::Admission moved = std::move(*a);
  moved.Commit();
  EXPECT_EQ(dedup.entries(), 2u);
}

TEST(UpdateDedupTest, AdvancingTheWatermarkDropsTheKeysBelowIt) {
  UpdateDedup dedup;
  for (uint64_t c = 0; c < 10; ++c) ApplyOnce(dedup, Tag(kCoordinator + c, 1), {"w", "b"});
  EXPECT_EQ(dedup.entries(), 20u);
  // Closures 0..5 finished: the next request says so.
  ApplyOnce(dedup, Tag(kCoordinator + 10, 1, kCoordinator + 6), {"w"});
  EXPECT_EQ(dedup.watermark(kCoordinator), kCoordinator + 6);
  EXPECT_EQ(dedup.entries(), 4u * 2 + 1);
  // A stale watermark (an older dispatch's) never moves it back.
  ApplyOnce(dedup, Tag(kCoordinator + 11, 1, kCoordinator + 2), {"w"});
  EXPECT_EQ(dedup.watermark(kCoordinator), kCoordinator + 6);
  EXPECT_EQ(dedup.entries(), 4u * 2 + 2);
  // Keys at or above the watermark still count as applied.
  auto repeat = dedup.Admit(Tag(kCoordinator + 6, 1, kCoordinator + 6), {"w"});
  ASSERT_TRUE(repeat.ok());
  EXPECT_FALSE(repeat->apply(0));
  EXPECT_FALSE(repeat->below_watermark());
}

TEST(UpdateDedupTest, AZombieBelowTheWatermarkIsRefusedAsAlreadyApplied) {
  UpdateDedup dedup;
  ApplyOnce(dedup, Tag(kCoordinator + 3, 1), {"w"});
  ApplyOnce(dedup, Tag(kCoordinator + 9, 1, kCoordinator + 4), {"w"});
  // Closure 3's old attempt goes on and makes a call its finished attempt never made.
  auto zombie = dedup.Admit(Tag(kCoordinator + 3, 2, kCoordinator), {"w", "b"});
  ASSERT_TRUE(zombie.ok());
  EXPECT_TRUE(zombie->below_watermark());
  EXPECT_EQ(Applied(*zombie, 2), (std::vector<bool>{false, false}));
  EXPECT_EQ(zombie->already_applied(), 2u);
  EXPECT_EQ(dedup.entries(), 1u);  // nothing recorded for it
}

// A restore tells the window which closures have finished: their keys go, their attempts are
// zombies from then on, and a lower watermark later changes nothing.
TEST(UpdateDedupTest, RaisingTheWatermarkRefusesTheClosuresBelowIt) {
  UpdateDedup dedup;
  ApplyOnce(dedup, Tag(kCoordinator + 1, 1), {"w"});
  ApplyOnce(dedup, Tag(kCoordinator + 5, 1), {"w"});
  EXPECT_EQ(dedup.entries(), 2u);
  dedup.RaiseWatermark(kCoordinator, kCoordinator + 5);
  EXPECT_EQ(dedup.watermark(kCoordinator), kCoordinator + 5);
  EXPECT_EQ(dedup.entries(), 1u);
  auto zombie = dedup.Admit(Tag(kCoordinator + 3, 1), {"w"});
  ASSERT_TRUE(zombie.ok());
  EXPECT_TRUE(zombie->below_watermark());
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 5, 1), {"w"}), (std::vector<bool>{false})) << "still a repeat";
  dedup.RaiseWatermark(kCoordinator, kCoordinator + 2);
  EXPECT_EQ(dedup.watermark(kCoordinator), kCoordinator + 5) << "never back";
  dedup.RaiseWatermark(0, 10);
  EXPECT_EQ(dedup.coordinators(), 1u) << "coordinator 0 is no coordinator";
}

TEST(UpdateDedupTest, MalformedTagsAreInvalidArgument) {
  UpdateDedup dedup;
  for (const UpdateTag& bad : {Tag(kCoordinator, 0),                      // no sequence
                               Tag(kCoordinator - 1, 1, 0),               // closure below its coordinator
                               Tag(kCoordinator + 1, 1, kCoordinator + 2)}) {  // watermark above its closure
    auto a = dedup.Admit(bad, {"w"});
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << a.status();
  }
  EXPECT_EQ(dedup.entries(), 0u);
}

// The value of the series of `name` whose line contains `labels`, or -1.
double MetricValue(const std::string& exposition, const std::string& name, const std::string& labels) {
  size_t pos = 0;
  while ((pos = exposition.find(name + "{", pos)) != std::string::npos) {
    const size_t end = exposition.find('\n', pos);
    const std::string line = exposition.substr(pos, end - pos);
    pos = end;
    if (line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

TEST(UpdateDedupTest, TheHardCapRefusesWithAClearErrorAndAMetric) {
  auto process = std::move(metrics::ProcessMetrics::Create("ps", 0, /*listen_address=*/"")).value();
  PsMetrics metrics(*process);
  UpdateDedup::Options options;
  options.max_entries = 3;
  options.metrics = &metrics;
  UpdateDedup dedup(options);
  ApplyOnce(dedup, Tag(kCoordinator, 1), {"a", "b"});
  // A closure that never finishes holds the watermark at kCoordinator.
  auto full = dedup.Admit(Tag(kCoordinator + 1, 1), {"a", "b"});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.status().message(), HasSubstr("--ps_dedup_max_entries"));
  EXPECT_EQ(dedup.entries(), 2u);  // nothing of the refused request was claimed
  const std::string text = process->Serialize();
  EXPECT_EQ(MetricValue(text, "asyncps_ps_rejected_requests_total", "reason=\"dedup_window_full\""), 1);
  EXPECT_EQ(MetricValue(text, "asyncps_ps_dedup_window_entries", "role=\"ps\""), 2);
  // Repeats need no room, so they are still answered.
  auto repeat = dedup.Admit(Tag(kCoordinator, 1), {"a", "b"});
  ASSERT_TRUE(repeat.ok());
  EXPECT_EQ(repeat->already_applied(), 2u);
  // Once the closure finishes, the window has room again.
  EXPECT_EQ(ApplyOnce(dedup, Tag(kCoordinator + 1, 1, kCoordinator + 1), {"a", "b"}),
            (std::vector<bool>{true, true}));
  const std::string after = process->Serialize();
  EXPECT_EQ(MetricValue(after, "asyncps_ps_dedup_skipped_total", "reason=\"repeat\""), 2);
  EXPECT_EQ(MetricValue(after, "asyncps_ps_dedup_window_entries", "role=\"ps\""), 2);
}

TEST(UpdateDedupTest, MemoryStaysBoundedOverAMillionClosures) {
  // A coordinator with 16 closures in flight: each dispatch carries the watermark of the
  // oldest unfinished one. Each closure updates two variables in two calls.
  // A million in the normal build (about a second); ThreadSanitizer's build is ~10x slower
  // and checks the locking, not the bound, so a tenth there.
#if defined(__SANITIZE_THREAD__)
  constexpr uint64_t kClosures = 100'000;
#else
  constexpr uint64_t kClosures = 1'000'000;
#endif
  constexpr uint64_t kInFlight = 16;
  UpdateDedup::Options options;
  options.max_entries = 4 * (kInFlight + 1);  // the bound, enforced: a leak would be refused
  UpdateDedup dedup(options);
  uint64_t most = 0;
  for (uint64_t i = 0; i < kClosures; ++i) {
    const uint64_t closure = kCoordinator + i;
    const uint64_t watermark = closure >= kCoordinator + kInFlight ? closure - kInFlight : kCoordinator;
    for (uint64_t call = 1; call <= 2; ++call) {
      auto a = dedup.Admit(Tag(closure, call, watermark), {"w", "b"});
      ASSERT_TRUE(a.ok()) << "closure " << i << ": " << a.status();
      ASSERT_TRUE(a->apply(0) && a->apply(1));
      a->Commit();
    }
    if (i % 1024 == 0) most = std::max(most, dedup.entries());
  }
  EXPECT_LE(most, 4 * (kInFlight + 1));
  EXPECT_LE(dedup.entries(), 4 * (kInFlight + 1));
  EXPECT_EQ(dedup.watermark(kCoordinator), kCoordinator + kClosures - 1 - kInFlight);
}

TEST(UpdateDedupTest, CoordinatorsBeyondTheCapEvictTheLeastRecentlyHeard) {
  UpdateDedup::Options options;
  options.max_coordinators = 2;
  UpdateDedup dedup(options);
  ApplyOnce(dedup, Tag(100, 1, 100, 100), {"w"});
  ApplyOnce(dedup, Tag(200, 1, 200, 200), {"w"});
  ApplyOnce(dedup, Tag(100, 2, 100, 100), {"w"});  // 100 heard from again
  ApplyOnce(dedup, Tag(300, 1, 300, 300), {"w"});  // evicts 200
  EXPECT_EQ(dedup.coordinators(), 2u);
  EXPECT_EQ(dedup.entries(), 3u);
  EXPECT_EQ(dedup.watermark(200), 0u);
  EXPECT_EQ(ApplyOnce(dedup, Tag(100, 1, 100, 100), {"w"}), (std::vector<bool>{false}));
}

// A copy rebuilt from another's window forgets the same coordinator first: with many
// coordinators heard from in an order other than their ids' (and than any hash map's), the
// window exported and imported evicts as the original does.
TEST(UpdateDedupTest, AnImportedWindowEvictsTheCoordinatorTheOriginalWould) {
  UpdateDedup::Options options;
  options.max_coordinators = 8;
  UpdateDedup original(options);
  const std::vector<uint64_t> heard = {700, 100, 500, 300, 800, 200, 600, 400};
  for (uint64_t c : heard) ApplyOnce(original, Tag(c, 1, c, c), {"w"});
  ApplyOnce(original, Tag(700, 2, 700, 700), {"w"});  // 700 heard from again: 100 is now the oldest
  UpdateDedup copy(options);
  copy.Import(original.Export());
  for (UpdateDedup* d : {&original, &copy}) {
    ApplyOnce(*d, Tag(900, 1, 900, 900), {"w"});  // evicts the least recently heard from
    EXPECT_EQ(d->watermark(100), 0u) << (d == &copy ? "copy" : "original");
    EXPECT_EQ(d->watermark(700), 700u) << (d == &copy ? "copy" : "original");
    EXPECT_EQ(d->watermark(500), 500u) << (d == &copy ? "copy" : "original");
  }
}

// Attempts of the same calls race (a zombie and its re-run, many times over): each key is
// applied exactly once, and no attempt hears "already applied" before the update is in.
TEST(UpdateDedupTest, RacingAttemptsApplyEachUpdateExactlyOnce) {
  constexpr int kThreads = 6;
  constexpr uint64_t kClosures = 2000;
  UpdateDedup dedup;
  std::vector<std::atomic<int>> applied(kClosures * 2);
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t c = 0; c < kClosures; ++c) {
        // Half the threads go ahead of the watermark a little, so entries are dropped while
        // others still work on them.
        const uint64_t watermark = (t % 2 == 0 && c > 50) ? kCoordinator + c - 50 : kCoordinator;
        for (uint64_t call = 1; call <= 2; ++call) {
          auto a = dedup.Admit(Tag(kCoordinator + c, call, watermark), {"w"});
          ASSERT_TRUE(a.ok()) << a.status();
          std::atomic<int>& slot = applied[c * 2 + call - 1];
          if (a->apply(0)) {
            slot.fetch_add(1);
            a->Commit();
          } else if (!a->below_watermark() && slot.load() == 0) {
            early.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t k = 0; k < applied.size(); ++k) {
    // A call whose closure fell below the watermark before any attempt reached it is applied
    // by none (the coordinator never moves it so far: its closure would be unfinished).
    EXPECT_LE(applied[k].load(), 1) << "key " << k;
    if (k / 2 + 50 >= kClosures) {
      EXPECT_EQ(applied[k].load(), 1) << "key " << k;
    }
  }
  EXPECT_EQ(early.load(), 0);
}

}  // namespace
}  // namespace asyncps::ps
