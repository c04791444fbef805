#ifndef ASYNCPS_PS_CHECKPOINT_WIRE_H_
#define ASYNCPS_PS_CHECKPOINT_WIRE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/ps.capnp.h"
#include "checkpoint/checkpoint_shard.h"

namespace asyncps::ps {

// Conversions between the checkpoint types of checkpoint_shard.h and their Cap'n Proto form.
// Readers validate what they read (dtype codes) and must run inside net::CatchDecodeErrors or
// a server handler.

void SavedFileToWire(const SavedFile& saved, wire::SaveCheckpointResponse::Builder out);
absl::StatusOr<SavedFile> SavedFileFromWire(wire::SaveCheckpointResponse::Reader in);

void RestorePlanToWire(const RestorePlan& plan, wire::RestoreCheckpointRequest::Builder out);
absl::StatusOr<RestorePlan> RestorePlanFromWire(wire::RestoreCheckpointRequest::Reader in);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_CHECKPOINT_WIRE_H_
