#include "core/logging.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/process_options.h"

namespace asyncps {

void InitLogging(const std::string& role, int task_index, const std::string& level) {
  spdlog::drop("asyncps");  // idempotent: a second call reconfigures
  auto logger = spdlog::stderr_color_mt("asyncps");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [" + role + ":" + std::to_string(task_index) +
                      "] %v");
  const bool known = IsLogLevelName(level);
  logger->set_level(known ? spdlog::level::from_str(level) : spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  if (!known) spdlog::warn("unknown log level '{}'; logging at info", level);
}

void InitLogging(const std::string& role, int task_index) {
  const char* env = std::getenv("ASYNCPS_LOG_LEVEL");
  InitLogging(role, task_index, env != nullptr ? env : "info");
}

}  // namespace asyncps
