#ifndef ASYNCPS_BENCH_SCALING_PROGRAM_H_
#define ASYNCPS_BENCH_SCALING_PROGRAM_H_

// The step functions of scaling_bench's push-pull workloads, built the same way in the bench
// (the chief) and in its worker processes (bench/scaling_worker.cc). Each is one unit of work:
//   * "dense_step": reads the variable "dense" (every shard, one request per PS) and pushes a
//     gradient of its shape (every element 1e-3; Adam on the PS, as ps_bench's dense push);
//   * "small_step": pushes one f32 to the variable "small" (SGD, as ps_bench's small push):
//     the fixed cost of a closure, dispatch included.
// Both return {units: f32 scalar 1}.

#include "worker/program.h"

namespace asyncps::bench {

Program MakeScalingProgram();

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_SCALING_PROGRAM_H_
