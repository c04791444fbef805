#!/usr/bin/env python3
"""How long a silent failure takes to be failed over, per kind, against the heartbeat timeout.

    python3 scripts/silent_failover_bench.py [--build build] [--repeat 3] [--heartbeat_timeout 2s]
                                             [--kinds primary_isolated,chief_cut_from_primary,...]
                                             [--json PATH] [--keep]

A silent failure is a link that stops carrying packets (a host isolated, or packets dropped
between two sets of hosts), never a killed process: nothing answers, no reset arrives. For each
kind the main job runs on hosts in network namespaces (scripts/partition_scenarios.py: 2 PS with
2 copies of every shard group, 3 workers, the chief; 3 epochs), the fault begins 3 s into
training and lasts 8 s, and the bench reads:

  detect  from the fault to the chief's decision (its log line's own time): ps_failover for a
          primary the chief stops hearing, ps_workers_cut for one only the workers stop hearing;
  stall   the longest time training stood still around the fault (the chief's closures-completed
          counter, read from its /metrics every 0.1 s): the failover plus the moment the workers'
          calls move to the new primary.

Kinds (each with a live backup the chief and the workers reach):
  primary_isolated          ps 0's host isolated (group 0's primary)
  chief_cut_from_primary    chief and ps 0 cut from each other (the workers still reach ps 0)
  workers_cut_from_primary  every worker cut from ps 0 (the chief still reaches it: a gray failure)

It prints each figure in seconds and as a ratio to the heartbeat timeout (--heartbeat_timeout,
passed to asyncps_launch --ps_heartbeat_timeout), median and max over --repeat runs. Needs root
and nftables (exits 77 otherwise, as scripts/netns_hosts.py check says why). Each run takes about
25 s.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import netns_hosts as nh  # noqa: E402
import partition_scenarios as ps  # noqa: E402

FAULT_SECONDS = 8
KINDS = {
    "primary_isolated": (ps.Scenario("ps 0 (group 0's primary) isolated", FAULT_SECONDS,
                                     lambda c: c.isolate("ps0"), lambda c: c.rejoin("ps0")),
                         "ps_failover"),
    "chief_cut_from_primary": (ps.Scenario("chief and ps 0 cut from each other", FAULT_SECONDS,
                                           lambda c: c.partition(["chief"], ["ps0"]), lambda c: c.heal()),
                               "ps_failover"),
    "workers_cut_from_primary": (ps.Scenario("every worker cut from ps 0", FAULT_SECONDS,
                                             lambda c: c.partition(ps.WORKERS, ["ps0"]), lambda c: c.heal()),
                                 "ps_workers_cut"),
}


def seconds(duration):
    """'2s', '500ms', '1.5s' -> seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", duration)
    if not m:
        raise argparse.ArgumentTypeError(f"a duration like 2s or 500ms, not '{duration}'")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def stall_around(result):
    """The longest gap between increases of the chief's closure counter that overlaps the fault,
    and when (s after the fault) training moved again after it."""
    fault = result["fault_at"]
    if fault is None:
        return None, None
    end = fault + FAULT_SECONDS
    worst, resumed, last_change, last_value = None, None, None, None
    for t, n in result["samples"]:
        if last_value is None or n != last_value:
            if last_change is not None and last_change <= end and t >= fault:
                if worst is None or t - last_change > worst:
                    worst, resumed = t - last_change, t - fault
            last_change, last_value = t, n
    return worst, resumed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--heartbeat_timeout", default="2s")
    parser.add_argument("--json", help="write every run's figures here")
    parser.add_argument("--keep", action="store_true", help="keep the jobs' logs (their directory is printed)")
    args = parser.parse_args()
    hb = seconds(args.heartbeat_timeout)
    kinds = args.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            parser.error(f"unknown kind '{k}' (known: {', '.join(KINDS)})")
    reason = nh.unsupported_reason()
    if reason:
        print(f"SKIP: {reason}")
        return 77
    for stale in nh.sweep():
        print(f"[bench] deleted {stale} (left by a run that crashed)")
    # What partition_scenarios.run_scenario reads of its own command line.
    job = argparse.Namespace(bin=os.path.join(os.path.abspath(args.build), "bin"), epochs=3, at=3.0, max_restarts=3,
                             log_level="info", heartbeat_timeout=args.heartbeat_timeout, timeout=120, job_args=[])
    workdir = tempfile.mkdtemp(prefix="silent_failover_bench_")
    runs = []
    try:
        for kind in kinds:
            scenario, decision = KINDS[kind]
            ps.SCENARIOS[kind] = scenario
            for i in range(args.repeat):
                r = ps.run_scenario(kind, job, workdir)
                walls = [w for w in r["chief_event_walls"].get(decision, []) if r["fault_wall"] and w >= r["fault_wall"]]
                detect = walls[0] - r["fault_wall"] if walls else None
                stall, resumed = stall_around(r)
                ok = r["exit_code"] == 0 and r["exact"]
                runs.append({"kind": kind, "run": i, "detect_s": detect, "stall_s": stall, "resumed_after_s": resumed,
                             "exit_code": r["exit_code"], "exact": r["exact"], "log": r["log"]})
                fmt = lambda v: "-" if v is None else f"{v:.2f} s ({v / hb:.2f}x)"
                print(f"[bench] {kind} #{i + 1}: {decision} after {fmt(detect)}, stall {fmt(stall)}, "
                      f"exit {r['exit_code']}, {'exact' if r['exact'] else 'NOT EXACT'}", flush=True)
                if not ok:
                    print(f"[bench]   see {r['log']}")
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"heartbeat_timeout_s": hb, "runs": runs}, f, indent=2)
        if args.keep:
            print(f"[bench] logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    def cell(values):
        values = [v for v in values if v is not None]
        if not values:
            return "-", "-"
        med, worst = statistics.median(values), max(values)
        return f"{med:.2f} / {worst:.2f}", f"{med / hb:.2f} / {worst / hb:.2f}"

    print(f"\nheartbeat timeout {hb:g} s; median / max over {args.repeat} run(s); "
          f"{time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f}")
    print("| silent failure | decision | detect (s) | detect / timeout | stall (s) | stall / timeout | exact |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        rs = [r for r in runs if r["kind"] == kind]
        d, dr = cell([r["detect_s"] for r in rs])
        st, sr = cell([r["stall_s"] for r in rs])
        exact = sum(1 for r in rs if r["exact"] and r["exit_code"] == 0)
        print(f"| {KINDS[kind][0].what} | {KINDS[kind][1]} | {d} | {dr} | {st} | {sr} | {exact}/{len(rs)} |")
    return 0 if all(r["exact"] and r["exit_code"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
