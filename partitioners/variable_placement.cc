#include "partitioners/variable_placement.h"

#include <algorithm>

namespace asyncps {

int VariablePlacement::ShardOfRow(int64_t row) const {
  auto it = std::upper_bound(shards.begin(), shards.end(), row,
                             [](int64_t r, const ShardPlacement& s) { return r < s.row_end; });
  if (it == shards.end() || row < it->row_begin) return -1;
  return static_cast<int>(it - shards.begin());
}

Shape VariablePlacement::ShardShape(size_t i) const {
  Shape s = shape;
  if (!s.empty()) s[0] = shards[i].row_end - shards[i].row_begin;
  return s;
}

}  // namespace asyncps
