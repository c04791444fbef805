#include "ps/replication/group_copy.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ps/replication/backup_stream.h"
#include "ps/replication/shard_map.h"

namespace asyncps::ps {

const char* CopyRoleName(CopyRole role) { return WireCopyRoleName(CopyRoleToWire(role)); }

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
  AnswerAll(absl::UnavailableError(absl::StrCat("group ", group,
                                                "'s copy was dropped before its backups acknowledged the write; "
                                                "retry it (tagged writes apply once)")));
}

void GroupCopy::TakeDueAnswers(absl::Time now, std::vector<std::pair<AnswerFn, absl::Status>>* due) {
  if (answers.empty()) return;
  // A restoring primary's restore waits for its copies like any write.
  if (role != CopyRole::kPrimary && role != CopyRole::kRestoring) {
    for (PendingAnswer& a : answers) {
      due->emplace_back(std::move(a.done), StaleShardMapError(group, generation, generation, -1));
    }
    answers.clear();
    return;
  }
  uint64_t acked = std::numeric_limits<uint64_t>::max();
  for (const auto& s : streams) {
    if (s->counted) acked = std::min(acked, s->acked);
  }
  while (!answers.empty() && answers.front().sequence <= acked) {
    due->emplace_back(std::move(answers.front().done), std::move(answers.front().applied));
    answers.pop_front();
  }
  bool expired = false;
  for (const PendingAnswer& a : answers) expired = expired || a.deadline <= now;
  if (!expired) return;
  std::deque<PendingAnswer> waiting;
  for (PendingAnswer& a : answers) {
    if (a.deadline > now) {
      waiting.push_back(std::move(a));
      continue;
    }
    std::vector<std::string> slow;
    for (const auto& s : streams) {
      if (s->counted && s->acked < a.sequence) slow.push_back(absl::StrCat("ps ", s->target()));
    }
    due->emplace_back(std::move(a.done),
                      absl::UnavailableError(absl::StrCat(a.method, " to group ", group, " (sequence ", a.sequence,
                                                          ") not acknowledged in time by ", absl::StrJoin(slow, ", "),
                                                          "; applied on the primary, retry it (tagged writes apply once)")));
  }
  answers = std::move(waiting);
}

void GroupCopy::AnswerDue() {
  std::vector<std::pair<AnswerFn, absl::Status>> due;
  {
    MutexLock lock(&mu);
    TakeDueAnswers(absl::Now(), &due);
  }
  for (auto& [done, status] : due) done(status);
}

void GroupCopy::AnswerAll(const absl::Status& status) {
  std::deque<PendingAnswer> all;
  {
    MutexLock lock(&mu);
    all.swap(answers);
  }
  for (PendingAnswer& a : all) a.done(status);
}

}  // namespace asyncps::ps
