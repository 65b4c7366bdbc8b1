"""grace.py: a just-answered result's blobs outlive eviction (issue 23, item 5).

The server runs under an absurdly small bound (`serve --max-size 1 --evict-every 1`: every
second its eviction takes all it may). Four client threads each Execute small actions with
two outputs, wait a random 0-1.5 s (the time a client may take to start its downloads), then
read every blob the result names. Before the grace, a tick between the response and the read
evicted them (the attack saw 19 of 200 reads fail); now each answered result's blobs are held
for 60 s. Counts reads that found a blob gone (must be 0); the server's log must show that
eviction ran meanwhile. Usage:
  grace.py CS SPAWN WORKDIR ACTIONS
Environment: RELIABILITY_SEED.
"""

import os
import random
import sys
import threading
import time

import reapi

cs, spawn, work = sys.argv[1:4]
n_actions = int(sys.argv[4]) if len(sys.argv) > 4 else 120
seed = int(os.environ.get("RELIABILITY_SEED", time.time()))
cache = os.path.join(work, "cache")
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve.log"), jobs=2,
                      extra=[reapi.CONFIG["max_size_flag"], "1",
                             reapi.CONFIG["evict_every_flag"], "1"])
lock = threading.Lock()
counts = {"actions": 0, "reads": 0, "gone": 0, "errors": 0, "reuploads": 0}
first = []


def worker(k, per):
    rng = random.Random(seed * 10 + k)
    cl = server.client(timeout=60)
    try:
        for i in range(per):
            nonce = "%d-%d-%d" % (seed, k, i)
            for _ in range(5):
                _, res = cl.run(["/bin/sh", "-c", "echo %s > out; head -c 70000 /dev/zero > big; "
                                 "echo %s >> big" % (nonce, nonce)],
                                output_files=["big", "out"], salt=nonce.encode())
                if res.status_code != 9:
                    break
                # What the client uploaded was evicted before its Execute: uploaded again and
                # retried, as Bazel does on FAILED_PRECONDITION.
                with lock:
                    counts["reuploads"] += 1
            if res.status_code != 0 or res.exit_code != 0:
                with lock:
                    counts["errors"] += 1
                    if len(first) < 3:
                        first.append("Execute: %r" % res)
                continue
            time.sleep(rng.uniform(0, 1.5))
            for path, d in sorted(res.outputs.items()):
                try:
                    data = cl.bytestream_read(d)
                    ok = reapi.Digest.of(data).hash == d.hash
                except Exception as e:  # NOT_FOUND: evicted before the client read it
                    ok = False
                    with lock:
                        if len(first) < 3:
                            first.append("%s: %s" % (path, str(e)[:200]))
                with lock:
                    counts["reads"] += 1
                    counts["gone"] += 0 if ok else 1
            with lock:
                counts["actions"] += 1
    finally:
        cl.close()


def main():
    os.makedirs(work, exist_ok=True)
    why = server.start()
    if why:
        reapi.say("grace: FAIL: the server did not start: %s" % why)
        sys.exit(1)
    threads = [threading.Thread(target=worker, args=(k, n_actions // 4)) for k in range(4)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - t0
    server.stop()
    crashes = server.crashes()
    with open(server.log, "rb") as f:
        evictions = f.read().count(b"evicted least-recently-used cache entries")
    ok, out = server.verify()
    bad = counts["gone"] + counts["errors"] + len(crashes) + (0 if ok else 1) + (1 if evictions == 0 else 0)
    for line in first:
        reapi.say("grace: " + line)
    reapi.say("grace: %s: %d actions in %.0f s under --max-size 1 --evict-every 1 (%d evictions, "
              "seed %d): %d of %d reads found a blob gone, %d failed Executes (%d uploaded again "
              "after FAILED_PRECONDITION), %d crashes, verify %s"
              % ("PASS" if bad == 0 else "FAIL", counts["actions"], took, evictions, seed,
                 counts["gone"], counts["reads"], counts["errors"], counts["reuploads"],
                 len(crashes),
                 "clean" if ok else "FAILED: " + out[:200]))
    sys.exit(0 if bad == 0 else 1)


main()
