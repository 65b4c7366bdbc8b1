#!/usr/bin/env python3
"""tests/perf/split_test.py: split.py on a recorded small round (testdata/split: two
SwiftCompile-like actions of tests/perf/large from Bazel 4.2.3's --profile, local and through
clonestage, and the server's debug lines for them), and on broken copies of it."""

import gzip
import json
import shutil
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import split  # noqa: E402

DATA = Path(__file__).resolve().parent / "testdata" / "split"


def event(trace, action, name):
    """The duration in ms of the event `name` inside the action named `action`, read
    directly from the trace file, independently of split.py."""
    events = json.loads((DATA / trace).read_text())["traceEvents"]
    a = next(e for e in events if e.get("cat") == "action processing" and e["name"] == action)
    inner = [
        e
        for e in events
        if e.get("tid") == a["tid"]
        and e is not a
        and a["ts"] <= e.get("ts", -1) <= a["ts"] + a["dur"]
        and (e.get("name") == name or e.get("cat") == name)
    ]
    return sum(e["dur"] for e in inner) / 1000.0, a["dur"] / 1000.0


class RecordedRound(unittest.TestCase):
    def setUp(self):
        self.rows, self.spreads, self.rpcs = split.split(DATA)
        self.by_name = {r["name"]: r for r in self.rows}

    def test_pairs_only_remotely_executed_actions(self):
        # The clonestage trace also holds a file-writing action that ran nowhere remotely.
        self.assertEqual(sorted(self.by_name), ["Compiling module A0", "Compiling module A1"])

    def test_phases_are_the_traces_own_durations(self):
        r = self.by_name["Compiling module A0"]
        merkle, action = event("round-1-clonestage.json", "Compiling module A0", "MerkleTree.build(ActionInput)")
        self.assertAlmostEqual(r["merkle"], merkle)
        self.assertAlmostEqual(r["cs_action"], action)
        execute, _ = event("round-1-clonestage.json", "Compiling module A0", "execute remotely")
        self.assertAlmostEqual(r["execute"], execute)
        command, local_action = event(
            "round-1-local.json", "Compiling module A0", "Remote execution process wall time"
        )
        self.assertAlmostEqual(r["local_command"], command)
        self.assertAlmostEqual(r["local_action"], local_action)
        self.assertGreater(r["upload"], 0)
        self.assertGreater(r["download"], 0)

    def test_server_figures_come_from_the_matched_log_lines(self):
        log = split.ANSI.sub("", (DATA / "round-1-server.log").read_text())
        totals = {float(x) / 1000 for x in split.re.findall(r"total_us=(\d+)", log)}
        commands = {float(x) / 1000 for x in split.re.findall(r"command_us=(\d+)", log)}
        self.assertEqual({r["server_total"] for r in self.rows}, totals)
        self.assertEqual({r["server_command"] for r in self.rows}, commands)
        for r in self.rows:
            # Each server action sits inside the Execute call it was matched with.
            self.assertLess(r["server_total"], r["execute"])
            self.assertLess(self.spreads[0], 50)

    def test_extra_is_split_exactly(self):
        for r in self.rows:
            self.assertAlmostEqual(r["extra"], r["bazel"] + r["rpc"] + r["server"] + r["cmd"])
            self.assertAlmostEqual(r["server"], r["server_total"] - r["server_command"])

    def test_summary_names_every_part(self):
        text = split.summary(self.rows, self.spreads, self.rpcs)
        for needle in ("Merkle tree", "FindMissingBlobs", "clonestage's share", "2 action pairs"):
            self.assertIn(needle, text)


class Rpcs(unittest.TestCase):
    def test_rpc_lines_are_grouped_by_method(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write(
                "2026-11-24T11:37:05.1Z DEBUG clonestage_server::rpc_timing: rpc "
                "rpc=/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs us=1500\n"
                "2026-11-24T11:37:05.2Z DEBUG clonestage_server::rpc_timing: rpc "
                "rpc=/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs us=2500\n"
                "2026-11-24T11:37:05.3Z DEBUG clonestage_server::execution::run: action phases action=x\n"
            )
            f.flush()
            self.assertEqual(split.server_rpcs(f.name), {"FindMissingBlobs": [1.5, 2.5]})


class Matching(unittest.TestCase):
    def test_close_ends_with_different_durations_are_not_swapped(self):
        # Bazel's clock counts from its trace's start, the server's from the epoch; b's
        # Execute ended 1 ms after a's in Bazel's trace, but the server logged b's answer
        # first (2 ms of jitter).
        remote = {
            "a": {"execute": 600.0, "execute_end_us": 10_000_000},
            "b": {"execute": 100.0, "execute_end_us": 10_001_000},
            "c": {"execute": 300.0, "execute_end_us": 20_000_000},
        }
        base = 1.7e15
        server = [
            {"total": 599.0, "t": base + 10_002_000},
            {"total": 99.0, "t": base + 10_000_000},
            {"total": 299.0, "t": base + 20_001_000},
        ]
        pairs = {n: s["total"] for n, s in split.match(["a", "b", "c"], remote, server)}
        self.assertEqual(pairs, {"a": 599.0, "b": 99.0, "c": 299.0})

    def test_server_phases_add_up_to_accepted_to_response(self):
        rows, _, _ = split.split(DATA)
        for r in rows:
            parts = sum(r["server_" + k] for k in split.SERVER_PHASES + ["stage", "wrapper", "command", "answer"])
            self.assertAlmostEqual(parts, r["server_total"])
            self.assertLess(r["server_answer"], 5)


class BrokenInput(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        for p in DATA.iterdir():
            shutil.copy(p, self.dir / p.name)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_gzip_trace_is_read(self):
        p = self.dir / "round-1-clonestage.json"
        with gzip.open(str(p) + ".gz", "wt") as f:
            f.write(p.read_text())
        p.unlink()
        rows, _, _ = split.split(self.dir)
        self.assertEqual(len(rows), 2)

    def test_missing_server_action_is_an_error_not_a_shorter_table(self):
        log = self.dir / "round-1-server.log"
        lines = log.read_text().splitlines()
        last_ran = max(i for i, l in enumerate(lines) if "action ran" in l)
        log.write_text("\n".join(lines[:last_ran]) + "\n")
        with self.assertRaisesRegex(split.SplitError, "executed 2 actions remotely but the server log has 1"):
            split.split(self.dir)

    def test_ran_without_phases_is_an_error(self):
        log = self.dir / "round-1-server.log"
        log.write_text("\n".join(l for l in log.read_text().splitlines() if "action phases" not in l) + "\n")
        with self.assertRaisesRegex(split.SplitError, "logged no phases"):
            split.split(self.dir)

    def test_local_action_missing_is_an_error(self):
        (self.dir / "round-1-local.json").write_text(json.dumps({"traceEvents": []}))
        with self.assertRaisesRegex(split.SplitError, "did not run a local command"):
            split.split(self.dir)

    def test_cache_hit_is_an_error(self):
        p = self.dir / "round-1-clonestage.json"
        trace = json.loads(p.read_text())
        trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("name") != "execute remotely"]
        p.write_text(json.dumps(trace))
        with self.assertRaisesRegex(split.SplitError, "not executed by clonestage.*Compiling module A0"):
            split.split(self.dir)

    def test_not_json_names_the_file(self):
        (self.dir / "round-1-local.json").write_text("{ truncated")
        with self.assertRaisesRegex(split.SplitError, "round-1-local.json: not a readable JSON trace"):
            split.split(self.dir)

    def test_main_exits_2_with_a_message(self):
        (self.dir / "round-1-clonestage.json").unlink()
        self.assertEqual(split.main(["split.py", str(self.dir)]), 2)


if __name__ == "__main__":
    unittest.main()
