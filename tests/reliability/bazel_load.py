"""bazel_load.py: the Bazel parts of the reliability suite (Bazel 4.2.3, TCP, through the
checkout's launcher, which finds the server this script started and adds its address).

A generated workspace of genrules whose outputs are known functions of their sources: 24
files, a sha256 per pair, a chain through all of them, and a 2 MiB output per nonce. A nonce
(`--action_env`) drawn per build from a small set makes actions run again yet lets one output
base hit results the other recorded.

  kill  N:    N builds, each with the server SIGKILLed at a random moment while it runs
              that build's actions (Bazel has started, so its launcher found the server,
              and a new work dir is staged; then 0-0.8 s), `clonestage verify` run on its
              cache (must be clean) and the server restarted at once; that build must still
              pass (remote again, or local by --remote_local_fallback), the next one too,
              with correct outputs, and no server but the script's may run on the cache at
              the end (part 1's Bazel share).
  two   SECS: two output bases (two copies of the workspace) build in a loop at the same time
              against one server for SECS seconds under eviction pressure: `serve --max-size`
              (EVICT=serve) or a `clonestage gc --max-size` loop (EVICT=gc, the default until
              the server evicts by itself) (part 5).

Every build's outputs are compared with the expected bytes. Prints one line per mode.
Usage: bazel_load.py CS SPAWN WORKDIR REPO kill N | two SECS
"""

import hashlib
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

import reapi

cs, spawn, work, repo, mode, amount = sys.argv[1:7]
amount = int(amount)
seed = int(os.environ.get("RELIABILITY_SEED", time.time()))
rng = random.Random(seed)
cache = os.path.join(work, "cache")
os.makedirs(cache, exist_ok=True)
N = 24
# Eviction pressure: the bound the server (EVICT=serve) or the gc loop (EVICT=gc) keeps.
MAX_SIZE = os.environ.get("RELIABILITY_MAX_SIZE", "4M")  # below one build's outputs
EVICT = os.environ.get("RELIABILITY_EVICT", "both")
extra = []
if mode == "two" and EVICT in ("serve", "both"):
    extra = [reapi.CONFIG["max_size_flag"], MAX_SIZE, reapi.CONFIG["evict_every_flag"], "1"]
# One TCP port for every restart, so the address the launcher gave Bazel stays right.
_s = socket.socket()
_s.bind(("127.0.0.1", 0))
extra += ["--port", str(_s.getsockname()[1])]
_s.close()
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve-%s.log" % mode), jobs=2,
                      extra=extra)

sources = {"src%d.txt" % i: (("source %d %s\n" % (i, rng.random())) * (200 + 50 * i)).encode()
           for i in range(N)}


def expected(nonce):
    out = {}
    for i in range(N):
        a, b = sources["src%d.txt" % i], sources["src%d.txt" % ((i + 1) % N)]
        out["pair%d.txt" % i] = (hashlib.sha256(a + b).hexdigest() + "  -\n").encode()
    chain = b""
    for i in range(N):
        chain = (hashlib.sha256(chain + out["pair%d.txt" % i]).hexdigest() + "  -\n").encode()
        out["chain%d.txt" % i] = chain
    big = b"".join(sources["src%d.txt" % i] for i in range(N))
    # as the rule "big" makes it: 2 MiB per nonce, so that eviction has work to do
    out["big.bin"] = (("%s\n" % nonce).encode() + big * (1 + (2 << 20) // len(big)))[:2 << 20]
    out["nonce.txt"] = ("%s\n" % nonce).encode()
    return out


def make_workspace(path):
    os.makedirs(os.path.join(path, "tools"), exist_ok=True)
    for n, data in sources.items():
        with open(os.path.join(path, n), "wb") as f:
            f.write(data)
    link = os.path.join(path, "tools", "bazel")
    if not os.path.lexists(link):
        os.symlink(os.path.join(repo, "tools", "bazel"), link)
    compat = os.path.join(repo, "third_party", "bazel_compat")
    with open(os.path.join(path, "WORKSPACE"), "w") as f:
        f.write('workspace(name = "reliability")\n')
        for name, p in (("bazel_skylib", "/usr/share/bazel/tools/skylib"),
                        ("platforms", "/usr/share/bazel/tools/platforms"),
                        ("rules_cc", compat + "/rules_cc"), ("rules_java", compat + "/rules_java"),
                        ("remote_coverage_tools", compat + "/remote_coverage_tools")):
            f.write('local_repository(name = "%s", path = "%s")\n' % (name, p))
    with open(os.path.join(path, ".bazelrc"), "w") as f:
        f.write("try-import %s/strategy/clonestage.bazelrc\nbuild --nosandbox_debug\n" % repo)
    rules = []
    for i in range(N):
        rules.append('genrule(name = "pair%d", srcs = ["src%d.txt", "src%d.txt"], '
                     'outs = ["pair%d.txt"], cmd = "sleep 0.1; cat $(SRCS) | sha256sum > $@")'
                     % (i, i, (i + 1) % N, i))
        prev = ('":chain%d", ' % (i - 1)) if i else ""
        rules.append('genrule(name = "chain%d", srcs = [%s":pair%d"], outs = ["chain%d.txt"], '
                     'cmd = "cat $(SRCS) | sha256sum > $@")' % (i, prev, i, i))
    reps = 1 + (2 << 20) // sum(len(d) for d in sources.values())
    rules.append('genrule(name = "big", srcs = [%s], outs = ["big.bin"], '
                 'cmd = "(echo $$RELIABILITY_NONCE; for i in $$(seq %d); do cat $(SRCS); done) > $@.tmp; '
                 'head -c 2097152 $@.tmp > $@; rm $@.tmp")'
                 % (", ".join('"src%d.txt"' % i for i in range(N)), reps))
    rules.append('genrule(name = "nonce", outs = ["nonce.txt"], '
                 'cmd = "echo $$RELIABILITY_NONCE > $@")')
    # $(SRCS) lists srcs in the order given, which is the order expected() hashes them in.
    with open(os.path.join(path, "BUILD.bazel"), "w") as f:
        f.write("\n".join(rules) + "\n")


def bazel(ws, outbase, args, log, limit=300):
    env = dict(os.environ)
    env.update({"CLONESTAGE_CACHE": cache, "CLONESTAGE_BIN": cs})
    for k in ("CLONESTAGE_DISABLE", "CLONESTAGE_SPAWN", "CLONESTAGE_TCP"):
        env.pop(k, None)
    with open(log, "ab") as f:
        f.write(("\n=== bazel %s\n" % " ".join(args)).encode())
        f.flush()
        try:
            return subprocess.run(["bazel", "--output_base=" + outbase] + args, cwd=ws,
                                  stdout=f, stderr=f, env=env, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            return 124


def build(ws, outbase, nonce, log):
    rc = bazel(ws, outbase, ["build", "--jobs=2", "--config=clonestage",
                             "--action_env=RELIABILITY_NONCE=%s" % nonce, "//..."], log)
    wrong = []
    if rc == 0:
        bin_dir = os.path.join(ws, "bazel-bin")
        for name, want in expected(nonce).items():
            try:
                with open(os.path.join(bin_dir, name), "rb") as f:
                    got = f.read()
            except OSError:
                got = None
            if got != want:
                wrong.append(name)
    return rc, wrong


def summary(log):
    """Bazel's last process summary line in LOG ("INFO: 51 processes: ...")."""
    last = ""
    with open(log, errors="replace") as f:
        for ln in f:
            if " process" in ln and ln.startswith("INFO: "):
                last = ln.strip()
    return last


def local_spawns(log):
    s = summary(log)
    m = re.search(r"(\d+) local", s)
    return int(m.group(1)) if m else 0


def fail_line(name, detail):
    reapi.say("%s: %s" % (name, detail))


why = server.start()
if why:
    reapi.say("bazel %s: FAIL: the server did not start: %s" % (mode, why))
    sys.exit(1)

if mode == "kill":
    ws = os.path.join(work, "ws")
    make_workspace(ws)
    ob = os.path.join(work, "ob")
    log = os.path.join(work, "bazel-kill.log")
    failed_next = wrong_outputs = corrupt = failed_restarts = kills = 0
    # A first build warms Bazel up (and proves the setup).
    rc, wrong = build(ws, ob, "warm", log)
    if rc != 0 or wrong:
        fail_line("bazel kill", "the first build failed (exit %d, wrong %s); see %s" % (rc, wrong, log))
        failed_next += 1
    killed_failed = 0
    for k in range(2 * amount):  # a build that ends before its kill gets another try
        if kills >= amount:
            break
        nonce = "k%d-%s" % (k, rng.random())
        out_k = {}
        # Kill while the server runs this build's actions, after a random delay; a build that
        # ended first is not counted as killed under. "This build's" matters: work dirs of the
        # last build may still hold a staged root/ while the janitor removes them, and a kill
        # before this build's launcher has looked (tools/bazel -> `clonestage launch`) makes
        # that launcher start a server of its own, rightly, which then holds the cache's lock
        # when the script restarts its server. So wait for Bazel's own output of this build
        # (the launcher has exec'd Bazel: it found the server) and a work dir that is new.
        workdir = os.path.join(cache, "work")
        before = set(os.listdir(workdir)) if os.path.isdir(workdir) else set()
        log_at = os.path.getsize(log)
        t = threading.Thread(target=lambda: out_k.update(r=build(ws, ob, nonce, log)))
        t.start()
        deadline = time.time() + 120

        def bazel_runs():
            with open(log, "rb") as f:
                f.seek(log_at)
                return b"Invocation ID" in f.read()

        # (a staged root/: the server also keeps empty work dirs ready for the next actions)
        def staging():
            return bazel_runs() and any(
                os.path.isdir(os.path.join(workdir, e, "root"))
                for e in os.listdir(workdir) if e not in before)
        while t.is_alive() and time.time() < deadline and not staging():
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.8))
        if server.alive() and t.is_alive():
            server.kill9()
            kills += 1
        else:
            reapi.say("bazel kill: build %d ended before its kill; another try" % (k + 1))
        # verify on the dead server's cache, then restart at once, as the launcher would for
        # the next command: this build goes on against the new server (or locally).
        ok, out = server.verify()
        if not ok:
            corrupt += 1
            fail_line("bazel kill", "verify after kill %d: %s" % (k + 1, out[-300:]))
        why = server.start()
        if why:
            failed_restarts += 1
            fail_line("bazel kill", "restart failed: %s" % why)
            if server.start():
                break
        t.join()
        rc, wrong = out_k.get("r", (1, []))
        if rc != 0:
            killed_failed += 1
            fail_line("bazel kill", "the build killed under failed (exit %d); see %s" % (rc, log))
        wrong_outputs += len(wrong)
        if wrong:
            fail_line("bazel kill", "wrong outputs of the build killed under: %s" % wrong)
        rc, wrong = build(ws, ob, "next%d-%s" % (k, rng.random()), log)
        if rc != 0:
            failed_next += 1
            fail_line("bazel kill", "the build after kill %d failed (exit %d); see %s" % (k + 1, rc, log))
        wrong_outputs += len(wrong)
        if wrong:
            fail_line("bazel kill", "wrong outputs after kill %d: %s" % (k + 1, wrong))
    bazel(ws, ob, ["shutdown"], log, 60)
    server.stop()
    # A server some launcher started (a restart the script lost) must not outlive the suite.
    # (`clonestage stop`: 0 stopped one, 3 none was running)
    p = subprocess.run([cs, "--cache", cache, "stop"], capture_output=True, text=True)
    stray = 0 if p.returncode == 3 else 1
    if stray:
        fail_line("bazel kill", "a server the script did not start still ran on the cache (stop: "
                  "exit %d, %s)" % (p.returncode, (p.stdout + p.stderr).strip()))
    crashes = server.crashes()
    bad = failed_next + killed_failed + wrong_outputs + corrupt + failed_restarts + len(crashes) + stray
    reapi.say("bazel kill: %s: %d kills mid-build: %d failed builds killed under, %d failed next "
              "builds, %d wrong outputs, %d corrupt blobs, %d failed restarts, %d crashes"
              % ("PASS" if bad == 0 and kills == amount else "FAIL", kills, killed_failed, failed_next,
                 wrong_outputs, corrupt, failed_restarts, len(crashes)))
    sys.exit(0 if bad == 0 and kills == amount else 1)

# mode == "two"
stop = threading.Event()
res = {"builds": 0, "failed": 0, "wrong": 0, "local": 0}
lock = threading.Lock()
gc_runs = [0, 0, 0]  # runs, failures, blobs evicted


def gc_loop():
    while not stop.is_set():
        p = subprocess.run([cs, "--cache", cache, "gc", "--max-size", MAX_SIZE],
                           capture_output=True, text=True)
        gc_runs[0] += 1
        m = re.search(r"evicted (\d+) blobs", p.stdout + p.stderr)
        gc_runs[2] += int(m.group(1)) if m else 0
        if p.returncode:
            gc_runs[1] += 1
            if gc_runs[1] <= 3:
                reapi.say("bazel two: gc failed: %s" % (p.stdout + p.stderr)[-300:])
        stop.wait(0.5)


def worker(idx):
    ws = os.path.join(work, "ws%d" % idx)
    make_workspace(ws)
    ob = os.path.join(work, "ob%d" % idx)
    log = os.path.join(work, "bazel-two-%d.log" % idx)
    r = random.Random(seed + idx)
    t0 = time.time()
    while time.time() - t0 < amount:
        nonce = "n%d" % r.randint(0, 7)  # shared by both bases: some builds hit the other's results
        if r.random() < 0.5:
            bazel(ws, ob, ["clean"], log, 120)
        rc, wrong = build(ws, ob, nonce, log)
        loc = local_spawns(log) if rc == 0 else 0
        with lock:
            res["builds"] += 1
            res["local"] += loc
            if rc != 0:
                res["failed"] += 1
                fail_line("bazel two", "base %d: build failed (exit %d); see %s" % (idx, rc, log))
            if wrong:
                res["wrong"] += len(wrong)
                fail_line("bazel two", "base %d: wrong outputs %s" % (idx, wrong))
    bazel(ws, ob, ["shutdown"], log, 60)


threads = [threading.Thread(target=worker, args=(i,)) for i in (1, 2)]
if EVICT in ("gc", "both"):
    threads.append(threading.Thread(target=gc_loop, daemon=True))
for t in threads:
    t.start()
for t in threads[:2]:
    t.join()
stop.set()
server.stop()
ok, out = server.verify()
crashes = server.crashes()
size = subprocess.run(["du", "-sh", os.path.join(cache, "blobs")], capture_output=True,
                      text=True).stdout.split("\t")[0]
bad = res["failed"] + res["wrong"] + len(crashes) + (0 if ok else 1)
reapi.say("bazel two: %s: 2 output bases, %d builds in %d s with eviction to %s (%s%s): %d failed "
          "builds, %d wrong outputs, %d spawns run locally, verify %s, %d crashes, blobs now %s"
          % ("PASS" if bad == 0 and res["builds"] >= 2 else "FAIL", res["builds"], amount,
             MAX_SIZE, {"serve": "serve --max-size", "gc": "gc loop"}.get(EVICT, "serve --max-size and a gc loop"),
             ", %d gc runs evicted %d blobs" % (gc_runs[0], gc_runs[2]) if EVICT != "serve" else "", res["failed"], res["wrong"],
             res["local"], "clean" if ok else "FOUND CORRUPT BLOBS", len(crashes), size))
sys.exit(0 if bad == 0 and res["builds"] >= 2 else 1)
