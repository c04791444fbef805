#ifndef ASYNCPS_BENCH_BENCH_FLAGS_H_
#define ASYNCPS_BENCH_BENCH_FLAGS_H_

#include <cstdio>
#include <cstring>
#include <string>

#include "bench/report.h"

namespace asyncps::bench {

// Parses the arguments every benchmark takes: [--quick] (a short smoke run for ctest) and
// [--json=PATH] (the figures as JSON too, bench/report.h; `json_path` stays empty without it).
// Returns false (after printing usage) on anything else.
inline bool ParseBenchFlags(int argc, char** argv, bool* quick, std::string* json_path) {
  *quick = false;
  json_path->clear();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      *quick = true;
    } else if (!ParseJsonFlag(argv[i], json_path)) {
      std::fprintf(stderr, "usage: %s [--quick] [--json=PATH]\n", argv[0]);
      return false;
    }
  }
  return true;
}

}  // namespace asyncps::bench

#endif  // ASYNCPS_BENCH_BENCH_FLAGS_H_
