#!/usr/bin/env python3
"""Tests scripts/bench_report.py (ctest: bench_report_script).

  * render: a fixture JSON (scripts/bench_report_fixture.json) to markdown, checked line by line;
  * run: a real bench ($ASYNCPS_INIT_BENCH, init_bench --quick) with --json, rendered with this
    machine's header, so the C++ writer (bench/report.cc) and this reader cannot drift apart.
Leaves nothing behind: every file goes to a temporary directory removed at the end.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "bench_report.py")
FIXTURE = os.path.join(HERE, "bench_report_fixture.json")


def run_script(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=100)


class RenderFixture(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="bench_report_test_")
        self.out = os.path.join(self.tmp.name, "benchmarks.md")
        result = run_script("render", "--out", self.out, FIXTURE)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.out, encoding="utf-8") as f:
            self.md = f.read()
        self.lines = self.md.splitlines()

    def tearDown(self):
        self.tmp.cleanup()

    def test_header_has_provenance(self):
        self.assertEqual(self.lines[0], "# Benchmarks")
        self.assertIn("| Date | 2026-11-25T13:19:58Z |", self.lines)
        self.assertIn("| Machine | Fixture CPU @ 2.00GHz, 2 cores, 7.8 GiB memory, Linux 6.1.0-fixture |",
                      self.lines)
        self.assertIn("| Load average (1, 5, 15 min) | 2.31 1.55 0.72 before, 3.05 1.90 0.80 after |", self.lines)
        self.assertIn("| Commit | `0123456789abcdef0123456789abcdef01234567` |", self.lines)
        self.assertIn("| Runs | quick (smoke) runs: short, noisier than full runs |", self.lines)
        self.assertNotIn("renderer's", self.md)

    def test_table(self):
        header = self.lines.index("| Figure | Value | Reference | Ratio | Aim |")
        self.assertEqual(self.lines[header - 2].split(" · ")[0], "`ps_bench --quick '--only=dense pull'`")
        self.assertEqual(self.lines[header + 1], "|---|---:|---|---:|---|")
        rows = self.lines[header + 2:header + 6]
        self.assertEqual(rows, [
            "| ps=1 dense pull 4MiB | 1.92 GB/s | raw TCP x1 conn: 2.40 GB/s | 0.80 | >= 0.90 **missed** |",
            "| ps=2 dense pull 4MiB | 2.50 GB/s | raw TCP x2 conn: 2.50 GB/s | 1.00 | >= 0.90 met |",
            "| ps=1 call floor (empty RPC) | 41.7 us | raw TCP 1 byte + ack: 30.2 us | 1.38 |  |",
            "| a\\|b small push 64 in flight (adaptive dispatch) | 123,457 req/s |  |  |  |",
        ])
        self.assertEqual(self.lines[header + 6], "")

    def test_aims_line_says_not_run(self):
        aims = [line for line in self.lines if line.startswith("Aims: ")]
        self.assertEqual(aims, ["Aims: dense pull >= 0.90: **missed** (2 cases, 1 missed); "
                                "dedup on/off <= 1.05: not run; call floor <= 2.00: met (1 case)."])

    def test_incomplete_run_is_marked(self):
        with open(FIXTURE, encoding="utf-8") as f:
            report = json.load(f)
        report["complete"] = False
        path = os.path.join(self.tmp.name, "incomplete.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f)
        result = run_script("render", "--out", self.out, path)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(self.out, encoding="utf-8") as f:
            self.assertIn("**INCOMPLETE: the bench failed part way**", f.read())

    def test_unreadable_json_fails(self):
        path = os.path.join(self.tmp.name, "bad.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write("{not json")
        result = run_script("render", "--out", self.out, path)
        self.assertEqual(result.returncode, 1)
        self.assertIn("bench_report:", result.stderr)


class RunRealBench(unittest.TestCase):
    def test_init_bench(self):
        binary = os.environ.get("ASYNCPS_INIT_BENCH")
        self.assertTrue(binary and os.access(binary, os.X_OK),
                        "ASYNCPS_INIT_BENCH must name the built init_bench (ctest sets it)")
        with tempfile.TemporaryDirectory(prefix="bench_report_test_") as tmp:
            out = os.path.join(tmp, "benchmarks.md")
            json_dir = os.path.join(tmp, "json")
            result = run_script("run", "--bin-dir", os.path.dirname(binary), "--json-dir", json_dir,
                                "--out", out, "init_bench")
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            with open(os.path.join(json_dir, "init_bench.json"), encoding="utf-8") as f:
                report = json.load(f)
            self.assertEqual(report["bench"], "init_bench")
            self.assertEqual(report["args"], ["--quick"])
            self.assertTrue(report["complete"])
            self.assertGreater(report["machine"]["cores"], 0)
            with open(out, encoding="utf-8") as f:
                lines = f.read().splitlines()
            self.assertTrue(any(line.startswith("| Machine | ") and " cores, " in line for line in lines))
            self.assertTrue(any(line.startswith("| Load average (1, 5, 15 min) | ") and "after" in line
                                for line in lines))
            rows = [line for line in lines if line.startswith("| init ")]
            # Four kinds over f32[10^6] and truncated_normal over [10^4, 100].
            self.assertEqual(len(rows), 5, "\n".join(lines))
            for row in rows:
                cells = [c.strip() for c in row.strip("|").split("|")]
                self.assertTrue(cells[1].endswith(" ms"), row)
                self.assertTrue(cells[2].startswith("std::fill of the same bytes: "), row)
                float(cells[3].replace(",", ""))  # a number


if __name__ == "__main__":
    unittest.main(verbosity=2)
