#include "coordinator/checkpoint_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator_metrics.h"
#include "core/durable_file.h"
#include "core/status_macros.h"
#include "metrics/status_board.h"
#include "net/rpc_client.h"
#include "ps/checkpoint_wire.h"
#include "ps/embedding/embedding.capnp.h"
#include "ps/embedding/embedding_wire.h"
#include "ps/embedding/key_partition.h"
#include "ps/ps.capnp.h"
#include "core/durable_file.h"
#include "worker/ps_client.h"
#include "worker/routed_call.h"
#include "worker/shard_map_cache.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ckpt-";
constexpr char kSaveEmbeddingMethod[] = "ps.SaveEmbeddingTables";
constexpr char kRestoreEmbeddingMethod[] = "ps.RestoreEmbeddingTables";

// Sends each call to its PS at once and waits for every answer (results in call order).
std::vector<absl::StatusOr<net::InMessage>> CallEach(
    ParameterServerStrategy& strategy, const std::string& method,
    std::vector<std::pair<int, net::OutMessage>> calls, absl::Duration timeout) {
  struct State {
    Mutex mu;
    size_t remaining ABSL_GUARDED_BY(mu) = 0;
    std::vector<absl::StatusOr<net::InMessage>> results ABSL_GUARDED_BY(mu);
  };
  auto state = std::make_shared<State>();
  {
    MutexLock lock(&state->mu);
    state->remaining = calls.size();
    for (size_t i = 0; i < calls.size(); ++i)
      state->results.emplace_back(absl::UnknownError("not sent"));
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const int ps = calls[i].first;
    auto answered = [state, i](int ps, const std::string* address, absl::StatusOr<net::InMessage> r) {
      if (!r.ok()) {
        r = absl::Status(r.status().code(), absl::StrCat("ps ", ps, " (", address != nullptr ? *address : "",
                                                         "): ", r.status().message()));
      }
      MutexLock lock(&state->mu);
      state->results[i] = std::move(r);
      --state->remaining;
    };
    if (ShardMapCache* shard_map = strategy.process().shard_map(); shard_map != nullptr) {
      // Replicated shards: `ps` is a shard group, saved or restored by its primary.
      CallGroupAsync(strategy.process().ps_rpcs(), *shard_map, method, ps, std::move(calls[i].second),
                     net::RpcClient::CallOptions{timeout, false}, std::move(answered));
      continue;
    }
    net::RpcClient& client = strategy.process().ps_rpc(ps);
    client.CallAsync(method, std::move(calls[i].second), net::RpcClient::CallOptions{timeout, false},
                     [ps, address = &client.address(), answered = std::move(answered)](
                         absl::StatusOr<net::InMessage> r) mutable { answered(ps, address, std::move(r)); });
  }
  MutexLock lock(&state->mu);
  state->mu.Await(absl::Condition(
      +[](size_t* n) { return *n == 0; }, &state->remaining));
  return std::move(state->results);
}

std::vector<VariablePlacement> Placements(const ParameterServerStrategy& strategy) {
  std::vector<VariablePlacement> out;
  for (const auto& p : strategy.process().directory().All()) out.push_back(*p);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

void RemoveBestEffort(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) spdlog::warn("could not delete {}: {}", path, ec.message());
}

}  // namespace

CheckpointManager::CheckpointManager(ParameterServerStrategy& strategy, std::string directory,
                                     int max_to_keep)
    : CheckpointManager(strategy, std::move(directory), Options{max_to_keep}) {}

CheckpointManager::CheckpointManager(ParameterServerStrategy& strategy, std::string directory,
                                     Options options)
    : strategy_(strategy),
      // Absolute, because the parameter servers resolve it in their own working directories.
      directory_(fs::absolute(directory).lexically_normal().string()),
      options_(options) {}

std::vector<std::string> CheckpointManager::List() const {
  std::vector<std::string> out;
  for (const CheckpointDir& f : ScanCheckpoints(directory_)) {
    if (f.committed) out.push_back(f.path);
  }
  return out;
}

absl::StatusOr<std::string> CheckpointManager::Save(int64_t step) { return Save(step, {}); }

absl::StatusOr<std::string> CheckpointManager::Save(int64_t step,
                                                    const std::map<std::string, std::string>& coordinator_state) {
  if (step < 0)
    return absl::InvalidArgumentError(absl::StrCat("checkpoint step ", step, " is negative"));
  MutexLock lock(&mu_);
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = absl::StrCat(directory_, "/", kPrefix, step);
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kManifestFileName, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", dir, " already exists"));
  }
  // A directory without a manifest is what a crashed save left: start it afresh.
  if (fs::exists(dir, ec)) RemoveBestEffort(dir);
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  RETURN_IF_ERROR(FsyncDirectory(directory_));

  const std::vector<VariablePlacement> placements = Placements(strategy_);
  const int num_ps = strategy_.cluster().num_ps();
  std::map<int, std::vector<std::string>> by_ps;
  for (const auto& p : placements) {
    for (const auto& s : p.shards) by_ps[s.ps].push_back(s.name);
  }
  std::vector<std::pair<int, net::OutMessage>> calls;
  std::vector<int> call_ps;  // calls[i]'s PS
  for (const auto& [ps, names] : by_ps) {
    call_ps.push_back(ps);
    net::OutMessage m;
    auto req = m.InitRequestBody<wire::SaveCheckpointRequest>();
    req.setDirectory(dir);
    req.setFileName(absl::StrCat("ps-", ps, "-of-", num_ps, ".safetensors"));
    auto list = req.initNames(static_cast<unsigned>(names.size()));
    for (unsigned i = 0; i < names.size(); ++i) list.set(i, names[i]);
    req.setStep(step);
    calls.emplace_back(ps, std::move(m));
  }
  auto results = CallEach(strategy_, "ps.SaveCheckpoint", std::move(calls), options_.rpc_timeout);
  std::vector<ps::SavedFile> saved;
  absl::Status failed;
  for (size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    if (!r.ok()) {
      if (failed.ok() && absl::IsNotFound(r.status()) && i < call_ps.size()) {
        // Every name sent is one the strategy placed on that PS once it held it: a PS without it
        // restarted empty. A PS failure (Unavailable, state lost) that PS recovery repairs and
        // a retry outlives, not the caller's mistake (as ps_client.h treats the same answer).
        const int ps = call_ps[i];
        failed = PsStateLostError(ps, strategy_.cluster().ps()[static_cast<size_t>(ps)], r.status().message());
      }
      if (failed.ok()) failed = r.status();
      continue;
    }
    absl::Status s = net::CatchDecodeErrors([&]() -> absl::Status {
      ASSIGN_OR_RETURN(ps::SavedFile f,
                       ps::SavedFileFromWire(r->ResponseBody<wire::SaveCheckpointResponse>()));
      saved.push_back(std::move(f));
      return absl::OkStatus();
    });
    if (!s.ok() && failed.ok()) failed = s;
  }
  absl::StatusOr<CheckpointManifest> manifest =
      failed.ok() ? BuildManifest(step, absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()),
                                  num_ps, placements, saved)
                  : absl::StatusOr<CheckpointManifest>(failed);
  if (manifest.ok()) {
    if (absl::Status s = SaveEmbeddingTables(dir, step, *manifest); !s.ok()) manifest = s;
  }
  if (!manifest.ok()) {
    spdlog::error("checkpoint {} not committed: {}", dir, manifest.status().ToString());
    strategy_.process().checkpoint_metrics().RecordFailed();
    strategy_.process().status_board().AddEvent("checkpoint_failed",
                                      absl::StrCat("step ", step, ": ", manifest.status().message()));
    RemoveBestEffort(dir);
    return absl::Status(
        manifest.status().code(),
        absl::StrCat("checkpoint ", dir, " not committed: ", manifest.status().message()));
  }
  manifest->coordinator_state = coordinator_state;
  {
    const std::string json = ManifestToJson(*manifest);
    ASSIGN_OR_RETURN(auto writer,
                     DurableFileWriter::Create(absl::StrCat(dir, "/", kManifestFileName)));
    RETURN_IF_ERROR(writer->Append(json.data(), json.size()));
    RETURN_IF_ERROR(writer->Commit());
  }
  uint64_t bytes = 0;
  for (const auto& f : manifest->files) bytes += f.digest.bytes;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info(
      "checkpoint {} committed: {} variables, {} embedding tables, {} files, {} bytes in {:.3f} s",
      dir, manifest->variables.size(), manifest->embedding_tables.size(), manifest->files.size(),
      bytes, seconds);
  strategy_.process().checkpoint_metrics().RecordSaved(seconds, bytes, step);
  strategy_.process().status_board().AddEvent(
      "checkpoint_saved", absl::StrCat("step ", step, ": ", bytes, " bytes in ", absl::StrFormat("%.2f", seconds), " s"));
  for (const auto& [id, listener] : listeners_) listener(step);

  // Only now that the new checkpoint is durable: drop the oldest beyond max_to_keep and the
  // leftovers of crashed saves older than this one.
  std::vector<CheckpointDir> found = ScanCheckpoints(directory_);
  size_t committed = 0;
  for (const CheckpointDir& f : found) committed += f.committed ? 1 : 0;
  for (const CheckpointDir& f : found) {
    if (f.step >= step) break;
    if (!f.committed) {
      RemoveBestEffort(f.path);
    } else if (options_.max_to_keep > 0 && committed > static_cast<size_t>(options_.max_to_keep)) {
      // The manifest goes first, so a crash mid-delete leaves no half checkpoint that looks whole.
      fs::remove(fs::path(f.path) / kManifestFileName, ec);
      RemoveBestEffort(f.path);
      --committed;
    }
  }
  return dir;
}

void CheckpointManager::AddEmbeddingTable(const std::string& name) {
  MutexLock lock(&tables_mu_);
  embedding_tables_.insert(name);
}

std::set<std::string> CheckpointManager::RegisteredTables() const {
  MutexLock lock(&tables_mu_);
  return embedding_tables_;
}

absl::Status CheckpointManager::SaveEmbeddingTables(const std::string& dir, int64_t step,
                                                    CheckpointManifest& manifest) {
  const int num_ps = strategy_.cluster().num_ps();
  // Every table any PS holds, with its dim; registered tables too, so that a PS that lost one
  // (restarted empty) fails the save instead of leaving its rows out.
  std::map<std::string, int64_t> tables;
  for (const std::string& name : RegisteredTables()) tables[name] = 0;
  std::vector<std::pair<int, net::OutMessage>> stats_calls;
  for (int ps = 0; ps < num_ps; ++ps) {
    net::OutMessage m;
    ps::BuildEmbeddingStatsRequest({}, m);
    stats_calls.emplace_back(ps, std::move(m));
  }
  for (auto& r : CallEach(strategy_, ps::kEmbeddingStatsMethod, std::move(stats_calls),
                          options_.rpc_timeout)) {
    if (!r.ok()) return r.status();
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      for (auto t : r->ResponseBody<wire::EmbeddingStatsResponse>().getTables())
        tables[t.getName().cStr()] = t.getDim();
      return absl::OkStatus();
    }));
  }
  if (tables.empty()) return absl::OkStatus();

  struct Expected {
    size_t table;
    std::string file;
  };
  std::vector<Expected> expected;
  std::vector<std::pair<int, net::OutMessage>> calls;
  manifest.embedding_key_partition = ps::kKeyPartitionName;
  for (const auto& [name, dim] : tables) {
    const size_t k = manifest.embedding_tables.size();
    manifest.embedding_tables.push_back({name, dim, 0, {}});
    for (int ps = 0; ps < num_ps; ++ps) {
      // Table names are free text; file names must be [A-Za-z0-9._-]+, so the index names it.
      const std::string file =
          absl::StrCat("embedding-", k, "-ps-", ps, "-of-", num_ps, ".safetensors");
      net::OutMessage m;
      auto req = m.InitRequestBody<wire::SaveEmbeddingTablesRequest>();
      req.setDirectory(dir);
      req.setFileName(file);
      req.initTables(1).set(0, name);
      req.setStep(step);
      req.setNumPs(static_cast<uint32_t>(num_ps));
      req.setPsIndex(static_cast<uint32_t>(ps));
      calls.emplace_back(ps, std::move(m));
      expected.push_back({k, file});
    }
  }
  auto results = CallEach(strategy_, kSaveEmbeddingMethod, std::move(calls), options_.rpc_timeout);
  for (size_t i = 0; i < results.size(); ++i) {
    auto& r = results[i];
    ManifestEmbeddingTable& table = manifest.embedding_tables[expected[i].table];
    if (!r.ok()) {
      const std::string detail = absl::StrCat("embedding table '", table.name, "': ", r.status().message());
      if (absl::IsNotFound(r.status())) {
        // Another PS holds it, or it was registered: a PS without it restarted empty. A PS
        // failure (Unavailable, state lost), which PS recovery repairs and a retry outlives,
        // not the caller's mistake.
        const int ps = static_cast<int>(i % static_cast<size_t>(num_ps));
        return PsStateLostError(ps, strategy_.cluster().ps()[static_cast<size_t>(ps)], detail);
      }
      return absl::Status(r.status().code(), detail);
    }
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      auto body = r->ResponseBody<wire::SaveEmbeddingTablesResponse>();
      if (body.getFileName() != expected[i].file) {
        return absl::InternalError(absl::StrCat("a PS answered file '", body.getFileName().cStr(),
                                                "' for '", expected[i].file, "'"));
      }
      manifest.files.push_back({expected[i].file, {body.getBytes(), body.getCrc32()}});
      table.files.push_back(expected[i].file);
      table.rows += body.getRows();
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::RestoreEmbeddingTables(const std::string& dir,
                                                       const CheckpointManifest& manifest) {
  if (manifest.embedding_tables.empty()) return absl::OkStatus();
  std::vector<std::string> files;
  for (const ManifestEmbeddingTable& t : manifest.embedding_tables)
    files.insert(files.end(), t.files.begin(), t.files.end());
  const int num_ps = strategy_.cluster().num_ps();
  std::vector<std::pair<int, net::OutMessage>> calls;
  for (int ps = 0; ps < num_ps; ++ps) {
    net::OutMessage m;
    auto req = m.InitRequestBody<wire::RestoreEmbeddingTablesRequest>();
    req.setDirectory(dir);
    auto list = req.initFiles(static_cast<unsigned>(files.size()));
    for (unsigned i = 0; i < files.size(); ++i) list.set(i, files[i]);
    req.setNumPs(static_cast<uint32_t>(num_ps));
    req.setPsIndex(static_cast<uint32_t>(ps));
    calls.emplace_back(ps, std::move(m));
  }
  uint64_t rows = 0;
  for (auto& r :
       CallEach(strategy_, kRestoreEmbeddingMethod, std::move(calls), options_.rpc_timeout)) {
    if (!r.ok()) return r.status();
    RETURN_IF_ERROR(net::CatchDecodeErrors([&]() -> absl::Status {
      rows += r->ResponseBody<wire::RestoreEmbeddingTablesResponse>().getRows();
      return absl::OkStatus();
    }));
  }
  spdlog::info("restored {} embedding tables of {} onto {} parameter servers: {} rows",
               manifest.embedding_tables.size(), dir, num_ps, rows);
  return absl::OkStatus();
}

int CheckpointManager::AddCommitListener(std::function<void(int64_t step)> listener) {
  MutexLock lock(&mu_);
  listeners_[next_listener_] = std::move(listener);
  return next_listener_++;
}

void CheckpointManager::RemoveCommitListener(int id) {
  MutexLock lock(&mu_);
  listeners_.erase(id);
}

absl::StatusOr<std::string> CheckpointManager::Latest(CheckpointCheck check) const {
  return LatestCheckpoint(directory_, check);
}

absl::StatusOr<int64_t> CheckpointManager::Restore(const std::string& path, const FinishedClosures& finished) {
  MutexLock lock(&mu_);
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = fs::absolute(path).lexically_normal().string();
  ASSIGN_OR_RETURN(
      CheckpointManifest manifest,
      VerifyCheckpoint(dir, options_.verify_before_restore ? CheckpointCheck::kChecksums
                                                           : CheckpointCheck::kStructure));
  ASSIGN_OR_RETURN(auto plans, PlanRestore(manifest, dir, Placements(strategy_)));
  // Everything about the tables that can be checked here is, before any PS changes.
  for (const std::string& name : RegisteredTables()) {
    if (manifest.FindEmbeddingTable(name) == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint ", dir, " has no embedding table '", name, "'"));
    }
  }
  if (!manifest.embedding_tables.empty()) {
    if (manifest.embedding_key_partition != ps::kKeyPartitionName) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", dir, " spreads embedding keys by '", manifest.embedding_key_partition,
          "'; this build knows '", ps::kKeyPartitionName, "'"));
    }
    if (!options_.verify_before_restore) {
      // The PS reads table files without checking their CRC-32: the coordinator does.
      for (const ManifestEmbeddingTable& t : manifest.embedding_tables) {
        for (const std::string& name : t.files) {
          const ManifestFile* f = manifest.FindFile(name);
          const std::string path = absl::StrCat(dir, "/", name);
          ASSIGN_OR_RETURN(auto digest, DigestFile(path));
          if (f == nullptr || digest.first != f->digest.bytes || digest.second != f->digest.crc32) {
            return absl::DataLossError(
                absl::StrCat("checkpoint file ", path, ": checksum mismatch with the manifest"));
          }
        }
      }
    }
  }
  if (absl::Status s = RestoreEmbeddingTables(dir, manifest); !s.ok()) {
    spdlog::error("restore of {} failed: embedding tables: {}", dir, s.ToString());
    return absl::Status(
        s.code(),
        absl::StrCat("restore of ", dir,
                     " failed restoring embedding tables (no variable changed; ",
                     "tables on PS that answered OK hold the checkpoint's rows): ", s.message()));
  }
  std::vector<std::pair<int, net::OutMessage>> calls;
  for (const auto& [ps, plan] : plans) {
    net::OutMessage m;
    auto body = m.InitRequestBody<wire::RestoreCheckpointRequest>();
    ps::RestorePlanToWire(plan, body);
    if (finished.coordinator != 0) {
      auto closures = body.initClosures();
      closures.setCoordinator(finished.coordinator);
      closures.setWatermark(finished.watermark);
    }
    calls.emplace_back(ps, std::move(m));
  }
  auto results =
      CallEach(strategy_, "ps.RestoreCheckpoint", std::move(calls), options_.rpc_timeout);
  for (const auto& r : results) {
    if (!r.ok()) {
      spdlog::error("restore of {} failed: {}", dir, r.status().ToString());
      return absl::Status(
          r.status().code(),
          absl::StrCat("restore of ", dir,
                       " failed (PS that answered OK hold the checkpoint's values; ",
                       "restore again once the cause is fixed): ", r.status().message()));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("restored checkpoint {} (step {}) onto {} parameter servers in {:.3f} s", dir,
               manifest.step, plans.size(), seconds);
  return manifest.step;
}

absl::StatusOr<int64_t> CheckpointManager::RestoreLatest() {
  ASSIGN_OR_RETURN(std::string latest, Latest());
  return Restore(latest);
}

}  // namespace asyncps
