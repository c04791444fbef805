#ifndef ASYNCPS_PS_SHARD_INITIALIZER_H_
#define ASYNCPS_PS_SHARD_INITIALIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace asyncps::ps {

// How to fill a variable, evaluated on the PS for one shard at a time, so a large table is
// never materialised on the coordinator. Random values are a function of (seed, global element
// index) only: a variable gets the same values however it is sharded. Each element draws from
// its own counter-based stream (splitmix64 started at a hash of seed and index), so the cost
// of a fill is proportional to its number of elements whatever the shape.
struct InitializerSpec {
  // zeros, ones, constant, uniform, normal, truncated_normal, glorot_uniform, tensor
  std::string kind = "zeros";
  double value = 0;                  // constant
  double minval = -0.05, maxval = 0.05;  // uniform (Keras defaults)
  double mean = 0, stddev = 0.05;    // normal, truncated_normal (Keras defaults)
  uint64_t seed = 0;
  Shape full_shape;                  // whole variable; empty = the shard's own shape
  int64_t row_offset = 0;            // global row of the shard's first row
  Tensor tensor;                     // kind == "tensor": the shard's values
};

// Builds the values of a shard of shape `shard_shape`. InvalidArgument (before anything is
// allocated) for: an invalid shape; an unknown kind; a random kind on a non-float dtype; a
// tensor of the wrong dtype/shape; NaN/infinite parameters, stddev < 0 or minval > maxval; a
// random distribution whose values could leave the dtype's range (normal: |mean| + 12.5 stddev,
// truncated_normal: |mean| + 2 stddev, uniform: minval and maxval); a constant the dtype cannot
// hold exactly (integers: NaN, infinities, fractions, out of range; bool: other than 0 and 1;
// f32: a finite value beyond its range); a full_shape the shard does not fit in (same rank
// and trailing dims, row_offset + rows <= full rows), or a row_offset without a full_shape.
absl::StatusOr<Tensor> Initialize(const InitializerSpec& spec, DType dtype, const Shape& shard_shape);

}  // namespace asyncps::ps

#endif  // ASYNCPS_PS_SHARD_INITIALIZER_H_
