#ifndef ASYNCPS_CORE_UPDATE_KIND_H_
#define ASYNCPS_CORE_UPDATE_KIND_H_

#include "absl/strings/string_view.h"

namespace asyncps {

// How an update combines a new value with the stored one (dense or per row): what a step
// function asks for (StepContext::Update, Scatter; ShardedVariable) and what the PS applies.
// In core, beside OptimizerKind, because the user API and the PS share it. Numbering matches
// UpdateKind in ps/ps.capnp (the wire).
enum class UpdateKind { kAssign = 0, kAdd, kSub, kMin, kMax, kMul, kDiv };

// "assign", "add", ...; "invalid" for a value outside the enum. Any thread.
absl::string_view UpdateKindName(UpdateKind kind);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_UPDATE_KIND_H_
