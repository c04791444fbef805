// Checkpoint save and restore throughput of 1 GiB of variables over 2 real PS processes,
// against a plain sequential write (with fsync) and read of the same number of bytes to the
// same directory (same disk), measured in the same run.
//
// Usage: ckpt_bench [--quick] [--rounds=N] [--json=PATH]
//   --quick: 32 MiB, one round (a smoke run for ctest); --rounds: rounds of the full run
//   (default 3; more on a shared machine, whose other work makes single rounds vary 2x);
//   --json: the figures as JSON too (bench/report.h).
//
// The variables are 8 f32 tables of 128 MiB each (4 MiB with --quick), placed round-robin on
// 2 PS, so each PS writes half the bytes into its own file, in parallel with the other.
//  * save: CheckpointManager::Save — each PS copies each table under its lock, checksums and
//    writes it, fsyncs and renames its file; then the manifest is written, fsynced, renamed.
//    Reference: one writer, the same bytes in 8 MiB write() calls, then fsync.
//  * restore: CheckpointManager::Restore (the coordinator first checks every file's CRC-32,
//    then each PS reads, checks and applies its file), and with verify_before_restore off.
//    Reference: one reader, the same bytes in 8 MiB read() calls. Before every read, reference
//    and checkpoint files alike are dropped from the page cache (posix_fadvise DONTNEED
//    after fsync), so both read from the disk.
// Every round changes all values first; the reference then writes the same bytes as the
// checkpoint (the tables' values, read back) to a new file, so neither side ever rewrites
// bytes it wrote before (storage that recognises rewritten content would flatter it). Each
// round runs the reference and the checkpoint operation back to back; figures are the median
// over rounds. Only the save itself is timed: the checkpoint manager keeps every checkpoint
// (max_to_keep 0), and the previous round's checkpoint and plain file are deleted between
// rounds, outside any timing (deleting a 1 GiB checkpoint inside Save, as max_to_keep would,
// charges the save for unlinking pages the reference never pays for).
// Directory: $ASYNCPS_BENCH_DIR, else $TMPDIR, else /tmp (it needs room for about 2 GiB).
//
// Exits 0 whether or not the aim (save >= 0.8x the plain write) is met; 1 when an operation
// fails or restores wrong values.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_flags.h"
#include "bench/report.h"
#include "bench/stats.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/initializers.h"
#include "coordinator/parameter_server_strategy.h"
#include "core/logging.h"
#include "tests/testutil/local_cluster.h"

namespace asyncps {
namespace {

using bench::Median;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool Fail(const std::string& what) {
  std::fprintf(stderr, "ckpt_bench: %s\n", what.c_str());
  return false;
}

// Drops `path`'s pages from the page cache (they are clean after fsync).
void DropCache(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

void DropCacheTree(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) DropCache(e.path().string());
  }
}

// Writes out everything dirty on `dir`'s file system (the deletions of the round before
// included), so that each round's timed writes start from the same clean state and neither
// pays for what the other left behind.
void SyncDisk(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  syncfs(fd);
  close(fd);
}

constexpr size_t kChunk = size_t{8} << 20;

// Plain sequential write of `bytes` with fsync; seconds.
double PlainWrite(const std::string& path, const char* data, size_t bytes) {
  const auto start = Clock::now();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  for (size_t done = 0; done < bytes;) {
    const ssize_t w = write(fd, data + done, std::min(kChunk, bytes - done));
    if (w <= 0) return -1;
    done += static_cast<size_t>(w);
  }
  fsync(fd);
  close(fd);
  return Seconds(start);
}

double PlainRead(const std::string& path, char* data, size_t bytes) {
  const auto start = Clock::now();
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return -1;
  for (size_t done = 0; done < bytes;) {
    const ssize_t r = read(fd, data + done, std::min(kChunk, bytes - done));
    if (r <= 0) return -1;
    done += static_cast<size_t>(r);
  }
  close(fd);
  return Seconds(start);
}

constexpr char kSaveAim[] = "checkpoint save";
constexpr double kSaveAimRatio = 0.8;  // checkpoint save GB/s / plain write+fsync GB/s

bool Run(bool quick, int full_rounds, bench::Report& report) {
  const int kTables = 8;
  const int64_t table_bytes = quick ? (int64_t{4} << 20) : (int64_t{128} << 20);
  const int64_t cols = 1024;
  const int64_t rows = table_bytes / 4 / cols;
  const size_t total = static_cast<size_t>(kTables * table_bytes);
  const int rounds = quick ? 1 : full_rounds;
  std::string base = "/tmp";
  for (const char* var : {"ASYNCPS_BENCH_DIR", "TMPDIR"}) {
    const char* env = std::getenv(var);
    if (env != nullptr && env[0] != '\0') {
      base = env;
      break;
    }
  }
  const std::string dir = absl::StrCat(base, "/ckpt_bench_", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);

  testutil::LocalCluster::Options o;
  o.num_ps = 2;
  o.num_workers = 1;
  auto cluster = testutil::LocalCluster::Start(o);
  if (!cluster.ok()) return Fail(cluster.status().ToString());
  auto chief = (*cluster)->MakeChief();
  if (!chief.ok()) return Fail(chief.status().ToString());
  ParameterServerStrategy& strategy = (*chief)->strategy();
  for (int t = 0; t < kTables; ++t) {
    auto v = strategy.CreateVariable(absl::StrCat("table_", t),
                                     init::Uniform({rows, cols}, -1, 1, t + 1));
    if (!v.ok()) return Fail(v.status().ToString());
  }
  // Each round first changes every value and copies the tables here: the reference writes
  // the very bytes the checkpoint holds (random floats), and both write bytes never written
  // before. This disk's storage recognises rewritten content: writing the same bytes over a
  // file again runs ~5x faster than writing new ones (measured), so a reference or a
  // checkpoint that repeats the previous round's bytes would be flattered.
  std::unique_ptr<char[]> buffer(new char[total]);
  std::vector<Tensor> expected;  // table_0 and table_7 as saved this round
  auto change_values = [&](int round) -> bool {
    Tensor delta(DType::kF32, {rows, cols});
    for (int64_t i = 0; i < delta.num_elements(); ++i) {
      delta.data<float>()[i] = 0.001f * static_cast<float>((i * 7919 + round * 104729) % 1000);
    }
    for (int t = 0; t < kTables; ++t) {
      const std::string name = absl::StrCat("table_", t);
      if (!strategy.process().ps().Update({{name, UpdateKind::kAdd, delta, std::nullopt}}).ok())
        return false;
      auto value = strategy.process().ps().Read({name});
      if (!value.ok()) return false;
      std::memcpy(buffer.get() + static_cast<size_t>(t) * static_cast<size_t>(table_bytes),
                  (*value)[0].raw_data(), static_cast<size_t>(table_bytes));
      if (t == 0 || t == kTables - 1) expected.push_back((*value)[0]);
    }
    return true;
  };
  CheckpointManager::Options verify_opts;
  verify_opts.max_to_keep = 0;  // the rounds delete old checkpoints themselves, untimed
  CheckpointManager manager(strategy, dir + "/ckpts", verify_opts);
  CheckpointManager::Options fast_opts = verify_opts;
  fast_opts.verify_before_restore = false;
  CheckpointManager fast(strategy, dir + "/ckpts", fast_opts);

  std::vector<double> write_s, save_s, read_s, restore_s, restore_fast_s;
  SyncDisk(dir);
  for (int r = 0; r < rounds; ++r) {
    expected.clear();
    if (!change_values(r)) return Fail("changing the values failed");
    const std::string plain = absl::StrCat(dir, "/plain-", r, ".bin");
    // Which goes first alternates by round: the disk may still be busy with the previous
    // write when the next one starts, and that should not always hit the same side.
    auto plain_write = [&]() -> bool {
      const double w = PlainWrite(plain, buffer.get(), total);
      write_s.push_back(w);
      return w >= 0;
    };
    if (r % 2 == 0 && !plain_write()) return Fail("plain write failed");
    const auto start = Clock::now();
    auto path = manager.Save(r + 1);
    if (!path.ok()) return Fail(path.status().ToString());
    save_s.push_back(Seconds(start));
    if (r % 2 == 1 && !plain_write()) return Fail("plain write failed");

    // Change the values, so a restore that did nothing would be caught.
    if (!strategy.process().ps()
             .Update({{"table_0", UpdateKind::kAdd, expected[0], std::nullopt}})
             .ok()) {
      return Fail("update failed");
    }
    DropCache(plain);
    const double rd = PlainRead(plain, buffer.get(), total);
    if (rd < 0) return Fail("plain read failed");
    read_s.push_back(rd);
    DropCacheTree(*path);
    auto rs = Clock::now();
    auto step = manager.Restore(*path);
    if (!step.ok()) return Fail(step.status().ToString());
    restore_s.push_back(Seconds(rs));
    DropCacheTree(*path);
    rs = Clock::now();
    step = fast.Restore(*path);
    if (!step.ok()) return Fail(step.status().ToString());
    restore_fast_s.push_back(Seconds(rs));
    auto got = strategy.process().ps().Read({"table_0", "table_7"});
    if (!got.ok() || !(*got)[0].Equals(expected[0]) || !(*got)[1].Equals(expected[1])) {
      return Fail("restored values differ from the saved ones");
    }
    fs::remove(plain);
    fs::remove_all(*path);
    std::printf("  round %d: plain write+fsync %.3f s, checkpoint save %.3f s (%.2fx)\n", r + 1,
                write_s.back(), save_s.back(), write_s.back() / save_s.back());
    SyncDisk(dir);
  }
  fs::remove_all(dir);

  const double mib = static_cast<double>(total) / (1 << 20);
  auto rate = [&](double s) { return static_cast<double>(total) / s / 1e9; };
  std::printf("ckpt_bench: %.0f MiB in %d tables over 2 PS, median of %d round(s)\n", mib, kTables,
              rounds);
  std::printf("  plain write+fsync   %6.3f s  %6.2f GB/s\n", Median(write_s),
              rate(Median(write_s)));
  report.aims().Declare(kSaveAim, bench::AimBound::kAtLeast, kSaveAimRatio);
  const double write_gbs = rate(Median(write_s));
  const double read_gbs = rate(Median(read_s));
  report.Add({.name = "plain write+fsync", .value = write_gbs, .unit = "GB/s"});
  const bool met = report.Add({.name = "checkpoint save",
                               .value = rate(Median(save_s)),
                               .unit = "GB/s",
                               .reference = "plain write+fsync",
                               .reference_value = write_gbs,
                               .aim = kSaveAim});
  report.Add({.name = "plain read (cold)", .value = read_gbs, .unit = "GB/s"});
  report.Add({.name = "restore, verified",
              .value = rate(Median(restore_s)),
              .unit = "GB/s",
              .reference = "plain read (cold)",
              .reference_value = read_gbs});
  report.Add({.name = "restore, PS checks",
              .value = rate(Median(restore_fast_s)),
              .unit = "GB/s",
              .reference = "plain read (cold)",
              .reference_value = read_gbs});
  std::printf("  checkpoint save     %6.3f s  %6.2f GB/s  = %.2fx plain write  %s (>= %.2f)\n",
              Median(save_s), rate(Median(save_s)), Median(write_s) / Median(save_s),
              bench::Verdict(met), kSaveAimRatio);
  // Each round's save against the plain write next to it: the two ran back to back, under
  // the same load, so this shows how much of the spread above is the machine's.
  std::vector<double> paired;
  for (size_t i = 0; i < save_s.size(); ++i) paired.push_back(write_s[i] / save_s[i]);
  std::printf("  save / plain write per round: median %.2fx, range %.2f-%.2fx\n", Median(paired),
              *std::min_element(paired.begin(), paired.end()),
              *std::max_element(paired.begin(), paired.end()));
  std::printf("  plain read (cold)   %6.3f s  %6.2f GB/s\n", Median(read_s), rate(Median(read_s)));
  std::printf("  restore, verified   %6.3f s  %6.2f GB/s  = %.2fx plain read\n", Median(restore_s),
              rate(Median(restore_s)), Median(read_s) / Median(restore_s));
  std::printf("  restore, PS checks  %6.3f s  %6.2f GB/s  = %.2fx plain read\n",
              Median(restore_fast_s), rate(Median(restore_fast_s)),
              Median(read_s) / Median(restore_fast_s));
  std::printf("%s\n", report.aims().Summary().c_str());
  return true;
}

}  // namespace
}  // namespace asyncps

int main(int argc, char** argv) {
  bool quick = false;
  int rounds = 3;
  std::string json;
  // --rounds=N is this benchmark's own; the rest are every benchmark's (bench_flags.h).
  std::vector<char*> common;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::atoi(argv[i] + 9);
      if (rounds < 1) {
        std::fprintf(stderr, "ckpt_bench: --rounds must be at least 1\n");
        return 2;
      }
    } else {
      common.push_back(argv[i]);
    }
  }
  if (!asyncps::bench::ParseBenchFlags(static_cast<int>(common.size()), common.data(), &quick,
                                       &json))
    return 2;
  asyncps::InitLogging("bench", 0, "warn");
  asyncps::bench::Report report(argc, argv);
  return report.Finish(json, asyncps::Run(quick, rounds, report) ? 0 : 1);
}
