#include "ps/checkpoint_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "core/status_macros.h"
#include "core/sync.h"
#include "ps/ps.capnp.h"
#include "ps/store_checkpoint.h"
#include "ps/checkpoint_wire.h"

namespace asyncps::ps {

CheckpointService::Options CheckpointService::OptionsFromEnv() {
  Options options;
  const char* hang = std::getenv("ASYNCPS_TEST_CKPT_HANG_AT_STEP");
  int64_t step = -1;
  if (hang != nullptr && absl::SimpleAtoi(hang, &step)) options.test_hang_at_step = step;
  const char* hang_restore = std::getenv("ASYNCPS_TEST_CKPT_HANG_AT_RESTORE");
  options.test_hang_at_restore = hang_restore != nullptr && std::string(hang_restore) == "1";
  return options;
}

void CheckpointService::RegisterWith(net::MethodTable& server) {
  // Only the coordinator saves and restores: a worker overwriting every variable from a file
  // is not a step function's business.
  server.Register<wire::SaveCheckpointRequest>(
      "ps.SaveCheckpoint", net::ChiefOnly(),
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) { return Save(req, resp); });
  server.Register<wire::RestoreCheckpointRequest>(
      "ps.RestoreCheckpoint", net::ChiefOnly(),
      [this](const net::RequestContext&, const net::InMessage& req, net::OutMessage* resp) {
        return Restore(req, resp);
      });
}

absl::Status CheckpointService::Save(const net::InMessage& request, net::OutMessage* response) {
  return SaveIn(store_, request.RequestBody<wire::SaveCheckpointRequest>(), response);
}

absl::Status CheckpointService::SaveIn(VariableStore& store, wire::SaveCheckpointRequest::Reader req,
                                       net::OutMessage* response) {
  std::vector<std::string> names;
  for (auto n : req.getNames()) names.emplace_back(n.cStr());
  const int64_t step = req.getStep();
  SaveHooks hooks;
  if (options_.test_hang_at_step >= 0 && step == options_.test_hang_at_step) {
    hooks.before_rename = [](const std::string& temp_path) {
      spdlog::warn("test hook: checkpoint file {} written, not renamed; stopping here", temp_path);
      // Waits for the test's SIGKILL; a timeout keeps a forgotten process from hanging forever.
      Notification never;
      never.WaitForNotificationWithTimeout(absl::Minutes(10));
    };
  }
  const auto start = std::chrono::steady_clock::now();
  auto saved =
      SaveShards(store, req.getDirectory().cStr(), req.getFileName().cStr(), names, step, hooks);
  if (!saved.ok()) {
    spdlog::error("checkpoint save of step {} failed: {}", step, saved.status().ToString());
    return saved.status();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("checkpoint step {}: wrote {} ({} shards, {} bytes) in {:.3f} s", step,
               saved->file_name, saved->shards.size(), saved->digest.bytes, seconds);
  SavedFileToWire(*saved, response->InitResponseBody<wire::SaveCheckpointResponse>());
  return absl::OkStatus();
}

absl::Status CheckpointService::Restore(const net::InMessage& request, net::OutMessage*) {
  return RestoreIn(store_, request.RequestBody<wire::RestoreCheckpointRequest>());
}

absl::Status CheckpointService::RestoreIn(VariableStore& store, wire::RestoreCheckpointRequest::Reader body,
                                          UpdateDedup* window) {
  ASSIGN_OR_RETURN(RestorePlan plan, RestorePlanFromWire(body));
  if (options_.test_hang_at_restore) {
    spdlog::warn("test hook: restore from {} not applied; stopping here", plan.directory);
    // Waits for the test's SIGKILL; a timeout keeps a forgotten process from hanging forever.
    Notification never;
    never.WaitForNotificationWithTimeout(absl::Minutes(10));
  }
  absl::Status s = RestoreShards(store, plan);
  if (!s.ok()) {
    spdlog::error("checkpoint restore from {} failed: {}", plan.directory, s.ToString());
    return s;
  }
  if (window != nullptr && body.hasClosures()) {
    window->RaiseWatermark(body.getClosures().getCoordinator(), body.getClosures().getWatermark());
  }
  spdlog::info("restored {} shards from {}", plan.shards.size(), plan.directory);
  return absl::OkStatus();
}

}  // namespace asyncps::ps
