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
#include "metrics/status_board.h"
#include "core/status_macros.h"
#include "ps/ps.capnp.h"
#include "net/rpc_client.h"
#include "ps/checkpoint_wire.h"
#include "core/durable_file.h"
#include "worker/routed_call.h"
#include "worker/shard_map_cache.h"

namespace asyncps {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "ckpt-";

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
  for (const auto& [ps, names] : by_ps) {
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
  for (auto& r : results) {
    if (!r.ok()) {
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
  spdlog::info("checkpoint {} committed: {} variables, {} files, {} bytes in {:.3f} s", dir,
               manifest->variables.size(), manifest->files.size(), bytes, seconds);
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

absl::StatusOr<int64_t> CheckpointManager::Restore(const std::string& path) {
  MutexLock lock(&mu_);
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = fs::absolute(path).lexically_normal().string();
  ASSIGN_OR_RETURN(
      CheckpointManifest manifest,
      VerifyCheckpoint(dir, options_.verify_before_restore ? CheckpointCheck::kChecksums
                                                           : CheckpointCheck::kStructure));
  ASSIGN_OR_RETURN(auto plans, PlanRestore(manifest, dir, Placements(strategy_)));
  std::vector<std::pair<int, net::OutMessage>> calls;
  for (const auto& [ps, plan] : plans) {
    net::OutMessage m;
    ps::RestorePlanToWire(plan, m.InitRequestBody<wire::RestoreCheckpointRequest>());
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
