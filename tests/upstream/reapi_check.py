"""tests/upstream/reapi_check.py: what an upstream REAPI server holds, asked independently.

Usage: python reapi_check.py uploaded CACHE_DIR HOST:PORT [INSTANCE]

For every ActionResult in clonestage's local action cache CACHE_DIR/ac/<hh>/<hash>-<size>
(the results that machine executed), asks the upstream with Python grpcio, not clonestage's
code: GetActionResult must return a result with the same exit code and the same output
files (path, digest, executable bit), and FindMissingBlobs must find every blob it names
(output files, output trees, stdout, stderr) present. Prints "N of N results present" and
exits 0, or prints each difference and exits 1. Needs grpcio and tests/lib/wire.py.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import grpc  # noqa: E402
import wire  # noqa: E402

AC = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
FMB = "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs"


def digest_msg(h, size):
    return wire.f_bytes(1, h) + (wire.f_varint(2, size) if size else b"")


def digest_key(msg):
    d = wire.decode(msg)
    return (d.get(1, [b""])[0].decode(), d.get(2, [0])[0])


def summary(result):
    """(exit code, sorted output files, every blob digest it names) of an ActionResult."""
    r = wire.decode(result)
    files = []
    blobs = set()
    for of in r.get(2, []):
        o = wire.decode(of)
        dg = digest_key(o[2][0]) if 2 in o else ("", 0)
        files.append((o.get(1, [b""])[0].decode(), dg, bool(o.get(4, [0])[0])))
        blobs.add(dg)
    for od in r.get(3, []):
        o = wire.decode(od)
        if 3 in o:
            blobs.add(digest_key(o[3][0]))
    for field in (6, 8):  # stdout_digest, stderr_digest
        for dg in r.get(field, []):
            blobs.add(digest_key(dg))
    blobs.discard(("", 0))
    blobs = {b for b in blobs if b[1] > 0}  # the empty blob is never stored
    return r.get(4, [0])[0], sorted(files), blobs


def uploaded(cache, addr, instance):
    channel = grpc.insecure_channel(addr)
    get = channel.unary_unary(AC)
    fmb = channel.unary_unary(FMB)
    problems = []
    n = 0
    acdir = os.path.join(cache, "ac")
    for sub in sorted(os.listdir(acdir)) if os.path.isdir(acdir) else []:
        for name in sorted(os.listdir(os.path.join(acdir, sub))):
            if "-" not in name or name.startswith("."):
                continue
            h, size = name.rsplit("-", 1)
            n += 1
            with open(os.path.join(acdir, sub, name), "rb") as f:
                local = summary(f.read())
            req = wire.f_bytes(1, instance) + wire.f_bytes(2, digest_msg(h, int(size)))
            try:
                theirs = summary(get(req, timeout=30))
            except grpc.RpcError as e:
                problems.append("%s: GetActionResult: %s %s" % (name, e.code().name, e.details()))
                continue
            if theirs[:2] != local[:2]:
                problems.append("%s: the upstream's result differs: %r vs local %r" % (name, theirs[:2], local[:2]))
                continue
            req = wire.f_bytes(1, instance) + b"".join(wire.f_bytes(2, digest_msg(*b)) for b in sorted(local[2]))
            missing = wire.decode(fmb(req, timeout=30)).get(2, [])
            if missing:
                problems.append("%s: the upstream lacks %d of its blobs, e.g. %r" % (name, len(missing), digest_key(missing[0])))
    for p in problems:
        print("reapi_check: " + p)
    print("%d of %d results present" % (n - len(problems), n))
    return 1 if problems or n == 0 else 0


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "uploaded":
        sys.exit(__doc__)
    sys.exit(uploaded(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else ""))


if __name__ == "__main__":
    main()
