#ifndef ASYNCPS_PARTITIONERS_VARIABLE_PLACEMENT_H_
#define ASYNCPS_PARTITIONERS_VARIABLE_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace asyncps {

// Where the pieces of a partitioned variable live: what the coordinator decides, workers are
// told (worker/variable_directory.h) and checkpoints record and re-slice
// (checkpoint/checkpoint_manifest.h). Here, below all of them, so each can name it.

// One shard of a variable: rows [row_begin, row_end) of the whole, held by PS `ps` under
// `name` ("var" for a plain variable, "var/part_i" for shard i of a sharded one).
struct ShardPlacement {
  std::string name;
  int ps = 0;
  int64_t row_begin = 0;
  int64_t row_end = 0;
};

// Where every piece of a variable lives. A plain variable has one shard named like itself
// (rows cover the whole first axis; a scalar has row range [0, 1)).
struct VariablePlacement {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<ShardPlacement> shards;

  bool sharded() const { return shards.size() > 1 || (shards.size() == 1 && shards[0].name != name); }
  // Index of the shard holding global row `row`, or -1.
  int ShardOfRow(int64_t row) const;
  // The shape of shard `i`.
  Shape ShardShape(size_t i) const;
};

}  // namespace asyncps

#endif  // ASYNCPS_PARTITIONERS_VARIABLE_PLACEMENT_H_
