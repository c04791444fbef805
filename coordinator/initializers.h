#ifndef ASYNCPS_COORDINATOR_INITIALIZERS_H_
#define ASYNCPS_COORDINATOR_INITIALIZERS_H_

#include <cstdint>

#include "core/tensor.h"
#include "ps/shard_initializer.h"

namespace asyncps {

// What a new variable looks like and how to fill it. The fill runs on the parameter servers,
// shard by shard (see ps/shard_initializer.h), so the coordinator never holds a large table.
struct VariableInit {
  DType dtype = DType::kF32;
  Shape shape;
  ps::InitializerSpec spec;
};

namespace init {

VariableInit Zeros(Shape shape, DType dtype = DType::kF32);
VariableInit Ones(Shape shape, DType dtype = DType::kF32);
VariableInit Constant(Shape shape, double value, DType dtype = DType::kF32);
// Keras defaults: uniform [-0.05, 0.05), normal(0, 0.05).
VariableInit Uniform(Shape shape, double minval = -0.05, double maxval = 0.05, uint64_t seed = 0);
VariableInit Normal(Shape shape, double mean = 0, double stddev = 0.05, uint64_t seed = 0);
VariableInit TruncatedNormal(Shape shape, double mean = 0, double stddev = 0.05, uint64_t seed = 0);
// Uniform in +-sqrt(6 / (fan_in + fan_out)) of the whole variable's shape.
VariableInit GlorotUniform(Shape shape, uint64_t seed = 0);
// Exactly `value` (its dtype and shape); sharded variables get the matching rows.
VariableInit FromTensor(Tensor value);
// A scalar f32 holding `value`.
VariableInit Scalar(float value);

}  // namespace init
}  // namespace asyncps

#endif  // ASYNCPS_COORDINATOR_INITIALIZERS_H_
