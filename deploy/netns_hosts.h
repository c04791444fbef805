#ifndef ASYNCPS_DEPLOY_NETNS_HOSTS_H_
#define ASYNCPS_DEPLOY_NETNS_HOSTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace asyncps::deploy {

// The subnet `asyncps_launch --hosts netns` (and scripts/netns_hosts.py) gives its hosts: an
// unusual /24 of the private 10.x space, and only ever inside namespaces the launcher creates.
inline constexpr char kDefaultNetnsSubnet[] = "10.213.47.0/24";
// Launchers' namespaces are "apsl-<pid>-<host>": a launcher that was SIGKILLed leaves them behind,
// and the next one deletes those whose pid no longer runs (SweepStaleLauncherNamespaces).
inline constexpr char kLauncherNetnsFamily[] = "apsl-";

// The first `count` host addresses of `subnet` ("10.213.47.0/24"), in order, leaving out the
// first (kept for a gateway should one be wanted): 10.213.47.2, .3, ... `*prefix_len` is set to
// the subnet's prefix length. InvalidArgument unless `subnet` is an IPv4 network address inside
// 10.0.0.0/8 with a prefix of 8..29 bits, or when `count` addresses do not fit.
absl::StatusOr<std::vector<std::string>> SubnetHostAddresses(absl::string_view subnet, int count,
                                                             int* prefix_len);

// OK when a name is fit to follow a prefix as a namespace name and a port alias (letters,
// digits, '_', '.' and '-'; 1..40 characters); InvalidArgument naming it otherwise.
absl::Status CheckNetnsName(absl::string_view name);

// Hosts on one machine: each a network namespace of its own with its own address on eth0 and
// loopback up, every eth0 the end of a veth whose other end is a port of one Linux bridge that
// lives in a namespace of its own (the "switch"), so the machine's own network is untouched.
//
// The layout is scripts/netns_hosts.py's, so that script can attach to these hosts by their
// prefix to partition, isolate, flap or cap them while a job runs: the switch is PREFIX + "sw"
// with bridge br0; host H is namespace PREFIX + H; its bridge port is "p<i>" (i: its index)
// with H as the port's alias.
//
// Made and removed by running `ip` (iproute2), so it needs root. Not thread-safe.
class NetnsHosts {
 public:
  struct Host {
    std::string name;     // "ps0"
    std::string netns;    // "apsl-123-ps0"
    std::string address;  // "10.213.47.3"
  };

  // Creates one host per name, with the addresses SubnetHostAddresses gives. FailedPrecondition
  // when not root, when `ip` is missing or fails (its message), or when a namespace named
  // `prefix`... exists already; whatever was made before an error is deleted again.
  static absl::StatusOr<std::unique_ptr<NetnsHosts>> Create(std::string prefix,
                                                            absl::string_view subnet,
                                                            const std::vector<std::string>& names);

  // Destroy(), its error dropped.
  ~NetnsHosts();

  // Deletes every namespace of these hosts (the veths and the bridge go with them). Processes
  // still running in one keep their network alive, nameless, until they exit: stop them first.
  // Idempotent; the first error is returned, after trying every namespace.
  absl::Status Destroy();

  const std::string& prefix() const { return prefix_; }
  std::string switch_netns() const;
  const std::vector<Host>& hosts() const { return hosts_; }

  // Caps every host's link at `rate` ("1gbit", "10gbit", "100mbit") in each direction, with a
  // token bucket (tc tbf, burst 256 kB) on both ends of its veth. InvalidArgument for a rate
  // CheckLinkRate refuses; FailedPrecondition when `tc` is missing or fails.
  absl::Status CapLinks(absl::string_view rate);

  // `argv` run inside host `index`: {"ip", "netns", "exec", netns, argv...}. `ip netns exec`
  // execs the program in place, so the pid started is the program's.
  std::vector<std::string> Exec(size_t index, const std::vector<std::string>& argv) const;

 private:
  NetnsHosts() = default;
  absl::Status Build(absl::string_view subnet, const std::vector<std::string>& names);

  std::string prefix_;
  std::vector<Host> hosts_;
  std::vector<std::string> created_;  // namespaces made so far, to delete
};

// Deletes the namespaces "apsl-<pid>-..." whose pid no longer runs (a launcher SIGKILLed before
// it could clean up; its tasks died with it: they get SIGKILL when the launcher dies). A live
// pid keeps its namespaces. Returns the names deleted; errors are not fatal and are skipped.
std::vector<std::string> SweepStaleLauncherNamespaces();

// OK when `rate` is a link rate CapLinks takes: a positive whole number (at most 6 digits)
// followed by bit, kbit, mbit or gbit; InvalidArgument saying so otherwise.
absl::Status CheckLinkRate(absl::string_view rate);

// OK when network namespaces can be made here; FailedPrecondition saying why not (not root,
// no `ip`).
absl::Status CheckNetnsSupport();

}  // namespace asyncps::deploy

#endif  // ASYNCPS_DEPLOY_NETNS_HOSTS_H_
