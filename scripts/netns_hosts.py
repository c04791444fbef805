#!/usr/bin/env python3
"""Hosts on one machine: network namespaces on a Linux bridge, and the faults of a real network.

Each host is a network namespace with its own address (10.x) and loopback; every host's veth
plugs into one bridge that lives in a namespace of its own (the "switch"), so the machine's own
network is never touched. Between hosts:

  partition(A, B)           packets between the hosts of A and those of B vanish, both ways
  partition(A, B, one_way)  only packets from A to B vanish (TCP breaks both ways: its ACKs)
  heal()                    every partition gone (or heal(rule_id): that one)
  isolate(h) / rejoin(h)    h's port on the bridge set down / up: h hears nothing, sends nothing
  flap(h, period, duration) h's port down and up every `period` seconds for `duration`
  cap(h, rate) / uncap(h)   tc tbf on both ends of h's veth: h's bandwidth, each direction
  h.exec(argv), h.popen(argv), h.run(argv), h.socket()    run or connect inside a host

Partitions are nftables drop rules in the switch (a bridge-family table), so packets vanish in
the network as they do behind a dead switch port or a firewall: the sender gets no error and no
reset. This kernel has no netem (nor fq): there is no delay, loss or reordering injection, only
drops, link state and bandwidth caps.

Names: every namespace of one cluster starts with its prefix. A cluster this module creates is
"aps-<pid>-<n>-" (its owner's pid, and a counter for several clusters in one process);
`asyncps_launch --hosts netns` uses "apsl-<pid>-"; the CLI's `create` uses "apsk-" unless told
(kept until `cleanup`). The switch is PREFIX + "sw"; host H is PREFIX + H, its interface eth0,
its bridge port "p<i>" in the switch with H as the port's alias (so `attach` finds the hosts of
any such cluster, the launcher's included).

Cleanup: a Cluster deletes its namespaces (after SIGKILL to whatever still runs in them) when
destroyed, when the process exits (atexit) and on SIGTERM/SIGHUP; SIGINT ends Python with
KeyboardInterrupt, which runs atexit. A SIGKILLed owner leaves them behind: `sweep()` (the
`sweep` verb) deletes the namespaces of "aps-<pid>-" and "apsl-<pid>-" clusters whose pid no
longer runs, and nothing else.

Needs root, iproute2 (`ip`, `tc`) and nftables (`nft`; Debian's `nftables`, which
scripts/install_deps.sh installs). `unsupported_reason()` says why hosts cannot be made here.

CLI (python3 scripts/netns_hosts.py VERB ...):
  check                                          why hosts cannot be made here, or "ok"
  create --hosts a,b,c [--prefix apsk-] [--subnet 10.213.47.0/24]
  list [--prefix P]                              clusters (or one cluster): hosts and addresses
  exec --prefix P HOST -- CMD...                 CMD inside HOST (exit code passed through)
  partition --prefix P --from a,b --to c [--one_way]    prints the rule id
  heal --prefix P [--id N]
  isolate|rejoin --prefix P HOST
  flap --prefix P HOST --period 1 --duration 30
  cap --prefix P HOST --rate 1gbit [--burst 256kb] | uncap --prefix P HOST
  cleanup --prefix P                             every namespace whose name starts with P
  sweep                                          namespaces of crashed runs (owner pid gone)
"""

import argparse
import atexit
import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

DEFAULT_SUBNET = "10.213.47.0/24"
HARNESS_FAMILY = "aps-"    # aps-<pid>-<n>-: clusters of this module, owned by process <pid>
LAUNCHER_FAMILY = "apsl-"  # apsl-<pid>-: asyncps_launch --hosts netns
KEPT_PREFIX = "apsk-"      # the CLI's `create`: kept until `cleanup`, never swept
SWITCH = "sw"              # the bridge's namespace: PREFIX + SWITCH
BRIDGE = "br0"
HOST_DEV = "eth0"
NFT_TABLE = "asyncps"      # bridge-family table in the switch holding the partitions
# Namespaces of a crashed run: family, owner pid, rest.
_STALE_NAME = re.compile(r"^(aps-|apsl-)(\d+)-")
# Host names become namespace-name suffixes and port aliases: keep them plain.
_HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
_CLONE_NEWNET = 0x40000000
_COMMAND_TIMEOUT_S = 30


class HarnessError(Exception):
    """A command of the harness failed (its stderr is in the message)."""


def _run(argv, input_text=None, check=True):
    try:
        result = subprocess.run(argv, input=input_text, capture_output=True, text=True,
                                timeout=_COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise HarnessError(f"{' '.join(argv)}: no answer in {_COMMAND_TIMEOUT_S} s") from e
    if check and result.returncode != 0:
        raise HarnessError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def unsupported_reason(need_nft=True):
    """None when hosts can be made here; else one line saying why not (for a test's skip)."""
    if os.geteuid() != 0:
        return f"needs root for network namespaces (ip netns, nft); running as uid {os.geteuid()}"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")) + ((("nft", "nftables"),) if need_nft else ()):
        if shutil.which(tool) is None:
            return f"'{tool}' not found: install Debian's {package} (scripts/install_deps.sh)"
    probe = f"{HARNESS_FAMILY}{os.getpid()}-probe"
    result = _run(["ip", "netns", "add", probe], check=False)
    if result.returncode != 0:
        return f"'ip netns add' fails here: {result.stderr.strip()}"
    try:
        if need_nft:
            result = _run(["ip", "netns", "exec", probe, "nft", "add", "table", "bridge", NFT_TABLE], check=False)
            if result.returncode != 0:
                return f"nftables bridge tables do not work here: {result.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


def namespaces():
    """Every named network namespace on the machine."""
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespaces(names):
    """SIGKILLs whatever runs in each namespace, then deletes it. Returns the names deleted."""
    deleted = []
    for name in names:
        pids = _run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)  # started in a namespace this harness made
            except (ProcessLookupError, ValueError):
                pass
        # Hosts first and the switch last would not matter: deleting a namespace destroys its
        # end of each veth, which destroys the other end.
        if _run(["ip", "netns", "del", name], check=False).returncode == 0:
            deleted.append(name)
    return deleted


def cleanup(prefix):
    """Deletes every namespace whose name starts with `prefix` (and kills what runs there)."""
    if not prefix or not prefix.startswith(("aps", "apsl", "apsk")):
        raise HarnessError(f"refusing to clean up '{prefix}': not a prefix of this harness (aps...)")
    return _delete_namespaces([n for n in namespaces() if n.startswith(prefix)])


def sweep():
    """Deletes the namespaces of crashed runs: aps-<pid>-* and apsl-<pid>-* whose pid is gone.

    A live pid keeps its namespaces, even if it is some other program now: a namespace is left
    behind rather than taken from under a running job."""
    stale = []
    for name in namespaces():
        m = _STALE_NAME.match(name)
        if m and not _pid_alive(int(m.group(2))):
            stale.append(name)
    return _delete_namespaces(stale)


def _subnet_hosts(subnet):
    net = ipaddress.ip_network(subnet, strict=True)
    # Only private 10.x space inside namespaces we create: never an address someone else uses.
    if net.version != 4 or not net.subnet_of(ipaddress.ip_network("10.0.0.0/8")) or net.prefixlen > 29:
        raise HarnessError(f"subnet {subnet} must be an IPv4 /8../29 inside 10.0.0.0/8")
    return net, list(net.hosts())[1:]  # .1 left for a gateway, should one be wanted


def _socket_in_namespace(netns, family, kind):
    """A socket created inside `netns` (it stays there, whichever thread then uses it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}

    def body():  # a thread of its own: setns moves only the calling thread, which then ends
        try:
            fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns {netns}: {os.strerror(err)}")
            finally:
                os.close(fd)
            out["socket"] = socket.socket(family, kind)
        except BaseException as e:  # handed to the caller's thread
            out["error"] = e

    t = threading.Thread(target=body)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["socket"]


class Host:
    """One host: a network namespace with eth0 on the bridge."""

    def __init__(self, cluster, name, index, address):
        self.cluster = cluster
        self.name = name
        self.index = index
        self.address = address           # "10.213.47.2"
        self.netns = cluster.prefix + name
        self.port = f"p{index}"          # its veth end on the bridge, in the switch namespace

    def __repr__(self):
        return f"Host({self.name}, {self.address}, netns {self.netns})"

    def exec(self, argv):
        """argv run inside this host (for subprocess, or a launcher's task)."""
        return ["ip", "netns", "exec", self.netns, *argv]

    def run(self, argv, **kwargs):
        return subprocess.run(self.exec(argv), **kwargs)

    def popen(self, argv, **kwargs):
        """Starts argv in this host and returns once it is there (or has exited): until `ip netns
        exec` has entered the namespace, `ip netns pids` cannot see it, and a destroy() in that
        window would leave it running."""
        proc = subprocess.Popen(self.exec(argv), **kwargs)
        want = os.stat(f"/run/netns/{self.netns}").st_ino
        deadline = time.monotonic() + 10.0
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == want:
                    return proc
            except FileNotFoundError:
                pass
            time.sleep(0.001)  # poll of the child's namespace, bounded by the deadline above
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise HarnessError(f"{argv[0]} did not enter {self.netns} within 10 s")
        return proc

    def socket(self, family=socket.AF_INET, kind=socket.SOCK_STREAM):
        """A socket inside this host, usable from this process: bind, connect, send as the host."""
        return _socket_in_namespace(self.netns, family, kind)

    def pids(self):
        return [int(p) for p in _run(["ip", "netns", "pids", self.netns]).stdout.split()]


class Flap:
    """A link flapping on a thread of its own; stop() ends it early. The link ends up."""

    def __init__(self, cluster, host, period, duration):
        self._cluster, self._host = cluster, host
        self._period, self._duration = period, duration
        self._stop = threading.Event()
        self.transitions = 0
        self.error = None
        self._thread = threading.Thread(target=self._body, daemon=True)
        self._thread.start()

    def _body(self):
        end = time.monotonic() + self._duration
        up = True
        try:
            while not self._stop.is_set() and time.monotonic() < end:
                up = not up
                self._cluster._set_port(self._host, up)
                self.transitions += 1
                # The flap's own rhythm (the fault being injected), not a wait for a condition.
                self._stop.wait(min(self._period, max(0.0, end - time.monotonic())))
        except HarnessError as e:
            self.error = e
        finally:
            if not up:
                try:
                    self._cluster._set_port(self._host, True)
                except HarnessError as e:
                    self.error = self.error or e

    def stop(self):
        self._stop.set()
        self.join()

    def join(self, timeout=None):
        self._thread.join(timeout)
        if self.error:
            raise self.error


# Clusters this process owns, for atexit and the signal handlers.
_owned = []
_owned_lock = threading.Lock()
_handlers_installed = False
_sequence = 0


def _cleanup_owned():
    with _owned_lock:
        clusters = list(_owned)
    for c in clusters:
        try:
            c.destroy()
        except Exception as e:  # at exit: say it, and go on with the others
            print(f"netns_hosts: cleanup of {c.prefix}: {e}", file=sys.stderr)


def _on_signal(sig, frame):
    _cleanup_owned()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)  # die of the signal, as without this handler


def _install_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_cleanup_owned)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) == signal.SIG_DFL:  # someone else's handler: leave it be
                signal.signal(sig, _on_signal)


class Cluster:
    """Hosts on a bridge. Create with Cluster(["chief", "ps0", ...]) or attach to one by prefix.

    Use as a context manager, or call destroy(); either way the namespaces are also deleted at
    exit and on SIGTERM/SIGHUP (sweep() after a SIGKILL)."""

    def __init__(self, names, subnet=DEFAULT_SUBNET, prefix=None, own=True):
        global _sequence
        names = list(names)
        for n in names:
            if not _HOST_NAME.match(n) or n == SWITCH:
                raise HarnessError(f"bad host name '{n}' (letters, digits, _ . -; not '{SWITCH}')")
        if len(set(names)) != len(names):
            raise HarnessError(f"host names repeat: {names}")
        net, addresses = _subnet_hosts(subnet)
        if len(names) > len(addresses):
            raise HarnessError(f"{len(names)} hosts do not fit in {subnet}")
        if prefix is None:
            with _owned_lock:
                _sequence += 1
                prefix = f"{HARNESS_FAMILY}{os.getpid()}-{_sequence}-"
        self.prefix = prefix
        self.subnet = str(net)
        self.switch = prefix + SWITCH
        self.hosts = {n: Host(self, n, i, str(addresses[i])) for i, n in enumerate(names)}
        self._rule_ids = 0
        self._destroyed = False
        if any(ns.startswith(prefix) for ns in namespaces()):
            raise HarnessError(f"namespaces named {prefix}* exist already (cleanup --prefix {prefix})")
        if own:
            _install_handlers()
            with _owned_lock:
                _owned.append(self)
        try:
            self._create()
        except BaseException:
            self.destroy(force=True)
            raise

    @classmethod
    def attach(cls, prefix):
        """The cluster whose namespaces start with `prefix` (made by anyone): not owned, so
        neither deleted at exit nor by destroy() unless asked (destroy(force=True))."""
        self = cls.__new__(cls)
        self.prefix = prefix
        self.switch = prefix + SWITCH
        self._rule_ids = 0
        self._destroyed = False
        if self.switch not in namespaces():
            raise HarnessError(f"no cluster {prefix}*: namespace {self.switch} does not exist")
        links = json.loads(_run(["ip", "-n", self.switch, "-j", "link", "show"]).stdout)
        self.hosts = {}
        for link in links:
            m = re.match(r"^p(\d+)$", link.get("ifname", ""))
            if not m or not link.get("ifalias"):
                continue
            name = link["ifalias"]
            addrs = json.loads(_run(["ip", "-n", prefix + name, "-j", "addr", "show", "dev", HOST_DEV]).stdout)
            v4 = [a for a in addrs[0]["addr_info"] if a["family"] == "inet"]
            self.hosts[name] = Host(self, name, int(m.group(1)), v4[0]["local"])
            self.subnet = str(ipaddress.ip_interface(f"{v4[0]['local']}/{v4[0]['prefixlen']}").network)
        self.hosts = dict(sorted(self.hosts.items(), key=lambda kv: kv[1].index))
        existing = self._rules() if shutil.which("nft") else []
        self._rule_ids = max([int(r["comment"][1:]) for r in existing if r.get("comment", "").startswith("p")] + [0])
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __getitem__(self, name):
        return self.hosts[name]

    def _ip(self, *args):
        return _run(["ip", *args])

    def _create(self):
        sw = self.switch
        self._ip("netns", "add", sw)
        self._ip("-n", sw, "link", "set", "lo", "up")
        self._ip("-n", sw, "link", "add", BRIDGE, "type", "bridge")
        self._ip("-n", sw, "link", "set", BRIDGE, "up")
        for h in self.hosts.values():
            self._ip("netns", "add", h.netns)
            # Both ends made from the switch: no interface ever appears in the machine's own
            # namespace, so its names and routes cannot clash with ours.
            self._ip("-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", HOST_DEV,
                     "netns", h.netns)
            self._ip("-n", sw, "link", "set", h.port, "alias", h.name)
            self._ip("-n", sw, "link", "set", h.port, "master", BRIDGE)
            self._ip("-n", sw, "link", "set", h.port, "up")
            self._ip("-n", h.netns, "addr", "add", f"{h.address}/{ipaddress.ip_network(self.subnet).prefixlen}",
                     "dev", HOST_DEV)
            self._ip("-n", h.netns, "link", "set", "lo", "up")
            self._ip("-n", h.netns, "link", "set", HOST_DEV, "up")

    def destroy(self, force=False):
        """Deletes every namespace of the cluster (after SIGKILL to what runs in them)."""
        if self._destroyed or (not force and self not in _owned):
            return
        self._destroyed = True
        with _owned_lock:
            if self in _owned:
                _owned.remove(self)
        cleanup(self.prefix)

    # Partitions: bridge-family drop rules in the switch, one per direction, tagged "p<id>".
    def _hosts_of(self, group):
        if isinstance(group, (str, Host)):
            group = [group]
        return [g if isinstance(g, Host) else self.hosts[g] for g in group]

    def _nft(self, script):
        # The table made on first use ("add" of what exists is a no-op): asyncps_launch's hosts
        # have none until a partition is asked for, and a machine without nft can still have
        # hosts, links and caps.
        _run(["ip", "netns", "exec", self.switch, "nft", "-f", "-"], input_text=(
            f"add table bridge {NFT_TABLE}\n"
            f"add chain bridge {NFT_TABLE} forward {{ type filter hook forward priority 0; policy accept; }}\n"
            + script))

    def partition(self, a, b, one_way=False):
        """Drops packets from the hosts of `a` to those of `b` (and back, unless one_way).
        Returns the rule id for heal(rule_id)."""
        a, b = self._hosts_of(a), self._hosts_of(b)
        if set(h.name for h in a) & set(h.name for h in b):
            raise HarnessError("a host cannot be on both sides of a partition")
        self._rule_ids += 1
        rid = f"p{self._rule_ids}"

        def rule(src, dst):
            s = ", ".join(h.address for h in src)
            d = ", ".join(h.address for h in dst)
            return (f"add rule bridge {NFT_TABLE} forward ip saddr {{ {s} }} ip daddr {{ {d} }} "
                    f"drop comment \"{rid}\"\n")

        self._nft(rule(a, b) + ("" if one_way else rule(b, a)))
        return rid

    def _rules(self):
        result = _run(["ip", "netns", "exec", self.switch, "nft", "-j", "-a", "list", "chain", "bridge",
                       NFT_TABLE, "forward"], check=False)
        if result.returncode != 0:
            if "No such file or directory" in result.stderr:
                return []  # no partition was ever made here
            raise HarnessError(f"nft list: {result.stderr.strip()}")
        out = result.stdout
        return [item["rule"] for item in json.loads(out)["nftables"] if "rule" in item]

    def partitions(self):
        """The rule ids in force."""
        return sorted({r.get("comment") for r in self._rules() if r.get("comment")})

    def heal(self, rule_id=None):
        """Removes partition `rule_id`, or every partition."""
        if rule_id is None:
            self._nft(f"flush chain bridge {NFT_TABLE} forward\n")
            return
        handles = [r["handle"] for r in self._rules() if r.get("comment") == rule_id]
        if not handles:
            raise HarnessError(f"no partition {rule_id}")
        self._nft("".join(f"delete rule bridge {NFT_TABLE} forward handle {h}\n" for h in handles))

    # Link state of a host's bridge port.
    def _set_port(self, host, up):
        h = self._hosts_of(host)[0]
        self._ip("-n", self.switch, "link", "set", h.port, "up" if up else "down")

    def isolate(self, host):
        """The host's port on the bridge down: nothing in or out (its own loopback still works)."""
        self._set_port(host, False)

    def rejoin(self, host):
        self._set_port(host, True)

    def port_up(self, host):
        h = self._hosts_of(host)[0]
        link = json.loads(_run(["ip", "-n", self.switch, "-j", "link", "show", h.port]).stdout)[0]
        return "UP" in link["flags"]

    def flap(self, host, period, duration):
        """Sets the host's port down and up again every `period` s for `duration` s, on a
        thread; returns the Flap (join() waits for the end, stop() ends it early)."""
        return Flap(self, self._hosts_of(host)[0], period, duration)

    # Bandwidth: tbf on both ends of the host's veth (each end shapes what it sends).
    def _ends(self, host):
        h = self._hosts_of(host)[0]
        return [(self.switch, h.port), (h.netns, HOST_DEV)]

    def cap(self, host, rate, burst="256kb", latency="50ms"):
        """Caps the host's bandwidth to `rate` ("1gbit", "10gbit", "100mbit") each direction."""
        for ns, dev in self._ends(host):
            _run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                  "burst", burst, "latency", latency])

    def uncap(self, host):
        for ns, dev in self._ends(host):
            _run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)

    def qdiscs(self, host):
        """[(namespace, device, root qdisc kind, its options)] for both ends of the veth."""
        out = []
        for ns, dev in self._ends(host):
            for q in json.loads(_run(["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev]).stdout):
                if q.get("root"):
                    out.append((ns, dev, q["kind"], q.get("options", {})))
        return out


def _split(s):
    return [x for x in s.split(",") if x]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("check")
    p = sub.add_parser("create")
    p.add_argument("--hosts", required=True)
    p.add_argument("--prefix", default=KEPT_PREFIX)
    p.add_argument("--subnet", default=DEFAULT_SUBNET)
    p = sub.add_parser("list")
    p.add_argument("--prefix")
    p = sub.add_parser("exec")
    p.add_argument("--prefix", required=True)
    p.add_argument("host")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p = sub.add_parser("partition")
    p.add_argument("--prefix", required=True)
    p.add_argument("--from", dest="src", required=True)
    p.add_argument("--to", dest="dst", required=True)
    p.add_argument("--one_way", action="store_true")
    p = sub.add_parser("heal")
    p.add_argument("--prefix", required=True)
    p.add_argument("--id")
    for verb in ("isolate", "rejoin", "uncap"):
        p = sub.add_parser(verb)
        p.add_argument("--prefix", required=True)
        p.add_argument("host")
    p = sub.add_parser("flap")
    p.add_argument("--prefix", required=True)
    p.add_argument("host")
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=30.0)
    p = sub.add_parser("cap")
    p.add_argument("--prefix", required=True)
    p.add_argument("host")
    p.add_argument("--rate", required=True)
    p.add_argument("--burst", default="256kb")
    p.add_argument("--latency", default="50ms")
    p = sub.add_parser("cleanup")
    p.add_argument("--prefix", required=True)
    sub.add_parser("sweep")
    args = parser.parse_args(argv)

    if args.verb == "check":
        reason = unsupported_reason()
        print(reason or "ok")
        return 1 if reason else 0
    reason = unsupported_reason(need_nft=args.verb in ("create", "partition", "heal"))
    if reason:
        print(f"netns_hosts: {reason}", file=sys.stderr)
        return 2
    try:
        if args.verb == "create":
            c = Cluster(_split(args.hosts), subnet=args.subnet, prefix=args.prefix, own=False)
            for h in c.hosts.values():
                print(f"{h.name} {h.address} netns {h.netns}")
        elif args.verb == "list":
            prefixes = ([args.prefix] if args.prefix else
                        sorted({n[:-len(SWITCH)] for n in namespaces() if n.endswith("-" + SWITCH)}))
            for prefix in prefixes:
                c = Cluster.attach(prefix)
                print(f"{prefix}* ({c.subnet}; partitions: {', '.join(c.partitions()) or 'none'})")
                for h in c.hosts.values():
                    print(f"  {h.name} {h.address}{'' if c.port_up(h) else ' (isolated)'}")
        elif args.verb == "exec":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            return Cluster.attach(args.prefix)[args.host].run(command).returncode
        elif args.verb == "partition":
            print(Cluster.attach(args.prefix).partition(_split(args.src), _split(args.dst), args.one_way))
        elif args.verb == "heal":
            Cluster.attach(args.prefix).heal(args.id)
        elif args.verb == "isolate":
            Cluster.attach(args.prefix).isolate(args.host)
        elif args.verb == "rejoin":
            Cluster.attach(args.prefix).rejoin(args.host)
        elif args.verb == "flap":
            f = Cluster.attach(args.prefix).flap(args.host, args.period, args.duration)
            try:
                f.join()
            except KeyboardInterrupt:
                f.stop()
            print(f"{f.transitions} transitions")
        elif args.verb == "cap":
            Cluster.attach(args.prefix).cap(args.host, args.rate, args.burst, args.latency)
        elif args.verb == "uncap":
            Cluster.attach(args.prefix).uncap(args.host)
        elif args.verb == "cleanup":
            for n in cleanup(args.prefix):
                print(f"deleted {n}")
        elif args.verb == "sweep":
            for n in sweep():
                print(f"deleted {n}")
    except (HarnessError, KeyError) as e:
        print(f"netns_hosts: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
