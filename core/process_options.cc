#include "core/process_options.h"

#include <signal.h>

#include <cstdlib>
#include <string_view>

#include "absl/strings/ascii.h"
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

void ByteSizeOption(int argc, char** argv, std::string_view flag, const char* env, uint64_t* out,
                    std::vector<std::string>* errors) {
  const char* v = FlagOrEnv(argc, argv, flag, env);
  if (v == nullptr) return;
  if (!ParseByteSize(v, out)) {
    errors->push_back(absl::StrCat("--", std::string(flag), " / ", env, ": '", v,
                                   "' is not a positive byte size (like 8GiB, 512M or 1048576)"));
  }
}

void BoolOption(int argc, char** argv, std::string_view flag, const char* env, bool* out,
                std::vector<std::string>* errors) {
  if (BareFlag(argc, argv, flag)) {
    *out = true;
    return;
  }
  const char* v = FlagOrEnv(argc, argv, flag, env);
  if (v == nullptr) return;
  const std::string lower = absl::AsciiStrToLower(v);
  if (lower == "1" || lower == "true") {
    *out = true;
  } else if (lower == "0" || lower == "false") {
    *out = false;
  } else {
    errors->push_back(absl::StrCat("--", std::string(flag), " / ", env, ": '", v, "' is not a boolean (true, false, 1, 0)"));
  }
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
  ByteSizeOption(argc, argv, "ps_max_variable_bytes", "ASYNCPS_PS_MAX_VARIABLE_BYTES", &o.ps_max_variable_bytes,
                 &o.errors);
  ByteSizeOption(argc, argv, "ps_max_response_bytes", "ASYNCPS_PS_MAX_RESPONSE_BYTES", &o.ps_max_response_bytes,
                 &o.errors);
  BoolOption(argc, argv, "allow_nonfinite_gradients", "ASYNCPS_ALLOW_NONFINITE_GRADIENTS",
             &o.allow_nonfinite_gradients, &o.errors);
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
