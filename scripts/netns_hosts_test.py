#!/usr/bin/env python3
"""Tests scripts/netns_hosts.py (ctest: netns_hosts_script) and asyncps_launch --hosts netns.

Hosts reach each other; a two-way partition stops TCP both ways and heal restores it (an open
connection included: its packets vanished, it was never reset); a one-way partition stops
datagrams one way only; an isolated host is unreachable until it rejoins; a flap leaves its link
up; a cap installs tbf on both ends of the veth (that tbf limits throughput is a benchmark's to
show, not this test's); cleanup leaves no namespace behind, also after SIGTERM, and after
SIGKILL of the owner followed by the sweep. With $ASYNCPS_LAUNCH, the launcher's hosts too.

Needs root, iproute2 and nftables: elsewhere it prints why and exits 77 (ctest: skipped).
Waits on conditions with deadlines; the only fixed windows are those that show that something
does NOT arrive (a partition's whole point), kept short.
"""

import faulthandler
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import netns_hosts as nh  # noqa: E402

# How long a packet that should arrive may take (generous: a loaded 2-core CI machine), and how
# long we watch for one that should not (a bridge forwards in microseconds).
ARRIVE_S = 10.0
SILENT_S = 0.5


def wait_for(condition, what, timeout=ARRIVE_S):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)  # polling interval of a condition with a deadline


def tcp_connects(src, dst, port, timeout=SILENT_S):
    """True when `src` opens a TCP connection to dst:port within `timeout`."""
    s = src.socket()
    s.settimeout(timeout)
    try:
        s.connect((dst.address, port))
        return True
    except (TimeoutError, socket.timeout, OSError):
        return False
    finally:
        s.close()


def listener(host, port=7000):
    s = host.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host.address, port))
    s.listen(64)
    return s


def process_gone(pid):
    """True once `pid` has exited (a zombie whose parent is gone counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Lines:
    """A pipe's lines, read on a thread of its own, so that waiting for one has a deadline."""

    def __init__(self, stream):
        self.queue = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        with stream:
            for line in stream:
                self.queue.put(line)
        self.queue.put(None)  # EOF

    def rest(self, timeout=ARRIVE_S):
        """Every line left up to EOF (which must come within `timeout`), joined."""
        deadline = time.monotonic() + timeout
        lines = []
        while (line := self.queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            lines.append(line)
        return "".join(lines)

    def wait_for(self, wanted=None, timeout=ARRIVE_S):
        """The next line containing `wanted` (any line when None) and the lines before it."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {wanted!r} in {timeout} s; got: {''.join(seen)}") from None
            if line is None:
                raise AssertionError(f"EOF before a line with {wanted!r}; got: {''.join(seen)}")
            seen.append(line)
            if wanted is None or wanted in line:
                return line, seen


def readable(sock, timeout):
    return bool(select.select([sock], [], [], timeout)[0])


class HarnessTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = nh.Cluster(["a", "b", "c"])
        cls.listeners = {n: listener(h) for n, h in cls.cluster.hosts.items()}

    @classmethod
    def tearDownClass(cls):
        for s in cls.listeners.values():
            s.close()
        prefix = cls.cluster.prefix
        cls.cluster.destroy()
        assert not [n for n in nh.namespaces() if n.startswith(prefix)], "namespaces left"

    def tearDown(self):
        self.cluster.heal()
        for h in self.cluster.hosts.values():
            self.cluster.rejoin(h)
            self.cluster.uncap(h)

    def test_hosts_have_their_addresses_and_reach_each_other(self):
        c = self.cluster
        self.assertEqual([h.address for h in c.hosts.values()], ["10.213.47.2", "10.213.47.3", "10.213.47.4"])
        for src in c.hosts.values():
            for dst in c.hosts.values():
                self.assertTrue(wait_for(lambda: tcp_connects(src, dst, 7000), f"{src.name} -> {dst.name}"))
        # A host's address is its own: another host cannot bind it.
        s = c["a"].socket()
        with self.assertRaises(OSError):
            s.bind((c["b"].address, 7001))
        s.close()

    def test_two_way_partition_and_heal(self):
        c = self.cluster
        # An open connection a -> b, to show that its packets vanish (no reset) and flow again.
        # (Its own listener: the shared ones hold the other tests' closed connections.)
        lone = listener(c["b"], 7200)
        client = c["a"].socket()
        client.settimeout(ARRIVE_S)
        client.connect((c["b"].address, 7200))
        lone.settimeout(ARRIVE_S)
        server, _ = lone.accept()
        lone.close()
        rid = c.partition(["a"], ["b"])
        self.assertEqual(c.partitions(), [rid])
        self.assertFalse(tcp_connects(c["a"], c["b"], 7000))
        self.assertFalse(tcp_connects(c["b"], c["a"], 7000))
        self.assertTrue(tcp_connects(c["a"], c["c"], 7000))  # others unaffected
        self.assertTrue(tcp_connects(c["c"], c["b"], 7000))
        client.sendall(b"x")
        self.assertFalse(readable(server, SILENT_S), "data crossed a partition")
        c.heal(rid)
        self.assertEqual(c.partitions(), [])
        wait_for(lambda: tcp_connects(c["a"], c["b"], 7000), "a -> b after heal")
        wait_for(lambda: tcp_connects(c["b"], c["a"], 7000), "b -> a after heal")
        server.settimeout(ARRIVE_S)
        self.assertEqual(server.recv(1), b"x")  # retransmitted: the connection survived
        client.close()
        server.close()

    def test_one_way_partition(self):
        c = self.cluster
        socks = {}
        for n in ("a", "b"):
            socks[n] = c[n].socket(kind=socket.SOCK_DGRAM)
            socks[n].bind((c[n].address, 7100))
        try:
            c.partition("a", "b", one_way=True)  # a's packets to b vanish; b's to a arrive
            for _ in range(3):
                socks["a"].sendto(b"a2b", (c["b"].address, 7100))
            socks["b"].sendto(b"b2a", (c["a"].address, 7100))
            self.assertTrue(readable(socks["a"], ARRIVE_S), "b -> a blocked by a one-way a -> b partition")
            self.assertEqual(socks["a"].recv(16), b"b2a")
            self.assertFalse(readable(socks["b"], SILENT_S), "a -> b crossed a one-way partition")
            # TCP needs both directions: it breaks both ways.
            self.assertFalse(tcp_connects(c["b"], c["a"], 7000))
            c.heal()
            socks["a"].sendto(b"a2b", (c["b"].address, 7100))
            self.assertTrue(readable(socks["b"], ARRIVE_S), "a -> b still blocked after heal")
        finally:
            for s in socks.values():
                s.close()

    def test_partition_of_sets(self):
        c = self.cluster
        c.partition(["a", "b"], ["c"])
        for x, y in (("a", "c"), ("c", "a"), ("b", "c"), ("c", "b")):
            self.assertFalse(tcp_connects(c[x], c[y], 7000), f"{x} -> {y}")
        self.assertTrue(tcp_connects(c["a"], c["b"], 7000))
        with self.assertRaises(nh.HarnessError):
            c.partition(["a"], ["a", "b"])

    def test_isolate_and_rejoin(self):
        c = self.cluster
        c.isolate("b")
        self.assertFalse(c.port_up("b"))
        self.assertFalse(tcp_connects(c["a"], c["b"], 7000))
        self.assertFalse(tcp_connects(c["b"], c["c"], 7000))
        self.assertTrue(tcp_connects(c["a"], c["c"], 7000))
        c.rejoin("b")
        self.assertTrue(c.port_up("b"))
        wait_for(lambda: tcp_connects(c["a"], c["b"], 7000), "a -> b after rejoin")

    def test_flap_ends_with_the_link_up(self):
        c = self.cluster
        f = c.flap("c", period=0.1, duration=0.5)
        f.join(timeout=ARRIVE_S)
        self.assertGreaterEqual(f.transitions, 3)
        self.assertTrue(c.port_up("c"))
        wait_for(lambda: tcp_connects(c["a"], c["c"], 7000), "a -> c after the flap")
        # Stopped early while down, it still ends up.
        f = c.flap("c", period=60, duration=120)
        wait_for(lambda: not c.port_up("c"), "the flap's first down")
        f.stop()
        self.assertTrue(c.port_up("c"))

    def test_cap_installs_tbf_on_both_ends(self):
        c = self.cluster
        c.cap("a", "1gbit")
        q = c.qdiscs("a")
        self.assertEqual(sorted((ns, dev) for ns, dev, _, _ in q),
                         sorted([(c.switch, c["a"].port), (c["a"].netns, "eth0")]))
        for _, _, kind, options in q:
            self.assertEqual(kind, "tbf")
            self.assertEqual(options["rate"], 125_000_000)  # bytes/s
        c.uncap("a")
        self.assertTrue(all(kind != "tbf" for _, _, kind, _ in c.qdiscs("a")))

    def test_attach_finds_the_same_hosts(self):
        c = self.cluster
        rid = c.partition("a", "c")
        other = nh.Cluster.attach(c.prefix)
        self.assertEqual({n: h.address for n, h in other.hosts.items()},
                         {n: h.address for n, h in c.hosts.items()})
        self.assertEqual(other.partitions(), [rid])
        self.assertNotEqual(other.partition("b", "c"), rid)  # new ids after the existing ones
        other.destroy()  # not owned: a no-op
        self.assertIn(c.switch, nh.namespaces())

    def test_run_inside_a_host(self):
        c = self.cluster
        out = c["b"].run(["cat", "/proc/net/dev"], capture_output=True, text=True, check=True).stdout
        self.assertIn("eth0", out)
        self.assertNotIn("br0", out)  # the bridge is the switch's, not the host's


CHILD = r"""
import sys, time
sys.path.insert(0, {here!r})
import netns_hosts as nh
c = nh.Cluster(["x", "y"])
p = c["x"].popen(["sleep", "600"])
print(c.prefix, p.pid, flush=True)
time.sleep(600)
"""


class CleanupTest(unittest.TestCase):
    def start_owner(self):
        proc = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE)], stdout=subprocess.PIPE, text=True)
        line, _ = Lines(proc.stdout).wait_for()  # the reader closes the pipe at the child's end
        prefix, pid = line.split()
        names = [n for n in nh.namespaces() if n.startswith(prefix)]
        self.assertEqual(sorted(names), sorted([prefix + "sw", prefix + "x", prefix + "y"]))
        return proc, prefix, int(pid)

    def assert_gone(self, prefix, pid):
        wait_for(lambda: not [n for n in nh.namespaces() if n.startswith(prefix)], f"{prefix}* deleted")
        wait_for(lambda: process_gone(pid), f"pid {pid} in a host killed")

    def test_destroy_kills_what_runs_and_deletes_everything(self):
        c = nh.Cluster(["x"])
        p = c["x"].popen(["sleep", "600"])
        try:
            self.assertIn(p.pid, c["x"].pids())  # popen returns once the child is in the host
            c.destroy()
            self.assertEqual(p.wait(timeout=ARRIVE_S), -signal.SIGKILL)
        finally:
            if p.poll() is None:
                p.kill()  # so a failure here does not leave a sleep holding ctest's pipe
                p.wait()
        self.assertEqual([n for n in nh.namespaces() if n.startswith(c.prefix)], [])

    def test_sigterm_of_the_owner_cleans_up(self):
        proc, prefix, pid = self.start_owner()
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(proc.wait(timeout=ARRIVE_S), -signal.SIGTERM)
        self.assert_gone(prefix, pid)

    def test_sigkill_of_the_owner_then_sweep(self):
        proc, prefix, pid = self.start_owner()
        proc.kill()
        proc.wait(timeout=ARRIVE_S)
        self.assertEqual(len([n for n in nh.namespaces() if n.startswith(prefix)]), 3)  # left behind
        mine = nh.Cluster(["z"])  # a live owner's cluster: the sweep must leave it
        try:
            deleted = nh.sweep()
            self.assertLessEqual({prefix + "sw", prefix + "x", prefix + "y"}, set(deleted))
            self.assert_gone(prefix, pid)
            self.assertIn(mine.switch, nh.namespaces())
        finally:
            mine.destroy()

    def test_cli_create_exec_partition_cleanup(self):
        prefix = f"apsk-test{os.getpid()}-"
        cli = [sys.executable, os.path.join(HERE, "netns_hosts.py")]
        try:
            out = subprocess.run(cli + ["create", "--prefix", prefix, "--hosts", "m,n"], capture_output=True,
                                 text=True, check=True).stdout
            self.assertIn(f"n 10.213.47.3 netns {prefix}n", out)
            r = subprocess.run(cli + ["exec", "--prefix", prefix, "m", "--", "cat", "/proc/net/dev"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("eth0", r.stdout)
            rid = subprocess.run(cli + ["partition", "--prefix", prefix, "--from", "m", "--to", "n"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            self.assertEqual(nh.Cluster.attach(prefix).partitions(), [rid])
            self.assertNotIn(prefix + "sw", nh.sweep())  # kept clusters are never swept
        finally:
            out = subprocess.run(cli + ["cleanup", "--prefix", prefix], capture_output=True, text=True).stdout
        self.assertEqual(out.count("deleted"), 3)
        self.assertEqual([n for n in nh.namespaces() if n.startswith(prefix)], [])


# A program for every task: servers listen on their TF_CONFIG address; the chief connects to each.
PROBE = r"""
import json, os, socket, sys, time
cfg = json.loads(os.environ["TF_CONFIG"])
me, cluster = cfg["task"], cfg["cluster"]
host, port = cluster[me["type"]][me["index"]].rsplit(":", 1)
if me["type"] != "chief":
    s = socket.socket()
    s.bind((host, int(port)))
    s.listen()
    print("listening", flush=True)
    while True:
        s.accept()[0].close()
peers = [a for job, addrs in cluster.items() if job != "chief" for a in addrs]
if os.environ.get("PROBE_WAIT"):
    print("waiting", flush=True)
    time.sleep(600)
deadline = time.monotonic() + 20
for p in peers:
    h, pt = p.rsplit(":", 1)
    while True:
        try:
            socket.create_connection((h, int(pt)), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("cannot reach " + p)
            time.sleep(0.05)
print("reached", " ".join(sorted(peers)), "metrics", os.environ.get("ASYNCPS_METRICS_BIND_ADDRESS"), flush=True)
"""


@unittest.skipUnless(os.environ.get("ASYNCPS_LAUNCH"), "set ASYNCPS_LAUNCH to asyncps_launch to test --hosts netns")
class LauncherTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="netns_hosts_test_")
        self.probe = os.path.join(self.tmp.name, "probe.py")
        with open(self.probe, "w") as f:
            f.write(f"#!{sys.executable}\n{PROBE}")
        os.chmod(self.probe, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def launch(self, *extra, env=None):
        return subprocess.Popen([os.environ["ASYNCPS_LAUNCH"], "--hosts", "netns", "--ps", "2", "--workers", "1",
                                 *extra, "--", self.probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, **(env or {})})

    def test_every_task_on_a_host_of_its_own(self):
        proc = self.launch()
        out, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, out)
        self.assertIn("[chief] reached 10.213.47.3:", out)
        addresses = {line.split(" at ")[1].split(":")[0] for line in out.splitlines() if " started " in line}
        self.assertEqual(addresses, {"10.213.47.2", "10.213.47.3", "10.213.47.4", "10.213.47.5"})
        self.assertIn("metrics 10.213.47.2", out)  # /metrics on the host's address
        prefix = f"apsl-{proc.pid}-"
        self.assertIn(f"deleted the hosts (network namespaces {prefix}*)", out)
        self.assertEqual([n for n in nh.namespaces() if n.startswith(prefix)], [])

    def test_sigterm_deletes_the_hosts_and_the_harness_attaches(self):
        prefix = f"apsl-t{os.getpid()}-"
        proc = self.launch("--netns_prefix", prefix, "--netns_rate", "1gbit", env={"PROBE_WAIT": "1"})
        self.addCleanup(nh.cleanup, prefix)  # should the launcher fail to
        self.addCleanup(proc.kill)
        output = Lines(proc.stdout)
        _, lines = output.wait_for("[chief] waiting", timeout=60)
        c = nh.Cluster.attach(prefix)
        self.assertEqual(sorted(c.hosts), ["chief", "ps0", "ps1", "worker0"])
        self.assertEqual(c["chief"].address, "10.213.47.2")
        self.assertEqual(len(c["ps1"].pids()), 1)
        for host in c.hosts:  # --netns_rate: tbf on both ends of every host's veth
            self.assertEqual([q[2] for q in c.qdiscs(host)], ["tbf", "tbf"], host)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        rest = output.rest()
        self.assertEqual(code, 143, "".join(lines) + rest)
        self.assertIn(f"deleted the hosts (network namespaces {prefix}*)", rest)
        self.assertEqual([n for n in nh.namespaces() if n.startswith(prefix)], [])

    def test_refuses_bad_flags(self):
        launch = os.environ["ASYNCPS_LAUNCH"]
        for args, message in ((["--hosts", "cloud"], "--hosts wants local or netns"),
                              (["--netns_subnet", "10.0.0.0/24"], "need --hosts netns"),
                              (["--netns_rate", "1gbit"], "need --hosts netns"),
                              (["--hosts", "netns", "--netns_rate", "fast"], "--netns_rate: a link rate"),
                              (["--hosts", "netns", "--netns_rate", "0gbit"], "--netns_rate: a link rate"),
                              (["--hosts", "netns", "--netns_subnet", "192.168.0.0/24"], "inside 10.0.0.0/8"),
                              (["--hosts", "netns", "--netns_subnet", "10.1.1.0/29"], "room for 5 hosts")):
            r = subprocess.run([launch, "--ps", "2", "--workers", "4", *args, "--", "true"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    reason = nh.unsupported_reason()
    if reason:
        print(f"SKIP: {reason}")
        sys.exit(77)
    nh.sweep()  # what crashed runs of this harness left (their owners are gone)
    # A hang shows where it is (every thread's stack) before ctest's timeout kills the test.
    faulthandler.dump_traceback_later(100, exit=True)
    unittest.main(verbosity=2)
