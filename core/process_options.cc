#include "core/process_options.h"

#include <signal.h>

#include <cstdlib>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace asyncps {
namespace {

// Value of --name=V or --name V in argv, else nullptr.
const char* FlagValue(int argc, char** argv, std::string_view name) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() < 2 || arg.substr(0, 2) != "--") continue;
    arg.remove_prefix(2);
    if (arg.substr(0, name.size()) != name) continue;
    if (arg.size() == name.size()) return i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg[name.size()] == '=') return argv[i] + 2 + name.size() + 1;
  }
  return nullptr;
}

const char* FlagOrEnv(int argc, char** argv, std::string_view flag, const char* env) {
  const char* v = FlagValue(argc, argv, flag);
  return v != nullptr ? v : std::getenv(env);
}

// Parses the integer setting `flag` (or `env`) into `out` when present; a malformed value or
// one outside [min, max] is recorded in `error` (the first one only).
void IntSetting(int argc, char** argv, std::string_view flag, const char* env, int64_t min, int64_t max,
                int64_t* out, std::string* error) {
  const char* v = FlagOrEnv(argc, argv, flag, env);
  if (v == nullptr) return;
  int64_t value;
  if (!absl::SimpleAtoi(v, &value) || value < min || value > max) {
    if (error->empty()) {
      *error = absl::StrCat("bad --", std::string(flag), "=", v, " (want an integer in [", min, ", ", max, "])");
    }
    return;
  }
  *out = value;
}

}  // namespace

ProcessOptions ProcessOptions::FromEnvAndFlags(int argc, char** argv) {
  ProcessOptions o;
  if (const char* v = FlagOrEnv(argc, argv, "cluster_token", "ASYNCPS_CLUSTER_TOKEN")) o.cluster_token = v;
  if (const char* v = FlagOrEnv(argc, argv, "metrics_port", "ASYNCPS_METRICS_PORT")) {
    int port;
    if (absl::SimpleAtoi(v, &port)) o.metrics_port = port;
  }
  if (const char* v = FlagOrEnv(argc, argv, "log_level", "ASYNCPS_LOG_LEVEL")) o.log_level = v;
  IntSetting(argc, argv, "rpc_max_connections", "ASYNCPS_RPC_MAX_CONNECTIONS", 1, 1 << 20,
             &o.rpc_max_connections, &o.error);
  IntSetting(argc, argv, "rpc_handshake_timeout_ms", "ASYNCPS_RPC_HANDSHAKE_TIMEOUT_MS", 1, 3600000,
             &o.rpc_handshake_timeout_ms, &o.error);
  IntSetting(argc, argv, "rpc_handshake_max_bytes", "ASYNCPS_RPC_HANDSHAKE_MAX_BYTES", 256, 1 << 20,
             &o.rpc_handshake_max_bytes, &o.error);
  IntSetting(argc, argv, "rpc_idle_timeout_s", "ASYNCPS_RPC_IDLE_TIMEOUT_S", 0, 365LL * 86400,
             &o.rpc_idle_timeout_s, &o.error);
  IntSetting(argc, argv, "rpc_max_frame_bytes", "ASYNCPS_RPC_MAX_FRAME_BYTES", 0, int64_t{1} << 40,
             &o.rpc_max_frame_bytes, &o.error);
  IntSetting(argc, argv, "metrics_threads", "ASYNCPS_METRICS_THREADS", 1, 1024, &o.metrics_threads, &o.error);
  IntSetting(argc, argv, "metrics_request_timeout_ms", "ASYNCPS_METRICS_REQUEST_TIMEOUT_MS", 1, 3600000,
             &o.metrics_request_timeout_ms, &o.error);
  return o;
}

void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signal = 0;
  while (sigwait(&set, &signal) != 0) {
  }
  return signal;
}

}  // namespace asyncps
