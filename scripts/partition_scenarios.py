#!/usr/bin/env python3
"""Network partitions against a real job: every task on a host of its own, faults on a schedule.

    python3 scripts/partition_scenarios.py [--build build] [--scenarios none,chief_isolated_6s,...]
                                           [--epochs 10] [--json PATH] [--keep] [-- FASHION_MNIST_ARGS]

Each scenario runs the main job under `asyncps_launch --hosts netns` (each task in a network
namespace of its own on one bridge: see scripts/netns_hosts.py) with 2 parameter servers holding
2 copies of every shard (--ps_replicas 2), 3 workers and the chief, training with
`--sharding dynamic --count_examples` (a counter per training example on the PS, checked by the
chief: every example applied exactly once per epoch), 8 epochs by default. --at seconds (default
5) after the chief starts training (its "training a mlp ..." line, about 4 s after the launch on a
2-core machine, so about 9 s into the job), the scenario's fault begins; it is healed after its
duration:

  none                     no fault
  chief_isolated_6s        the chief's host cut off (its bridge port down) for 6 s
  ps0_isolated_12s         ps 0's host cut off for 12 s
  chief_ps0_cut_15s        chief and ps 0 cannot reach each other for 15 s (the workers reach both)
  workers_ps0_cut_15s      every worker cut from ps 0 for 15 s (the chief still reaches it)
  worker0_isolated_12s     worker 0's host cut off for 12 s
  chief_ps0_oneway_15s     packets from the chief to ps 0 dropped for 15 s (not back)

For each it reports the exit code, the wall time, whether the chief's exactly-once check passed,
the test accuracy, the longest stretch without a training step, the fault's times and the
lines that say what went wrong. Partitions drop packets silently (no reset, no error to the
sender); this kernel has no netem, so there is no delay or loss injection.

Needs root and nftables (scripts/netns_hosts.py says why not, and this exits 77). Not part of
CI: each scenario trains for about half a minute; the acceptance tests of issue 36 will be built
on it.
"""

import argparse
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

# name -> (what, start action, heal action, duration s). Actions take the attached Cluster.
SCENARIOS = {
    "none": ("no fault", None, None, 0),
    "chief_isolated_6s": ("the chief's host isolated for 6 s",
                          lambda c: c.isolate("chief"), lambda c: c.rejoin("chief"), 6),
    "ps0_isolated_12s": ("ps 0's host isolated for 12 s",
                         lambda c: c.isolate("ps0"), lambda c: c.rejoin("ps0"), 12),
    "chief_ps0_cut_15s": ("chief and ps 0 cut from each other for 15 s (workers reach both)",
                          lambda c: c.partition(["chief"], ["ps0"]), lambda c: c.heal(), 15),
    "workers_ps0_cut_15s": ("every worker cut from ps 0 for 15 s (the chief still reaches it)",
                            lambda c: c.partition(WORKERS, ["ps0"]), lambda c: c.heal(), 15),
    "worker0_isolated_12s": ("worker 0's host isolated for 12 s",
                             lambda c: c.isolate("worker0"), lambda c: c.rejoin("worker0"), 12),
    "chief_ps0_oneway_15s": ("packets from the chief to ps 0 dropped for 15 s (one way)",
                             lambda c: c.partition(["chief"], ["ps0"], one_way=True), lambda c: c.heal(), 15),
}
DEFAULT_SCENARIOS = ["none", "chief_isolated_6s", "workers_ps0_cut_15s"]

HOSTS_LINE = re.compile(r"^\[launcher\] hosts: \d+ network namespaces (\S+)\* ")
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


def run_scenario(name, args, workdir):
    what, start_fault, heal_fault, duration = SCENARIOS[name]
    log_path = os.path.join(workdir, f"{name}-{time.strftime('%H%M%S')}.log")
    command = [os.path.join(args.bin, "asyncps_launch"), "--hosts", "netns", "--ps", "2", "--workers", "3",
               "--ps_replicas", "2", "--max_restarts", str(args.max_restarts), "--log_level", args.log_level, "--",
               os.path.join(args.bin, "fashion_mnist"), "--epochs", str(args.epochs), "--batch_size", "120",
               "--sharding", "dynamic", "--count_examples", *args.job_args]
    events = []
    snapshots = []
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        job = Job(command, log)
        try:
            training_at = job.wait_training_started(timeout=120)
            if training_at is not None:
                events.append(("training", round(training_at, 1)))
            if training_at is not None and start_fault is not None and job.prefix is not None:
                cluster = nh.Cluster.attach(job.prefix)
                fault_at = training_at + args.at
                # The fault schedule itself: the fault starts at a time, whatever the job does.
                while job.proc.poll() is None and job.now() < fault_at:
                    time.sleep(min(0.05, max(0.0, fault_at - job.now())))
                if job.proc.poll() is None:
                    start_fault(cluster)
                    events.append(("fault", round(job.now(), 1)))
                    heal_at = job.now() + duration
                    while job.proc.poll() is None and job.now() < heal_at:
                        time.sleep(min(0.05, max(0.0, heal_at - job.now())))
                    if job.proc.poll() is None:
                        for line in tcp_snapshot(cluster):
                            log.write(f"[scenarios] at heal: {line}\n")
                            snapshots.append(line)
                        heal_fault(cluster)
                        events.append(("healed", round(job.now(), 1)))
            deadline = time.monotonic() + args.timeout
            while job.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)  # waiting for the job's end, with a deadline
            timed_out = job.proc.poll() is None
            if timed_out:
                events.append(("timed out, stopped", round(job.now(), 1)))
        finally:
            job.stop()
    lines = job.lines
    text = "\n".join(line for _, line in lines)
    exact = EXACT.search(text)
    accuracy = [float(m.group(1)) for _, line in lines if (m := ACCURACY.match(line))]
    result = {
        "scenario": name,
        "fault": what,
        "exit_code": job.proc.returncode if not timed_out else None,
        "timed_out": timed_out,
        "seconds": round(lines[-1][0], 1) if lines else None,
        "exact": bool(exact),
        "test_accuracy": accuracy[-1] if accuracy else None,
        "events": events,
        "longest_stall_s": longest_stall(lines),
        "notable": notable(lines),
        "tcp_at_heal": snapshots,
        "log": log_path,
    }
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS),
                        help=f"comma-separated, or 'all': {', '.join(SCENARIOS)}")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--at", type=float, default=5.0,
                        help="seconds after the chief starts training when the fault begins")
    parser.add_argument("--max_restarts", type=int, default=3)
    parser.add_argument("--log_level", default="warn", help="the tasks' (asyncps_launch --log_level)")
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
            print(f"[scenarios] {n}: {SCENARIOS[n][0]} ...", flush=True)
            r = run_scenario(n, args, workdir)
            results.append(r)
            verdict = "timed out" if r["timed_out"] else f"exit {r['exit_code']}"
            print(f"[scenarios] {n}: {verdict}, {r['seconds']} s, exact={r['exact']}, "
                  f"accuracy={r['test_accuracy']}, longest stall {r['longest_stall_s']} s, events {r['events']}")
            for line in r["notable"]:
                print(f"    {line}")
            for line in r["tcp_at_heal"]:
                print(f"    at heal: {line}")
            sys.stdout.flush()
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        if args.keep:
            print(f"[scenarios] logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n| scenario | exit | seconds | exact | accuracy | longest stall (s) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['fault']} | {'timed out' if r['timed_out'] else r['exit_code']} | {r['seconds']} | "
              f"{'yes' if r['exact'] else 'no'} | {r['test_accuracy']} | {r['longest_stall_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
