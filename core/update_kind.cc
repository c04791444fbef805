#include "core/update_kind.h"

namespace asyncps {

absl::string_view UpdateKindName(UpdateKind kind) {
  switch (kind) {
    case UpdateKind::kAssign:
      return "assign";
    case UpdateKind::kAdd:
      return "add";
    case UpdateKind::kSub:
      return "sub";
    case UpdateKind::kMin:
      return "min";
    case UpdateKind::kMax:
      return "max";
    case UpdateKind::kMul:
      return "mul";
    case UpdateKind::kDiv:
      return "div";
  }
  return "invalid";
}

}  // namespace asyncps
