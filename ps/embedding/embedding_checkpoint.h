#ifndef ASYNCPS_PS_EMBEDDING_EMBEDDING_CHECKPOINT_H_
#define ASYNCPS_PS_EMBEDDING_EMBEDDING_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/embedding/embedding_store.h"

namespace asyncps::ps {

// Embedding tables in a checkpoint: one safetensors file per PS holding, for each table T,
//   T/keys         i64 [rows]
//   T/values       f32 [rows, dim]
//   T/slot/<name>  f32 [rows, dim]   one per optimizer slot (UpdateRule::slots())
//   T/last_update  i64 [rows]        the table step of each row's last update
//   T/sketch       i32 [4, width]    the admission sketch, when the table has one
// and metadata "format" = "asyncps-embedding-1", "key_partition" = kKeyPartitionName, "num_ps",
// "ps_index", "step", and "table/T" = the table's config (JSON) with its step.
//
// Restore reads every file of a checkpoint and keeps the keys PsForKey(key, num_ps) gives this
// PS, so a checkpoint saved by n PS restores into any number of PS with identical lookups.

struct SavedEmbeddingFile {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  uint64_t rows = 0;
};

// Writes `tables` (empty: every table) of `store` to directory/file_name durably. Each table is
// one consistent copy (EmbeddingTable::Export). InvalidArgument for a bad file name or a
// relative directory; NotFound for an unknown table.
absl::StatusOr<SavedEmbeddingFile> SaveEmbeddingTables(const EmbeddingStore& store, const std::string& directory,
                                                       const std::string& file_name,
                                                       const std::vector<std::string>& tables, int64_t step,
                                                       int num_ps, int ps_index);

// Restores every table found in `files` (in directory) into `store`, creating tables that do
// not exist from the config the files recorded. Every file is read and validated (header,
// format, key partition, one config per table across files) before any table changes; each
// table is then replaced all-or-nothing (EmbeddingTable::Import). Returns the rows this PS
// holds afterwards. DataLoss for a corrupt file, InvalidArgument for a mismatch.
absl::StatusOr<uint64_t> RestoreEmbeddingTables(EmbeddingStore& store, const std::string& directory,
                                                const std::vector<std::string>& files, int num_ps, int ps_index);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_EMBEDDING_EMBEDDING_CHECKPOINT_H_
