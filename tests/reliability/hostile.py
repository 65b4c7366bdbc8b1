"""hostile.py: part 3 (live half) of the reliability suite: hostile trees, symlink chains and
paths sent to a running server.

Fixed cases, one per finding of issue 10 that input can trigger, and the output lists REAPI
forbids (issue 23): each must be refused with the listed gRPC codes, never crash the server,
never leave a file outside the action's root. Then
a grammar-based generator for a fixed time: random trees of hostile names (NUL, slash, ".",
"..", empty, very long), nested directories, symlinks whose targets are built from "..", ".",
the tree's own symlinks and names, absolute targets, and commands that try to write through
every symlink, with random working_directory and output paths drawn from the same grammar.

After every request: the server is alive (else: a crash, its log lines, a restart); no file
named with this run's marker exists outside an action root (a scan of the suite's work dir,
which holds the cache, and of each ancestor of the cache along the generated names); the
call finished within its deadline (else: a hung client); INTERNAL for client input counts as
a wrong status. Prints one line with the counts. Usage:
  hostile.py CS SPAWN WORKDIR SECONDS
Environment: RELIABILITY_SEED.
"""

import itertools
import os
import random
import subprocess
import sys
import time

import reapi
from reapi import Digest, action, command, directory

cs, spawn, work = sys.argv[1:4]
seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 60
seed = int(os.environ.get("RELIABILITY_SEED", time.time()))
rng = random.Random(seed)
cache = os.path.join(work, "cache")
os.makedirs(cache, exist_ok=True)
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve.log"), jobs=2)
MARK = "ESCAPE-%d" % os.getpid()

OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, RESOURCE_EXHAUSTED, FAILED_PRECONDITION = \
    0, 3, 4, 5, 8, 9
INTERNAL, UNKNOWN = 13, 2
CODES = {0: "OK", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED", 5: "NOT_FOUND",
         8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION", 13: "INTERNAL", 14: "UNAVAILABLE"}

findings = []
stats = {"requests": 0, "crashes": 0, "escapes": 0, "hung": 0, "wrong_status": 0,
         "failed_restarts": 0}
seen_crash_lines = 0


def finding(kind, case, detail):
    stats[kind] += 1
    if sum(1 for f in findings if f[0] == kind) < 20:
        findings.append((kind, case, detail))
        reapi.say("hostile: %s in %s: %s" % (kind, case, " ".join(detail.split())[:300]))


def restart(case):
    global server
    server.kill9()
    why = server.start()
    if why:
        finding("failed_restarts", case, why)
        # A cache the server cannot start on is a finding; go on with a fresh one.
        server = reapi.Server(cs, spawn, cache + "-%d" % server.starts, server.log, jobs=2)
        if server.start():
            reapi.say("hostile: no server can be started; stopping")
            report(1)


def escapes():
    """Files carrying this run's marker outside every action root."""
    # find(1), not os.walk: a crashed server can leave a work dir thousands of levels deep.
    p = subprocess.run(["find", work, "-path", os.path.join(work, "*", "work", "*", "root"),
                        "-prune", "-o", "-name", "*%s*" % MARK, "-print"],
                       capture_output=True, text=True, errors="replace")
    found = p.stdout.split("\n")[:-1]
    # Above the work dir: generated targets climb with ".." then name pool entries.
    a = os.path.dirname(os.path.abspath(work))
    while True:
        for depth in range(3):
            for names in itertools.product(["sub", "up", "d", "x"], repeat=depth):
                p = os.path.join(a, *names, MARK)
                if os.path.lexists(p):
                    found.append(p)
        if a == "/":
            break
        a = os.path.dirname(a)
    return found


def check_after(case, started):
    global seen_crash_lines
    stats["requests"] += 1
    lines = server.crashes()
    if server.alive() and len(lines) > seen_crash_lines:
        try:  # a panic or an abort in the log: the process may be on its way out
            server.proc.wait(3)
        except Exception:
            pass
        lines = server.crashes()
    if not server.alive():
        finding("crashes", case, "server exited with %s; log: %s" % (
            server.proc.returncode, " | ".join(lines[seen_crash_lines:seen_crash_lines + 3])))
        seen_crash_lines = len(lines)
        restart(case)
        seen_crash_lines = len(server.crashes())
    elif len(lines) > seen_crash_lines:
        finding("crashes", case, "panic in the log (server still up): " + lines[seen_crash_lines])
        seen_crash_lines = len(lines)
    found = escapes()
    if found:
        finding("escapes", case, "created outside the root: %s" % found[:3])
        for p in found:
            try:
                os.remove(p)
            except OSError:
                pass


def execute(case, blobs, root, args, expect=None, timeout_s=30, working_directory=None,
            output_files=(), output_dirs=(), deadline=60, output_paths=None):
    """Upload blobs (bytes), the command and action; Execute; check the outcome."""
    cmd = command(args, output_files=output_files, output_dirs=output_dirs,
                  working_directory=working_directory, output_paths=output_paths)
    act = action(Digest.of(cmd), root, timeout_s=timeout_s, salt=os.urandom(8))
    cl = server.client(timeout=deadline)
    t0 = time.time()
    code, msg = None, ""
    try:
        for i in range(0, len(blobs), 200):
            cl.batch_upload(blobs[i:i + 200])
        cl.batch_upload([cmd, act])
        res = cl.execute(Digest.of(act), timeout=deadline)
        code, msg = res.status_code, res.status_message
    except Exception as e:
        code, msg = getattr(e, "status_code", None), str(e)
        if hasattr(e, "code") and callable(e.code):
            code = e.code().value[0]
            msg = e.details() or ""
    finally:
        cl.close()
    took = time.time() - t0
    if code == DEADLINE_EXCEEDED and took >= deadline - 1:
        finding("hung", case, "no answer in %d s" % deadline)
    elif code == INTERNAL or code == UNKNOWN:
        finding("wrong_status", case, "%s: %s" % (CODES.get(code), msg))
    elif expect is not None and code not in expect:
        finding("wrong_status", case, "got %s (%s), want %s" % (
            CODES.get(code, code), msg[:200], "/".join(CODES[c] for c in expect)))
    check_after(case, t0)
    return code


def tree(spec):
    """spec: {name: bytes | dict | ("link", target)}. Returns (root Digest, blobs)."""
    blobs = []

    def build(d):
        files, dirs, links = [], [], []
        for name, v in sorted(d.items()):
            if isinstance(v, dict):
                dirs.append((name, build(v)))
            elif isinstance(v, tuple):
                links.append((name, v[1]))
            else:
                blobs.append(v)
                files.append((name, Digest.of(v), False))
        msg = directory(files=files, dirs=dirs, symlinks=links)
        blobs.append(msg)
        return Digest.of(msg)

    return build(spec), blobs


WRITE_THROUGH = ("for l in $(find . -type l 2>/dev/null); do echo pwn > \"$l\" 2>/dev/null; "
                 "echo pwn > \"$l/%s\" 2>/dev/null; done; echo pwn > %s 2>/dev/null; true"
                 % (MARK, MARK))

# --- fixed cases: one per finding input can trigger --------------------------------------


def case_deep(depth):
    blobs = []
    d = Digest.of(directory())
    blobs.append(directory())
    for _ in range(depth):
        msg = directory(dirs=[("d", d)])
        blobs.append(msg)
        d = Digest.of(msg)
    # Staged by iterative walks or refused by a depth limit: either, never a crash.
    execute("deep tree (%d levels)" % depth, blobs, d, ["/bin/true"],
            expect=(OK, INVALID_ARGUMENT), deadline=120)


def case_doubling(levels, expect=(INVALID_ARGUMENT, RESOURCE_EXHAUSTED), deadline=30):
    f = b"x"
    blobs = [f]
    msg = directory(files=[("f", Digest.of(f), False)])
    blobs.append(msg)
    d = Digest.of(msg)
    for _ in range(levels):
        msg = directory(dirs=[("a", d), ("b", d)])
        blobs.append(msg)
        d = Digest.of(msg)
    # 2^levels files from ~levels small blobs: past the server's bound on a tree's expanded
    # size it must be refused before any staging work, within the deadline.
    execute("doubling tree (%d levels, %d files)" % (levels, 2 ** levels), blobs, d,
            ["/bin/true"], expect=expect, deadline=deadline)


def case_chain():
    root, blobs = tree({"sub": {"up": ("link", "..")},
                        "x": ("link", "sub/up/sub/up/../../../" + MARK)})
    execute("symlink chain x -> sub/up/sub/up/../../../MARK", blobs, root,
            ["/bin/sh", "-c", "echo pwn > x"], expect=(INVALID_ARGUMENT,))


def case_workdir():
    root, blobs = tree({"sub": {"up": ("link", "..")},
                        "wd": ("link", "sub/up/sub/up/../../..")})
    execute("working_directory through a symlink chain", blobs, root,
            ["/bin/sh", "-c", "echo pwn > " + MARK], working_directory="wd",
            expect=(INVALID_ARGUMENT,))


def case_output_escape():
    root, blobs = tree({"sub": {"up": ("link", "..")}})
    execute("output path through a symlink chain", blobs, root,
            ["/bin/sh", "-c", "echo pwn > sub/up/sub/up/../../../%s 2>/dev/null; true" % MARK],
            output_files=["sub/up/sub/up/../../../" + MARK], expect=(INVALID_ARGUMENT,))


def case_timeout():
    root, blobs = tree({"f": b"f"})
    execute("Action.timeout 2e9 s", blobs, root, ["/bin/true"], timeout_s=2 * 10 ** 9,
            expect=(INVALID_ARGUMENT,))


def case_long_output():
    root, blobs = tree({"f": b"f"})
    execute("output path longer than PATH_MAX", blobs, root, ["/bin/true"],
            output_files=["d/" * 2100 + "f"], expect=(INVALID_ARGUMENT,))


def case_names():
    for name in ["a/b", "..", ".", "", "a\0b", "n" * 300]:
        root, blobs = tree({name: b"f"})
        execute("file named %r" % name[:20], blobs, root, ["/bin/true"],
                expect=(INVALID_ARGUMENT,))


def case_output_lists():
    """Issue 23, item 4: output lists REAPI forbids clients to send (remote_execution.proto,
    Command.output_files / output_directories / output_paths)."""
    root, blobs = tree({"f": b"f"})
    for name, files, dirs, paths in [
            ("output_files twice", ["a", "a"], [], None),
            ("a path as file and directory", ["a"], ["a"], None),
            ("output_directories twice", [], ["d", "d"], None),
            ("an output file inside another", ["a", "a/b"], [], None),
            ("output_paths twice", [], [], ["p", "p"]),
            ("output_paths twice beside output_files", ["p"], [], ["p", "p"])]:
        execute(name, blobs, root, ["/bin/sh", "-c", "mkdir -p a d; echo x > p"],
                output_files=files, output_dirs=dirs, output_paths=paths,
                expect=(INVALID_ARGUMENT,))


def case_missing():
    msg = directory(files=[("f", Digest("ab" * 32, 5), False)])
    execute("missing input blob", [msg], Digest.of(msg), ["/bin/true"],
            expect=(FAILED_PRECONDITION,))


def case_garbage():
    junk = b"\xff\xff\xff\xff\x0f garbage"
    execute("Directory blob that is not a Directory", [junk], Digest.of(junk), ["/bin/true"],
            expect=(INVALID_ARGUMENT, FAILED_PRECONDITION))


# --- the generator ---------------------------------------------------------------------------

NAMES = ["sub", "up", "d", "x", "a", "b", "..", ".", "", "a/b", "n\0", "/", "sub/", " ",
         "\u00e9", "\udcff", "n" * 256, MARK]
SAFE = ["sub", "up", "d", "x", "a", "b"]


def gen_name(r):
    return r.choice(NAMES) if r.random() < 0.15 else r.choice(SAFE)


def gen_target(r):
    k = r.random()
    if k < 0.1:
        return "/" + "/".join(r.choice(["tmp", "etc", "..", MARK]) for _ in range(r.randint(1, 3)))
    if k < 0.15:
        return r.choice(["", ".", "/", "a\0b", "x" * 5000])
    parts = [r.choice(["..", "..", ".", "sub", "up", "x", "d", MARK])
             for _ in range(r.randint(1, 10))]
    return "/".join(parts)


def gen_tree(r, depth):
    d = {}
    for _ in range(r.randint(0, 4)):
        k = r.random()
        n = gen_name(r)
        if k < 0.35 and depth < 5:
            d[n] = gen_tree(r, depth + 1)
        elif k < 0.75:
            d[n] = ("link", gen_target(r))
        else:
            d[n] = os.urandom(r.randint(0, 32))
    return d


def gen_path(r):
    return "/".join(gen_name(r) if r.random() < 0.3 else r.choice(["sub", "up", "x", "..", MARK])
                    for _ in range(r.randint(1, 5)))


def random_case(r, i):
    spec = gen_tree(r, 0)
    root, blobs = tree(spec)
    wd = gen_path(r) if r.random() < 0.2 else None
    outs = [gen_path(r) for _ in range(r.randint(0, 2))]
    dirs = [gen_path(r)] if r.random() < 0.2 else []
    timeout_s = r.choice([None, 5, 0, 2 ** 62]) if r.random() < 0.1 else 10
    execute("generated #%d (seed %d)" % (i, seed), blobs, root, ["/bin/sh", "-c", WRITE_THROUGH],
            working_directory=wd, output_files=outs, output_dirs=dirs, timeout_s=timeout_s,
            deadline=60)


def report(rc=None):
    if stats["hung"]:
        server.kill9()  # it may still be staging what it should have refused
    else:
        server.stop()
    bad = sum(stats[k] for k in ("crashes", "escapes", "hung", "wrong_status", "failed_restarts"))
    reapi.say("hostile: %s: %d requests (%d generated in %.0f s, seed %d): %d crashes, %d "
              "escapes, %d hung calls, %d wrong status codes, %d failed restarts"
              % ("PASS" if bad == 0 else "FAIL", stats["requests"], generated, gen_time, seed,
                 stats["crashes"], stats["escapes"], stats["hung"], stats["wrong_status"],
                 stats["failed_restarts"]))
    sys.exit(rc if rc is not None else (0 if bad == 0 else 1))


generated = 0
gen_time = 0.0
why = server.start()
if why:
    reapi.say("hostile: FAIL: the server did not start: %s" % why)
    sys.exit(1)

for c in (case_chain, case_workdir, case_output_escape, case_timeout, case_long_output,
          case_names, case_output_lists, case_missing, case_garbage,
          # 16,384 files: a bound may accept it (real actions have ~2,000 inputs) or refuse it
          lambda: case_doubling(14, expect=(OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED)),
          lambda: case_deep(5000)):
    c()

t0 = time.time()
while time.time() - t0 < seconds:
    random_case(random.Random(rng.random()), generated)
    generated += 1
gen_time = time.time() - t0
# Last: a doubling tree of 2^26 files (67 M) that any sane bound refuses at once and today's
# server would take hours and gigabytes to stage. 5 s, not more: what an unbounded server
# stages meanwhile (~10^5 files a second) must be deleted after the run. A hung server is
# killed after it.
case_doubling(26, deadline=5)
report()
