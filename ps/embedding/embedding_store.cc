#include "ps/embedding/embedding_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "ps/update_rule.h"

namespace asyncps::ps {
namespace {

std::string Describe(const EmbeddingTableConfig& c) {
  return absl::StrCat("dim ", c.dim, ", ", DTypeName(c.dtype), ", initializer ",
                      EmbeddingInitializerKindName(c.initializer.kind), " seed ", c.initializer.seed, ", optimizer ",
                      OptimizerKindName(c.optimizer.kind));
}

// EmbeddingTable::Create's checks of the config's own fields, for a create that finds its table:
// an idempotent create is answered OK only for a config that could have created it.
absl::Status CheckConfig(const EmbeddingTableConfig& config) {
  RETURN_IF_ERROR(ValidateEmbeddingTableConfig(config));
  absl::Status rule = UpdateRule::Create(config.optimizer).status();
  if (rule.ok()) return rule;
  return absl::InvalidArgumentError(absl::StrCat("embedding table '", config.name, "': ", rule.message()));
}

}  // namespace

absl::StatusOr<std::pair<EmbeddingTable*, bool>> EmbeddingStore::Create(const EmbeddingTableConfig& config) {
  {
    ReaderMutexLock lock(&mu_);
    auto it = tables_.find(config.name);
    if (it != tables_.end()) {
      // The initializer must agree too: rows created on different PS must start alike.
      if (Describe(it->second->config()) != Describe(config)) {
        return absl::AlreadyExistsError(absl::StrCat("embedding table '", config.name, "' exists with ",
                                                     Describe(it->second->config()), "; asked for ",
                                                     Describe(config)));
      }
      RETURN_IF_ERROR(CheckConfig(config));
      return std::make_pair(it->second.get(), false);
    }
  }
  // Built outside the lock (the sketch may be large); a racing create of the same name wins
  // once, the other finds it.
  auto table = EmbeddingTable::Create(config);
  if (!table.ok()) return table.status();
  MutexLock lock(&mu_);
  auto [it, inserted] = tables_.try_emplace(config.name, std::move(*table));
  if (!inserted && Describe(it->second->config()) != Describe(config)) {
    return absl::AlreadyExistsError(absl::StrCat("embedding table '", config.name, "' exists with ",
                                                 Describe(it->second->config())));
  }
  return std::make_pair(it->second.get(), inserted);
}

absl::StatusOr<EmbeddingTable*> EmbeddingStore::Find(const std::string& name) const {
  ReaderMutexLock lock(&mu_);
  auto it = tables_.find(name);
  if (it == tables_.end()) return absl::NotFoundError(absl::StrCat("no embedding table '", name, "' on this PS"));
  return it->second.get();
}

std::vector<EmbeddingTable*> EmbeddingStore::List() const {
  std::vector<EmbeddingTable*> out;
  {
    ReaderMutexLock lock(&mu_);
    for (const auto& [name, table] : tables_) out.push_back(table.get());
  }
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  return out;
}

}  // namespace asyncps::ps
