#ifndef ASYNCPS_TESTS_TESTUTIL_OUTPUT_TEXT_H_
#define ASYNCPS_TESTS_TESTUTIL_OUTPUT_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace asyncps::testutil {

// Reading what a process printed. The number right after the first `prefix` in `text`
// ("... trained 5616 steps", "trained " -> 5616; a fraction is truncated), or -1 when
// `prefix` is absent or no number follows it.
int64_t NumberAfter(absl::string_view text, absl::string_view prefix);

// The lines of `text` that contain `needle`, in order.
std::vector<std::string> LinesWith(absl::string_view text, absl::string_view needle);

// The chief's final test accuracy, from its one line "[chief] test accuracy A"; -1 when it
// printed none or more than one.
double FinalAccuracy(absl::string_view text);

}  // namespace asyncps::testutil

#endif  // ASYNCPS_TESTS_TESTUTIL_OUTPUT_TEXT_H_
