#!/usr/bin/env python3
"""Unit test of scripts/nemesis.py's own logic, with no process started: a schedule is a function
of its seed, a replayed schedule is the schedule that ran, and the overlap matrix counts the pairs
of faults active at the same time. ctest: nemesis_selftest."""

import copy
import json
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nemesis  # noqa: E402


class ScheduleTest(unittest.TestCase):
    def test_same_seed_same_schedule(self):
        a = nemesis.schedule_rounds(20261128, 8)
        b = nemesis.schedule_rounds(20261128, 8)
        self.assertEqual(a, b)
        self.assertEqual(json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True))

    def test_other_seed_other_schedule(self):
        a = nemesis.make_round(1, 0)
        b = nemesis.make_round(2, 0)
        self.assertNotEqual([(f["at"], f["kind"]) for f in a["faults"]],
                            [(f["at"], f["kind"]) for f in b["faults"]])

    def test_a_round_does_not_depend_on_the_rounds_before_it(self):
        # Round k of a seed is the same whether or not rounds 0..k-1 were drawn first (a replay of
        # one round and a long run agree).
        self.assertEqual(nemesis.make_round(7, 5), nemesis.schedule_rounds(7, 6)[5])

    def test_eight_rounds_take_every_variant(self):
        rounds = nemesis.schedule_rounds(3, 8)
        seen = [(r["workload"], r["replicas"], r["data_workers"]) for r in rounds]
        variants = [(v["workload"], v["replicas"], v["data_workers"]) for v in nemesis.VARIANTS]
        self.assertEqual(sorted(seen), sorted(variants))  # each once, repeats as often as listed

    def test_workloads_filter(self):
        for r in nemesis.schedule_rounds(3, 6, workloads=("counter",)):
            self.assertEqual(r["workload"], "counter")

    def test_faults_target_roles_the_round_has(self):
        for r in nemesis.schedule_rounds(11, 16):
            roles = nemesis.target_range(nemesis.round_roles(r, r["ps"], r["workers"]), r.get("elastic"), r["ps"],
                                         r["workers"], r.get("max_ps", r["ps"]))
            ats = [f["at"] for f in r["faults"]]
            self.assertEqual(ats, sorted(ats))
            self.assertEqual([f["id"] for f in r["faults"]], list(range(len(r["faults"]))))
            for f in r["faults"]:
                self.assertIn(f["role"], roles)
                self.assertIn(f["kind"], nemesis.KINDS)
                if f["kind"] in nemesis.SCALE_KINDS:
                    self.assertIsNone(f["target"])
                    self.assertIsNone(f["duration"])
                    continue
                self.assertLess(f["target"], roles[f["role"]])
                if f["kind"].startswith("pause_"):
                    self.assertGreaterEqual(f["duration"], nemesis.PAUSE_SECONDS[0])
                    self.assertLessEqual(f["duration"], nemesis.PAUSE_SECONDS[1])
                else:
                    self.assertIsNone(f["duration"])
                if f["trigger"] in ("state_transfer", "failover"):
                    self.assertEqual(r["replicas"], 2)

    def test_every_kind_event_and_trigger_is_drawn(self):
        rounds = nemesis.schedule_rounds(5, 8)
        kinds = {f["kind"] for r in rounds for f in r["faults"]}
        self.assertEqual(kinds, set(nemesis.KINDS))
        events = {f["event"] for r in rounds for f in r["faults"]}
        self.assertEqual(events, {"single", "double", "triggered", "setup", "storm", "scale"})
        triggers = {f["trigger"] for r in rounds for f in r["faults"]} - {None}
        self.assertEqual(triggers, set(nemesis.TRIGGERS))

    def test_scales_stay_in_bounds_and_change_the_count(self):
        # Workers: 1 .. --workers + 2, up by 1 or 2 from the count the schedule expects, or down;
        # PS: max(--ps, --ps_replicas) .. --max_ps (--ps + 1), never the count expected then.
        seen = set()
        for r in nemesis.schedule_rounds(12, 16):
            self.assertTrue(r["elastic"])
            self.assertEqual(r["max_ps"], r["ps"] + 1)
            # In the order they run: each wants a count other than the one the scales before it left.
            scales = [f for f in r["faults"] if f["kind"] in nemesis.SCALE_KINDS]
            self.assertTrue(scales)
            # Every elastic round scales early (a short round would have none otherwise).
            self.assertLessEqual(min(f["at"] for f in scales), nemesis.FIRST_SCALE[1])
            counts = {"worker": r["workers"], "ps": r["ps"]}
            for f in scales:
                role = nemesis.SCALE_KINDS[f["kind"]]
                self.assertEqual(f["role"], role)
                self.assertNotEqual(f["want"], counts[role])
                if role == "worker":
                    self.assertGreaterEqual(f["want"], 1)
                    self.assertLessEqual(f["want"], r["workers"] + nemesis.WORKERS_ABOVE)
                    self.assertLessEqual(f["want"], counts[role] + 2)
                    seen.add(("worker", "up" if f["want"] > counts[role] else "down"))
                else:
                    self.assertGreaterEqual(f["want"], max(r["ps"], r["replicas"]))
                    self.assertLessEqual(f["want"], r["max_ps"])
                    seen.add(("ps", "up" if f["want"] > counts[role] else "down"))
                counts[role] = f["want"]
        self.assertEqual(seen, {("worker", "up"), ("worker", "down"), ("ps", "up"), ("ps", "down")})

    def test_scales_pair_with_kills_and_pauses_in_doubles(self):
        pairs = set()
        for r in nemesis.schedule_rounds(13, 16):
            groups = {}
            for f in r["faults"]:
                if f["event"] == "double":
                    groups.setdefault(f["group"], []).append(f["kind"])
            pairs |= {"|".join(sorted(g)) for g in groups.values() if any(k in nemesis.SCALE_KINDS for k in g)}
        self.assertTrue(any("kill_ps" in p and "scale_ps" in p for p in pairs), pairs)
        self.assertFalse(any(all(k in nemesis.SCALE_KINDS for k in p.split("|")) for p in pairs))

    def test_no_scales_without_elastic(self):
        r = nemesis.make_round(12, 0, scale=False)
        # Nor are scale pairs counted as possible in the coverage of such a run.
        self.assertNotIn("scale_ps", nemesis.run_kinds([r]))
        self.assertIn("scale_ps", nemesis.run_kinds([r, nemesis.make_round(12, 1)]))
        self.assertNotIn("elastic", r)
        self.assertFalse([f for f in r["faults"] if f["kind"] in nemesis.SCALE_KINDS or f["event"] == "scale"])

    def test_job_command_runs_elastic_rounds_with_a_control_token(self):
        class Args:
            bin, fmnist_epochs, counter_ids, counter_epochs, counter_closures_per_worker = "/b", 1, 10, 1, 2
        rd = nemesis.make_round(12, 0, workloads=("counter",))
        cmd = nemesis.job_command(Args, rd, "/ckpt")
        launcher = cmd[:cmd.index("--")]
        self.assertIn("--elastic", launcher)
        self.assertEqual(launcher[launcher.index("--max_ps") + 1], "3")
        self.assertEqual(launcher[launcher.index("--token") + 1], nemesis.scale_token(rd))
        self.assertNotIn("--elastic", nemesis.job_command(Args, nemesis.make_round(12, 0, scale=False), "/ckpt"))

    def test_launcher_lines_of_a_scale(self):
        # The lines scripts/nemesis.py reads to follow the tasks a scale starts and drains.
        self.assertEqual(nemesis.CONTROL_PORT.match(
            "[launcher] control port 46435 (asyncps_launch scale --control 127.0.0.1:46435 --workers N)").group(1),
            "46435")
        line = ("[launcher] scale to 4 workers: started worker:2 pid 15484 at 127.0.0.1:57931; "
                "started worker:3 pid 15487 at 127.0.0.1:41033")
        self.assertTrue(nemesis.SCALE_STARTED.match(line))
        self.assertEqual([m.groups() for m in nemesis.STARTED_IN_SCALE.finditer(line)],
                         [("worker:2", "15484"), ("worker:3", "15487")])
        self.assertTrue(nemesis.SCALE_STARTED.match("[launcher] scale to 3 PS: started ps:2 pid 1 at 127.0.0.1:2"))
        self.assertFalse(nemesis.SCALE_STARTED.match("[launcher] scale to 3 PS refused: FAILED_PRECONDITION: x"))
        self.assertEqual(nemesis.LEFT.match("[launcher] ps:2 left the job (exited with code 0)").group(1), "ps:2")
        self.assertIsNone(nemesis.LEFT.match("[ps:2] ps 2 left the job: its 2 group copies moved"))

    def test_doubles_come_in_pairs_with_the_chief_kill_second(self):
        for r in nemesis.schedule_rounds(9, 8):
            groups = {}
            for f in r["faults"]:
                if f["event"] == "double":
                    groups.setdefault(f["group"], []).append(f)
            self.assertTrue(groups)
            for pair in groups.values():
                self.assertEqual(len(pair), 2)
                first, second = sorted(pair, key=lambda f: (f["at"], f["id"]))
                self.assertLessEqual(second["at"] - first["at"], nemesis.DOUBLE_SPREAD + 1e-9)
                self.assertFalse(first["kind"] == "kill_chief" and second["kind"] != "kill_chief")

    def test_fault_rate_follows_fault_every(self):
        dense = nemesis.make_round(4, 0, fault_every=1.0, horizon=600)
        sparse = nemesis.make_round(4, 0, fault_every=6.0, horizon=600)
        self.assertGreater(len({f["group"] for f in dense["faults"]}), 3 * len({f["group"] for f in sparse["faults"]}))

    def test_seed_of_the_day(self):
        self.assertEqual(nemesis.seed_of_the_day(0), 19700101)
        self.assertEqual(nemesis.seed_of_the_day(1764288000), 20251128)


class ReplayTest(unittest.TestCase):
    def test_replay_reproduces_the_schedule_that_ran(self):
        original = nemesis.schedule_rounds(42, 3)
        ran = copy.deepcopy(original)
        # What a run adds: outcomes, times, pids, results.
        for r in ran:
            for f in r["faults"]:
                f.update(applied_at=f["at"] + 0.01, ended_at=f["at"] + 1, outcome="applied", pid=123,
                         label="ps:0", landed_mid=True, fired_by="x", armed_at=f["at"], _cont=5.0)
            r["result"] = {"ok": False}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "schedule.json")
            with open(path, "w") as out:
                json.dump({"seed": 42, "options": {"counter_ids": 1000},
                           "rounds": [nemesis.clean_for_json(r) for r in ran]}, out)
            options, replayed = nemesis.load_schedule(path)
            self.assertEqual(options, {"counter_ids": 1000})
            self.assertEqual(replayed, original)
            _, one = nemesis.load_schedule(path, only_round=1)
            self.assertEqual(one, [original[1]])
            # A failed_round_K.json holds one round the same way.
            single = os.path.join(d, "failed_round_2.json")
            with open(single, "w") as out:
                json.dump({"seed": 42, "options": {}, "rounds": [nemesis.clean_for_json(ran[2])]}, out)
            self.assertEqual(nemesis.load_schedule(single)[1], [original[2]])
            with self.assertRaises(ValueError):
                nemesis.load_schedule(single, only_round=0)

    def test_replay_leaves_out_the_faults_the_run_never_applied(self):
        rd = nemesis.make_round(43, 0)
        ran = copy.deepcopy(rd)
        ran["faults"][-1]["outcome"] = "not reached"
        ran["faults"][-2]["outcome"] = "skipped: after the deadline"
        ran["faults"][0]["outcome"] = "skipped: ps:0 is down"  # it was tried: a replay tries it again
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "failed_round_0.json")
            with open(path, "w") as out:
                json.dump({"seed": 43, "rounds": [nemesis.clean_for_json(ran)]}, out)
            replayed = nemesis.load_schedule(path)[1][0]
        self.assertEqual(replayed["faults"], rd["faults"][:-2])


class OverlapTest(unittest.TestCase):
    def test_counts_pairs_active_together(self):
        intervals = [
            ("kill_ps", 0.0, 2.0),
            ("pause_worker", 1.0, 5.0),     # overlaps kill_ps and kill_worker
            ("kill_worker", 4.0, 4.5),      # overlaps pause_worker only
            ("kill_ps", 10.0, 11.0),        # alone
            ("kill_chief", 11.0, 12.0),     # touches the kill_ps before it: counted
            ("pause_ps", 20.0, 21.0),
            ("pause_ps", 20.5, 22.0),       # same kind: the diagonal
        ]
        self.assertEqual(nemesis.overlap_matrix(intervals), {
            "kill_ps|pause_worker": 1,
            "kill_worker|pause_worker": 1,
            "kill_ps|kill_chief": 1,
            "pause_ps|pause_ps": 1,
        })

    def test_order_of_intervals_and_of_kinds_does_not_matter(self):
        intervals = [("pause_chief", 0, 3), ("kill_worker", 1, 2), ("kill_dispatcher", 2.5, 4)]
        want = nemesis.overlap_matrix(intervals)
        self.assertEqual(nemesis.overlap_matrix(list(reversed(intervals))), want)
        self.assertEqual(want, {"kill_worker|pause_chief": 1, "kill_dispatcher|pause_chief": 1})

    def test_three_at_once_are_three_pairs(self):
        m = nemesis.overlap_matrix([("kill_ps", 0, 10), ("kill_ps", 1, 9), ("pause_ps", 2, 3)])
        self.assertEqual(m, {"kill_ps|kill_ps": 1, "kill_ps|pause_ps": 2})

    def test_disjoint_intervals_count_nothing(self):
        self.assertEqual(nemesis.overlap_matrix([("kill_ps", 0, 1), ("kill_ps", 1.5, 2)]), {})

    def test_possible_pairs_leave_out_a_single_process_with_itself(self):
        possible = set(nemesis.possible_pairs())
        self.assertEqual(set(nemesis.all_pairs()) - possible,
                         {"kill_chief|kill_chief", "pause_chief|pause_chief",
                          "kill_dispatcher|kill_dispatcher", "pause_dispatcher|pause_dispatcher",
                          # one scale request at a time (the launcher refuses a second)
                          "scale_workers|scale_workers", "scale_ps|scale_ps", "scale_workers|scale_ps"})
        self.assertIn("kill_ps|scale_ps", possible)
        self.assertIn("kill_chief|pause_chief", possible)
        self.assertIn("kill_worker|kill_worker", possible)

    def test_every_pair_and_the_matrix_text(self):
        pairs = nemesis.all_pairs()
        self.assertEqual(len(pairs), len(nemesis.KINDS) * (len(nemesis.KINDS) + 1) // 2)
        lines = nemesis.render_matrix({"kill_worker|pause_chief": 3})
        self.assertEqual(len(lines), 1 + len(nemesis.KINDS))
        self.assertIn("3", lines[1])
        self.assertEqual(nemesis.merge_counts({"a": 1}, {"a": 2, "b": 1}), {"a": 3, "b": 1})


class SummaryTest(unittest.TestCase):
    def test_faults_per_kind_doubles_and_triggers(self):
        rd = {"index": 0, "faults": [
            {"kind": "kill_ps", "event": "double", "group": 1, "trigger": None, "outcome": "applied"},
            {"kind": "pause_chief", "event": "double", "group": 1, "trigger": None, "outcome": "applied"},
            {"kind": "kill_worker", "event": "single", "group": 2, "trigger": None, "outcome": "skipped: worker:0 is down"},
            {"kind": "kill_ps", "event": "setup", "group": 3, "trigger": None, "outcome": "applied"},
            {"kind": "kill_ps", "event": "triggered", "group": 3, "trigger": "state_transfer", "outcome": "applied",
             "landed_mid": True},
            {"kind": "pause_ps", "event": "triggered", "group": 4, "trigger": "restore", "outcome": "not triggered"},
            {"kind": "kill_chief", "event": "single", "group": 5, "trigger": None, "outcome": "not reached"},
        ], "result": {"overlaps": {"kill_ps|pause_chief": 1}}}
        s = nemesis.summarize([rd])
        self.assertEqual(s["faults"]["kill_ps"], {"applied": 3, "skipped": 0})
        self.assertEqual(s["faults"]["kill_worker"], {"applied": 0, "skipped": 1})
        self.assertEqual(s["faults"]["kill_chief"], {"applied": 0, "skipped": 0})
        self.assertEqual(s["double_faults"], 1)
        self.assertEqual(s["events"], {"single": 0, "double": 2, "triggered": 1, "setup": 1, "storm": 0, "scale": 0})
        self.assertEqual(s["triggers"]["state_transfer"], {"armed": 1, "fired": 1, "landed_mid": 1})
        self.assertEqual(s["triggers"]["restore"], {"armed": 1, "fired": 0, "landed_mid": 0})
        self.assertEqual(s["overlaps"], {"kill_ps|pause_chief": 1})

    def test_scales_done_and_refused(self):
        rd = {"index": 0, "faults": [
            {"kind": "scale_ps", "event": "scale", "group": 1, "trigger": None, "outcome": "applied", "scale_exit": 0},
            {"kind": "scale_ps", "event": "double", "group": 2, "trigger": None, "outcome": "applied",
             "scale_exit": 9},  # FAILED_PRECONDITION: another scale request is in progress
            {"kind": "scale_workers", "event": "scale", "group": 3, "trigger": None, "outcome": "applied",
             "scale_exit": None},  # no answer
            {"kind": "scale_workers", "event": "scale", "group": 4, "trigger": None,
             "outcome": "skipped: the job is restarting"},
            {"kind": "scale_workers", "event": "scale", "group": 5, "trigger": None, "outcome": "applied",
             "scale_exit": 0, "scale_answer": "already 2 workers"},  # a chief restart set it back to 2
        ]}
        s = nemesis.summarize([rd])
        self.assertEqual(s["faults"]["scale_ps"], {"applied": 2, "skipped": 0, "refused": 1, "noop": 0})
        self.assertEqual(s["faults"]["scale_workers"], {"applied": 2, "skipped": 1, "refused": 1, "noop": 1})
        self.assertEqual(s["events"]["scale"], 3)
        self.assertNotIn("refused", s["faults"]["kill_ps"])


if __name__ == "__main__":
    unittest.main()
