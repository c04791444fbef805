#ifndef ASYNCPS_PS_CHECKPOINT_SERVICE_H_
#define ASYNCPS_PS_CHECKPOINT_SERVICE_H_

#include <cstdint>

#include "net/method_table.h"
#include "ps/ps.capnp.h"
#include "ps/update_dedup.h"
#include "ps/variable_store.h"

namespace asyncps::ps {

// The checkpoint methods of a parameter server:
//   ps.SaveCheckpoint     SaveCheckpointRequest -> SaveCheckpointResponse (writes this PS's
//                         file of the checkpoint; see SaveShards)
//   ps.RestoreCheckpoint  RestoreCheckpointRequest -> Empty (all-or-nothing on this PS; see
//                         RestoreShards)
// They run on the server's handler pool, so a save never blocks the I/O thread or pulls and
// pushes from other clients (those continue between shards).
//
// `store` must outlive the server the service is registered with.
class CheckpointService {
 public:
  struct Options {
    // Test-only: a save for this step stops (for 10 minutes) after writing its temporary file
    // and before renaming it, so a test can kill the PS in the middle of a checkpoint. Set
    // from ASYNCPS_TEST_CKPT_HANG_AT_STEP by the PS binary; -1 disables it.
    int64_t test_hang_at_step = -1;
    // Test-only: every restore stops (for 10 minutes) once its plan is read and before any
    // variable changes, so a test can kill a PS in the middle of a restore. Set from
    // ASYNCPS_TEST_CKPT_HANG_AT_RESTORE=1 by the PS binary.
    bool test_hang_at_restore = false;
  };

  CheckpointService(VariableStore& store, Options options) : store_(store), options_(options) {}
  explicit CheckpointService(VariableStore& store) : CheckpointService(store, Options()) {}

  // Reads ASYNCPS_TEST_CKPT_HANG_AT_STEP and ASYNCPS_TEST_CKPT_HANG_AT_RESTORE.
  static Options OptionsFromEnv();

  void RegisterWith(net::MethodTable& server);

  // The methods against another store (a replicated group's copy, ps/replication/): `body`
  // is the request, read from the frame the handler got.
  absl::Status SaveIn(VariableStore& store, wire::SaveCheckpointRequest::Reader body, net::OutMessage* response);
  // `window` (may be null): the update window of the same copy as `store`; once the restore
  // is done its watermark is raised as the request's `closures` says.
  absl::Status RestoreIn(VariableStore& store, wire::RestoreCheckpointRequest::Reader body,
                         UpdateDedup* window = nullptr);

 private:
  absl::Status Save(const net::InMessage& request, net::OutMessage* response);
  absl::Status Restore(const net::InMessage& request, net::OutMessage* response);

  VariableStore& store_;
  const Options options_;
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_CHECKPOINT_SERVICE_H_
