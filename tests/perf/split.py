#!/usr/bin/env python3
"""tests/perf/split.py: where each action's extra time under clonestage goes.

Splits, per action, the wall time a remotely executed action takes in Bazel beyond the same
action under --spawn_strategy=local into Bazel's own remote-execution cost and clonestage's.
Used by large.sh; a parser of recorded files, it never judges a timing.

Input, a directory with, for each round N (any N, any order):
  round-N-local.json       Bazel's --profile trace of the --spawn_strategy=local build
  round-N-clonestage.json  Bazel's --profile trace of the clonestage build (.json.gz also read)
  round-N-server.log       the lines `clonestage serve` logged during that build, with
                           CLONESTAGE_LOG=...clonestage_server::execution=debug
                           (its "action phases" and "action ran" lines; and, if
                           clonestage_server::rpc_timing=debug, each call's server time)

What Bazel 4.2.3's trace holds (read from its JSON): one "action processing" event per action,
named by its progress message ("Compiling module A0"), and on the same thread inside it:
  local:  "Remote execution process wall time" (category of the subprocess's wall time, despite
          its name) - the command under Bazel's process-wrapper;
  remote: "AbstractSpawnStrategy.getInputMapping", "MerkleTree.build(ActionInput)",
          "check cache hit" (GetActionResult), "upload missing inputs" (FindMissingBlobs and
          the uploads, recorded only when 50 ms or longer: the UPLOAD_TIME task's threshold,
          as PROCESS_TIME's; so taken as the time from the end of the cache check to the
          Execute call), "execute remotely" (the Execute call, sent to response),
          "download server logs", "download outputs".
clonestage's figures per action come from its debug log: "action ran" total_us (Execute
accepted to response built) and "action phases" (stage_us, command_us, ...), joined by digest.
Server actions are matched to Bazel's in the order their Execute calls ended; the spread of
the clock offsets between the two (printed) shows whether that matching holds.

Per action pair (same progress message, same round), with
  extra  = clonestage action - local action, it is split exactly into
  bazel  = (cs action - execute remotely) - (local action - local command)
           Bazel's own remote bookkeeping: input mapping, Merkle tree, cache check,
           FindMissingBlobs and uploads, output downloads, minus what local spends around
           its own command (process-wrapper, output checks);
  rpc    = execute remotely - clonestage accepted->response (the Execute call's transport);
  server = clonestage accepted->response - command (clonestage's share: staging, spawn,
           collecting outputs, bookkeeping);
  cmd    = command under clonestage - command under local (page cache, CPU contention).

Usage: split.py DIR [--json]   (exit 2 with a message naming the file on unusable input)
"""

import gzip
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

REMOTE_PHASES = {
    "AbstractSpawnStrategy.getInputMapping": "input_mapping",
    "MerkleTree.build(ActionInput)": "merkle",
    "check cache hit": "cache_check",
    "upload missing inputs": "upload",
    "execute remotely": "execute",
    "download server logs": "download",
    "download outputs": "download",
}
SERVER_PHASES = ["queued", "workdir", "prespawn", "postexec", "outputs"]
LOCAL_COMMAND = "Remote execution process wall time"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FIELD = re.compile(r"(\w+)=(\S+)")


class SplitError(Exception):
    pass


def load_trace(path):
    """The trace's events (Bazel writes gzip when the name ends in .gz)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise SplitError(f"{path}: not a readable JSON trace: {e}") from e
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise SplitError(f"{path}: no traceEvents list")
    return events


def actions(events, path):
    """{progress message: {"action": ms, phase: ms..., "end_execute": us}} of the trace's
    actions, with the phases found inside each action on its thread."""
    by_tid = {}
    for e in events:
        if e.get("ph") == "X" and "dur" in e and "ts" in e:
            by_tid.setdefault(e.get("tid"), []).append(e)
    out = {}
    for evs in by_tid.values():
        for a in evs:
            if a.get("cat") != "action processing":
                continue
            t0, t1 = a["ts"], a["ts"] + a["dur"]
            row = {"action": a["dur"] / 1000.0}
            for e in evs:
                if e is a or not t0 <= e["ts"] <= t1:
                    continue
                name = e.get("name")
                key = REMOTE_PHASES.get(name)
                if key:
                    row[key] = row.get(key, 0.0) + e["dur"] / 1000.0
                    if key == "execute":
                        row["execute_start_us"] = e["ts"]
                        row["execute_end_us"] = e["ts"] + e["dur"]
                    if key == "cache_check":
                        row["cache_check_end_us"] = e["ts"] + e["dur"]
                elif e.get("cat") == LOCAL_COMMAND:
                    row["command"] = row.get("command", 0.0) + e["dur"] / 1000.0
            # Bazel records "upload missing inputs" only when it lasts 50 ms or more (the
            # UPLOAD_TIME task's threshold): FindMissingBlobs and the uploads are the time
            # from the end of the cache check to the Execute call, recorded or not.
            if "execute_start_us" in row and "cache_check_end_us" in row:
                row["upload"] = (row["execute_start_us"] - row["cache_check_end_us"]) / 1000.0
            name = a.get("name", "")
            if name in out:
                raise SplitError(f"{path}: two actions named {name!r}")
            out[name] = row
    return out


def server_actions(path):
    """clonestage's executed actions in log order: [{"total": ms, "command": ms, "stage": ms,
    "t": epoch us of the "action ran" line, ...}]."""
    phases, ran = {}, []
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise SplitError(f"{path}: {e}") from e
    for line in text.splitlines():
        line = ANSI.sub("", line)
        if "action phases" not in line and "action ran" not in line:
            continue
        f = dict(FIELD.findall(line))
        digest = f.get("action")
        if not digest:
            continue
        if "action phases" in line:
            phases[digest] = f
        else:
            stamp = line.split()[0]
            try:
                t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError as e:
                raise SplitError(f"{path}: no timestamp at the start of: {line}") from e
            ran.append((t * 1e6, digest, f))
    out = []
    for t, digest, f in ran:
        p = phases.get(digest)
        if p is None:
            raise SplitError(f"{path}: action {digest} ran but logged no phases")
        row = {k[:-3]: int(v) / 1000.0 for k, v in p.items() if k.endswith("_us")}
        row["total"] = int(f["total_us"]) / 1000.0
        row["t"] = t
        out.append(row)
    return out


def match(executed, remote, server):
    """[(Bazel action name, server row)]: each server action with the Execute call it answered.
    The two clocks differ by a fixed offset (Bazel's trace counts from its own start), taken
    as the median over the calls matched in order of their ends; then the pairs whose end
    (offset applied) and duration agree best are taken first, so two actions that ended a
    few ms apart are not swapped when their durations differ."""
    by_end = sorted(server, key=lambda s: s["t"])
    offset = statistics.median(s["t"] - remote[n]["execute_end_us"] for n, s in zip(executed, by_end))
    costs = sorted(
        (
            abs(s["t"] - offset - remote[n]["execute_end_us"]) / 1000.0
            + abs(remote[n]["execute"] - s["total"]),
            i,
            j,
        )
        for i, n in enumerate(executed)
        for j, s in enumerate(by_end)
    )
    taken_b, taken_s, pairs = set(), set(), []
    for _, i, j in costs:
        if i not in taken_b and j not in taken_s:
            taken_b.add(i)
            taken_s.add(j)
            pairs.append((executed[i], by_end[j]))
    return sorted(pairs, key=lambda p: p[1]["t"])


def server_rpcs(path):
    """{method: [server-side ms...]} from the rpc_timing layer's debug lines, if logged
    (clonestage_server::rpc_timing=debug; for streaming calls, until the response headers)."""
    out = {}
    for line in Path(path).read_text(errors="replace").splitlines():
        line = ANSI.sub("", line)
        if "rpc_timing" not in line:
            continue
        f = dict(FIELD.findall(line))
        if "rpc" in f and "us" in f:
            out.setdefault(f["rpc"].rsplit("/", 1)[-1], []).append(int(f["us"]) / 1000.0)
    return out


def round_pairs(local, remote, server, where):
    """The per-action rows of one round: local and clonestage actions paired by name, server
    rows matched to remote actions by the end of their Execute calls."""
    hits = sorted(n for n, r in remote.items() if "cache_check" in r and "execute" not in r)
    if hits:
        raise SplitError(f"{where}: not executed by clonestage (a cache hit?): {', '.join(hits)}")
    executed = sorted(
        (n for n, r in remote.items() if "execute" in r), key=lambda n: remote[n]["execute_end_us"]
    )
    if len(executed) != len(server):
        raise SplitError(
            f"{where}: Bazel executed {len(executed)} actions remotely but the server log has "
            f"{len(server)} (was any action a cache hit, or run locally?)"
        )
    rows, offsets = [], []
    for name, s in match(executed, remote, server):
        r = remote[name]
        lo = local.get(name)
        if lo is None or "command" not in lo:
            raise SplitError(f"{where}: {name!r} did not run a local command in the local trace")
        offsets.append(s["t"] - r["execute_end_us"])
        row = {
            "name": name,
            "local_action": lo["action"],
            "local_command": lo["command"],
            "cs_action": r["action"],
            "server_total": s["total"],
            "server_command": s.get("command", 0.0),
            "server_stage": s.get("stage", 0.0),
        }
        # The server's own phases; "answer" is what follows them (the response, bookkeeping).
        for k in SERVER_PHASES:
            row["server_" + k] = s.get(k, 0.0)
        row["server_wrapper"] = s.get("exec", 0.0) - s.get("command", 0.0)
        row["server_answer"] = row["server_total"] - sum(s.get(k, 0.0) for k in SERVER_PHASES + ["stage", "exec"])
        for k in ("input_mapping", "merkle", "cache_check", "upload", "execute", "download"):
            row[k] = r.get(k, 0.0)
        row["bazel_other"] = row["cs_action"] - sum(
            row[k] for k in ("input_mapping", "merkle", "cache_check", "upload", "execute", "download")
        )
        row["local_other"] = row["local_action"] - row["local_command"]
        row["extra"] = row["cs_action"] - row["local_action"]
        row["bazel"] = (row["cs_action"] - row["execute"]) - (row["local_action"] - row["local_command"])
        row["rpc"] = row["execute"] - row["server_total"]
        row["server"] = row["server_total"] - row["server_command"]
        row["cmd"] = row["server_command"] - row["local_command"]
        rows.append(row)
    spread = (max(offsets) - min(offsets)) / 1000.0 if offsets else 0.0
    return rows, spread


def split(directory):
    d = Path(directory)
    rounds = sorted(
        {int(m.group(1)) for p in d.iterdir() if (m := re.match(r"round-(\d+)-", p.name))}
    )
    if not rounds:
        raise SplitError(f"{d}: no round-N-* files")
    rows, spreads, rpcs = [], [], {}
    for n in rounds:
        def one(kind):
            for ext in (".json", ".json.gz"):
                p = d / f"round-{n}-{kind}{ext}"
                if p.exists():
                    return p
            raise SplitError(f"{d}: round {n} has no {kind} trace")

        lp, cp = one("local"), one("clonestage")
        local = actions(load_trace(lp), lp)
        remote = actions(load_trace(cp), cp)
        log = d / f"round-{n}-server.log"
        r, spread = round_pairs(local, remote, server_actions(log), f"{d} round {n}")
        for method, ms in server_rpcs(log).items():
            rpcs.setdefault(method, []).extend(ms)
        for row in r:
            row["round"] = n
        rows.extend(r)
        spreads.append(spread)
    return rows, spreads, rpcs


COLUMNS = [
    ("local_action", "local: action"),
    ("local_command", "local: command (process wall time)"),
    ("local_other", "local: the rest (process-wrapper, output checks)"),
    ("cs_action", "clonestage: action"),
    ("input_mapping", "  Bazel: input mapping"),
    ("merkle", "  Bazel: Merkle tree"),
    ("cache_check", "  Bazel: cache check (GetActionResult)"),
    ("upload", "  Bazel: FindMissingBlobs + uploads"),
    ("execute", "  Bazel: Execute call (sent -> response)"),
    ("server_total", "    clonestage: accepted -> response"),
    ("server_queued", "      queued"),
    ("server_workdir", "      work directory"),
    ("server_stage", "      staging"),
    ("server_prespawn", "      to the wrapper"),
    ("server_wrapper", "      wrapper start and end"),
    ("server_command", "      the command"),
    ("server_postexec", "      after the command"),
    ("server_outputs", "      outputs into the CAS"),
    ("server_answer", "      the answer and bookkeeping"),
    ("download", "  Bazel: output downloads"),
    ("bazel_other", "  Bazel: the rest (outside the phases above)"),
    ("extra", "extra = clonestage action - local action"),
    ("bazel", "  Bazel's remote bookkeeping (beyond local's)"),
    ("rpc", "  Execute transport (call - accepted->response)"),
    ("server", "  clonestage's share (accepted->response - command)"),
    ("cmd", "  command under clonestage - under local"),
]


def summary(rows, spreads, rpcs=None):
    n_rounds = len({r["round"] for r in rows})
    lines = [
        f"per action, ms, over {len(rows)} action pairs in {n_rounds} rounds "
        f"(median / mean / min / max):"
    ]
    for key, label in COLUMNS:
        v = [r[key] for r in rows]
        lines.append(
            f"  {label:<52} {statistics.median(v):8.1f} {statistics.fmean(v):8.1f} "
            f"{min(v):8.1f} {max(v):8.1f}"
        )
    lines.append(
        "  (extra = Bazel's bookkeeping + transport + clonestage's share + command difference, "
        "exactly, per action; medians need not add up)"
    )
    lines.append(
        f"  server-to-Bazel matching: clock offset spread per round {', '.join(f'{s:.1f}' for s in spreads)} ms "
        "(small = each server action matched its own Execute call)"
    )
    if rpcs:
        lines.append("  server-side time per call, ms (median / max, calls), over the clonestage builds:")
        for method in sorted(rpcs):
            v = rpcs[method]
            lines.append(f"    {method:<30} {statistics.median(v):8.2f} {max(v):8.2f} {len(v):6d}")
    return "\n".join(lines)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        rows, spreads, rpcs = split(argv[1])
    except SplitError as e:
        print(f"split.py: {e}", file=sys.stderr)
        return 2
    if "--json" in argv[2:]:
        print(json.dumps({"rows": rows, "spreads_ms": spreads, "rpcs_ms": rpcs}, indent=1))
    else:
        print(summary(rows, spreads, rpcs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
