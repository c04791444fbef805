#ifndef ASYNCPS_PS_PS_WIRE_H_
#define ASYNCPS_PS_PS_WIRE_H_

#include "absl/status/statusor.h"
#include "net/message.h"
#include "ps/ps.capnp.h"
#include "ps/shard_initializer.h"
#include "core/optimizer_config.h"
#include "core/update_kind.h"
#include "ps/update_tag.h"

namespace asyncps::ps {

// Conversions between PS value types and their Cap'n Proto form. The writers are used by
// clients (coordinator, workers); the readers by the PS, and validate what they read.

void OptimizerToWire(const OptimizerConfig* config, wire::OptimizerConfig::Builder out);
// Null when the wire config has an empty type (no optimizer); InvalidArgument for a type that
// names no OptimizerKind.
absl::StatusOr<std::unique_ptr<OptimizerConfig>> OptimizerFromWire(wire::OptimizerConfig::Reader in);

// `message` receives the initializer's tensor payload, if any.
void InitializerToWire(const InitializerSpec& spec, net::OutMessage& message,
                       wire::InitializerSpec::Builder out);
absl::StatusOr<InitializerSpec> InitializerFromWire(const net::InMessage& message,
                                                    wire::InitializerSpec::Reader in);

wire::UpdateKind UpdateKindToWire(UpdateKind kind);
absl::StatusOr<UpdateKind> UpdateKindFromWire(wire::UpdateKind kind);

// Clients set the field only for a tagged update (UpdateTag::tagged); absent reads as untagged.
void UpdateTagToWire(const UpdateTag& tag, wire::UpdateTag::Builder out);
UpdateTag UpdateTagFromWire(wire::UpdateTag::Reader in);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_PS_WIRE_H_
