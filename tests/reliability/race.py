"""race.py: part 4 of the reliability suite: the write-through race (issue 10, finding 2).

Two concurrent actions share one input blob, which a hardlinking cache (ext4) gives both as
the same inode. Both are staged at once; 0.5 s later A appends to it (as root it can; as a
non-root owner it does `chmod u+w` first) and exits; at 1.5 s B copies the input to its output. Whatever B read after A's
write is corrupted input: such a result must never come back as a clean success, nor be
served from the action cache afterwards.

Run once with the server as root and once as a non-root cache owner (a system user created
for it, `setpriv` to run the server). Prints one line per owner: rounds, results built from
corrupted input that were reported as success, and those served from the action cache.
Usage: race.py CS SPAWN WORKDIR(on ext4) root|USER [ROUNDS]
"""

import os
import pwd
import sys
import threading
import time

import reapi

cs, spawn, work, owner = sys.argv[1:5]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
user = None if owner == "root" else owner
cache = os.path.join(work, "cache-" + owner)
os.makedirs(cache, exist_ok=True)
if user:
    pw = pwd.getpwnam(user)
    os.chown(work, pw.pw_uid, pw.pw_gid)
    os.chown(cache, pw.pw_uid, pw.pw_gid)
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve-%s.log" % owner), jobs=2,
                      user=user)
why = server.start()
if why:
    reapi.say("race (%s): FAIL: the server did not start: %s" % (owner, why))
    sys.exit(1)

reported = served = a_cached = clean_b = errors = 0
for r in range(rounds):
    original = ("input %d %s\n" % (r, os.urandom(8).hex())).encode() * 100
    res = {}

    def run(name, args, outs, delay):
        time.sleep(delay)
        cl = server.client()
        try:
            res[name] = cl.run(args, inputs={"shared": original}, output_files=outs,
                               salt=os.urandom(8))
        except Exception as e:  # an RPC error: counted, not a success
            res[name] = (None, reapi.Result(status_code=-1, status_message=str(e)))
        finally:
            cl.close()

    a = threading.Thread(target=run, args=("A", ["/bin/sh", "-c",
                         "sleep 0.5; chmod u+w shared 2>/dev/null; printf TAMPERED >> shared; echo a > a"],
                         ["a"], 0))
    b = threading.Thread(target=run, args=("B", ["/bin/sh", "-c", "sleep 1.5; cat shared > out"],
                         ["out"], 0))
    a.start()
    b.start()
    a.join()
    b.join()
    cl = server.client()
    try:
        ad, ra = res["A"]
        bd, rb = res["B"]
        if ad is not None and cl.get_action_result(ad) is not None:
            a_cached += 1
        if rb.status_code == 0 and rb.exit_code == 0 and "out" in rb.outputs:
            got = cl.bytestream_read(rb.outputs["out"])
            if got != original:
                reported += 1
                reapi.say("race (%s): round %d: B succeeded with a corrupted input (%d bytes, "
                          "ends %r)" % (owner, r + 1, len(got), got[-12:]))
            else:
                clean_b += 1
        elif rb.status_code == -1:
            errors += 1
        if bd is not None:
            cached = cl.get_action_result(bd)
            if cached is not None and "out" in cached.outputs:
                try:
                    got = cl.bytestream_read(cached.outputs["out"])
                except Exception:
                    got = None  # the cache lists a blob it cannot serve: not served
                if got is not None and got != original:
                    served += 1
    finally:
        cl.close()

server.stop()
crashes = server.crashes()
ok, out = server.verify()
bad = reported + served + a_cached + len(crashes) + errors + (0 if ok else 1)
reapi.say("race (%s owner): %s: %d rounds: %d results built from corrupted input reported as "
          "success, %d served from the action cache, %d tampering actions cached, %d clean B "
          "results, %d RPC errors, verify %s, %d crashes"
          % (owner, "PASS" if bad == 0 else "FAIL", rounds, reported, served, a_cached, clean_b,
             errors, "clean" if ok else "found corrupt blobs", len(crashes)))
sys.exit(0 if bad == 0 else 1)
