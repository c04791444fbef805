// Replays every checked-in fuzzer input (the seed corpus and every input the fuzzer once
// crashed on, tests/fuzz/regressions/) through the fuzzer's entry point, built with the normal
// compiler: a regression crashes or fails this test.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fuzz/server_fuzz_entry.h"

namespace asyncps::fuzz {
namespace {

std::vector<std::filesystem::path> Inputs(const std::string& subdir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(ASYNCPS_FUZZ_DIR) + "/" + subdir)) {
    if (entry.is_regular_file() && entry.path().filename() != "README.md") files.push_back(entry.path());
  }
  return files;
}

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void ReplayAll(const std::string& subdir, size_t at_least) {
  const auto files = Inputs(subdir);
  EXPECT_GE(files.size(), at_least) << subdir;
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    const std::string bytes = Read(path);
    EXPECT_EQ(FuzzServerInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  }
}

TEST(FuzzReplayTest, SeedCorpus) { ReplayAll("corpus", 10); }

// The seeds reach the real handlers and succeed there, so mutations start from deep paths.
TEST(FuzzReplayTest, SeedsPassTheHandshakeAndAreServed) {
  for (const char* name :
       {"ps_dense", "ps_sparse", "ps_initializers", "ps_update_kinds", "ps_bf16_versions", "ps_compressed",
        "worker_all"}) {
    SCOPED_TRACE(name);
    const std::string bytes = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/" + name);
    SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    EXPECT_TRUE(outcome.authenticated);
    EXPECT_FALSE(outcome.closed);
    EXPECT_GE(outcome.response_codes.size(), 5u);
    int ok = 0;
    for (int code : outcome.response_codes) ok += code == 0;
    // worker_all: SetDirectory names a PS this worker has no client for, and it ends on a
    // deleted resource.
    EXPECT_GE(ok, static_cast<int>(outcome.response_codes.size()) - 2);
  }
  const std::string denied = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/worker_role_denied");
  SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(denied.data()), denied.size());
  ASSERT_EQ(outcome.response_codes.size(), 2u);
  EXPECT_EQ(outcome.response_codes[0], 7);  // worker.Run from a worker: PermissionDenied
  EXPECT_EQ(outcome.response_codes[1], 0);  // ps.CreateVariable from a worker: allowed
}

// The bf16 and versions seed (bf16 reads and pushes, fused readAfter, base versions, a decayed
// bounded-staleness optimizer) is served whole, so mutations start from those fields.
TEST(FuzzReplayTest, Bf16AndVersionsSeedIsServedWhole) {
  const std::string bytes = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/ps_bf16_versions");
  SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_EQ(outcome.response_codes.size(), 7u);
  for (size_t i = 0; i < outcome.response_codes.size(); ++i) EXPECT_EQ(outcome.response_codes[i], 0) << i;
}

TEST(FuzzReplayTest, MembershipSeedIsServedAndRefusesWhatItMust) {
  const std::string bytes = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/membership");
  const SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_TRUE(outcome.authenticated);
  // Join OK; Join as worker 3 from worker 0: PermissionDenied; a bad address: InvalidArgument;
  // Leave OK; Leave as worker 2: PermissionDenied.
  EXPECT_EQ(outcome.response_codes, (std::vector<int>{0, 7, 3, 0, 7}));
}

TEST(FuzzReplayTest, PsMembershipSeedIsServedAndRefusesWhatItMust) {
  const std::string bytes = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/membership_ps");
  const SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_TRUE(outcome.authenticated);
  // JoinPs OK; as ps 3 from ps 0: PermissionDenied; a bad address: InvalidArgument; LeavePs
  // OK; as ps 2: PermissionDenied.
  EXPECT_EQ(outcome.response_codes, (std::vector<int>{0, 7, 3, 0, 7}));
}

// The compressed-gradient seed (int8 blocks with a fused read, top-k, and a top-k claiming
// 2^20 rows of a 4-row variable): the good pushes are served, the oversized one is refused
// (InvalidArgument) and the PS keeps serving the read after it.
TEST(FuzzReplayTest, CompressedSeedIsServedAndItsOversizedPushRefused) {
  const std::string bytes = Read(std::string(ASYNCPS_FUZZ_DIR) + "/corpus/ps_compressed");
  SessionOutcome outcome = RunServerSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  EXPECT_FALSE(outcome.closed);
  EXPECT_EQ(outcome.response_codes, (std::vector<int>{0, 0, 0, 3, 0}));  // create, int8, top-k, oversized, read
}

TEST(FuzzReplayTest, Regressions) { ReplayAll("regressions", 1); }

}  // namespace
}  // namespace asyncps::fuzz
