#include "tests/testutil/output_text.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace asyncps::testutil {

int64_t NumberAfter(absl::string_view text, absl::string_view prefix) {
  const size_t at = text.find(prefix);
  if (at == absl::string_view::npos) return -1;
  absl::string_view rest = text.substr(at + prefix.size());
  rest = rest.substr(0, rest.find_first_not_of("0123456789."));
  double value = -1;
  return absl::SimpleAtod(rest, &value) ? static_cast<int64_t>(value) : -1;
}

std::vector<std::string> LinesWith(absl::string_view text, absl::string_view needle) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StrContains(line, needle)) lines.emplace_back(line);
  }
  return lines;
}

double FinalAccuracy(absl::string_view text) {
  constexpr absl::string_view kPrefix = "[chief] test accuracy ";
  const std::vector<std::string> lines = LinesWith(text, kPrefix);
  double value = -1;
  if (lines.size() != 1) return -1;
  const absl::string_view line = lines[0];
  if (!absl::SimpleAtod(line.substr(line.find(kPrefix) + kPrefix.size()), &value)) return -1;
  return value;
}

}  // namespace asyncps::testutil
