#include "checkpoint/checkpoint_shard.h"

#include "absl/strings/str_cat.h"

namespace asyncps::ps {

std::string SlotTensorName(const std::string& shard, const std::string& slot) {
  return absl::StrCat(shard, "/.OPTIMIZER_SLOT/", slot);
}

absl::Status ValidateCheckpointFileName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) {
    return absl::InvalidArgumentError(absl::StrCat("invalid checkpoint file name '", name, "'"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok)
      return absl::InvalidArgumentError(absl::StrCat("invalid checkpoint file name '", name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace asyncps::ps
