#include "tests/testutil/output_text.h"

#include "absl/strings/numbers.h"

namespace asyncps::testutil {

int64_t NumberAfter(absl::string_view text, absl::string_view prefix) {
  const size_t at = text.find(prefix);
  if (at == absl::string_view::npos) return -1;
  absl::string_view rest = text.substr(at + prefix.size());
  rest = rest.substr(0, rest.find_first_not_of("0123456789."));
  double value = -1;
  return absl::SimpleAtod(rest, &value) ? static_cast<int64_t>(value) : -1;
}

}  // namespace asyncps::testutil
