#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_STORE_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/sync.h"
#include "ps/embedding/embedding_table.h"

namespace asyncps::ps {

// The embedding tables of one parameter server, by name. Tables are created, never removed,
// so the pointers it hands out stay valid for the store's life.
//
// Thread-safe.
class EmbeddingStore {
 public:
  EmbeddingStore() = default;
  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  // Creates table `config.name`, or finds it when it exists with the same dim, dtype,
  // initializer and optimizer kind (second: whether it was created). AlreadyExists naming both
  // when it exists otherwise; EmbeddingTable::Create's errors for a bad config (its config
  // checks also when the table exists).
  absl::StatusOr<std::pair<EmbeddingTable*, bool>> Create(const EmbeddingTableConfig& config);

  // NotFound naming the table.
  absl::StatusOr<EmbeddingTable*> Find(const std::string& name) const;

  // Every table, by name.
  std::vector<EmbeddingTable*> List() const;

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<EmbeddingTable>> tables_ ABSL_GUARDED_BY(mu_);
};

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_STORE_H_
