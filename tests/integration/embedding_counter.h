#ifndef ASYNCPS_TESTS_INTEGRATION_EMBEDDING_COUNTER_H_
#define ASYNCPS_TESTS_INTEGRATION_EMBEDDING_COUNTER_H_

#include "worker/program.h"

namespace asyncps::testutil {

// The Program of embedding_exactly_once_test (its workers run embedding_counter_program; the
// test's coordinator resolves the same names): function "count_keys" (args: i64 [k] keys, i64
// scalar milliseconds) pushes a gradient of -1 to element 0 of each key's row of table "counts"
// (dim kCounterDim; with SGD at learning rate 1 on zero-initialised rows each applied push adds
// exactly 1), then works for the given time, so a SIGKILL usually lands after the push reached
// the PS and before the closure answered.
inline constexpr int64_t kCounterDim = 2;
Program MakeEmbeddingCounterProgram();

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_INTEGRATION_EMBEDDING_COUNTER_H_
