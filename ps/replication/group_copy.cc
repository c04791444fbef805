#include "ps/replication/group_copy.h"

#include "ps/replication/backup_stream.h"

namespace asyncps::ps {

const char* CopyRoleName(CopyRole role) {
  switch (role) {
    case CopyRole::kPrimary:
      return "primary";
    case CopyRole::kBackup:
      return "backup";
    case CopyRole::kRebuilding:
      return "rebuilding";
    case CopyRole::kNeedsRebuild:
      return "needs_rebuild";
    case CopyRole::kFenced:
      return "fenced";
    case CopyRole::kRestoring:
      return "restoring";
  }
  return "unknown";
}

wire::CopyRole CopyRoleToWire(CopyRole role) {
  switch (role) {
    case CopyRole::kPrimary:
      return wire::CopyRole::PRIMARY;
    case CopyRole::kBackup:
      return wire::CopyRole::BACKUP;
    case CopyRole::kRebuilding:
      return wire::CopyRole::REBUILDING;
    case CopyRole::kNeedsRebuild:
      return wire::CopyRole::NEEDS_REBUILD;
    case CopyRole::kFenced:
      return wire::CopyRole::FENCED;
    case CopyRole::kRestoring:
      return wire::CopyRole::RESTORING;
  }
  return wire::CopyRole::NEEDS_REBUILD;
}

GroupCopy::GroupCopy(uint32_t group, uint64_t max_variable_bytes, const UpdateDedup::Options& dedup_options,
                     std::shared_ptr<CopyExtensionState> extension)
    : group(group),
      owned_store(std::make_unique<VariableStore>(max_variable_bytes)),
      owned_dedup(std::make_unique<UpdateDedup>(dedup_options)),
      extension(std::move(extension)),
      state{owned_store.get(), owned_dedup.get(), this->extension.get()} {}

GroupCopy::GroupCopy(uint32_t group, VariableStore* budget, const UpdateDedup::Options& dedup_options,
                     std::shared_ptr<CopyExtensionState> extension)
    : group(group),
      owned_store(std::make_unique<VariableStore>(budget)),
      owned_dedup(std::make_unique<UpdateDedup>(dedup_options)),
      extension(std::move(extension)),
      state{owned_store.get(), owned_dedup.get(), this->extension.get()} {}

GroupCopy::GroupCopy(uint32_t group, PsService::ShardState shared, std::shared_ptr<CopyExtensionState> extension)
    : group(group),
      extension(std::move(extension)),
      state{shared.store, shared.dedup, this->extension != nullptr ? this->extension.get() : shared.extension} {}

GroupCopy::~GroupCopy() {
  std::vector<std::unique_ptr<BackupStream>> stopping;
  {
    MutexLock lock(&mu);
    stopping.swap(streams);
  }
  stopping.clear();
}

}  // namespace asyncps::ps
