#ifndef ASYNCPS_CORE_LOGGING_H_
#define ASYNCPS_CORE_LOGGING_H_

#include <string>

namespace asyncps {

// Configures the process's default spdlog logger so every line carries the role and task
// ("[ps:1]"), the time and the level. Call once from main before starting any thread.
// `level` is an spdlog level name ("info", "debug", ...), applied as given: the caller has
// already resolved it (ProcessOptions: a --log_level flag overrides ASYNCPS_LOG_LEVEL, which
// overrides the default). An unknown name logs at info and says so.
void InitLogging(const std::string& role, int task_index, const std::string& level);
// For a process without flags of its own: the level from ASYNCPS_LOG_LEVEL, else info.
void InitLogging(const std::string& role, int task_index);

}  // namespace asyncps

#endif  // ASYNCPS_CORE_LOGGING_H_
