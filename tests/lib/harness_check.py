#!/usr/bin/env python3
"""The shell suites share one reporting harness: tests/lib/report.sh (issue 27, "One harness").

Contract: `python3 tests/lib/harness_check.py [ROOT]` (ROOT defaults to this checkout) reads
every shell script under ROOT/tests and ROOT/tools and exits 0 when none outside tests/lib/
defines a `pass` or `fail` function or keeps its own count of passes (`passed=`), 1 with one
line per finding otherwise. Offline, well
under a second; one line of tests/run.sh's layout step. A suite sources tests/lib/report.sh
instead (pass, fail, die, finish, say, tail_of).
"""

import os
import re
import sys

DEF_RE = re.compile(r"^\s*(?:function\s+)?(pass|fail)\s*(?:\(\s*\)|\s+\{)", re.M)
COUNT_RE = re.compile(r"^\s*(?:local\s+)?passed=", re.M)


def shell_files(root):
    for top in ("tests", "tools"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if not x.startswith("bazel-") and x != "node_modules"]
            for f in files:
                path = os.path.join(d, f)
                if f.endswith((".sh", ".bash")) or _has_shell_shebang(path):
                    yield path


def _has_shell_shebang(path):
    try:
        with open(path, "rb") as fh:
            first = fh.readline(100)
    except OSError:
        return False
    return first.startswith(b"#!") and (b"sh" in first.split(b"/")[-1] or b"bash" in first)


def problems(root):
    out = []
    for path in sorted(shell_files(root)):
        rel = os.path.relpath(path, root)
        if rel.startswith("tests/lib/"):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError as e:
            out.append(f"{rel}: cannot read: {e}")
            continue
        for m in DEF_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line}: defines {m.group(1)}(); source tests/lib/report.sh instead")
        for m in COUNT_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line}: counts its own passes; report.sh's pass and finish do")
    return out


def main(argv):
    if len(argv) > 2:
        print("usage: harness_check.py [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    found = problems(root)
    for p in found:
        print(p)
    if found:
        print(f"harness: {len(found)} own pass()/fail() or pass count(s) outside tests/lib/",
              file=sys.stderr)
        return 1
    print("harness: no pass()/fail() or pass count outside tests/lib/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
