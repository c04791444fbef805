#include "core/process_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

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

// A setting's value and where it came from ("--flag" or "ENV_VAR"), for error messages.
struct Setting {
  const char* value = nullptr;
  std::string source;
};

Setting FlagOrEnv(int argc, char** argv, std::string_view flag, const char* env) {
  if (const char* v = FlagValue(argc, argv, flag)) return {v, absl::StrCat("--", absl::string_view(flag.data(), flag.size()))};
  if (const char* v = std::getenv(env)) return {v, env};
  return {};
}

// True when argv holds the bare boolean flag --name (no value).
bool BareFlag(int argc, char** argv, std::string_view name) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() == name.size() + 2 && arg.substr(0, 2) == "--" && arg.substr(2) == name) return true;
  }
  return false;
}

// "8GiB", "512M", "1048576" -> bytes; false when malformed, zero or overflowing.
bool ParseByteSize(std::string_view text, uint64_t* bytes) {
  struct Suffix {
    std::string_view name;
    int shift;
  };
  constexpr Suffix kSuffixes[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40},
                                  {"K", 10},   {"M", 20},   {"G", 30},   {"T", 40}};
  int shift = 0;
  for (const Suffix& s : kSuffixes) {
    if (text.size() > s.name.size() && text.substr(text.size() - s.name.size()) == s.name) {
      text.remove_suffix(s.name.size());
      shift = s.shift;
      break;
    }
  }
  uint64_t n;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &n) || n == 0) return false;
  if (n > (~uint64_t{0} >> shift)) return false;
  *bytes = n << shift;
  return true;
}

absl::Status ByteSizeOption(int argc, char** argv, std::string_view flag, const char* env, uint64_t* out) {
  Setting s = FlagOrEnv(argc, argv, flag, env);
  if (s.value == nullptr || ParseByteSize(s.value, out)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(s.source, "='", s.value, "' is not a positive byte size (like 8GiB, 512M or 1048576)"));
}

absl::Status BoolOption(int argc, char** argv, std::string_view flag, const char* env, bool* out) {
  if (BareFlag(argc, argv, flag)) {
    *out = true;
    return absl::OkStatus();
  }
  Setting s = FlagOrEnv(argc, argv, flag, env);
  if (s.value == nullptr) return absl::OkStatus();
  const std::string lower = absl::AsciiStrToLower(s.value);
  if (lower == "1" || lower == "true") {
    *out = true;
  } else if (lower == "0" || lower == "false") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(s.source, "='", s.value, "' is not a boolean (true, false, 1, 0)"));
  }
  return absl::OkStatus();
}

// Parses the integer setting `s` into `out` when present; InvalidArgument naming its source
// when it is malformed or outside [min, max].
absl::Status IntSetting(const Setting& s, int64_t min, int64_t max, int64_t* out) {
  if (s.value == nullptr) return absl::OkStatus();
  int64_t value;
  if (!absl::SimpleAtoi(s.value, &value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.source, "='", s.value, "' is not an integer in [", min, ", ", max, "]"));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status IntOption(int argc, char** argv, std::string_view flag, const char* env, int64_t min, int64_t max,
                       int64_t* out) {
  return IntSetting(FlagOrEnv(argc, argv, flag, env), min, max, out);
}

// A positive duration ("2s", "500ms", "1m30s") of at most an hour.
absl::Status DurationOption(int argc, char** argv, std::string_view flag, const char* env, absl::Duration* out) {
  Setting s = FlagOrEnv(argc, argv, flag, env);
  if (s.value == nullptr) return absl::OkStatus();
  absl::Duration d;
  if (!absl::ParseDuration(s.value, &d) || d <= absl::ZeroDuration() || d > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.source, "='", s.value, "' is not a duration from 1ms to 1h (like 2s or 500ms)"));
  }
  *out = d;
  return absl::OkStatus();
}

// A setting that also answers to an older name: either flag wins over either variable, and the
// current name over the older one.
Setting FlagOrEnvWithOldName(int argc, char** argv, std::string_view flag, const char* env,
                             std::string_view old_flag, const char* old_env) {
  for (std::string_view f : {flag, old_flag}) {
    if (const char* v = FlagValue(argc, argv, f)) return {v, absl::StrCat("--", absl::string_view(f.data(), f.size()))};
  }
  for (const char* e : {env, old_env}) {
    if (const char* v = std::getenv(e)) return {v, e};
  }
  return {};
}

// An IPv4 or IPv6 address literal (what a socket can bind without a name lookup).
bool IsIpLiteral(const char* text) {
  in6_addr addr;
  return inet_pton(AF_INET, text, &addr) == 1 || inet_pton(AF_INET6, text, &addr) == 1;
}

}  // namespace

bool IsLogLevelName(const std::string& name) {
  static constexpr std::string_view kNames[] = {"trace", "debug", "info",     "warn", "warning",
                                                "error", "err",   "critical", "off"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// True when `--name` is the last argument, with no value after it.
static bool DanglingFlag(int argc, char** argv, std::string_view name) {
  if (argc < 2) return false;
  std::string_view last = argv[argc - 1];
  return last.size() == name.size() + 2 && last.substr(0, 2) == "--" && last.substr(2) == name;
}

absl::StatusOr<ProcessOptions> ProcessOptions::Parse(int argc, char** argv) {
  for (std::string_view flag : {"cluster_token", "metrics_port", "metrics_bind_address", "log_level",
                                "ps_max_variable_bytes", "ps_max_response_bytes", "ps_replicas",
                                "ps_heartbeat_timeout", "ps_lost_after", "dispatcher_work_dir", "transport",
                                "compression", "pull_compression"}) {
    if (DanglingFlag(argc, argv, flag)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", absl::string_view(flag.data(), flag.size()), " needs a value"));
    }
  }
  ProcessOptions o;
  if (Setting s = FlagOrEnv(argc, argv, "cluster_token", "ASYNCPS_CLUSTER_TOKEN"); s.value != nullptr) {
    o.cluster_token = s.value;
  }
  if (Setting s = FlagOrEnv(argc, argv, "metrics_port", "ASYNCPS_METRICS_PORT"); s.value != nullptr) {
    int port = 0;
    if (!absl::SimpleAtoi(s.value, &port) || port < -1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(s.source, "='", s.value,
                                                     "' is not a port (an integer from -1 to 65535)"));
    }
    o.metrics_port = port;
  }
  if (Setting s = FlagOrEnv(argc, argv, "metrics_bind_address", "ASYNCPS_METRICS_BIND_ADDRESS");
      s.value != nullptr) {
    if (!IsIpLiteral(s.value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.source, "='", s.value,
          "' is not an IP address (an IPv4 or IPv6 literal such as 127.0.0.1, 0.0.0.0 or ::; no host names)"));
    }
    o.metrics_bind_address = s.value;
  }
  if (Setting s = FlagOrEnv(argc, argv, "log_level", "ASYNCPS_LOG_LEVEL"); s.value != nullptr) {
    if (!IsLogLevelName(s.value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.source, "='", s.value, "' is not a log level (trace, debug, info, warn, error, critical, off)"));
    }
    o.log_level = s.value;
  }
  RETURN_IF_ERROR(ByteSizeOption(argc, argv, "ps_max_variable_bytes", "ASYNCPS_PS_MAX_VARIABLE_BYTES",
                                 &o.ps_max_variable_bytes));
  RETURN_IF_ERROR(ByteSizeOption(argc, argv, "ps_max_response_bytes", "ASYNCPS_PS_MAX_RESPONSE_BYTES",
                                 &o.ps_max_response_bytes));
  RETURN_IF_ERROR(BoolOption(argc, argv, "allow_nonfinite_gradients", "ASYNCPS_ALLOW_NONFINITE_GRADIENTS",
                             &o.allow_nonfinite_gradients));
  RETURN_IF_ERROR(BoolOption(argc, argv, "ps_inline_small_updates", "ASYNCPS_PS_INLINE_SMALL_UPDATES",
                             &o.ps_inline_small_updates));
  RETURN_IF_ERROR(BoolOption(argc, argv, "elastic", "ASYNCPS_ELASTIC", &o.elastic));
  RETURN_IF_ERROR(IntOption(argc, argv, "ps_dedup_max_entries", "ASYNCPS_PS_DEDUP_MAX_ENTRIES", 1, int64_t{1} << 40,
                            &o.ps_dedup_max_entries));
  RETURN_IF_ERROR(IntOption(argc, argv, "ps_replicas", "ASYNCPS_PS_REPLICAS", 1, 3, &o.ps_replicas));
  RETURN_IF_ERROR(IntOption(argc, argv, "initial_ps", "ASYNCPS_INITIAL_PS", 0, 4096, &o.initial_ps));
  RETURN_IF_ERROR(DurationOption(argc, argv, "ps_heartbeat_timeout", "ASYNCPS_PS_HEARTBEAT_TIMEOUT",
                                 &o.ps_heartbeat_timeout));
  RETURN_IF_ERROR(DurationOption(argc, argv, "ps_lost_after", "ASYNCPS_PS_LOST_AFTER", &o.ps_lost_after));
  if (Setting s = FlagOrEnv(argc, argv, "dispatcher_work_dir", "ASYNCPS_DISPATCHER_WORK_DIR"); s.value != nullptr) {
    o.dispatcher_work_dir = s.value;
  }
  if (Setting s = FlagOrEnv(argc, argv, "transport", "ASYNCPS_TRANSPORT"); s.value != nullptr) {
    absl::StatusOr<WirePrecision> precision = ParseWirePrecision(s.value);
    if (!precision.ok()) return absl::InvalidArgumentError(absl::StrCat(s.source, ": ", precision.status().message()));
    o.transport = *precision;
  }
  if (Setting s = FlagOrEnv(argc, argv, "compression", "ASYNCPS_COMPRESSION"); s.value != nullptr) {
    absl::StatusOr<Compression> compression = ParseCompression(s.value);
    if (!compression.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.source, ": ", compression.status().message()));
    }
    o.compression = *compression;
  }
  if (Setting s = FlagOrEnv(argc, argv, "pull_compression", "ASYNCPS_PULL_COMPRESSION"); s.value != nullptr) {
    absl::StatusOr<Compression> pull = ParsePullCompression(s.value);
    if (!pull.ok()) return absl::InvalidArgumentError(absl::StrCat(s.source, ": ", pull.status().message()));
    o.pull_compression = *pull;
  }
  RETURN_IF_ERROR(IntOption(argc, argv, "rpc_max_connections", "ASYNCPS_RPC_MAX_CONNECTIONS", 1, 1 << 20, &o.rpc_max_connections));
  RETURN_IF_ERROR(IntOption(argc, argv, "rpc_handshake_timeout_ms", "ASYNCPS_RPC_HANDSHAKE_TIMEOUT_MS", 1, 3600000, &o.rpc_handshake_timeout_ms));
  RETURN_IF_ERROR(IntOption(argc, argv, "rpc_handshake_max_bytes", "ASYNCPS_RPC_HANDSHAKE_MAX_BYTES", 256, 1 << 20, &o.rpc_handshake_max_bytes));
  RETURN_IF_ERROR(IntOption(argc, argv, "rpc_idle_timeout_s", "ASYNCPS_RPC_IDLE_TIMEOUT_S", 0, 365LL * 86400, &o.rpc_idle_timeout_s));
  RETURN_IF_ERROR(IntOption(argc, argv, "rpc_max_frame_bytes", "ASYNCPS_RPC_MAX_FRAME_BYTES", 0, int64_t{1} << 40, &o.rpc_max_frame_bytes));
  RETURN_IF_ERROR(IntSetting(FlagOrEnvWithOldName(argc, argv, "metrics_max_connections", "ASYNCPS_METRICS_MAX_CONNECTIONS",
                                                  "metrics_threads", "ASYNCPS_METRICS_THREADS"),
                             1, 1024, &o.metrics_max_connections));
  RETURN_IF_ERROR(IntOption(argc, argv, "metrics_request_timeout_ms", "ASYNCPS_METRICS_REQUEST_TIMEOUT_MS", 1, 3600000, &o.metrics_request_timeout_ms));
  return o;
}

ProcessOptions ProcessOptions::FromEnvAndFlags(int argc, char** argv) {
  absl::StatusOr<ProcessOptions> o = Parse(argc, argv);
  if (!o.ok()) {
    std::fprintf(stderr, "asyncps: %s\n", std::string(o.status().message()).c_str());
    std::exit(2);
  }
  return *std::move(o);
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
