#ifndef ASYNCPS_DEPLOY_FILE_SD_H_
#define ASYNCPS_DEPLOY_FILE_SD_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace asyncps::deploy {

// One process whose /metrics a Prometheus should scrape.
struct ScrapeTarget {
  std::string address;  // "127.0.0.1:9100" (the metrics endpoint, not the RPC port)
  std::string role;     // "chief", "ps", "worker", "evaluator"
  int index = 0;
};

// Prometheus file_sd JSON (one target group per process) for `targets`. Target labels are
// asyncps_role and asyncps_task: the scraped series already carry role and task, and reusing
// those names would make Prometheus rename them to exported_role / exported_task.
std::string FileSdJson(const std::vector<ScrapeTarget>& targets);

// Writes FileSdJson(targets) to `path` so that a watching Prometheus never reads half a file
// (temporary file, fsync, rename). Errors name the file.
absl::Status WriteFileSd(const std::string& path, const std::vector<ScrapeTarget>& targets);

}  // namespace asyncps::deploy

#endif  // ASYNCPS_DEPLOY_FILE_SD_H_
