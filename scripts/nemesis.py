#!/usr/bin/env python3
"""Nemesis: jobs run again and again under a random, seeded schedule of faults across every role,
each round checked for exactly-once updates (and, for the main job, its accuracy target).

    python3 scripts/nemesis.py --minutes 30 [--build build] [--seed N|day] [--json PATH] [--keep]
                               [--workloads counter,fmnist] [--fault_every 3] [--plant no_dedup]
                               [--out DIR] [--grace_minutes 5]
    python3 scripts/nemesis.py --replay SCHEDULE.json [--round K] [--build build]

Each round runs one job under `asyncps_launch --max_restarts 1000 --log_level info` (a killed PS,
worker, data worker or dispatcher is started again by the launcher), in one of eight variants
taken in turn: the workload (`fashion_mnist --count_examples`, or `nemesis_counter`: sharded
counters, a scalar sum, a PushGradients scalar and an embedding table), `--ps_replicas` 2 or 1
(with automatic PS recovery from checkpoints either way), and the tf.data service (a dispatcher
with a journal and 2 data workers) or none. While it runs, the round's schedule applies:

  kill_<role>    SIGKILL of a worker, ps, data_worker, dispatcher or the chief. A killed chief
                 ends the launcher (it stops every task); the nemesis starts the same command
                 again, which resumes from the newest checkpoint (as soak.py does).
  pause_<role>   SIGSTOP of any role's process, SIGCONT 0.5-10 s later.
  scale_workers  `asyncps_launch scale --workers N` (issue 37): up by 1 or 2 (at most --workers + 2)
                 or down to a smaller count (at least 1); every variant runs --elastic (local
                 hosts, the dispatcher a task of its own: the chief's membership service is on).
  scale_ps       `asyncps_launch scale --ps N`, N between max(--ps, --ps_replicas) and --max_ps
                 (--ps + 1): a PS joins its slot and copies move to it, or the highest leaves.
                 A scale runs in a thread of its own (a PS leave waits for its moves); one the
                 launcher refuses (another in progress, the job ending) is logged and counted as
                 refused, not failed. Each elastic round scales once in its first 3-10 s.
  double faults  two of the above at once (the second 0-0.3 s after the first).
  storms         a worker killed 4-10 times, 0.4-1.2 s apart, while the other faults go on.
  triggered      a fault at a bad moment, found from the processes' log lines or files:
                 state_transfer (a PS killed, then a fault as its rebuild's state transfer
                 starts), failover (a PS killed, then a fault before the chief promoted its
                 backup), restore (PS lost, then a fault as the checkpoint restore of automatic
                 recovery begins), checkpoint_save (a fault while a checkpoint directory has no
                 manifest yet). Whether it landed inside that window is recorded.

The checker: the job ends with exit 0 and its chief's exactly-once line (every example, or every
id and embedding key, counted exactly the number of epochs; the counter also checks its sum and
its gradient pushes), and the main job reaches --target. A chief that exits on its own with a
retryable code (>= 128: e.g. a PS lost in the middle of a checkpoint save) is started again, as
Kubernetes would, and counted (`retryable exits`), not failed; the round must still be exact.

A failing round prints its seed and fault schedule, and writes it as JSON (failed_round_K.json
beside the logs, which are kept); `--replay FILE` runs the rounds of such a file (or the
schedule.json every run writes) again: the same variants, faults and offsets (a triggered fault
is armed at the same offset and fires when its moment comes again). The summary gives the
faults per kind, the triggered faults, and a matrix of fault kind x fault kind that were active
at the same time (a kill until the task is running again, a pause until SIGCONT), and how often;
--json writes it in the benchmarks' machine-readable form (scripts/bench_report.py render).

--seed day takes today's date (UTC, YYYYMMDD): CI's seed of the day. --plant no_dedup runs the
jobs with --test_only_no_dedup (exactly-once updates off), a planted bug the nemesis must find.
Standard library only. Only processes this script started (from its launchers' output) are
signalled.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROLES = ("worker", "ps", "data_worker", "dispatcher", "chief")
ACTIONS = ("kill", "pause")
# Scale faults (issue 37): `asyncps_launch scale` to a number of workers or PS the schedule drew,
# while the job runs under --elastic (--max_ps for the PS). Their role is the role they scale.
SCALE_KINDS = {"scale_workers": "worker", "scale_ps": "ps"}
KINDS = tuple(f"{a}_{r}" for a in ACTIONS for r in ROLES) + tuple(SCALE_KINDS)
TRIGGERS = ("state_transfer", "failover", "restore", "checkpoint_save")

# The round variants, taken in turn (from an offset the seed picks).
# Six of eight with the data service: its two roles exist only there, and a 30-minute run
# should kill each of them 100 times.
VARIANTS = (
    {"workload": "counter", "replicas": 2, "data_workers": 0},
    {"workload": "fmnist", "replicas": 2, "data_workers": 2},
    {"workload": "counter", "replicas": 1, "data_workers": 2},
    {"workload": "fmnist", "replicas": 1, "data_workers": 0},
    {"workload": "counter", "replicas": 2, "data_workers": 2},
    {"workload": "fmnist", "replicas": 2, "data_workers": 2},
    {"workload": "counter", "replicas": 1, "data_workers": 2},
    {"workload": "fmnist", "replicas": 1, "data_workers": 2},
)
# How often each role is picked (among the roles a round has), and the share of pauses.
ROLE_WEIGHTS = {"worker": 2, "ps": 3, "data_worker": 12, "dispatcher": 14, "chief": 5}
PAUSE_SHARE = 0.3
PAUSE_SECONDS = (0.5, 10.0)
DOUBLE_SPREAD = 0.3  # the second fault of a double follows within this many seconds
# Event mix: single faults, double faults, triggered faults. Every other double fault is the
# next pair of kinds in a rotation over the pairs the round can have (the rest are drawn as
# singles are), so a run covers rare pairs (two paused workers) as well as common ones.
EVENT_WEIGHTS = {"single": 0.45, "double": 0.25, "triggered": 0.15, "storm": 0.05, "scale": 0.10}
# Scale faults: workers between 1 and --workers + WORKERS_ABOVE (each scale-up adds 1 or 2 to the
# count the schedule expects), PS between max(--ps, --ps_replicas) and --max_ps (--ps + PS_ABOVE).
WORKERS_ABOVE = 2
PS_ABOVE = 1
# Every elastic round scales once this early (a counter round under CI's settings lasts 10-25 s,
# where the weights alone would leave most rounds without a scale).
FIRST_SCALE = (3.0, 10.0)
# A scale-up of workers answers once the processes started; they register and are admitted in
# the seconds after (the chief logs no line for it): the scale counts as active this long.
WORKER_SCALE_SETTLE = 5.0
# A storm: a flapping node, its worker killed again and again (as in the mix of issue 35, where PS
# failovers during worker kills applied a batch twice), while the rest of the schedule goes on.
STORM_KILLS = (4, 10)
STORM_GAP = (0.4, 1.2)
TRIGGER_WINDOW = 30.0  # an armed trigger not seen within this many seconds is given up
FIRST_FAULT = (2.0, 5.0)  # the first fault of a round, after start-up
HORIZON = 900.0  # faults are drawn this far into a round; later ones are never reached

STARTED = re.compile(r"^\[launcher\] (?:started (\S+) pid (\d+)|restarted (\S+) \(restart \d+/\d+\): pid (\d+))")
METRICS_PORT = re.compile(r"metrics port (\d+)")
CONTROL_PORT = re.compile(r"^\[launcher\] control port (\d+)")
# A scale request's answer, printed by the launcher: the tasks it started (new workers, PS slots).
SCALE_STARTED = re.compile(r"^\[launcher\] scale to \d+ (?:workers|PS): ")
STARTED_IN_SCALE = re.compile(r"started (\S+) pid (\d+)")
LEFT = re.compile(r"^\[launcher\] (\S+) left the job")
FMNIST_EXACT = re.compile(r"exactly once: (\d+) examples x (\d+) epochs")
COUNTER_EXACT = re.compile(r"exactly once: (\d+) keys x (\d+) epochs")
ACCURACY = re.compile(r"\[chief\] test accuracy (\d+\.\d+)")
CHIEF_EXIT = re.compile(r"^\[launcher\] chief exited with code (\d+)")
# Lines that say an update was lost or applied twice.
DUPLICATE_OR_LOST = re.compile(r"MISMATCH|were not applied exactly|not counted exactly|not pushed exactly")
# Moments, from the processes' log lines (each task logs at info under --log_level info).
MOMENTS = {
    "transfer_start": re.compile(r"state transfer \d+ to ps \d+:"),
    "transfer_done": re.compile(r"state transfer \d+ to ps \d+ done|is in sync at sequence"),
    "ps_down": re.compile(r"\bps_down: "),
    "ps_failover": re.compile(r"\bps_failover: "),
    "recovery_start": re.compile(r"dispatch paused for automatic PS recovery|lost every copy: restoring the checkpoint"),
    "restore_done": re.compile(r"restored checkpoint .* onto \d+ parameter servers|PS recovery done|"
                               r"parameter servers reachable again"),
    "ps_restarted": re.compile(r"^\[launcher\] restarted ps:"),
    "chief_started": re.compile(r"^\[launcher\] started chief "),
    "ps_moved": re.compile(r"\bps_move_done: |\bps_left: "),
}


# ----- the schedule (pure: a function of the seed and the options) -------------------------------


def seed_of_the_day(now=None):
    """Today's date (UTC) as YYYYMMDD: CI's seed of the day."""
    return int(time.strftime("%Y%m%d", time.gmtime(now)))


def round_roles(variant, ps=2, workers=2):
    """Task counts by role in a round of `variant`."""
    roles = {"worker": workers, "ps": ps, "chief": 1}
    if variant["data_workers"]:
        roles["data_worker"] = variant["data_workers"]
        roles["dispatcher"] = 1
    return roles


def can_scale(variant):
    """Whether a round of `variant` runs its launcher with --elastic: every variant does, as each
    runs on local hosts (--elastic needs --hosts local) and a data service's dispatcher is a task
    of its own (the chief's membership service is off only with the dispatcher inside the chief)."""
    return variant.get("hosts", "local") == "local"


def kind_role(kind):
    """The role a fault kind acts on (a scale kind: the role it scales)."""
    return SCALE_KINDS.get(kind) or kind.split("_", 1)[1]


def target_range(roles, elastic, ps, workers, max_ps):
    """How many processes of each role a fault can target: with --elastic a worker or PS index is
    taken modulo the tasks of that role running when it applies, so it is drawn from the most
    the schedule lets run (a round that scaled up has its new tasks targeted too)."""
    out = dict(roles)
    if elastic:
        out["worker"] = workers + WORKERS_ABOVE
        out["ps"] = max_ps
    return out


def _scale(rng, at, kind, counts, lo, hi):
    """A scale fault: `want` a count of the role's tasks other than the one the schedule expects
    then (counts: role -> expected count, updated)."""
    role = SCALE_KINDS[kind]
    have = counts[role]
    if role == "worker":  # up by 1 or 2, or down to any smaller count
        choices = [n for n in (have + 1, have + 2) if n <= hi["worker"]] + list(range(lo["worker"], have))
    else:
        choices = [n for n in range(lo["ps"], hi["ps"] + 1) if n != have]
    want = rng.choice(choices)
    counts[role] = want
    return {"at": round(at, 3), "kind": kind, "role": role, "target": None, "want": want, "duration": None,
            "trigger": None, "delay": 0.0, "event": "scale"}


def _fault(rng, at, roles, role=None, action=None, exclude=()):
    """One fault at offset `at`: a role (weighted among those present), kill or pause, a target."""
    if role is None:
        names = [r for r in ROLES if r in roles and r not in exclude]
        role = rng.choices(names, weights=[ROLE_WEIGHTS[r] for r in names])[0]
    if action is None:
        action = "pause" if rng.random() < PAUSE_SHARE else "kill"
    fault = {"at": round(at, 3), "kind": f"{action}_{role}", "role": role, "target": rng.randrange(roles[role]),
             "duration": round(rng.uniform(*PAUSE_SECONDS), 3) if action == "pause" else None,
             "trigger": None, "delay": 0.0, "event": "single"}
    return fault


def _triggered(rng, at, roles, variant):
    """A setup fault (if the moment needs one) and the fault that waits for the moment."""
    choices = ["checkpoint_save", "restore"]
    if variant["replicas"] >= 2:
        choices += ["state_transfer", "failover"]
    trigger = rng.choice(choices)
    setup = []
    if trigger in ("state_transfer", "failover"):
        setup.append(_fault(rng, at, roles, role="ps", action="kill"))
    elif trigger == "restore":
        if variant["replicas"] >= 2:  # every copy of a group lost: both PS at once
            setup = [_fault(rng, at, roles, role="ps", action="kill") for _ in range(2)]
            setup[0]["target"], setup[1]["target"] = 0, 1
            setup[1]["at"] = round(at + rng.uniform(0, 0.1), 3)
        else:
            setup.append(_fault(rng, at, roles, role="ps", action="kill"))
    # The fault at the moment: mostly a PS (the one serving the transfer, save or restore), else
    # any role.
    role = "ps" if rng.random() < 0.6 else None
    fault = _fault(rng, at, roles, role=role)
    fault["trigger"] = trigger
    if trigger == "failover":
        fault["delay"] = round(rng.uniform(0.1, 1.8), 3)  # inside the 2 s heartbeat timeout
    elif trigger == "restore":
        fault["delay"] = round(rng.uniform(0.0, 0.3), 3)
    for s in setup:
        s["event"] = "setup"
    fault["event"] = "triggered"
    return setup + [fault]


def make_round(seed, index, workloads=("counter", "fmnist"), fault_every=3.0, ps=2, workers=2,
               horizon=HORIZON, scale=True):
    """Round `index` of the schedule of `seed`: its variant, job seed and faults (offsets in s).
    With `scale` (and a variant that can, see can_scale) the job runs --elastic with --max_ps
    ps + PS_ABOVE and the schedule scales its workers and PS too."""
    variants = [v for v in VARIANTS if v["workload"] in workloads]
    if not variants:
        raise ValueError(f"no variant runs workloads {workloads}")
    offset = random.Random(f"nemesis:{seed}").randrange(len(variants))
    variant = dict(variants[(offset + index) % len(variants)])
    rng = random.Random(f"nemesis:{seed}:{index}")
    elastic = bool(scale) and can_scale(variant)
    max_ps = ps + PS_ABOVE if elastic else ps
    task_roles = round_roles(variant, ps, workers)
    roles = target_range(task_roles, elastic, ps, workers, max_ps)
    counts = {"worker": workers, "ps": ps}  # the counts the schedule's scale faults expect
    lo = {"worker": 1, "ps": max(ps, variant["replicas"])}
    hi = {"worker": workers + WORKERS_ABOVE, "ps": max_ps}
    kinds = [k for k in KINDS if elastic or k not in SCALE_KINDS]
    weights = {e: w for e, w in EVENT_WEIGHTS.items() if elastic or e != "scale"}

    def make(kind, at):
        if kind in SCALE_KINDS:
            return _scale(rng, at, kind, counts, lo, hi)
        return _fault(rng, at, roles, role=kind_role(kind), action=kind.split("_", 1)[0])

    faults = []
    group = 0
    # The round's first scale, drawn in its turn among the events (the expected counts a scale
    # draws from follow the order the scales run in).
    first_scale = rng.uniform(*FIRST_SCALE) if elastic else None
    t = rng.uniform(*FIRST_FAULT)
    doubles = 0
    # The pairs this round's roles allow, in a rotation starting where the seed says.
    pairs = [p for p in possible_pairs(kinds) if all(kind_role(k) in roles for k in p.split("|"))]
    pair_offset = rng.randrange(len(pairs)) if pairs else 0
    while t < horizon:
        if first_scale is not None and first_scale <= t:
            group += 1
            f = make(rng.choice(list(SCALE_KINDS)), first_scale)
            f["group"] = group
            faults.append(f)
            first_scale = None
        group += 1
        event = rng.choices(list(weights), weights=list(weights.values()))[0]
        if event == "single":
            made = [_fault(rng, t, roles)]
        elif event == "double":
            doubles += 1
            if doubles % 2 == 0 and pairs:
                kind_a, kind_b = pairs[(pair_offset + doubles // 2) % len(pairs)].split("|")
                first = make(kind_a, t)
                second = make(kind_b, t + rng.uniform(0, DOUBLE_SPREAD))
                if (first["role"] == second["role"] and roles[first["role"]] > 1 and
                        first["target"] is not None and second["target"] is not None):
                    # Two processes of one role: the same one twice would be one fault.
                    second["target"] = (first["target"] + 1 + rng.randrange(roles[first["role"]] - 1)) % roles[
                        first["role"]]
            else:
                first = _fault(rng, t, roles)
                second = _fault(rng, t + rng.uniform(0, DOUBLE_SPREAD), roles)
            if first["kind"] == "kill_chief":  # a chief kill ends the launcher: it goes second
                first["at"], second["at"] = second["at"], first["at"]
                first, second = second, first
            made = [first, second]
            for f in made:
                f["event"] = "double"
        elif event == "storm":
            made = []
            at = t
            for _ in range(rng.randint(*STORM_KILLS)):
                f = _fault(rng, at, roles, role="worker", action="kill")
                f["event"] = "storm"
                made.append(f)
                at += rng.uniform(*STORM_GAP)
        elif event == "scale":
            made = [make(rng.choice(list(SCALE_KINDS)), t)]
        else:
            made = _triggered(rng, t, roles, variant)
        for f in made:
            f["group"] = group
        faults.extend(made)
        t += rng.expovariate(1.0 / fault_every)
    faults.sort(key=lambda f: f["at"])
    for i, f in enumerate(faults):
        f["id"] = i
    rd = {"index": index, "seed": seed, **variant, "ps": ps, "workers": workers,
          "job_seed": rng.randrange(1 << 30), "faults": faults}
    if elastic:
        rd.update(elastic=True, max_ps=max_ps)
    return rd


def schedule_rounds(seed, count, **options):
    """The first `count` rounds of seed's schedule."""
    return [make_round(seed, i, **options) for i in range(count)]


def load_schedule(path, only_round=None):
    """The rounds of a schedule file (schedule.json, or a failed_round_K.json), as run."""
    with open(path) as f:
        data = json.load(f)
    rounds = data["rounds"] if "rounds" in data else [data]
    cleaned = []
    for r in rounds:
        r = dict(r)
        # Faults the run never reached (its round ended first, or they came after --minutes) are
        # not replayed: a replay applies what the run applied, at the same offsets.
        r["faults"] = [{k: v for k, v in f.items() if k not in RESULT_FIELDS} for f in r["faults"]
                       if f.get("outcome") not in ("not reached", "skipped: after the deadline")]
        for k in ROUND_RESULT_FIELDS:
            r.pop(k, None)
        cleaned.append(r)
    if only_round is not None:
        cleaned = [r for r in cleaned if r["index"] == only_round]
        if not cleaned:
            raise ValueError(f"{path} has no round {only_round}")
    return data.get("options", {}), cleaned


# What a run adds to a fault and to a round (left out when a schedule is replayed).
RESULT_FIELDS = ("applied_at", "ended_at", "outcome", "pid", "label", "landed_mid", "fired_by", "armed_at",
                 "scale_exit", "scale_answer")
ROUND_RESULT_FIELDS = ("result",)


# ----- coverage: which fault kinds were active at the same time -----------------------------------


def overlap_matrix(intervals):
    """{"a|b": n}: pairs of faults whose active intervals [start, end] intersect, by kind (a <= b
    in KINDS order). `intervals` is [(kind, start, end)] of one round."""
    order = {k: i for i, k in enumerate(KINDS)}
    counts = {}
    items = sorted(intervals, key=lambda x: x[1])
    for i, (ka, sa, ea) in enumerate(items):
        for kb, sb, eb in items[i + 1:]:
            if sb > ea:
                break  # sorted by start: no later interval starts before this one ends
            if sb <= ea and sa <= eb:
                a, b = sorted((ka, kb), key=lambda k: order[k])
                key = f"{a}|{b}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def merge_counts(total, more):
    for k, v in more.items():
        total[k] = total.get(k, 0) + v
    return total


def all_pairs(kinds=KINDS):
    """Every unordered pair of kinds (with each kind and itself)."""
    return [f"{a}|{b}" for i, a in enumerate(kinds) for b in kinds[i:]]


# A job has one chief and one dispatcher: a fault of one of them cannot be active twice at once.
SINGLE_ROLES = ("dispatcher", "chief")


def possible_pairs(kinds=KINDS):
    """The pairs that can be active at the same time: all but a single process's kind with itself,
    and two scales (the launcher runs one scale request at a time and refuses another)."""
    def possible(a, b):
        if a in SCALE_KINDS and b in SCALE_KINDS:
            return False
        return not (a == b and kind_role(a) in SINGLE_ROLES)
    return [p for p in all_pairs(kinds) if possible(*p.split("|"))]


def scale_noop(f):
    """Whether a scale the launcher did found the job at that count already (a chief restart sets
    the counts back to the command line's, which the schedule's expected counts do not follow)."""
    return f.get("scale_exit") == 0 and (f.get("scale_answer") or "").startswith("already ")


def run_kinds(rounds):
    """The fault kinds the rounds could have: the scale kinds only when a round ran --elastic."""
    elastic = any(r.get("elastic") for r in rounds)
    return tuple(k for k in KINDS if elastic or k not in SCALE_KINDS)


def render_matrix(counts, kinds=KINDS):
    """The overlap matrix as text rows (upper triangle; '.' for never)."""
    short = {k: k.replace("kill_", "K:").replace("pause_", "P:").replace("scale_", "S:").replace("data_worker", "dw")
             .replace("dispatcher", "disp").replace("worker", "wk") for k in kinds}
    width = max(len(s) for s in short.values()) + 1
    lines = [" " * width + "".join(f"{short[k]:>{width}}" for k in kinds)]
    order = {k: i for i, k in enumerate(kinds)}
    for a in kinds:
        cells = []
        for b in kinds:
            if order[b] < order[a]:
                cells.append(" " * width)
            else:
                cells.append(f"{counts.get(f'{a}|{b}', '.'):>{width}}")
        lines.append(f"{short[a]:<{width}}" + "".join(cells))
    return lines


# ----- running a round ----------------------------------------------------------------------------


def ppid_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


class Launch:
    """One asyncps_launch run: its output (timestamped into the round's log), the current pid of
    each task, and the moments its lines report."""

    def __init__(self, command, env, log, t0, moments):
        self.t0 = t0
        self.log = log
        self.moments = moments  # shared by the round: name -> [times]
        self.pids = {}
        self.ports = {}  # task label -> its /metrics port (the chief's also serves /status.json)
        self.live = {}  # role -> labels of its tasks the launcher runs (started, not left the job)
        self.control_port = None  # --elastic: the port `asyncps_launch scale` talks to
        self.lock = threading.Lock()
        self.lines = []
        self.last_chief_line = None
        self.longest_silence = 0.0  # the longest stretch between two of the chief's lines
        self.started_at = time.monotonic() - t0
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     text=True, bufsize=1, start_new_session=True, errors="replace")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            t = time.monotonic() - self.t0
            line = line.rstrip("\n")
            m = STARTED.match(line)
            with self.lock:
                self.log.write(f"{t:9.3f} {line}\n")
                self.log.flush()  # a stalled or hung round's log is read while it runs
                self.lines.append(line)
                if line.startswith("[chief]"):
                    if self.last_chief_line is not None:
                        self.longest_silence = max(self.longest_silence, t - self.last_chief_line)
                    self.last_chief_line = t
                started = []
                if m:
                    label = m.group(1) or m.group(3)
                    started.append((label, int(m.group(2) or m.group(4))))
                    port = METRICS_PORT.search(line)
                    if port:
                        self.ports[label] = int(port.group(1))
                elif SCALE_STARTED.match(line):
                    started += [(s.group(1), int(s.group(2))) for s in STARTED_IN_SCALE.finditer(line)]
                for label, pid in started:
                    self.pids[label] = pid
                    self.live.setdefault(label.split(":")[0], set()).add(label)
                    self.moments.setdefault(f"up:{label}", []).append(t)
                left = LEFT.match(line)
                if left:
                    self.pids.pop(left.group(1), None)
                    self.live.get(left.group(1).split(":")[0], set()).discard(left.group(1))
                control = CONTROL_PORT.match(line)
                if control:
                    self.control_port = int(control.group(1))
                for name, pattern in MOMENTS.items():
                    if pattern.search(line):
                        self.moments.setdefault(name, []).append(t)
        self.log.flush()

    def pid(self, label):
        """The task's current pid, when it is our launcher's child (never a reused pid)."""
        with self.lock:
            pid = self.pids.get(label)
        if pid is None or ppid_of(pid) != self.proc.pid:
            return None
        return pid

    def live_labels(self, role):
        """The labels of the role's tasks running now (or restarting), by index."""
        with self.lock:
            labels = list(self.live.get(role, ()))
        return sorted(labels, key=lambda l: int(l.split(":")[1]))

    def forget(self, label):
        with self.lock:
            self.pids.pop(label, None)

    def text(self):
        self.reader.join(timeout=30)
        with self.lock:
            return "\n".join(self.lines)

    def stop(self):
        """Ends the launcher (it stops its tasks) and whatever of its session is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session we created for it
        except ProcessLookupError:
            pass
        self.proc.wait()


def http_get(port, path, timeout=5):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read()


def capture_stall(launch, out_dir, stacks=True):
    """What a stalled job's processes are doing: the chief's /status.json, every task's /metrics
    and, with gdb, every task's thread stacks. Best effort."""
    os.makedirs(out_dir, exist_ok=True)
    with launch.lock:
        ports = dict(launch.ports)
        pids = dict(launch.pids)
    for label, port in ports.items():
        name = label.replace(":", "_")
        try:
            if label == "chief":
                with open(os.path.join(out_dir, "chief_status.json"), "wb") as f:
                    f.write(http_get(port, "/status.json"))
            with open(os.path.join(out_dir, f"{name}.metrics"), "wb") as f:
                f.write(http_get(port, "/metrics"))
        except Exception as e:  # noqa: BLE001 (a diagnostic: whatever fails is noted, not raised)
            with open(os.path.join(out_dir, f"{name}.error"), "w") as f:
                f.write(f"{e}\n")
    gdb = shutil.which("gdb") if stacks else None
    for label, pid in pids.items():
        if gdb and ppid_of(pid) == launch.proc.pid:
            with open(os.path.join(out_dir, f"{label.replace(':', '_')}.stacks"), "w") as f:
                subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"], stdout=f,
                               stderr=subprocess.STDOUT, timeout=60, check=False)


def scale_token(rd):
    """The cluster token of an --elastic round's job (the scale command presents it)."""
    return f"nemesis-{rd['seed']}-{rd['index']}"


def job_command(args, rd, ckpt):
    launch = [os.path.join(args.bin, "asyncps_launch"), "--ps", str(rd["ps"]), "--workers", str(rd["workers"]),
              "--max_restarts", "1000", "--log_level", "info", "--ps_replicas", str(rd["replicas"])]
    if rd["data_workers"]:
        launch += ["--data_workers", str(rd["data_workers"])]
    if rd.get("elastic"):
        launch += ["--elastic", "--max_ps", str(rd["max_ps"]), "--token", scale_token(rd)]
    launch.append("--")
    if rd["workload"] == "fmnist":
        program = [os.path.join(args.bin, "fashion_mnist"), "--epochs", str(args.fmnist_epochs),
                   "--batch_size", "120", "--sharding", "dynamic", "--ps_recovery", "auto",
                   "--checkpoint_dir", ckpt, "--checkpoint_every_steps", "150", "--count_examples",
                   "--seed", str(rd["job_seed"])]
    else:
        program = [os.path.join(args.bin, "nemesis_counter"), "--checkpoint_dir", ckpt,
                   "--ids", str(args.counter_ids), "--epochs", str(args.counter_epochs),
                   "--closures_per_worker", str(args.counter_closures_per_worker)]
    if rd.get("plant") == "no_dedup":
        program.append("--test_only_no_dedup")
    return launch + program


def uncommitted_checkpoint(ckpt):
    """A checkpoint directory being written (no manifest yet), or None."""
    try:
        for e in os.scandir(ckpt):
            if e.name.startswith("ckpt-") and e.is_dir() and not os.path.exists(os.path.join(e.path, "manifest.json")):
                return e.path
    except OSError:
        pass
    return None


class RoundRunner:
    """Applies one round's schedule to its job; returns the round's result."""

    def __init__(self, args, rd, round_dir, deadline):
        self.args = args
        self.rd = rd
        self.dir = round_dir
        self.deadline = deadline  # no faults after it (monotonic); the round finishes quietly
        self.ckpt = os.path.join(round_dir, "checkpoints")
        self.moments = {}
        self.paused = {}  # pid -> fault (SIGSTOPped, SIGCONT due at fault["_cont"])
        self.launch = None
        self.launches = 0
        self.retryable = []
        self.texts = []
        self.intervals = []
        self.silence = 0.0
        self.captured = False
        self.last_fault_at = 0.0
        self.scales = []  # threads running `asyncps_launch scale` (a scale may take seconds)
        self.scale_lock = threading.Lock()  # guards the scale faults' result fields

    def now(self):
        return time.monotonic() - self.t0

    def label(self, fault):
        role = fault["role"]
        if role == "chief":
            return "chief"
        if role == "dispatcher":
            return "dispatcher"
        live = self.launch.live_labels(role) if self.rd.get("elastic") and role in ("worker", "ps") else []
        if live:  # with --elastic the tasks of a role change: one of those running now
            return live[fault["target"] % len(live)]
        return f"{role}:{fault['target'] % self.roles[role]}"

    def cont_all(self):
        for pid, fault in list(self.paused.items()):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            fault["ended_at"] = round(self.now(), 3)
            self.log.write(f"{self.now():9.3f} [nemesis] SIGCONT {fault['label']} pid {pid} (the job ended)\n")
        self.paused.clear()

    def apply(self, fault, fired_by=None):
        """Signals the fault's target; records what happened."""
        fault["fired_by"] = fired_by
        if self.now() + self.t0 > self.deadline:
            fault["outcome"] = "skipped: after the deadline"
            return
        if self.launch is None or self.launch.proc.poll() is not None or self.tearing_down:
            fault["outcome"] = "skipped: the job is restarting"
            return
        if fault["kind"] in SCALE_KINDS:
            self.scale(fault)
            return
        label = self.label(fault)
        pid = self.launch.pid(label)
        if pid is None:
            fault["outcome"] = f"skipped: {label} is down"
            return
        action = fault["kind"].split("_", 1)[0]
        if action == "pause" and pid in self.paused:
            fault["outcome"] = f"skipped: {label} is paused already"
            return
        try:
            os.kill(pid, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        except ProcessLookupError:
            fault["outcome"] = f"skipped: {label} ended meanwhile"
            return
        t = self.now()
        self.last_fault_at = t
        fault.update(applied_at=round(t, 3), outcome="applied", pid=pid, label=label)
        self.log.write(f"{t:9.3f} [nemesis] {'SIGKILL' if action == 'kill' else 'SIGSTOP'} {label} pid {pid} "
                       f"({fault['kind']}, fault {fault['id']}, {fault['event']}"
                       f"{', trigger ' + fault['trigger'] if fault['trigger'] else ''})\n")
        if action == "kill":
            self.launch.forget(label)  # until its "restarted" line: never a pid that may be reused
            if pid in self.paused:
                self.paused.pop(pid)["ended_at"] = round(t, 3)
            if label == "chief":
                self.chief_killed = True
                self.tearing_down = True
        else:
            fault["_cont"] = t + fault["duration"]
            self.paused[pid] = fault
        if fault["trigger"] == "checkpoint_save":
            fault["landed_mid"] = uncommitted_checkpoint(self.ckpt) is not None

    def scale(self, fault):
        """Starts `asyncps_launch scale` to the fault's count, in a thread of its own: a scale-down
        of a PS waits for its copies to move, and the schedule goes on meanwhile. Its answer (a
        refusal too: another scale in progress, the job ending) is logged and recorded, not failed."""
        port = self.launch.control_port
        if port is None:
            fault["outcome"] = "skipped: no control port yet"
            return
        flag = "--workers" if fault["kind"] == "scale_workers" else "--ps"
        command = [os.path.join(self.args.bin, "asyncps_launch"), "scale", "--control", f"127.0.0.1:{port}",
                   flag, str(fault["want"]), "--token", scale_token(self.rd)]
        t = self.now()
        self.last_fault_at = t
        fault.update(applied_at=round(t, 3), outcome="applied", label=f"{'workers' if fault['role'] == 'worker' else 'PS'} to {fault['want']}")
        self.log.write(f"{t:9.3f} [nemesis] scale {fault['label']} (fault {fault['id']}, {fault['event']}): "
                       f"asyncps_launch scale --control 127.0.0.1:{port} {flag} {fault['want']}\n")

        def run_scale():
            try:
                done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      timeout=200, check=False, errors="replace")
                code, answer = done.returncode, done.stdout.strip()
            except subprocess.TimeoutExpired:
                code, answer = None, "no answer in 200 s"
            end = self.now()
            with self.scale_lock:
                fault.update(ended_at=round(end, 3), scale_exit=code, scale_answer=answer[-500:])
                if self.log.closed:  # the round ended without it (its launcher did not answer)
                    return
                self.log.write(f"{end:9.3f} [nemesis] scale {fault['label']} (fault {fault['id']}) "
                               f"{'done' if code == 0 else 'refused or failed (exit ' + str(code) + ')'}: "
                               f"{answer[-300:]}\n")

        thread = threading.Thread(target=run_scale, daemon=True)
        thread.start()
        self.scales.append(thread)

    def scale_settled(self, f, end):
        """When a scale that was done stopped changing the job: a PS scale at the chief's last
        ps_move_done / ps_left before the next scale (its copies moving), a scale-up of workers
        WORKER_SCALE_SETTLE s after (registering, admitted), else at its answer."""
        answered = f.get("ended_at") or end
        nxt = min([g["applied_at"] for g in self.rd["faults"] if g["kind"] in SCALE_KINDS and
                   g.get("outcome") == "applied" and g["applied_at"] > f["applied_at"]] + [end])
        if f["kind"] == "scale_ps":
            moved = [x for x in self.moments.get("ps_moved", []) if f["applied_at"] < x <= nxt]
            return round(max([answered] + moved), 3)
        if "started" in (f.get("scale_answer") or ""):
            return round(min(max(answered, f["applied_at"] + WORKER_SCALE_SETTLE), end), 3)
        return round(answered, 3)

    def moment_after(self, name, t):
        times = self.moments.get(name, [])
        return next((x for x in times if x > t), None)

    def check_trigger(self, armed):
        """When the armed fault's moment has come: returns what fired it, else None."""
        f, since = armed["fault"], armed["since"]
        trig = f["trigger"]
        now = self.now()
        if trig == "failover":
            if now >= since + f["delay"]:
                return "delay after the PS kill"
        elif trig == "state_transfer":
            t = self.moment_after("transfer_start", since)
            if t is not None:
                return "state transfer started"
        elif trig == "restore":
            start = self.moment_after("recovery_start", since)
            if start is not None:
                back = self.moment_after("ps_restarted", start)
                if back is not None and now >= back + f["delay"]:
                    return "PS back during recovery"
        elif trig == "checkpoint_save":
            if uncommitted_checkpoint(self.ckpt):
                return "checkpoint being written"
        return None

    def landed_mid(self, f):
        """Whether a triggered fault landed inside its window (known after the fact)."""
        t = f["applied_at"]
        trig = f["trigger"]
        if trig == "checkpoint_save":
            return f.get("landed_mid")
        if trig == "state_transfer":
            start = self.moment_after("transfer_start", f["armed_at"])
            done = self.moment_after("transfer_done", start) if start is not None else None
            return start is not None and (done is None or done >= t)
        if trig == "failover":
            promoted = self.moment_after("ps_failover", f["armed_at"])
            return promoted is None or promoted >= t
        if trig == "restore":
            start = self.moment_after("recovery_start", f["armed_at"])
            done = self.moment_after("restore_done", start) if start is not None else None
            return start is not None and (done is None or done >= t)
        return None

    def start_launch(self):
        self.launches += 1
        self.chief_killed = False
        self.tearing_down = False
        env = dict(os.environ)
        env["ASYNCPS_DISPATCHER_WORK_DIR"] = os.path.join(self.dir, "dispatcher")
        self.launch = Launch(self.command, env, self.log, self.t0, self.moments)
        self.log.write(f"{self.now():9.3f} [nemesis] launch {self.launches}: {' '.join(self.command)}\n")

    def run(self):
        args, rd = self.args, self.rd
        self.roles = round_roles(rd, rd["ps"], rd["workers"])
        os.makedirs(self.ckpt, exist_ok=True)
        self.command = job_command(args, rd, self.ckpt)
        self.t0 = time.monotonic()
        faults = rd["faults"]
        pending = list(faults)  # in order of "at"
        armed = []
        code = None
        hung = False
        with open(os.path.join(self.dir, "log"), "w") as self.log:
            self.start_launch()
            try:
                while True:
                    now = self.now()
                    if self.launch.proc.poll() is not None:
                        code = self.launch.proc.wait()
                        self.cont_all()
                        self.texts.append(self.launch.text())
                        self.silence = max(self.silence, self.launch.longest_silence)
                        self.launch.stop()
                        self.log.write(f"{self.now():9.3f} [nemesis] launcher exited with {code}\n")
                        relaunch = self.chief_killed or code >= 128
                        if relaunch and not self.chief_killed:
                            reason = [l for l in self.texts[-1].splitlines() if "failed:" in l or "Error" in l]
                            self.retryable.append({"at": round(now, 3), "code": code,
                                                   "reason": reason[-1][:300] if reason else ""})
                        if relaunch and self.launches < args.max_launches:
                            self.start_launch()
                            continue
                        break
                    if time.monotonic() > self.hard_stop:
                        self.log.write(f"{now:9.3f} [nemesis] the round outlived its time: stopping it\n")
                        hung = True
                        self.cont_all()
                        self.launch.stop()
                        code = None
                        self.texts.append(self.launch.text())
                        self.silence = max(self.silence, self.launch.longest_silence,
                                           self.now() - (self.launch.last_chief_line or 0))
                        break
                    last = self.launch.last_chief_line
                    if (not self.captured and last is not None and not self.paused and
                            now - last >= self.args.stall_seconds and now - self.last_fault_at >= self.args.stall_seconds):
                        self.captured = True  # once a round: what the processes do while the chief is silent
                        where = os.path.join(self.dir, f"stall_{now:.0f}s")
                        self.log.write(f"{now:9.3f} [nemesis] the chief has been silent {now - last:.0f} s with no "
                                       f"fault active: capturing the processes' state into {where}\n")
                        self.log.flush()
                        capture_stall(self.launch, where, stacks=self.args.stall_stacks)
                    for pid, f in list(self.paused.items()):
                        if now >= f["_cont"]:
                            try:
                                os.kill(pid, signal.SIGCONT)
                            except ProcessLookupError:
                                pass
                            f["ended_at"] = round(self.now(), 3)
                            self.log.write(f"{self.now():9.3f} [nemesis] SIGCONT {f['label']} pid {pid}\n")
                            del self.paused[pid]
                    while pending and pending[0]["at"] <= now:
                        f = pending.pop(0)
                        if f["trigger"]:
                            f["armed_at"] = round(now, 3)
                            armed.append({"fault": f, "since": now})
                        else:
                            self.apply(f)
                    for a in list(armed):
                        fired = self.check_trigger(a)
                        if fired is not None:
                            armed.remove(a)
                            self.apply(a["fault"], fired_by=fired)
                        elif self.now() > a["since"] + TRIGGER_WINDOW:
                            armed.remove(a)
                            a["fault"]["outcome"] = "not triggered"
                    time.sleep(0.004 if armed else 0.02)  # pacing of the schedule, not synchronisation
            finally:
                self.cont_all()
                if self.launch.proc.poll() is None:
                    self.launch.stop()
                for thread in self.scales:  # their launcher is gone: each answers at once
                    thread.join(timeout=30)
        for f in pending:
            f.setdefault("outcome", "not reached")
        for a in armed:
            a["fault"]["outcome"] = "not reached"
        return self.finish(code, hung)

    def finish(self, code, hung):
        rd = self.rd
        end = self.now()
        text = "\n".join(self.texts)
        ups = {k: v for k, v in self.moments.items() if k.startswith("up:")}
        for f in rd["faults"]:
            if f.get("outcome") != "applied":
                continue
            t = f["applied_at"]
            if f["trigger"]:
                f["landed_mid"] = self.landed_mid(f)
            if f["kind"] in SCALE_KINDS:
                with self.scale_lock:
                    if f.get("scale_exit") != 0 or scale_noop(f):  # refused, no answer, or a no-op
                        if f.get("ended_at") is None:
                            f["ended_at"] = round(end, 3)
                        continue
                    f["ended_at"] = self.scale_settled(f, end)
            if f["kind"].startswith("kill_"):
                back = next((x for x in ups.get(f"up:{f['label']}", []) if x > t), None)
                f["ended_at"] = round(back if back is not None else end, 3)
            elif f.get("ended_at") is None:
                f["ended_at"] = round(end, 3)
            self.intervals.append((f["kind"], t, f["ended_at"]))
        exact = (FMNIST_EXACT if rd["workload"] == "fmnist" else COUNTER_EXACT).search(text)
        accuracy = [float(a) for a in ACCURACY.findall(text)]
        wrong = [l for l in text.splitlines() if DUPLICATE_OR_LOST.search(l)]
        problems = []
        if hung:
            problems.append("hang: the round did not end in time")
        elif code != 0:
            problems.append(f"exit {code}")
        if wrong:
            problems.append("lost or duplicated updates")
        elif not exact and not hung:
            problems.append("no exactly-once line")
        if rd["workload"] == "fmnist" and not hung:
            if not accuracy or accuracy[-1] < self.args.target:
                problems.append(f"accuracy {accuracy[-1] if accuracy else 'none'} under {self.args.target}")
        applied = [f for f in rd["faults"] if f.get("outcome") == "applied"]
        scales = [f for f in applied if f["kind"] in SCALE_KINDS]
        stalled = self.silence >= self.args.stall_seconds
        return {"ok": not problems, "problems": problems, "exit": code, "seconds": round(end, 1),
                "longest_chief_silence": round(self.silence, 1), "stalled": stalled,
                "launches": self.launches, "retryable_exits": self.retryable,
                "accuracy": accuracy[-1] if accuracy else None, "exact": exact is not None,
                "wrong_lines": wrong[:20], "applied": len(applied),
                "scales": len(scales), "scales_refused": sum(1 for f in scales if f.get("scale_exit") != 0),
                "scales_noop": sum(1 for f in scales if scale_noop(f)),
                "overlaps": overlap_matrix(self.intervals)}


# ----- the run ------------------------------------------------------------------------------------


def summarize(rounds):
    """Faults per kind, events, triggers, overlaps over the rounds run."""
    per_kind = {k: {"applied": 0, "skipped": 0} for k in KINDS}
    for k in SCALE_KINDS:
        per_kind[k]["refused"] = 0  # applied (asked), but the launcher refused or did not answer
        per_kind[k]["noop"] = 0  # applied and done, but the job had that count already
    events = {"single": 0, "double": 0, "triggered": 0, "setup": 0, "storm": 0, "scale": 0}
    triggers = {t: {"armed": 0, "fired": 0, "landed_mid": 0} for t in TRIGGERS}
    doubles = set()
    overlaps = {}
    for rd in rounds:
        for f in rd["faults"]:
            outcome = f.get("outcome", "")
            if outcome in ("not reached", "") or outcome == "skipped: after the deadline":
                continue
            if f["trigger"]:
                triggers[f["trigger"]]["armed"] += 1
            if outcome == "applied":
                per_kind[f["kind"]]["applied"] += 1
                if f["kind"] in SCALE_KINDS and f.get("scale_exit") != 0:
                    per_kind[f["kind"]]["refused"] += 1
                elif f["kind"] in SCALE_KINDS and scale_noop(f):
                    per_kind[f["kind"]]["noop"] += 1
                events[f["event"]] += 1
                if f["event"] == "double":
                    doubles.add((rd["index"], f["group"]))
                if f["trigger"]:
                    triggers[f["trigger"]]["fired"] += 1
                    if f.get("landed_mid"):
                        triggers[f["trigger"]]["landed_mid"] += 1
            elif outcome.startswith("skipped"):
                per_kind[f["kind"]]["skipped"] += 1
        merge_counts(overlaps, rd.get("result", {}).get("overlaps", {}))
    return {"faults": per_kind, "events": events, "double_faults": len(doubles), "triggers": triggers,
            "overlaps": overlaps}


def bench_json(opts, rounds, summary, started_at, load_start, load_end, seconds):
    """The nemesis's figures in the benchmarks' JSON form (bench/report.h; scripts/bench_report.py)."""
    results = [r["result"] for r in rounds]
    passed = sum(1 for r in results if r["ok"])
    exact = sum(1 for r in results if r["exact"] and not r["wrong_lines"])
    wrong = sum(1 for r in results if r["wrong_lines"])
    pairs = possible_pairs(run_kinds(rounds))
    covered = sum(1 for p in pairs if summary["overlaps"].get(p))
    accuracies = [r["accuracy"] for rd, r in zip(rounds, results) if rd["workload"] == "fmnist" and r["accuracy"]]
    figures = [
        {"name": "rounds that ended exact (and on target)", "value": passed, "unit": "rounds",
         "reference": {"name": "rounds run", "value": len(rounds)},
         "ratio": passed / len(rounds) if rounds else None,
         "aim": {"condition": "every round", "met": bool(rounds) and passed == len(rounds)}},
        {"name": "rounds with every update applied exactly once", "value": exact, "unit": "rounds",
         "reference": {"name": "rounds run", "value": len(rounds)}},
        {"name": "rounds with lost or duplicated updates", "value": wrong, "unit": "rounds"},
        {"name": "lowest final test accuracy (main job)", "value": min(accuracies) if accuracies else None,
         "unit": "", "reference": {"name": "target", "value": opts["target"]}},
        {"name": "pairs of fault kinds active at the same time", "value": covered, "unit": "pairs",
         "reference": {"name": "pairs that can be", "value": len(pairs)}, "ratio": covered / len(pairs),
         "note": f"{len(all_pairs(run_kinds(rounds)))} pairs of kinds less a single process's (chief, dispatcher) kind with itself "
                 f"and two scales"},
        {"name": "double faults", "value": summary["double_faults"], "unit": "faults"},
        {"name": "rounds stalled (exact, but the chief silent for --stall_seconds or more)",
         "value": sum(1 for r in results if r.get("stalled")), "unit": "rounds",
         "note": f"longest chief silence {max([r.get('longest_chief_silence', 0) for r in results] or [0])} s"},
        {"name": "retryable chief exits (started again)",
         "value": sum(len(r["retryable_exits"]) for r in results), "unit": "exits"},
    ]
    for kind in KINDS:
        figures.append({"name": f"faults: {kind}", "value": summary["faults"][kind]["applied"], "unit": "faults"})
    for kind in SCALE_KINDS:
        figures.append({"name": f"faults: {kind} refused by the launcher (logged, not failed)",
                        "value": summary["faults"][kind]["refused"], "unit": "faults",
                        "note": f"{summary['faults'][kind]['noop']} more found the job at that count already"})
    for trig in TRIGGERS:
        t = summary["triggers"][trig]
        figures.append({"name": f"faults at the moment {trig}: fired", "value": t["fired"], "unit": "faults",
                        "note": f"{t['landed_mid']} landed inside the window; {t['armed']} armed"})
    cli = [f"--{k}={v}" for k, v in opts.items() if k in ("minutes", "seed", "fault_every", "workloads", "target",
                                                          "fmnist_epochs", "counter_epochs", "counter_ids", "plant",
                                                          "counter_closures_per_worker", "scale",
                                                          "replay") and v is not None]
    return {"bench": "nemesis", "args": cli, "complete": True, "started_at": started_at,
            "wall_seconds": round(seconds, 1), "load_average": {"start": list(load_start), "end": list(load_end)},
            "figures": figures,
            "aims": [{"name": "every update exactly once, every main job on target", "condition": "every round",
                      "state": "met" if rounds and passed == len(rounds) else ("missed" if rounds else "not run"),
                      "cases": len(rounds), "missed": len(rounds) - passed}],
            "coverage": {"faults": summary["faults"], "events": summary["events"],
                         "triggers": summary["triggers"], "overlaps": summary["overlaps"]},
            "rounds": [{k: v for k, v in r.items() if k != "faults"} for r in rounds]}


def clean_for_json(rd):
    out = dict(rd)
    out["faults"] = [{k: v for k, v in f.items() if not k.startswith("_")} for f in rd["faults"]]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30, help="stop starting rounds after this long")
    parser.add_argument("--build", default="build")
    parser.add_argument("--seed", default=None, help="a number, or 'day' (UTC YYYYMMDD); default: the clock")
    parser.add_argument("--workloads", default="counter,fmnist", help="comma-separated: counter, fmnist")
    parser.add_argument("--fault_every", type=float, default=3.0, help="mean seconds between fault events")
    parser.add_argument("--fmnist_epochs", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.86, help="the main job's accuracy target")
    parser.add_argument("--counter_ids", type=int, default=200000)
    parser.add_argument("--counter_epochs", type=int, default=3)
    # 2 closures per worker with --ps_replicas 2 once stalled both PS until the 30 s RPC deadline
    # (replicated embedding pushes held every handler thread; fixed in ReplicatedTables).
    parser.add_argument("--counter_closures_per_worker", type=int, default=2)
    parser.add_argument("--plant", choices=["no_dedup"], help="run the jobs with a planted bug")
    parser.add_argument("--scale", type=int, default=1,
                        help="1: jobs run --elastic --max_ps ps+1 and the schedule scales workers and PS; "
                             "0: fixed jobs, no scale faults (a different schedule for the same seed)")
    parser.add_argument("--replay", help="run the rounds of this schedule JSON again")
    parser.add_argument("--round", type=int, help="with --replay: only this round")
    parser.add_argument("--max_rounds", type=int, default=0, help="stop after this many rounds (0: no limit)")
    parser.add_argument("--grace_minutes", type=float, default=5,
                        help="a round still running this long after --minutes (or its own start) is a hang")
    parser.add_argument("--round_minutes", type=float, default=15, help="a round running longer is a hang")
    parser.add_argument("--max_launches", type=int, default=60, help="launcher starts per round at most")
    parser.add_argument("--stop_on_failure", action="store_true", help="stop at the first failed round")
    parser.add_argument("--stall_seconds", type=float, default=20,
                        help="a round whose chief printed nothing this long is reported as stalled (kept, not failed); "
                             "the first such silence with no fault active captures the processes' state")
    parser.add_argument("--stall_stacks", type=int, default=1, help="1: the capture includes gdb thread stacks")
    parser.add_argument("--out", help="work directory (default: a new one under $TMPDIR)")
    parser.add_argument("--json", help="write the summary as benchmark JSON here")
    parser.add_argument("--keep", action="store_true", help="keep every round's logs and checkpoints")
    args = parser.parse_args(argv)

    replay = None
    if args.replay:
        stored, replay = load_schedule(args.replay, args.round)
        for key in ("fmnist_epochs", "counter_ids", "counter_epochs", "target", "counter_closures_per_worker"):
            if key in stored and parser.get_default(key) == getattr(args, key):
                setattr(args, key, stored[key])
        args.seed = replay[0]["seed"] if replay else None
    elif args.seed == "day":
        args.seed = seed_of_the_day()
    elif args.seed is None:
        args.seed = int(time.time())
    else:
        args.seed = int(args.seed)
    workloads = tuple(w for w in args.workloads.split(",") if w)

    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = os.getloadavg()
    work = args.out or tempfile.mkdtemp(prefix="asyncps_nemesis_")
    os.makedirs(work, exist_ok=True)
    # Copies of the binaries: a rebuild while the nemesis runs must not swap them under a round.
    args.bin = os.path.join(work, "bin")
    os.makedirs(args.bin, exist_ok=True)
    used = {r["workload"] for r in replay} if replay is not None else set(workloads)
    needed = ["asyncps_launch"] + (["fashion_mnist"] if "fmnist" in used else []) + \
        (["nemesis_counter"] if "counter" in used else [])
    for name in needed:
        shutil.copy2(os.path.join(args.build, "bin", name), args.bin)
    opts = {"minutes": args.minutes, "seed": args.seed, "fault_every": args.fault_every,
            "workloads": ",".join(workloads), "target": args.target, "fmnist_epochs": args.fmnist_epochs,
            "counter_epochs": args.counter_epochs, "counter_ids": args.counter_ids, "plant": args.plant,
            "counter_closures_per_worker": args.counter_closures_per_worker,
            "replay": args.replay, "scale": args.scale}
    start = time.monotonic()
    deadline = start + args.minutes * 60
    rounds = []
    failures = []
    print(f"nemesis: seed {args.seed}{' (replay of ' + args.replay + ')' if replay else ''}, "
          f"{args.minutes:g} min, work {work}", flush=True)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    interrupted = False
    try:
        index = 0
        while True:
            if replay is not None:
                if index >= len(replay):
                    break
                rd = replay[index]
            else:
                if time.monotonic() >= deadline or (args.max_rounds and index >= args.max_rounds):
                    break
                rd = make_round(args.seed, index, workloads=workloads, fault_every=args.fault_every,
                                scale=bool(args.scale))
                if args.plant:
                    rd["plant"] = args.plant
            index += 1
            round_dir = os.path.join(work, f"round_{rd['index']}")
            shutil.rmtree(round_dir, ignore_errors=True)
            os.makedirs(round_dir)
            runner = RoundRunner(args, rd, round_dir, deadline if replay is None else float("inf"))
            round_start = time.monotonic()
            runner.hard_stop = min(round_start + args.round_minutes * 60,
                                   max(deadline, round_start) + args.grace_minutes * 60) \
                if replay is None else round_start + args.round_minutes * 60
            result = runner.run()
            rd["result"] = result
            rounds.append(rd)
            applied = {}
            for f in rd["faults"]:
                if f.get("outcome") == "applied":
                    applied[f["kind"]] = applied.get(f["kind"], 0) + 1
            desc = (f"{rd['workload']}, replicas {rd['replicas']}, data workers {rd['data_workers']}"
                    f"{', elastic, max_ps ' + str(rd['max_ps']) if rd.get('elastic') else ''}"
                    f"{', PLANTED ' + rd['plant'] if rd.get('plant') else ''}")
            print(f"nemesis: round {rd['index']} ({desc}): {result['seconds']:.0f} s, exit {result['exit']}, "
                  f"launches {result['launches']}, faults {result['applied']} "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(applied.items()))}), "
                  f"{'scales ' + str(result['scales']) + ' (refused ' + str(result['scales_refused']) + ', no-op ' + str(result.get('scales_noop', 0)) + '), ' if result.get('scales') else ''}"
                  f"accuracy {result['accuracy']}, exactly-once {'yes' if result['exact'] else 'NO'}"
                  f"{', retryable exits ' + str(len(result['retryable_exits'])) if result['retryable_exits'] else ''}"
                  f", longest chief silence {result['longest_chief_silence']:.0f} s"
                  f" -> {'ok' if result['ok'] else 'FAILED: ' + '; '.join(result['problems'])}", flush=True)
            with open(os.path.join(work, "schedule.json"), "w") as out:
                json.dump({"seed": args.seed, "options": opts, "rounds": [clean_for_json(r) for r in rounds]},
                          out, indent=1)
            if not result["ok"]:
                failures.append(rd)
                path = os.path.join(work, f"failed_round_{rd['index']}.json")
                with open(path, "w") as out:
                    json.dump({"seed": args.seed, "options": opts, "rounds": [clean_for_json(rd)]}, out, indent=1)
                print(f"nemesis: FAILED round {rd['index']}, seed {args.seed}, found {time.monotonic() - start:.0f} s "
                      f"into the run: {'; '.join(result['problems'])}", flush=True)
                for line in result["wrong_lines"][:5]:
                    print(f"  {line}", flush=True)
                print("  schedule (offset s, fault, target, outcome):", flush=True)
                for f in rd["faults"]:
                    if f.get("outcome") in (None, "not reached", "skipped: after the deadline"):
                        continue
                    print(f"    {f['at']:8.3f} {f['kind']:<17} {f.get('label', f['target'])!s:<14} "
                          f"{f['event']:<9} {f['trigger'] or '':<15} {f.get('outcome')}"
                          f"{' at ' + str(f['applied_at']) if f.get('applied_at') is not None else ''}", flush=True)
                print(f"  written to {path}; logs kept in {round_dir}\n"
                      f"  replay: python3 scripts/nemesis.py --replay {path} --build {args.build}", flush=True)
                if args.stop_on_failure:
                    break
            elif result["stalled"]:
                path = os.path.join(work, f"stalled_round_{rd['index']}.json")
                with open(path, "w") as out:
                    json.dump({"seed": args.seed, "options": opts, "rounds": [clean_for_json(rd)]}, out, indent=1)
                print(f"nemesis: round {rd['index']} STALLED: its chief printed nothing for "
                      f"{result['longest_chief_silence']:.0f} s (exact all the same); schedule {path}, logs kept in "
                      f"{round_dir}", flush=True)
            elif not args.keep:
                shutil.rmtree(round_dir, ignore_errors=True)
    except KeyboardInterrupt:
        interrupted = True
        print("nemesis: interrupted", flush=True)
    elapsed = time.monotonic() - start
    summary = summarize(rounds)
    print(f"nemesis: {len(rounds)} rounds in {elapsed / 60:.1f} min, seed {args.seed}; failed rounds: "
          f"{[r['index'] for r in failures] or 'none'}", flush=True)
    print("nemesis: faults applied per kind (skipped: target down or restarting; scales: refused, and no-op: "
          "the job had that count already): " +
          ", ".join(f"{k} {v['applied']} ({v['skipped']}"
                    f"{'; refused ' + str(v['refused']) + ', no-op ' + str(v['noop']) if 'refused' in v else ''})"
                    for k, v in summary["faults"].items()), flush=True)
    ev = summary["events"]
    print(f"nemesis: single {ev['single']}, double faults {summary['double_faults']}, storm kills {ev['storm']}, "
          f"scales alone {ev['scale']}, "
          f"triggered {ev['triggered']} "
          f"(+{ev['setup']} setup kills); at the moment (fired/landed inside/armed): " +
          ", ".join(f"{t} {v['fired']}/{v['landed_mid']}/{v['armed']}" for t, v in summary["triggers"].items()),
          flush=True)
    pairs = possible_pairs(run_kinds(rounds))
    covered = [p for p in pairs if summary["overlaps"].get(p)]
    missing = [p for p in pairs if not summary["overlaps"].get(p)]
    print(f"nemesis: fault kinds active at the same time: {len(covered)} of the {len(pairs)} pairs that can be "
          f"(K: kill, P: pause, S: scale; a single chief or dispatcher cannot overlap itself, nor two scales)"
          f"{'; never: ' + ', '.join(missing) if missing else ''}:", flush=True)
    for line in render_matrix(summary["overlaps"], run_kinds(rounds)):
        print("  " + line, flush=True)
    stalled = [r for r in rounds if r["result"].get("stalled")]
    if stalled:
        print("nemesis: stalled rounds (exact, but the chief printed nothing for long): " +
              ", ".join(f"round {r['index']} {r['result']['longest_chief_silence']:.0f} s" for r in stalled), flush=True)
    retry = sum(len(r["result"]["retryable_exits"]) for r in rounds)
    if retry:
        print(f"nemesis: {retry} retryable chief exits, started again:", flush=True)
        for r in rounds:
            for e in r["result"]["retryable_exits"]:
                print(f"  round {r['index']} at {e['at']} s: exit {e['code']}: {e['reason']}", flush=True)
    if args.json:
        report = bench_json(opts, rounds, summary, started_at, load_start, os.getloadavg(), elapsed)
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    shutil.rmtree(args.bin, ignore_errors=True)
    if args.keep or failures or interrupted or stalled:
        print(f"nemesis: kept {work}", flush=True)
    elif args.out:  # the schedule stays, for --replay
        for r in rounds:
            shutil.rmtree(os.path.join(work, f"round_{r['index']}"), ignore_errors=True)
        print(f"nemesis: schedule {os.path.join(work, 'schedule.json')}", flush=True)
    else:  # nothing to keep: the seed draws the same schedule again
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures or not rounds or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
