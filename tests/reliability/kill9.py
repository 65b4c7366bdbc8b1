"""kill9.py: part 1 of the reliability suite: kill -9 of the server at random points of a
mixed load, then restart, verify and check the next requests.

Load (three threads, running throughout, reconnecting after each kill): batch uploads of small
blobs, ByteStream writes of 100 KiB - 2 MiB blobs, and Execute of small actions whose output is
a known function of their inputs (checked byte for byte whenever an Execute succeeds). After
each SIGKILL at a random moment: `clonestage verify` on the dead server's cache (corrupt blobs),
a restart (failed restarts), and a fresh upload + Execute + read back (failed next requests);
the server's log is scanned for panics and aborts. Every acknowledged upload is read back at
the end and compared.

Prints one line: kills, corrupt blobs, failed restarts, failed next requests, wrong outputs,
lost blobs, crashes, the load's successes. Exit 1 when any of those counts is not 0.
Usage: kill9.py CS SPAWN WORKDIR [KILLS]
"""

import os
import random
import sys
import threading
import time

import reapi

cs, spawn, work = sys.argv[1:4]
kills = int(sys.argv[4]) if len(sys.argv) > 4 else 50
seed = int(os.environ.get("RELIABILITY_SEED", time.time()))
rng = random.Random(seed)
cache = os.path.join(work, "cache")
os.makedirs(cache, exist_ok=True)
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve.log"), jobs=2)

stop = threading.Event()
lock = threading.Lock()
acked = {}  # digest str -> sha256 hex, uploads the server acknowledged
counts = {"uploads": 0, "executes": 0, "wrong_outputs": 0, "errors": 0}
wrong = []


def bump(k, n=1):
    with lock:
        counts[k] += n


def client_loop(body):
    """Run body(client) until stop; any RPC error (server killed) means: wait, reconnect."""
    trng = random.Random(rng.random())
    while not stop.is_set():
        cl = reapi.Client(server.socket, timeout=20)
        try:
            while not stop.is_set():
                body(cl, trng)
        except Exception:  # the server died under us: expected, count and reconnect
            bump("errors")
            time.sleep(0.05)
        finally:
            cl.close()


def batch(cl, r):
    blobs = [os.urandom(r.randint(1, 64 << 10)) for _ in range(r.randint(1, 8))]
    for d, b in zip(cl.batch_upload(blobs), blobs):
        with lock:
            acked[repr(d)] = d
    bump("uploads", len(blobs))


def stream(cl, r):
    data = os.urandom(r.randint(100 << 10, 2 << 20))
    d = cl.bytestream_write(data)
    with lock:
        acked[repr(d)] = d
    bump("uploads")


def execute(cl, r):
    a = os.urandom(r.randint(0, 200 << 10))
    b = ("%d\n" % r.randint(0, 1 << 60)).encode()
    # out = b then a, with an extra line: a known function of the inputs.
    args = ["/bin/sh", "-c", "cat b a > out; echo done >> out; sleep 0.%d" % r.randint(0, 3)]
    ad, res = cl.run(args, inputs={"a": a, "b": b}, output_files=["out"])
    if res.status_code != 0:
        raise RuntimeError("execute: %r" % res)
    got = cl.bytestream_read(res.outputs["out"])
    if got != b + a + b"done\n":
        bump("wrong_outputs")
        wrong.append(repr(ad))
    bump("executes")


def next_request_ok():
    """A fresh upload, Execute and read back on the restarted server."""
    cl = server.client(timeout=20)
    try:
        data = os.urandom(1000)
        ad, res = cl.run(["/bin/sh", "-c", "cat x > y"], inputs={"x": data}, output_files=["y"],
                         salt=os.urandom(8))
        return res.status_code == 0 and res.exit_code == 0 and cl.bytestream_read(res.outputs["y"]) == data
    except Exception as e:
        reapi.say("kill9: next request failed: %s" % e)
        return False
    finally:
        cl.close()


why = server.start()
if why:
    reapi.say("kill9: FAIL: the server did not start: %s" % why)
    sys.exit(1)
threads = [threading.Thread(target=client_loop, args=(f,), daemon=True)
           for f in (batch, stream, execute, execute)]
for t in threads:
    t.start()

corrupt = failed_restarts = failed_next = done = 0
t0 = time.time()
for k in range(kills):
    time.sleep(rng.uniform(0.05, 1.0))
    server.kill9()
    done += 1
    if k == 0 and os.environ.get("RELIABILITY_SELFTEST") == "corrupt":
        # Proves the count can fail: damage one stored blob as a crash mid-write would.
        blobs = os.path.join(cache, "blobs")
        for sub in sorted(os.listdir(blobs)):
            names = sorted(os.listdir(os.path.join(blobs, sub)))
            if names:
                p = os.path.join(blobs, sub, names[0])
                os.chmod(p, 0o644)
                with open(p, "ab") as f:
                    f.write(b"x")
                break
    ok, out = server.verify()
    if not ok:
        corrupt += max(1, sum(1 for ln in out.splitlines() if ln.startswith("corrupt:")))
        reapi.say("kill9: verify after kill %d: %s" % (k + 1, out[-500:]))
    why = server.start()
    if why:
        failed_restarts += 1
        reapi.say("kill9: restart after kill %d failed: %s" % (k + 1, why))
        why = server.start()
        if why:
            reapi.say("kill9: second restart failed too: %s; stopping" % why)
            break
    if not next_request_ok():
        failed_next += 1

stop.set()
for t in threads:
    t.join(30)

# Every upload the server acknowledged must still be there, intact (verify quarantines a
# corrupt one, so "missing" counts both).
cl = server.client(timeout=60)
digests = list(acked.values())
missing = []
for i in range(0, len(digests), 500):
    missing += cl.find_missing(digests[i:i + 500])
cl.close()
server.stop()
ok, out = server.verify()
if not ok:
    corrupt += 1
    reapi.say("kill9: final verify: %s" % out[-500:])
crashes = server.crashes()
for ln in crashes[:5]:
    reapi.say("kill9: server log: %s" % ln[:300])

bad = corrupt + failed_restarts + failed_next + counts["wrong_outputs"] + len(missing) + len(crashes)
reapi.say("kill9: %s: %d kills in %.0f s (seed %d): %d corrupt blobs, %d failed restarts, "
          "%d failed next requests, %d wrong outputs, %d acknowledged blobs lost, %d crashes; "
          "load: %d uploads, %d executes checked, %d interrupted calls"
          % ("PASS" if bad == 0 and done >= kills else "FAIL", done, time.time() - t0, seed,
             corrupt, failed_restarts, failed_next, counts["wrong_outputs"], len(missing),
             len(crashes), counts["uploads"], counts["executes"], counts["errors"]))
sys.exit(0 if bad == 0 and done >= kills else 1)
