#ifndef ASYNCPS_TESTS_INTEGRATION_TEST_FUNCTIONS_H_
#define ASYNCPS_TESTS_INTEGRATION_TEST_FUNCTIONS_H_

#include <cstdint>

#include "worker/program.h"

namespace asyncps::testutil {

// The Program both the test workers and the in-process test chief build:
//   "increment"        iterations += 1
//   "slow_increment"   works for arg0 (i64 ms) in 2 ms slices, then iterations += 1;
//                      returns Cancelled early if the coordinator cancels it
//   "slow_increment_then_mirror"  like slow_increment, then mirror += 1 in a second request
//                      sent only once the first succeeded: a closure that fails on the PS
//                      holding "iterations" never touches "mirror" (on another PS)
//   "fail"             returns InvalidArgument
//   "noop"             returns nothing
//   "use_counter"      arg0 is a "counter" resource: bumps it and returns
//                      [worker index, count, instance id] (i64)
//   "mark_then_work"   started += 1, then works for arg0 (i64 ms) in 2 ms slices; stops early
//                      (Cancelled) on cancellation only when arg1 (i64) is non-zero
//   "whoami"           returns [worker index] (i64 scalar)
//   "read_iterations"  returns the value of "iterations"
//   "sparse_regression_step"  arg0 is a "regression_data" resource: one SGD step of a sparse
//                      linear model "w" [kVocab, 1] towards TrueWeight, pushed as row gradients
//   "next_element"     arg0 is an iterator: returns [worker index, its next element's first tensor]
//   "add_to_row"       adds 1 to row arg0 (i64) of the i64 vector "rows", then works for arg1
//                      (i64 ms) in 2 ms slices, so a worker killed then has applied the update
//                      but not answered (exactly-once tests)
//   "push_and_read_row"  pushes gradient -1 to row arg0 (i64) of the f32 vector "fused_rows"
//                      (SGD, learning rate 1) and reads "fused_rows" in the same request
//                      (StepContext::PushGradientsAndReadAsync); fails (Internal) unless the row
//                      read is exactly 1; then works for arg1 (i64 ms) like "add_to_row"
//   "count_ids"        arg0 is an iterator over "ids": adds 1 to row id of the i64 vector "counts"
//                      for every id of its next batch, then works for arg1 (i64 ms) in 2 ms
//                      slices; returns [worker index, ids counted] (0 at the end of the data)
//   "count_and_sum_ids"  count_ids, and then (the step's second update call) adds the batch's
//                      id sum to the i64 scalar "total"
// Datasets: "range" (args n: 0..n-1 sharded by worker), "idx_file" (args path: records of an
// IDX file), "ids" (args n, batch: 0..n-1 shuffled (seeded by worker index), in batches).
// Resources: "counter" (a per-worker counter with a random instance id), "picky_counter" (a
// counter whose factory fails with FailedPrecondition on the worker whose index is the
// "fail_on_worker" argument), "regression_data"
// (a per-worker example generator seeded by the worker index).
Program MakeTestProgram();

inline constexpr int64_t kVocab = 200;
inline constexpr int kFeaturesPerExample = 4;
// The optimum the sparse regression converges to.
float TrueWeight(int64_t feature);

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_INTEGRATION_TEST_FUNCTIONS_H_
