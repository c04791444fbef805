#!/usr/bin/env python3
"""The main job and ps_bench on links of a given speed, against the same run uncapped.

    python3 bench/link_bench.py [--build build] [--rates none,10gbit,1gbit] [--repeat 2]
                                [--epochs 3] [--only job|ps] [--json PATH]
                                [-- FASHION_MNIST_ARGS...]

On loopback every byte is a memcpy and a job is bound by CPU; a parameter server is a network
machine. This bench puts the job where a network decides:

  job  asyncps_launch --hosts netns --netns_rate R --ps 2 --workers 2 -- fashion_mnist ...: each
       task on a host of its own (a network namespace on one bridge), every host's link capped at
       R in each direction with tc tbf (burst 256 kB). Rates are run in turn, --repeat rounds,
       so load on the (shared) machine lands on each alike. It reads the chief's examples/s and
       test accuracy, and the bytes each worker's port carried (the bridge's counters, read every
       0.2 s while the job runs) divided by the steps trained: the bytes on the wire per step.
  ps   ps_bench --quick --only=dense inside a namespace of its own whose loopback is capped at R:
       the PS processes, the client and the raw TCP reference all cross the one capped link, so
       each figure's ratio to the raw transfer still says what the PS path costs over it. (On
       loopback both directions share the one cap; a pull's request and a push's answer are
       small, so the capped direction is the payload's.)

Each figure is printed with its ratio to the uncapped run of the same bench in the same
invocation (the figure "none" names). Needs root and iproute2 (exits 77 otherwise, saying why).
Exits 1 when a run fails.
"""

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import netns_hosts as nh  # noqa: E402

TRAINED = re.compile(r"\[chief\] trained (\d+) steps \((\d+) examples\) in ([\d.]+) s, ([\d.]+) examples/s")
ACCURACY = re.compile(r"\[chief\] test accuracy (\d+\.\d+)")
PS_FIGURE = re.compile(r"^ps=\d dense \S+ \d+MiB$")


def port_bytes(switch, aliases):
    """{alias: rx+tx bytes} of the bridge ports whose alias is in `aliases`."""
    out = subprocess.run(["ip", "-n", switch, "-s", "-j", "link", "show"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    result = {}
    for link in json.loads(out.stdout or "[]"):
        alias = link.get("ifalias")
        if alias in aliases:
            stats = link.get("stats64", {})
            result[alias] = stats.get("rx", {}).get("bytes", 0) + stats.get("tx", {}).get("bytes", 0)
    return result


def run_job(args, rate, round_index):
    prefix = f"apsl-{os.getpid()}b{round_index}-"
    argv = [os.path.join(args.build, "bin", "asyncps_launch"), "--hosts", "netns", "--netns_prefix", prefix,
            "--ps", "2", "--workers", "2"]
    if rate != "none":
        argv += ["--netns_rate", rate]
    argv += ["--", os.path.join(args.build, "bin", "fashion_mnist"), "--epochs", str(args.epochs), *args.program_args]
    workers = {"worker0", "worker1"}
    last = {}
    done = threading.Event()

    def poll():  # the bridge's counters vanish with the namespaces: keep the last reading
        while not done.wait(0.2):
            reading = port_bytes(prefix + "sw", workers)
            if reading:
                last.update(reading)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    done.set()
    poller.join()
    out = proc.stdout + proc.stderr
    trained, accuracy = TRAINED.search(out), ACCURACY.search(out)
    if proc.returncode != 0 or not trained or not accuracy:
        raise RuntimeError(f"job at {rate} failed (exit {proc.returncode}):\n{out[-3000:]}")
    steps = int(trained.group(1))
    if not last or not all(last.get(w) for w in workers):
        raise RuntimeError(f"job at {rate}: no bytes read from the workers' bridge ports ({last})")
    return {"examples_per_s": float(trained.group(4)), "accuracy": float(accuracy.group(1)),
            "bytes_per_step": sum(last.values()) / steps}


def run_ps(args, rate, round_index):
    netns = f"aps-{os.getpid()}-lb{round_index}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        if rate != "none":
            subprocess.run(["tc", "-n", netns, "qdisc", "replace", "dev", "lo", "root", "tbf", "rate", rate,
                            "burst", "256kb", "latency", "50ms"], check=True)
        report = os.path.join(args.work, f"ps_bench_{round_index}.json")
        proc = subprocess.run(["ip", "netns", "exec", netns, os.path.join(args.build, "bin", "ps_bench"), "--quick",
                               "--only=dense", f"--json={report}"], capture_output=True, text=True,
                              timeout=args.timeout)
    finally:
        nh.cleanup(netns)
    if proc.returncode != 0:
        raise RuntimeError(f"ps_bench at {rate} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    figures = {}
    with open(report) as f:
        for fig in json.load(f)["figures"]:
            if PS_FIGURE.match(fig["name"]):  # the PS's figure and its raw TCP over the same link
                figures[fig["name"]] = (fig["value"], fig["reference"]["value"])
    if not figures:
        raise RuntimeError(f"ps_bench at {rate} printed no dense figure:\n{proc.stdout[-3000:]}")
    return figures


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rates", default="none,10gbit,1gbit", help="comma-separated; none: uncapped")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--only", choices=["job", "ps"])
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", help="write the figures here (bench/report.h's format)")
    parser.add_argument("--work", default=None, help="where ps_bench's JSON goes (default: a temporary directory)")
    parser.add_argument("program_args", nargs="*", help="after --: more fashion_mnist flags")
    args = parser.parse_args()
    reason = nh.unsupported_reason(need_nft=False)
    if reason:
        print(f"SKIP: {reason}")
        return 77
    rates = args.rates.split(",")
    if "none" not in rates:
        rates = ["none"] + rates  # the reference each ratio is to
    for r in rates:
        if r != "none" and not re.fullmatch(r"[1-9]\d{0,5}(bit|kbit|mbit|gbit)", r):
            parser.error(f"--rates: '{r}' is not a tc rate such as 1gbit or 100mbit")
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="link_bench_")
        args.work = tmp.name
    started = time.time()
    load_start = os.getloadavg()
    jobs = {r: [] for r in rates}
    pss = {r: [] for r in rates}
    try:
        for k in range(args.repeat):
            for i, rate in enumerate(rates):
                if args.only in (None, "job"):
                    jobs[rate].append(run_job(args, rate, k * len(rates) + i))
                    j = jobs[rate][-1]
                    print(f"round {k + 1} job {rate:>7}: {j['examples_per_s']:9.0f} examples/s  accuracy "
                          f"{j['accuracy']:.4f}  {(j['bytes_per_step'] or 0) / 1e6:6.2f} MB/step", flush=True)
                if args.only in (None, "ps"):
                    pss[rate].append(run_ps(args, rate, k * len(rates) + i))
                    print(f"round {k + 1} ps   {rate:>7}: " + ", ".join(f"{n} {v[0]:.2f} GB/s"
                                                                       for n, v in pss[rate][-1].items()), flush=True)
    except (RuntimeError, subprocess.SubprocessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    figures = []
    print(f"\nload average {load_start[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end; medians of {args.repeat}")
    if jobs["none"]:
        ref = median(j["examples_per_s"] for j in jobs["none"])
        print(f"{'main job':<28} {'examples/s':>11} {'vs uncapped':>12} {'accuracy':>9} {'MB/step':>8}")
        for rate in rates:
            eps = median(j["examples_per_s"] for j in jobs[rate])
            acc = median(j["accuracy"] for j in jobs[rate])
            bps = median(j["bytes_per_step"] for j in jobs[rate])
            print(f"{'links ' + rate:<28} {eps:>11.0f} {eps / ref:>12.2f} {acc:>9.4f} "
                  f"{(bps or 0) / 1e6:>8.2f}")
            figures.append({"name": f"main job, links {rate}", "value": eps, "unit": "examples/s",
                            "reference": {"name": "main job uncapped", "value": ref}, "ratio": eps / ref,
                            "note": f"test accuracy {acc:.4f}, {(bps or 0) / 1e6:.2f} MB on the wire per step"})
    if pss["none"]:
        print(f"\n{'ps_bench case':<28} {'links':>7} {'GB/s':>6} {'raw TCP':>8} {'vs raw':>7} {'vs uncapped':>12}")
        for n in pss["none"][0]:
            ref = median(f[n][0] for f in pss["none"] if n in f)
            for rate in rates:
                v = median(f[n][0] for f in pss[rate] if n in f)
                raw = median(f[n][1] for f in pss[rate] if n in f)
                print(f"{n:<28} {rate:>7} {v:>6.2f} {raw:>8.2f} {v / raw:>7.2f} {v / ref:>12.2f}")
                figures.append({"name": f"{n}, links {rate}", "value": v, "unit": "GB/s",
                                "reference": {"name": f"{n} uncapped", "value": ref}, "ratio": v / ref,
                                "note": f"raw TCP over the same link {raw:.2f} GB/s (ratio {v / raw:.2f})"})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": 1, "bench": "link_bench", "args": sys.argv[1:], "complete": True,
                       "started_at": datetime.datetime.fromtimestamp(started, datetime.timezone.utc)
                       .strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "wall_seconds": round(time.time() - started, 2),
                       "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
                       "figures": figures}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
