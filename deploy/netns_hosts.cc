#include "deploy/netns_hosts.h"

#include <arpa/inet.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/subprocess.h"

namespace asyncps::deploy {
namespace {

// Where `ip netns` keeps the names (iproute2's NETNS_RUN_DIR).
constexpr char kNetnsRunDir[] = "/run/netns";
constexpr char kSwitchSuffix[] = "sw";
constexpr char kBridge[] = "br0";
constexpr char kHostDevice[] = "eth0";
// One `ip` command answers in milliseconds; a minute means something is wrong.
constexpr absl::Duration kCommandTimeout = absl::Seconds(60);

// An iproute2 binary (`ip`, `tc`): from PATH, else the places Debian puts it (root's PATH has
// /usr/sbin, a `sudo -E` or a cron environment may not).
std::string ToolPath(absl::string_view tool) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const std::string& d : dirs) {
    const std::string candidate = absl::StrCat(d, "/", tool);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs `tool args...`; FailedPrecondition with its output when it fails.
absl::Status RunTool(absl::string_view tool, const std::vector<std::string>& args) {
  const std::string path = ToolPath(tool);
  if (path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", tool, "' not found: install Debian's iproute2"));
  }
  Subprocess::Options options;
  options.argv.push_back(path);
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> proc = Subprocess::Start(options);
  if (!proc.ok()) return proc.status();
  absl::StatusOr<int> code = (*proc)->Wait(kCommandTimeout);
  const std::string command = absl::StrCat(tool, " ", absl::StrJoin(args, " "));
  if (!code.ok()) {
    (*proc)->Signal(SIGKILL);
    return absl::FailedPreconditionError(absl::StrCat(command, ": ", code.status().message()));
  }
  if (*code != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        command, ": exit ", *code, ": ", absl::StripAsciiWhitespace((*proc)->output())));
  }
  return absl::OkStatus();
}

absl::Status RunIp(const std::vector<std::string>& args) { return RunTool("ip", args); }

std::vector<std::string> ListNamespaces() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kNetnsRunDir, ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;  // none (or no such directory): no namespaces
}

bool PidRuns(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

absl::StatusOr<std::vector<std::string>> SubnetHostAddresses(absl::string_view subnet, int count,
                                                             int* prefix_len) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("subnet '", subnet, "' ", why));
  };
  std::vector<absl::string_view> parts = absl::StrSplit(subnet, '/');
  int bits = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &bits)) return bad("is not A.B.C.D/N");
  in_addr addr{};
  const std::string base(parts[0]);
  if (inet_pton(AF_INET, base.c_str(), &addr) != 1) return bad("is not A.B.C.D/N");
  const uint32_t network = ntohl(addr.s_addr);
  // Only the private 10.x space, inside namespaces the launcher makes: never an address that
  // someone else's network uses.
  if ((network >> 24) != 10 || bits < 8 || bits > 29)
    return bad("must be inside 10.0.0.0/8, with a prefix of 8..29 bits");
  const uint32_t host_mask = (uint32_t{1} << (32 - bits)) - 1;
  if ((network & host_mask) != 0)
    return bad("has host bits set (give the network address, e.g. 10.213.47.0/24)");
  // Usable: network+1 .. broadcast-1; the first is left out.
  const int64_t usable = static_cast<int64_t>(host_mask) - 2;
  if (count < 0 || count > usable) {
    return bad(absl::StrCat("has room for ", usable, " hosts, not ", count));
  }
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    in_addr a{};
    a.s_addr = htonl(network + 2 + static_cast<uint32_t>(i));
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a, text, sizeof(text));
    out.emplace_back(text);
  }
  if (prefix_len != nullptr) *prefix_len = bits;
  return out;
}

absl::Status CheckNetnsName(absl::string_view name) {
  const bool plain =
      !name.empty() && name.size() <= 40 && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
               c == '-';
      });
  if (!plain) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' is not a plain name (1..40 letters, digits, '_', '.', '-')"));
  }
  return absl::OkStatus();
}

absl::Status CheckNetnsSupport() {
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("network namespaces need root (ip netns); running as uid ", geteuid()));
  }
  if (ToolPath("ip").empty())
    return absl::FailedPreconditionError("'ip' not found: install Debian's iproute2");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NetnsHosts>> NetnsHosts::Create(
    std::string prefix, absl::string_view subnet, const std::vector<std::string>& names) {
  if (absl::Status s = CheckNetnsSupport(); !s.ok()) return s;
  if (absl::Status s = CheckNetnsName(prefix); !s.ok()) return s;
  for (const std::string& name : names) {
    if (absl::Status s = CheckNetnsName(name); !s.ok()) return s;
    if (name == kSwitchSuffix)
      return absl::InvalidArgumentError("a host cannot be named 'sw' (the switch)");
  }
  for (const std::string& existing : ListNamespaces()) {
    if (absl::StartsWith(existing, prefix)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "network namespace ", existing, " exists already: choose another prefix than '", prefix,
          "', or delete them (ip netns del NAME; scripts/netns_hosts.py cleanup --prefix ", prefix,
          ")"));
    }
  }
  std::unique_ptr<NetnsHosts> hosts(new NetnsHosts());
  hosts->prefix_ = std::move(prefix);
  if (absl::Status s = hosts->Build(subnet, names); !s.ok()) {
    (void)hosts->Destroy();  // what was made; the build's error is the one to report
    return s;
  }
  return hosts;
}

absl::Status NetnsHosts::Build(absl::string_view subnet, const std::vector<std::string>& names) {
  int prefix_len = 0;
  absl::StatusOr<std::vector<std::string>> addresses =
      SubnetHostAddresses(subnet, static_cast<int>(names.size()), &prefix_len);
  if (!addresses.ok()) return addresses.status();
  const std::string sw = switch_netns();
  auto add_netns = [this](const std::string& netns) {
    absl::Status s = RunIp({"netns", "add", netns});
    if (s.ok()) created_.push_back(netns);
    return s;
  };
  if (absl::Status s = add_netns(sw); !s.ok()) return s;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"-n", sw, "link", "set", "lo", "up"},
                                             {"-n", sw, "link", "add", kBridge, "type", "bridge"},
                                             {"-n", sw, "link", "set", kBridge, "up"}}) {
    if (absl::Status s = RunIp(args); !s.ok()) return s;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    Host host{names[i], prefix_ + names[i], (*addresses)[i]};
    if (absl::Status s = add_netns(host.netns); !s.ok()) return s;
    const std::string port = absl::StrCat("p", i);
    // Both ends are made from the switch: no interface ever appears in the machine's own
    // namespace, so neither its names nor its routes can clash with ours.
    for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
             {"-n", sw, "link", "add", port, "type", "veth", "peer", "name", kHostDevice, "netns",
              host.netns},
             {"-n", sw, "link", "set", port, "alias", host.name},
             {"-n", sw, "link", "set", port, "master", kBridge},
             {"-n", sw, "link", "set", port, "up"},
             {"-n", host.netns, "addr", "add", absl::StrCat(host.address, "/", prefix_len), "dev",
              kHostDevice},
             {"-n", host.netns, "link", "set", "lo", "up"},
             {"-n", host.netns, "link", "set", kHostDevice, "up"}}) {
      if (absl::Status s = RunIp(args); !s.ok()) return s;
    }
    hosts_.push_back(std::move(host));
  }
  return absl::OkStatus();
}

absl::Status CheckLinkRate(absl::string_view rate) {
  // tc's units, as scripts/netns_hosts.py passes them: digits, then bit, kbit, mbit, gbit.
  static constexpr absl::string_view kUnits[] = {"kbit", "mbit", "gbit", "bit"};
  for (absl::string_view unit : kUnits) {
    if (!absl::EndsWith(rate, unit)) continue;
    absl::string_view digits = rate.substr(0, rate.size() - unit.size());
    uint32_t n = 0;
    if (!digits.empty() && digits.size() <= 6 &&
        std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(digits, &n) && n > 0) {
      return absl::OkStatus();
    }
    break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "a link rate is a positive whole number of bit, kbit, mbit or gbit per second (1gbit, "
      "100mbit), got '", rate, "'"));
}

absl::Status NetnsHosts::CapLinks(absl::string_view rate) {
  if (absl::Status s = CheckLinkRate(rate); !s.ok()) return s;
  const std::string sw = switch_netns();
  for (size_t i = 0; i < hosts_.size(); ++i) {
    // Each end of the veth shapes what it sends: the host's end its uplink, the bridge port its
    // downlink. The burst is scripts/netns_hosts.py's default, a few frames more than a 10 Gbit/s
    // timer tick sends.
    const std::pair<std::string, std::string> ends[] = {{hosts_[i].netns, kHostDevice},
                                                        {sw, absl::StrCat("p", i)}};
    for (const auto& [netns, dev] : ends) {
      if (absl::Status s = RunTool("tc", {"-n", netns, "qdisc", "replace", "dev", dev, "root",
                                          "tbf", "rate", std::string(rate), "burst", "256kb",
                                          "latency", "50ms"});
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

NetnsHosts::~NetnsHosts() { (void)Destroy(); }

absl::Status NetnsHosts::Destroy() {
  absl::Status first;
  // Hosts before the switch; either order works (a namespace's end of a veth takes the other
  // end with it), this one leaves no bridge port dangling while the hosts go.
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
    if (absl::Status s = RunIp({"netns", "del", *it}); !s.ok() && first.ok()) first = s;
  }
  created_.clear();
  return first;
}

std::string NetnsHosts::switch_netns() const { return prefix_ + kSwitchSuffix; }

std::vector<std::string> NetnsHosts::Exec(size_t index,
                                          const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ToolPath("ip"), "netns", "exec", hosts_.at(index).netns};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> SweepStaleLauncherNamespaces() {
  std::vector<std::string> deleted;
  for (const std::string& name : ListNamespaces()) {
    if (!absl::StartsWith(name, kLauncherNetnsFamily)) continue;
    absl::string_view rest = absl::string_view(name).substr(sizeof(kLauncherNetnsFamily) - 1);
    const size_t dash = rest.find('-');
    int pid = 0;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(rest.substr(0, dash), &pid) ||
        pid <= 0)
      continue;
    if (PidRuns(pid)) continue;
    if (RunIp({"netns", "del", name}).ok()) deleted.push_back(name);
  }
  return deleted;
}

}  // namespace asyncps::deploy
