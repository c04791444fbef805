#include "deploy/file_sd.h"

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/status_macros.h"

namespace asyncps::deploy {

std::string FileSdJson(const std::vector<ScrapeTarget>& targets) {
  nlohmann::json groups = nlohmann::json::array();
  for (const ScrapeTarget& t : targets) {
    groups.push_back({{"targets", {t.address}},
                      {"labels", {{"asyncps_role", t.role}, {"asyncps_task", std::to_string(t.index)}}}});
  }
  return groups.dump(2) + "\n";
}

absl::Status WriteFileSd(const std::string& path, const std::vector<ScrapeTarget>& targets) {
  const std::string json = FileSdJson(targets);
  ASSIGN_OR_RETURN(std::unique_ptr<DurableFileWriter> writer, DurableFileWriter::Create(path));
  RETURN_IF_ERROR(writer->Append(json.data(), json.size()));
  return writer->Commit();
}

}  // namespace asyncps::deploy
