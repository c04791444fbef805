#!/usr/bin/env python3
"""Writes docs/benchmarks.md from the benchmarks' machine-readable output (--json=PATH).

Every bench in bench/ takes --json=PATH and writes its figures there (bench/report.h has the
format). This script runs benches and renders their JSON as markdown, with the provenance a
reader needs to weigh the figures: date, machine (CPU model, cores, memory), load average
before and after, and the commit.

  scripts/bench_report.py run [--bin-dir build/bin] [--json-dir DIR] [--out docs/benchmarks.md]
                              [--full] [BENCH ...]
      Runs each BENCH (default: every known bench found in --bin-dir) with --quick (unless
      --full) and --json, one at a time, and renders the results. A BENCH may carry its own
      arguments, quoted: 'ps_bench --quick --only=dense'. --json-dir keeps the JSON files
      (default: a temporary directory, removed afterwards).
  scripts/bench_report.py render [--out FILE] [--title TEXT] JSON ...
      Renders JSON files already written (by `run --json-dir` or by a bench's --json); the
      header comes from the "machine" block `run` adds to each file, or, without one, from the
      machine rendering it (and says so).

Standard library only. Exits 1 when a bench fails or a file cannot be read; a bench that fails
part way still has its figures rendered, marked incomplete.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile

# The benches in bench/, in the order the document lists them.
KNOWN_BENCHES = [
    "rpc_bench",
    "ps_bench",
    "dispatch_bench",
    "init_bench",
    "data_bench",
    "ckpt_bench",
    "train_bench",
    "scaling_bench",
]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----- the machine --------------------------------------------------------------------------------


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def load_average():
    """The 1-, 5- and 15-minute load averages from /proc/loadavg, or None."""
    fields = _read("/proc/loadavg").split()
    try:
        return [float(x) for x in fields[:3]] if len(fields) >= 3 else None
    except ValueError:
        return None


def machine_info():
    """CPU model, cores, memory and kernel of this machine, from /proc."""
    cpu_model = ""
    cores = 0
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not cpu_model:
            cpu_model = value.strip()
        elif key == "processor":
            cores += 1
    mem_kib = 0
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            try:
                mem_kib = int(line.split()[1])
            except (IndexError, ValueError):
                pass
    return {
        "cpu_model": cpu_model or platform.processor() or "unknown",
        "cores": cores or os.cpu_count() or 0,
        "memory_kib": mem_kib,
        "kernel": platform.release(),
    }


def commit_info():
    """The checked-out commit, and whether tracked files differ from it."""
    def git(*args):
        try:
            return subprocess.run(["git", "-C", REPO_ROOT, *args], capture_output=True, text=True,
                                  check=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    head = git("rev-parse", "HEAD")
    if head is None:
        return {"commit": "unknown", "dirty": False}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head, "dirty": bool(status)}


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----- markdown ----------------------------------------------------------------------------------


def fmt(x):
    """A number with about three significant digits; an em dash for none."""
    if x is None:
        return "—"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    a = abs(x)
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a == 0:
        return "0"
    return f"{x:.3g}"


def fmt_ratio(x):
    """A ratio with two decimals (two significant digits below 0.1); empty for none."""
    if x is None:
        return ""
    return f"{x:.2f}" if abs(x) >= 0.1 else f"{x:.2g}"


def cell(text):
    """Text safe inside a markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def fmt_load(loads):
    return " ".join(f"{x:.2f}" for x in loads) if loads else "unknown"


def with_unit(value, unit):
    return f"{fmt(value)} {unit}".rstrip() if value is not None else "—"


AIM_WORDS = {"met": "met", "missed": "**missed**", "not run": "not run"}


def render_bench(report):
    """One bench's section: a line of provenance, its table and its aims."""
    name = report.get("bench", "?")
    args = report.get("args", [])
    lines = [f"## {cell(name)}", ""]
    loads = report.get("load_average", {})
    status = "complete" if report.get("complete", False) else "**INCOMPLETE: the bench failed part way**"
    lines.append(
        f"`{' '.join([name] + [shlex.quote(a) for a in args])}` · started {report.get('started_at', '?')} · "
        f"{fmt(report.get('wall_seconds'))} s · load average {fmt_load(loads.get('start'))} → "
        f"{fmt_load(loads.get('end'))} · {status}")
    lines.append("")
    figures = report.get("figures", [])
    if not figures:
        lines += ["No figures (the bench measured nothing; see its output).", ""]
    else:
        lines.append("| Figure | Value | Reference | Ratio | Aim |")
        lines.append("|---|---:|---|---:|---|")
        for f in figures:
            unit = f.get("unit", "")
            ref = f.get("reference")
            reference = f"{cell(ref['name'])}: {with_unit(ref.get('value'), cell(unit))}" if ref else ""
            aim = f.get("aim")
            aim_text = ""
            if aim:
                aim_text = f"{cell(aim['condition'])} {'met' if aim.get('met') else '**missed**'}"
            figure = cell(f.get("name", "?"))
            if f.get("note"):
                figure += f" ({cell(f['note'])})"
            lines.append(f"| {figure} | {with_unit(f.get('value'), cell(unit))} | {reference} | "
                         f"{fmt_ratio(f.get('ratio'))} | {aim_text} |")
        lines.append("")
    aims = report.get("aims", [])
    if aims:
        parts = []
        for a in aims:
            state = a.get("state", "not run")
            text = f"{cell(a['name'])} {cell(a['condition'])}: {AIM_WORDS.get(state, cell(state))}"
            if a.get("cases"):
                text += f" ({a['cases']} case{'s' if a['cases'] != 1 else ''}"
                text += f", {a['missed']} missed)" if a.get("missed") else ")"
            parts.append(text)
        lines += ["Aims: " + "; ".join(parts) + ".", ""]
    return lines


def render(reports, title="Benchmarks", regenerate=None):
    """The whole document for `reports` (parsed bench JSON objects, in order)."""
    machine = next((r["machine"] for r in reports if "machine" in r), None)
    rendered_here = machine is None
    if rendered_here:
        machine = {**machine_info(), **commit_info(), "date": utc_now(), "load_average": {"start": load_average()}}
    mem = machine.get("memory_kib", 0)
    loads = machine.get("load_average", {})
    lines = [f"# {title}", ""]
    lines.append("Generated by `scripts/bench_report.py` from the benchmarks' `--json` output "
                 "(bench/report.h); do not edit by hand.")
    if regenerate:
        lines.append(f"Regenerate with `{regenerate}`.")
    lines += ["", "| | |", "|---|---|"]
    lines.append(f"| Date | {cell(machine.get('date', '?'))} |")
    lines.append(f"| Machine | {cell(machine.get('cpu_model', '?'))}, {machine.get('cores', '?')} cores, "
                 f"{mem / 1048576:.1f} GiB memory, Linux {cell(machine.get('kernel', '?'))} |")
    load_text = f"{fmt_load(loads.get('start'))} before"
    if loads.get("end"):
        load_text += f", {fmt_load(loads.get('end'))} after"
    lines.append(f"| Load average (1, 5, 15 min) | {load_text} |")
    commit = machine.get("commit", "unknown")
    lines.append(f"| Commit | `{cell(commit)}`{' with uncommitted changes' if machine.get('dirty') else ''} |")
    if rendered_here:
        lines.append("| Note | the JSON carried no machine block: date, machine and load are the renderer's |")
    if machine.get("runs"):
        lines.append(f"| Runs | {cell(machine['runs'])} |")
    lines.append("")
    lines.append("Each figure is measured beside its reference in the same run; the ratio is value / "
                 "reference unless the figure's note says otherwise. An aim none of whose cases ran is "
                 "\"not run\", never met. Loaded or shared machines slow figures and references alike "
                 "only roughly: read the load average before comparing runs.")
    lines.append("")
    for r in reports:
        lines += render_bench(r)
    return "\n".join(lines).rstrip("\n") + "\n"


# ----- commands ----------------------------------------------------------------------------------


def read_reports(paths):
    reports = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            reports.append(json.load(f))
    return reports


def write(path, text):
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def cmd_render(args):
    try:
        reports = read_reports(args.json)
    except (OSError, ValueError) as e:
        print(f"bench_report: {e}", file=sys.stderr)
        return 1
    write(args.out, render(reports, args.title))
    print(f"bench_report: wrote {args.out} ({len(reports)} bench(es))")
    return 0


def cmd_run(args):
    specs = args.bench or [b for b in KNOWN_BENCHES if os.path.exists(os.path.join(args.bin_dir, b))]
    if not specs:
        print(f"bench_report: no benches found in {args.bin_dir}", file=sys.stderr)
        return 1
    json_dir = args.json_dir or tempfile.mkdtemp(prefix="bench_report_")
    os.makedirs(json_dir, exist_ok=True)
    machine = {**machine_info(), **commit_info(), "date": utc_now(), "load_average": {"start": load_average()},
               "runs": "full runs" if args.full else "quick (smoke) runs: short, noisier than full runs"}
    failed = []
    paths = []
    try:
        for spec in specs:
            words = shlex.split(spec)
            name, bench_args = words[0], words[1:]
            if not bench_args and not args.full:
                bench_args = ["--quick"]
            binary = os.path.join(args.bin_dir, name)
            path = os.path.join(json_dir, f"{name}.json")
            if os.path.exists(path):
                os.remove(path)
            print(f"bench_report: {' '.join([binary] + bench_args)}", flush=True)
            rc = subprocess.run([binary, *bench_args, f"--json={path}"]).returncode
            if rc != 0:
                failed.append(f"{name} (exit {rc})")
            if not os.path.exists(path):
                failed.append(f"{name} (no JSON written)")
                continue
            paths.append(path)
        machine["load_average"]["end"] = load_average()
        reports = read_reports(paths)
        for r, p in zip(reports, paths):
            r["machine"] = machine
            with open(p, "w", encoding="utf-8") as f:
                json.dump(r, f, indent=2)
                f.write("\n")
        regenerate = " ".join(["python3 scripts/bench_report.py run"] + (["--full"] if args.full else []) +
                              [shlex.quote(s) for s in args.bench])
        write(args.out, render(reports, args.title, regenerate))
        print(f"bench_report: wrote {args.out} ({len(reports)} bench(es))")
    finally:
        if not args.json_dir:
            shutil.rmtree(json_dir, ignore_errors=True)
    if failed:
        print("bench_report: FAILED: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run benches with --json and render them")
    run.add_argument("--bin-dir", default=os.path.join(REPO_ROOT, "build", "bin"))
    run.add_argument("--json-dir", default="", help="keep the JSON files here")
    run.add_argument("--out", default=os.path.join(REPO_ROOT, "docs", "benchmarks.md"))
    run.add_argument("--full", action="store_true", help="full runs instead of --quick")
    run.add_argument("--title", default="Benchmarks")
    run.add_argument("bench", nargs="*", help="bench name, optionally with its arguments, quoted")
    rend = sub.add_parser("render", help="render JSON files already written")
    rend.add_argument("--out", default=os.path.join(REPO_ROOT, "docs", "benchmarks.md"))
    rend.add_argument("--title", default="Benchmarks")
    rend.add_argument("json", nargs="+")
    args = parser.parse_args(argv)
    return cmd_run(args) if args.command == "run" else cmd_render(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
