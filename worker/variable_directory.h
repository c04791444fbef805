#ifndef ASYNCPS_WORKER_VARIABLE_DIRECTORY_H_
#define ASYNCPS_WORKER_VARIABLE_DIRECTORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "partitioners/variable_placement.h"

namespace asyncps {

// Variable name -> placement, shared by the coordinator (who decides it) and workers (who are
// told it). Versioned so the coordinator can tell whether a worker is up to date.
//
// Thread-safe; placements are immutable once added.
class VariableDirectory {
 public:
  // Adds or replaces a variable's placement and bumps the version.
  void Add(VariablePlacement placement);
  // Replaces everything with `placements` at `version`.
  void Reset(std::vector<VariablePlacement> placements, uint64_t version);
  // NotFound names the variable.
  absl::StatusOr<std::shared_ptr<const VariablePlacement>> Find(const std::string& name) const;
  std::vector<std::shared_ptr<const VariablePlacement>> All() const;
  uint64_t version() const;

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const VariablePlacement>> placements_
      ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace asyncps

#endif  // ASYNCPS_WORKER_VARIABLE_DIRECTORY_H_
