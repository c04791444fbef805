#!/usr/bin/env python3
"""Soak: the main job, run again and again for a chosen time while its processes are SIGKILLed.

    python3 scripts/soak.py --minutes 30 [--build build] [--epochs 10] [--kill_every 6]
                            [--seed N] [--json PATH] [--keep]

Each round starts the Fashion-MNIST job with `asyncps_launch --max_restarts` (so a killed worker
or parameter server is started again by the launcher), dynamic sharding, automatic PS recovery,
checkpoints, and `--count_examples` (a counter per training example on the parameter servers,
checked by the chief at the end: every example applied exactly once per epoch). While a round
runs, a random task is SIGKILLed about every --kill_every seconds: a worker, a parameter server,
or the chief. A killed chief ends the launcher (the chief's exit is the job's); the soak then
starts the same command again, which resumes from the newest checkpoint. A round passes when the
job ends with exit 0, its chief printed the exactly-once line, and its test accuracy reached
--target. The soak stops starting rounds after --minutes and fails if any round failed.

Not part of CI (it runs for minutes). Its summary is printed and, with --json, written in the
benchmarks' machine-readable form for scripts/bench_report.py.
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

STARTED = re.compile(r"^\[launcher\] (?:started (\S+) pid (\d+)|restarted (\S+) \(restart \d+/\d+\): pid (\d+))")
ACCURACY = re.compile(r"test accuracy (\d+\.\d+)")
EXACT = re.compile(r"exactly once: (\d+) examples x (\d+) epochs")
REDONE = re.compile(r"(\d+) step\(s\) (?:undone|redone)")


class Round:
    """One launcher run: its output, the current pid of each task, the kills made."""

    def __init__(self, command, log):
        self.pids = {}  # task label -> pid of its current process
        self.lock = threading.Lock()
        self.lines = []
        self.log = log
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            self.log.flush()
            m = STARTED.match(line)
            with self.lock:
                self.lines.append(line.rstrip("\n"))
                if m:
                    label = m.group(1) or m.group(3)
                    self.pids[label] = int(m.group(2) or m.group(4))

    def forget(self, label):
        with self.lock:
            self.pids.pop(label, None)

    def tasks(self):
        with self.lock:
            return dict(self.pids)

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
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def run_job(args, rng, job_dir, log, kills, deadline):
    """Runs one job to its end, restarting the launcher after each chief kill. Returns its text."""
    ckpt = os.path.join(job_dir, "checkpoints")
    command = [os.path.join(args.bin, "asyncps_launch"), "--ps", str(args.ps),
               "--workers", str(args.workers), "--max_restarts", "1000", "--",
               os.path.join(args.bin, "fashion_mnist"), "--epochs", str(args.epochs),
               "--batch_size", str(args.batch_size), "--sharding", "dynamic", "--ps_recovery", "auto",
               "--checkpoint_dir", ckpt, "--checkpoint_every_steps", str(args.checkpoint_every),
               "--count_examples", "--seed", str(rng.randrange(1 << 30))]
    texts = []
    launches = 0
    while True:
        launches += 1
        if launches > 50:
            raise RuntimeError("the chief was restarted 50 times in one job")
        job = Round(command, log)
        try:
            chief_killed = False
            while job.proc.poll() is None:
                wait = rng.expovariate(1.0 / args.kill_every)
                end = time.monotonic() + wait
                while job.proc.poll() is None and time.monotonic() < end:
                    time.sleep(0.1)  # pacing of the kill schedule, not synchronisation
                if job.proc.poll() is not None:
                    break
                if time.monotonic() > deadline + args.grace_minutes * 60:
                    log.write("[soak] the round outlived --grace_minutes: stopping it\n")
                    job.stop()
                    break
                tasks = job.tasks()
                if not tasks:
                    continue
                role = rng.choices(["worker", "ps", "chief"], weights=args.weights)[0]
                choices = [label for label in tasks if label.split(":")[0] == role]
                if not choices:
                    continue
                label = rng.choice(choices)
                try:
                    os.kill(tasks[label], signal.SIGKILL)
                except ProcessLookupError:
                    continue  # it ended by itself meanwhile
                kills[role] += 1
                job.forget(label)  # until its "restarted" line: never a pid that may be reused
                log.write(f"[soak] SIGKILL {label} pid {tasks[label]}\n")
                if role == "chief":
                    chief_killed = True
                    break
            code = job.proc.wait()
            texts.append(job.text())
        finally:
            job.stop()
        if chief_killed:
            continue  # the same command again: it resumes from the newest checkpoint
        return code, "\n".join(texts), launches


def bench_json(args, rounds, started_at, load_start, load_end, seconds):
    """The soak's figures in the benchmarks' JSON form (bench/report.h; scripts/bench_report.py)."""
    kills = {role: sum(r["kills"][role] for r in rounds) for role in ("worker", "ps", "chief")}
    passed = sum(1 for r in rounds if r["ok"])
    exact = sum(1 for r in rounds if r["exact"])
    accuracies = [r["accuracy"] for r in rounds if r["accuracy"] is not None]
    target = args["target"]
    figures = [
        {"name": "rounds that ended exact and on target", "value": passed, "unit": "rounds",
         "reference": {"name": "rounds run", "value": len(rounds)},
         "ratio": passed / len(rounds) if rounds else None,
         "aim": {"condition": "every round", "met": bool(rounds) and passed == len(rounds)}},
        {"name": "rounds whose every example was applied exactly once per epoch", "value": exact,
         "unit": "rounds", "reference": {"name": "rounds run", "value": len(rounds)},
         "ratio": exact / len(rounds) if rounds else None},
        {"name": "lowest final test accuracy", "value": min(accuracies) if accuracies else None,
         "unit": "", "reference": {"name": "target", "value": target},
         "ratio": min(accuracies) / target if accuracies else None},
        {"name": "SIGKILLs: workers", "value": kills["worker"], "unit": "kills"},
        {"name": "SIGKILLs: parameter servers", "value": kills["ps"], "unit": "kills"},
        {"name": "SIGKILLs: chief (the job started again, resumed from its checkpoint)",
         "value": kills["chief"], "unit": "kills"},
        {"name": "steps redone after PS recoveries", "value": sum(r["steps_redone"] for r in rounds),
         "unit": "steps"},
        {"name": "mean round time", "value": round(sum(r["seconds"] for r in rounds) / len(rounds), 1)
         if rounds else None, "unit": "s",
         "note": f"{args['epochs']} epochs of Fashion-MNIST each, 2 PS + 2 workers + chief"},
    ]
    cli = [f"--{k}={v}" for k, v in args.items() if k in ("minutes", "epochs", "batch_size", "kill_every",
                                                            "target", "seed", "checkpoint_every")]
    return {"bench": "soak", "args": cli, "complete": True, "started_at": started_at,
            "wall_seconds": round(seconds, 1), "load_average": {"start": list(load_start), "end": list(load_end)},
            "figures": figures,
            "aims": [{"name": "exactly once and on target", "condition": "every round",
                      "state": "met" if rounds and passed == len(rounds) else ("missed" if rounds else "not run"),
                      "cases": len(rounds), "missed": len(rounds) - passed}],
            "rounds": rounds}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--build", default="build")
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=120, help="must divide 60000")
    parser.add_argument("--checkpoint_every", type=int, default=150)
    parser.add_argument("--kill_every", type=float, default=6.0, help="mean seconds between kills")
    parser.add_argument("--weights", type=float, nargs=3, default=[5, 3, 1], metavar=("WORKER", "PS", "CHIEF"))
    parser.add_argument("--target", type=float, default=0.88)
    parser.add_argument("--grace_minutes", type=float, default=10, help="a round still running this long after --minutes is a failure")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--json", help="write the summary as benchmark JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, checkpoints)")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_start = os.getloadavg()
    work = tempfile.mkdtemp(prefix="asyncps_soak_")
    log_path = os.path.join(work, "soak.log")
    # Copies of the binaries: a rebuild while the soak runs must not swap them under a round.
    args.bin = os.path.join(work, "bin")
    os.makedirs(args.bin)
    for name in ("asyncps_launch", "fashion_mnist"):
        shutil.copy2(os.path.join(args.build, "bin", name), args.bin)
    start = time.monotonic()
    deadline = start + args.minutes * 60
    kills = {"worker": 0, "ps": 0, "chief": 0}
    rounds = []
    failures = []
    print(f"soak: seed {args.seed}, {args.minutes:g} min, log {log_path}", flush=True)
    with open(log_path, "w") as log:
        while time.monotonic() < deadline:
            index = len(rounds) + 1
            job_dir = os.path.join(work, f"round_{index}")
            os.makedirs(job_dir)
            t0 = time.monotonic()
            before = dict(kills)
            code, text, launches = run_job(args, rng, job_dir, log, kills, deadline)
            seconds = time.monotonic() - t0
            accuracy = [float(a) for a in ACCURACY.findall(text)]
            exact = EXACT.search(text)
            redone = sum(int(n) for n in REDONE.findall(text))
            ok = code == 0 and exact is not None and accuracy and accuracy[-1] >= args.target
            made = {role: kills[role] - before[role] for role in kills}
            rounds.append({"round": index, "exit": code, "seconds": round(seconds, 1),
                           "accuracy": accuracy[-1] if accuracy else None, "exact": exact is not None,
                           "kills": made, "launches": launches, "steps_redone": redone, "ok": bool(ok)})
            print(f"soak: round {index}: exit {code}, {seconds:.0f} s, accuracy "
                  f"{accuracy[-1] if accuracy else 'none'}, exactly-once {'yes' if exact else 'NO'}, "
                  f"kills worker {made['worker']} ps {made['ps']} chief {made['chief']}, "
                  f"steps redone {redone} -> {'ok' if ok else 'FAILED'}", flush=True)
            if not ok:
                failures.append(index)
                shutil.copytree(job_dir, job_dir + "_failed", dirs_exist_ok=True)
    elapsed = (time.monotonic() - start) / 60
    summary = (f"soak: {len(rounds)} rounds in {elapsed:.1f} min, kills: worker {kills['worker']}, "
               f"ps {kills['ps']}, chief {kills['chief']}; failed rounds: {failures or 'none'}")
    print(summary, flush=True)
    if args.json:
        report = bench_json(vars(args), rounds, started_at, load_start, os.getloadavg(), elapsed * 60)
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    if args.keep or failures:
        print(f"soak: kept {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures or not rounds else 0


if __name__ == "__main__":
    sys.exit(main())
