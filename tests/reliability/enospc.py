"""enospc.py: part 2 of the reliability suite: a full disk under the cache.

The cache lives on a small ext4 loop filesystem (64 MiB) made and mounted here, with a
ballast file taking part of it. The disk is filled by ByteStream and batch uploads, then by
actions whose outputs do not fit; every error must be RESOURCE_EXHAUSTED (issue 10, finding 6;
an action that fails on its own write is an action failure, not an error). Then `verify` must
find 0 corrupt entries, the ballast is removed (space returns) and the next uploads and
actions must succeed, results checked byte for byte, on the same server without a restart.

Prints one line: errors by code, unclear errors (any code but RESOURCE_EXHAUSTED), corrupt
entries, crashes, whether it recovered. Needs root (mount). Usage: enospc.py CS SPAWN WORKDIR
"""

import os
import subprocess
import sys
import time

import reapi

cs, spawn, work = sys.argv[1:4]
img = os.path.join(work, "small.img")
mnt = os.path.join(work, "mnt")
os.makedirs(mnt, exist_ok=True)
subprocess.run(["truncate", "-s", "64M", img], check=True)
subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", img], check=True)
subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
RESOURCE_EXHAUSTED = 8
codes = {}
unclear = []
server = None


def note(code, msg):
    codes[code] = codes.get(code, 0) + 1
    if code != RESOURCE_EXHAUSTED and len(unclear) < 5:
        unclear.append("%s: %s" % (code, msg[:300].replace("\n", " ")))


def rpc_code(e):
    if hasattr(e, "code") and callable(e.code):
        return e.code().value[0], e.details() or ""
    return getattr(e, "status_code", -1), str(e)


try:
    cache = os.path.join(mnt, "cache")
    os.makedirs(cache)
    with open(os.path.join(mnt, "ballast"), "wb") as f:
        f.write(b"\0" * (24 << 20))
        f.flush()
        os.fsync(f.fileno())
    server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve.log"), jobs=2)
    why = server.start()
    if why:
        reapi.say("enospc: FAIL: the server did not start: %s" % why)
        sys.exit(1)
    cl = server.client(timeout=30)
    # 1. Fill the disk with uploads until 10 of them failed.
    failures = stored = 0
    for i in range(200):
        try:
            if i % 2:
                cl.bytestream_write(os.urandom(2 << 20))
            else:
                cl.batch_upload([os.urandom(512 << 10) for _ in range(4)])
            stored += 1
        except Exception as e:
            note(*rpc_code(e))
            failures += 1
            if failures >= 10:
                break
    # 2. Actions on a full disk: staging, outputs, the action cache.
    actions_run = 0
    for i in range(6):
        try:
            ad, res = cl.run(["/bin/sh", "-c", "head -c %d /dev/urandom > out" % (4 << 20)],
                             inputs={"in": os.urandom(64 << 10)}, output_files=["out"],
                             salt=os.urandom(8))
            actions_run += 1
            if res.status_code:
                note(res.status_code, res.status_message)
        except Exception as e:
            note(*rpc_code(e))
    alive_full = server.alive()
    cl.close()
    # 3. Nothing corrupt (verify while the server runs: it only reads and quarantines).
    ok, out = server.verify()
    corrupt = sum(1 for ln in out.splitlines() if ln.startswith("corrupt:"))
    if not ok and not corrupt:
        corrupt = 1
    # 4. Space returns: the same server must serve again.
    os.remove(os.path.join(mnt, "ballast"))
    recovered = False
    detail = ""
    cl = server.client(timeout=30)
    try:
        data = os.urandom(1 << 20)
        d = cl.bytestream_write(data)
        ad, res = cl.run(["/bin/sh", "-c", "cat in in > out"], inputs={"in": data},
                         output_files=["out"], salt=os.urandom(8))
        recovered = (cl.bytestream_read(d) == data and res.status_code == 0 and res.exit_code == 0
                     and cl.bytestream_read(res.outputs["out"]) == data + data)
        detail = repr(res)
    except Exception as e:
        detail = str(e)[:300]
    finally:
        cl.close()
    server.stop()
    ok2, out2 = server.verify()
    if not ok2:
        corrupt += 1
    crashes = server.crashes()
    bad = len(unclear) > 0 or corrupt or crashes or not recovered or not alive_full or not codes
    for u in unclear:
        reapi.say("enospc: not RESOURCE_EXHAUSTED: %s" % u)
    if not recovered:
        reapi.say("enospc: after space returned: %s" % detail)
    if not codes:
        reapi.say("enospc: the disk never filled: the check proved nothing")
    reapi.say("enospc: %s: %d uploads stored before the disk filled, %d errors on a full disk "
              "(%s), %d not RESOURCE_EXHAUSTED, %d corrupt entries, %d crashes, server %s while "
              "full, %s after space returned"
              % ("FAIL" if bad else "PASS", stored, sum(codes.values()),
                 ", ".join("%s x%d" % ({8: "RESOURCE_EXHAUSTED", 13: "INTERNAL", 2: "UNKNOWN"}
                                       .get(c, str(c)), n) for c, n in sorted(codes.items())),
                 sum(n for c, n in codes.items() if c != RESOURCE_EXHAUSTED), corrupt,
                 len(crashes), "alive" if alive_full else "DEAD",
                 "recovered" if recovered else "NOT recovered"))
    sys.exit(1 if bad else 0)
finally:
    if server:
        server.kill9()
    for _ in range(20):
        if subprocess.run(["umount", mnt]).returncode == 0:
            break
        time.sleep(0.5)
    try:
        os.remove(img)
    except OSError:
        pass
