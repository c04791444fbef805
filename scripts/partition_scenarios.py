#!/usr/bin/env python3
"""Network partitions against a real job: every task on a host of its own, faults on a schedule.

    python3 scripts/partition_scenarios.py [--build build] [--scenarios none,chief_isolated_6s,...|all]
                                           [--epochs 8] [--at 5] [--check] [--json PATH] [--keep]
                                           [-- FASHION_MNIST_ARGS]

Each scenario runs the main job under `asyncps_launch --hosts netns` (each task in a network
namespace of its own on one bridge: see scripts/netns_hosts.py) with 2 parameter servers holding
2 copies of every shard (--ps_replicas 2), 3 workers and the chief, training with
`--sharding dynamic --count_examples` (a counter per training example on the PS, checked by the
chief: every example applied exactly once per epoch), 8 epochs by default. --at seconds (default
5) after the chief starts training (its "training a mlp ..." line), the scenario's fault begins;
it is healed after its duration (SCENARIOS below: isolations, partitions both ways and one way,
a partition during a state transfer, a flapping link, majority/minority splits, the data service's
hosts).

For each it reports the exit code, the wall time, whether the chief's exactly-once check passed,
the test accuracy, the longest training stall (the chief's closures-completed counter read from
its /metrics every 0.1 s, inside the chief's host; and, for comparison with earlier tables, the
longest gap between its progress lines, which come at most once a second), the chief's events
(its shard-map decisions) with the time each kind first happened, the fault's times and the
lines that say what went wrong. With --check it exits 1 unless every run exits 0, exactly once,
with the events its scenario expects and none it forbids (e.g. a chief cut off: no failover, no
state transfer, no restore): the netns-labelled ctest runs two short scenarios that way.
Partitions drop packets silently (no reset, no error to the sender); this kernel has no netem, so
there is no delay or loss injection.

Needs root and nftables (scripts/netns_hosts.py says why not, and this exits 77).
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import netns_hosts as nh  # noqa: E402

WORKERS = ["worker0", "worker1", "worker2"]


class Scenario:
    """A fault on a schedule: `start` at the fault's time, each of `steps` (offset s, what,
    action[, chief event]) that many seconds after it (or after the chief's first such event
    since the fault), `heal` `duration` s after it. Actions take the attached
    Cluster. `launch`: more asyncps_launch flags. With --check the run must exit 0, exactly once,
    and the chief's events (its log lines "kind: ...") must include every kind of `expect` and
    none of `forbid`."""

    def __init__(self, what, duration=0, start=None, heal=None, steps=(), launch=(), expect=(), forbid=()):
        self.what, self.duration, self.start, self.heal = what, duration, start, heal
        self.steps, self.launch, self.expect, self.forbid = list(steps), list(launch), list(expect), list(forbid)


# What a partition must never cause while a copy of every group is alive: a PS counted lost, a
# group thrown away or restored from a checkpoint.
NOTHING_LOST = ["ps_down", "no_live_copy", "ps_restored"]
# A chief cut off changes nothing (docs/replication.md): no failover, no state transfer.
CHIEF_WAITS = NOTHING_LOST + ["ps_unreachable", "ps_failover", "ps_rebuilding", "ps_workers_cut"]


def _isolated(host, seconds, **kw):
    return Scenario(f"{host}'s host isolated for {seconds} s", seconds,
                    lambda c: c.isolate(host), lambda c: c.rejoin(host), **kw)


def _cut(a, b, seconds, what, one_way=False, **kw):
    return Scenario(what, seconds, lambda c: c.partition(a, b, one_way=one_way), lambda c: c.heal(), **kw)


def _flap(host, period, seconds, **kw):
    holder = {}

    def start(c):
        holder["flap"] = c.flap(host, period=period, duration=seconds)

    def heal(c):
        holder.pop("flap").join()  # it ends with the link up

    return Scenario(f"{host}'s link down and up every {period:g} s for {seconds} s", seconds, start, heal, **kw)


def _transfer_cut():
    """ps 0 isolated 4 s (the chief fails group 0 over to ps 1, drops ps 0 from group 1's
    backups); it rejoins capped at 8 Mbit/s, so the state transfers that rebuild its copies
    (about 3 MB) take seconds; 1 s after the chief starts them (its ps_rebuilding event) ps 0
    and ps 1 are cut from each other, until 16 s after the fault began."""
    def rejoin_capped(c):
        c.cap("ps0", "8mbit")
        c.rejoin("ps0")

    def heal(c):
        c.heal()
        c.uncap("ps0")

    return Scenario("ps 0 and ps 1 cut from each other 1 s into the state transfer that rebuilds ps 0 "
                    "(ps 0 isolated 4 s first, then capped at 8 Mbit/s), healed 16 s after the fault began", 16,
                    lambda c: c.isolate("ps0"), heal,
                    steps=[(4, "ps 0 rejoins, capped", rejoin_capped),
                           (1, "ps 0 cut from ps 1", lambda c: c.partition(["ps0"], ["ps1"]), "ps_rebuilding")],
                    expect=["ps_rebuilding", "ps_rebuilt"], forbid=NOTHING_LOST)


SCENARIOS = {
    "none": Scenario("no fault"),
    "chief_isolated_5s": _isolated("chief", 5, expect=["chief_cut_off"], forbid=CHIEF_WAITS),
    "chief_isolated_6s": _isolated("chief", 6, expect=["chief_cut_off"], forbid=CHIEF_WAITS),
    "chief_isolated_60s": _isolated("chief", 60, expect=["chief_cut_off"], forbid=CHIEF_WAITS),
    "ps0_isolated_12s": _isolated("ps0", 12, expect=["ps_unreachable", "ps_failover"], forbid=NOTHING_LOST),
    "chief_ps0_cut_15s": _cut(["chief"], ["ps0"], 15, "chief and ps 0 cut from each other for 15 s (workers reach both)",
                              expect=["ps_failover"], forbid=NOTHING_LOST),
    "workers_ps0_cut_15s": _cut(WORKERS, ["ps0"], 15, "every worker cut from ps 0 for 15 s (the chief still reaches it)",
                                expect=["ps_workers_cut", "ps_failover"], forbid=NOTHING_LOST + ["ps_unreachable"]),
    "workers_ps0_cut_8s": _cut(WORKERS, ["ps0"], 8, "every worker cut from ps 0 for 8 s (the chief still reaches it)",
                               expect=["ps_workers_cut", "ps_failover"], forbid=NOTHING_LOST + ["ps_unreachable"]),
    "worker0_isolated_12s": _isolated("worker0", 12, forbid=NOTHING_LOST),
    "chief_ps0_oneway_15s": _cut(["chief"], ["ps0"], 15, "packets from the chief to ps 0 dropped for 15 s (one way)",
                                 one_way=True, expect=["ps_failover"], forbid=NOTHING_LOST),
    "ps0_chief_oneway_15s": _cut(["ps0"], ["chief"], 15, "packets from ps 0 to the chief dropped for 15 s (one way)",
                                 one_way=True, expect=["ps_failover"], forbid=NOTHING_LOST),
    "workers_ps0_oneway_15s": _cut(WORKERS, ["ps0"], 15, "packets from every worker to ps 0 dropped for 15 s (one way)",
                                   one_way=True, expect=["ps_workers_cut"], forbid=NOTHING_LOST),
    "ps0_workers_oneway_15s": _cut(["ps0"], WORKERS, 15, "packets from ps 0 to every worker dropped for 15 s (one way)",
                                   one_way=True, expect=["ps_workers_cut"], forbid=NOTHING_LOST),
    "transfer_cut": _transfer_cut(),
    "ps0_flap_30s": _flap("ps0", 1, 30, forbid=NOTHING_LOST),
    "split_chief_majority_15s": _cut(["chief", "ps1", "worker1", "worker2"], ["ps0", "worker0"], 15,
                                     "hosts split 4 | 2 for 15 s: chief, ps 1, workers 1-2 | ps 0, worker 0",
                                     expect=["ps_failover"], forbid=NOTHING_LOST),
    "split_chief_minority_15s": _cut(["chief", "ps0"], ["ps1"] + WORKERS, 15,
                                     "hosts split 2 | 4 for 15 s: chief, ps 0 | ps 1, every worker",
                                     forbid=NOTHING_LOST),
    "none_data_service": Scenario("no fault, input from the tf.data service (2 data workers)", launch=["--data_workers", "2"]),
    "data_worker0_isolated_12s": _isolated("data_worker0", 12, launch=["--data_workers", "2"], forbid=NOTHING_LOST),
    "dispatcher_isolated_12s": _isolated("dispatcher", 12, launch=["--data_workers", "2"], forbid=NOTHING_LOST),
}
DEFAULT_SCENARIOS = ["none", "chief_isolated_6s", "workers_ps0_cut_15s"]

HOSTS_LINE = re.compile(r"^\[launcher\] hosts: \d+ network namespaces (\S+)\* ")
STATUS_LINE = re.compile(r"^\[launcher\] status page http://([\d.]+):(\d+)/status")
COMPLETED = re.compile(r"^asyncps_coordinator_closures_completed_total\{[^}]*\} (\S+)", re.M)
LOG_TIME = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) ")
# A chief's event (PsMonitor::Event logs "kind: text" at info).
EVENT = re.compile(r"^\[chief\] .* I \[chief:\d+\] (\w+): ")
TRAINING = re.compile(r"^\[chief\] training a ")
PROGRESS = re.compile(r"^\[chief\] epoch \d+/\d+\s+step (\d+)/(\d+)")
EXACT = re.compile(r"exactly once: (\d+) examples x (\d+) epochs")
ACCURACY = re.compile(r"^\[chief\] test accuracy (\d+\.\d+)")
# Lines worth reading in a report: errors, losses, failovers, restarts, the end.
NOTABLE = re.compile(r"(?i)error|unavailable|lost|fail|fenc|promot|mismatch|abort|deadline|restart|"
                     r"killed|exited|exactly once|test accuracy|trained|recover|restor|unreachable|timed out")


class Job:
    """One launcher run, its output lines with their times (seconds since it started)."""

    def __init__(self, command, log):
        self.start = time.monotonic()
        self.lines = []  # (seconds, line)
        self.lock = threading.Lock()
        self.prefix = None
        self.status_address = None  # the chief's metrics (host, port)
        self.training_started = None
        self.changed = threading.Condition(self.lock)
        self.log = log
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            t = time.monotonic() - self.start
            line = line.rstrip("\n")
            self.log.write(f"{t:7.2f} {line}\n")
            self.log.flush()
            with self.lock:
                self.lines.append((t, line))
                if self.prefix is None and (m := HOSTS_LINE.match(line)):
                    self.prefix = m.group(1)
                if self.status_address is None and (m := STATUS_LINE.match(line)):
                    self.status_address = (m.group(1), int(m.group(2)))
                if self.training_started is None and TRAINING.match(line):
                    self.training_started = t
                self.changed.notify_all()
        with self.lock:
            self.changed.notify_all()

    def wait_training_started(self, timeout):
        """When the chief said it started training; None if it does not within `timeout`."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.training_started is None and self.proc.poll() is None and time.monotonic() < deadline:
                self.changed.wait(0.5)
            return self.training_started

    def now(self):
        return time.monotonic() - self.start

    def wait_event(self, kind, since, until):
        """Waits until the chief logs event `kind` after `since` (job seconds), or `until`; True
        if it did."""
        with self.lock:
            while self.proc.poll() is None and self.now() < until:
                if any(t >= since and (m := EVENT.match(line)) and m.group(1) == kind for t, line in self.lines):
                    return True
                self.changed.wait(0.1)
            return False

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the launcher stops its tasks and deletes the hosts
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=10)


def longest_stall(lines):
    """The longest time (s) between two chief progress lines with different step counts: how long
    training stood still at worst (progress is printed at most once a second, so about 1 s when
    nothing stalls)."""
    points = [(t, int(m.group(1))) for t, line in lines if (m := PROGRESS.match(line))]
    worst, last = None, None
    for t, step in points:
        if last is None or step != last[1]:
            if last is not None:
                worst = max(worst or 0.0, t - last[0])
            last = (t, step)
    return round(worst, 1) if worst is not None else None


class ProgressSampler:
    """Reads the chief's closures-completed counter from its /metrics every 0.1 s, over a
    socket inside the chief's host (the hosts' network is not the machine's): the training
    stalls measured to about 0.1 s, where the progress lines (at most one a second) measure
    them to about a second."""

    def __init__(self, host, address, job):
        self.host, self.address, self.job = host, address, job
        self.samples = []  # (seconds since the job started, closures completed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._body, daemon=True)
        self._thread.start()

    def _scrape(self):
        s = self.host.socket()
        try:
            s.settimeout(0.5)
            s.connect(self.address)
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: chief\r\n\r\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        finally:
            s.close()
        m = COMPLETED.search(b"".join(chunks).decode(errors="replace"))
        return float(m.group(1)) if m else None

    def _body(self):
        while not self._stop.is_set():
            t = self.job.now()
            try:
                n = self._scrape()
                if n is not None:
                    self.samples.append((t, n))
            except OSError:
                pass  # unreachable for now (a sample missed, the stall it hides is still counted)
            # The sampling period itself, not a wait for a condition.
            self._stop.wait(0.1)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)

    def longest_stall(self):
        """The longest time (s) between two increases of the counter, and when it began."""
        worst, at, last_change, last_value = None, None, None, None
        for t, n in self.samples:
            if last_value is None or n != last_value:
                if last_change is not None and last_value is not None and (worst is None or t - last_change > worst):
                    worst, at = t - last_change, last_change
                last_change, last_value = t, n
        return (round(worst, 1) if worst is not None else None), (round(at, 1) if at is not None else None)


def notable(lines, limit=30):
    """The lines that say what went wrong, each kind once: a line that differs from an earlier one
    only in its numbers (times, generations, ports) is counted there instead of repeated."""
    kinds = {}
    for t, line in lines:
        if PROGRESS.match(line) or not NOTABLE.search(line):
            continue
        key = re.sub(r"\d+", "N", re.sub(r"^\[[^]]+\] \S+ \S+ ", "", line))
        if key in kinds:
            kinds[key][2] += 1
        else:
            kinds[key] = [t, line, 1]
    out = [f"{t:6.1f} s {line}" + (f"  (x{n})" if n > 1 else "") for t, line, n in kinds.values()]
    return out[:limit]


def tcp_snapshot(cluster):
    """The TCP connections between hosts that have data waiting or a retransmission timer backed
    off, from `ss -tin` in every host: what a healed partition still has to get through, and how
    long the kernel will wait before its next try (rto, in ms)."""
    out = []
    addresses = {h.address: h.name for h in cluster.hosts.values()}
    for h in cluster.hosts.values():
        r = h.run(["ss", "-tin", "state", "established"], capture_output=True, text=True)
        rows = r.stdout.splitlines()[1:]
        # Per socket: "RECV-Q SEND-Q LOCAL PEER" (no state column with a state filter), then its
        # details on the next line.
        for head, detail in zip(rows[0::2], rows[1::2]):
            fields = head.split()
            if len(fields) < 4:
                continue
            peer = addresses.get(fields[3].rsplit(":", 1)[0])
            keep = [f for f in detail.split() if f.split(":")[0] in ("rto", "backoff", "unacked", "lastsnd", "lastrcv")]
            if peer and (fields[1] != "0" or any(f.startswith("backoff:") for f in keep)):
                out.append(f"{h.name} -> {peer}: send-q {fields[1]} {' '.join(keep)}")
    return out


def wait_until(job, at):
    """Waits until the job's clock reads `at` s (the fault schedule itself), or the job ends;
    True if it still runs."""
    while job.proc.poll() is None and job.now() < at:
        time.sleep(min(0.05, max(0.0, at - job.now())))
    return job.proc.poll() is None


def run_scenario(name, args, workdir):
    sc = SCENARIOS[name]
    log_path = os.path.join(workdir, f"{name}-{time.strftime('%H%M%S')}.log")
    command = [os.path.join(args.bin, "asyncps_launch"), "--hosts", "netns", "--ps", "2", "--workers", "3",
               "--ps_replicas", "2", "--max_restarts", str(args.max_restarts), "--log_level", args.log_level,
               *(["--ps_heartbeat_timeout", args.heartbeat_timeout] if args.heartbeat_timeout else []),
               *sc.launch, "--",
               os.path.join(args.bin, "fashion_mnist"), "--epochs", str(args.epochs), "--batch_size", "120",
               "--sharding", "dynamic", "--count_examples", *args.job_args]
    events = []
    snapshots = []
    sampler = None
    fault_wall = None
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        job = Job(command, log)
        try:
            training_at = job.wait_training_started(timeout=120)
            if training_at is not None:
                events.append(("training", round(training_at, 1)))
            cluster = nh.Cluster.attach(job.prefix) if training_at is not None and job.prefix else None
            if cluster is not None and job.status_address is not None:
                sampler = ProgressSampler(cluster["chief"], job.status_address, job)
            if cluster is not None and sc.start is not None:
                fault_at = training_at + args.at
                if wait_until(job, fault_at):
                    fault_wall = time.time()
                    sc.start(cluster)
                    events.append(("fault", round(job.now(), 1)))
                    for step in sc.steps:
                        offset, what, action = step[:3]
                        after = step[3] if len(step) > 3 else None
                        # A step after a chief event: `offset` s after it (at most by the heal).
                        if after is not None:
                            seen = job.wait_event(after, fault_at, fault_at + sc.duration)
                            events.append((f"{after} seen" if seen else f"no {after}", round(job.now(), 1)))
                            at = job.now() + offset
                        else:
                            at = fault_at + offset
                        if not wait_until(job, at):
                            break
                        action(cluster)
                        events.append((what, round(job.now(), 1)))
                    if wait_until(job, fault_at + sc.duration):
                        for line in tcp_snapshot(cluster):
                            log.write(f"[scenarios] at heal: {line}\n")
                            snapshots.append(line)
                        sc.heal(cluster)
                        events.append(("healed", round(job.now(), 1)))
            deadline = time.monotonic() + args.timeout
            while job.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)  # waiting for the job's end, with a deadline
            timed_out = job.proc.poll() is None
            if timed_out:
                events.append(("timed out, stopped", round(job.now(), 1)))
        finally:
            if sampler is not None:
                sampler.stop()
            job.stop()
    lines = job.lines
    text = "\n".join(line for _, line in lines)
    exact = EXACT.search(text)
    accuracy = [float(m.group(1)) for _, line in lines if (m := ACCURACY.match(line))]
    chief_events = {}
    event_walls = {}  # kind -> the chief's own log times (s since the epoch) of each
    for t, line in lines:
        if (m := EVENT.match(line)):
            chief_events.setdefault(m.group(1), round(t, 1))
            if (w := LOG_TIME.search(line)):
                stamp = datetime.datetime.strptime(w.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
                event_walls.setdefault(m.group(1), []).append(stamp)
    stall, stall_at = sampler.longest_stall() if sampler is not None else (None, None)
    result = {
        "scenario": name,
        "fault": sc.what,
        "exit_code": job.proc.returncode if not timed_out else None,
        "timed_out": timed_out,
        "seconds": round(lines[-1][0], 1) if lines else None,
        "exact": bool(exact),
        "test_accuracy": accuracy[-1] if accuracy else None,
        "events": events,
        "longest_stall_s": stall,
        "longest_stall_at": stall_at,
        "longest_stall_progress_lines_s": longest_stall(lines),
        "chief_events": chief_events,
        "chief_event_walls": event_walls,
        "fault_wall": fault_wall,
        "samples": sampler.samples if sampler is not None else [],
        "fault_at": next((t for what, t in events if what == "fault"), None),
        "notable": notable(lines),
        "tcp_at_heal": snapshots,
        "log": log_path,
    }
    result["problems"] = check(sc, result)
    return result


def check(sc, r):
    """What --check fails a run for: not exit 0, not exactly once, an expected event missing, a
    forbidden one present."""
    problems = []
    if r["timed_out"] or r["exit_code"] != 0:
        problems.append("timed out" if r["timed_out"] else f"exit code {r['exit_code']}")
    if not r["exact"]:
        problems.append("no exactly-once line (every example once per epoch, every epoch)")
    problems += [f"no {k} event" for k in sc.expect if k not in r["chief_events"]]
    problems += [f"{k} event at {r['chief_events'][k]} s" for k in sc.forbid if k in r["chief_events"]]
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"comma-separated, or 'all': {', '.join(SCENARIOS)}")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--at", type=float, default=5.0,
                        help="seconds after the chief starts training when the fault begins")
    parser.add_argument("--max_restarts", type=int, default=3)
    parser.add_argument("--heartbeat_timeout", help="asyncps_launch --ps_heartbeat_timeout (default: its own, 2s)")
    parser.add_argument("--log_level", default="info",
                        help="the tasks' (asyncps_launch --log_level); the chief's events are read at info")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every run exits 0, exactly once, with the scenario's expected "
                             "chief events and none of its forbidden ones (a test)")
    parser.add_argument("--repeat", type=int, default=1, help="run each scenario this many times")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a job may run after its fault")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the logs (their directory is printed)")
    parser.add_argument("job_args", nargs="*", help="more fashion_mnist arguments (after --)")
    args = parser.parse_args()
    args.bin = os.path.join(os.path.abspath(args.build), "bin")
    names = list(SCENARIOS) if args.scenarios == "all" else args.scenarios.split(",")
    for n in names:
        if n not in SCENARIOS:
            parser.error(f"unknown scenario '{n}' (known: {', '.join(SCENARIOS)})")
    reason = nh.unsupported_reason()
    if reason:
        print(f"SKIP: {reason}")
        return 77
    for stale in nh.sweep():
        print(f"[scenarios] deleted {stale} (left by a run that crashed)")
    workdir = tempfile.mkdtemp(prefix="partition_scenarios_")
    results = []
    try:
        for n in [n for n in names for _ in range(args.repeat)]:
            print(f"[scenarios] {n}: {SCENARIOS[n].what} ...", flush=True)
            r = run_scenario(n, args, workdir)
            results.append(r)
            verdict = "timed out" if r["timed_out"] else f"exit {r['exit_code']}"
            print(f"[scenarios] {n}: {verdict}, {r['seconds']} s, exact={r['exact']}, "
                  f"accuracy={r['test_accuracy']}, longest stall {r['longest_stall_s']} s at {r['longest_stall_at']} s "
                  f"(progress lines: {r['longest_stall_progress_lines_s']} s), events {r['events']}")
            print(f"    chief events (first time): {r['chief_events']}")
            if r["problems"]:
                print(f"    CHECK: {'; '.join(r['problems'])}")
            for line in r["notable"]:
                print(f"    {line}")
            for line in r["tcp_at_heal"]:
                print(f"    at heal: {line}")
            sys.stdout.flush()
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        if args.keep or (args.check and any(r["problems"] for r in results)):
            print(f"[scenarios] logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n| scenario | exit | seconds | exact | accuracy | longest stall (s) | progress lines (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['fault']} | {'timed out' if r['timed_out'] else r['exit_code']} | {r['seconds']} | "
              f"{'yes' if r['exact'] else 'no'} | {r['test_accuracy']} | {r['longest_stall_s']} | "
              f"{r['longest_stall_progress_lines_s']} |")
    failed = [r for r in results if r["problems"]]
    if args.check and failed:
        for r in failed:
            print(f"FAILED {r['scenario']}: {'; '.join(r['problems'])} (log {r['log']})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
