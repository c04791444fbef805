#include "core/sync.h"
#include "worker/variable_directory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace asyncps {

void VariableDirectory::Add(VariablePlacement placement) {
  MutexLock lock(&mu_);
  const std::string name = placement.name;
  placements_[name] = std::make_shared<const VariablePlacement>(std::move(placement));
  ++version_;
}

void VariableDirectory::Reset(std::vector<VariablePlacement> placements, uint64_t version) {
  MutexLock lock(&mu_);
  placements_.clear();
  for (auto& p : placements) {
    const std::string name = p.name;
    placements_[name] = std::make_shared<const VariablePlacement>(std::move(p));
  }
  version_ = version;
}

absl::StatusOr<std::shared_ptr<const VariablePlacement>> VariableDirectory::Find(
    const std::string& name) const {
  MutexLock lock(&mu_);
  auto it = placements_.find(name);
  if (it == placements_.end()) return absl::NotFoundError(absl::StrCat("unknown variable '", name, "'"));
  return it->second;
}

std::vector<std::shared_ptr<const VariablePlacement>> VariableDirectory::All() const {
  std::vector<std::shared_ptr<const VariablePlacement>> out;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, p] : placements_) out.push_back(p);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  return out;
}

uint64_t VariableDirectory::version() const {
  MutexLock lock(&mu_);
  return version_;
}

}  // namespace asyncps
