"""tests/upstream/reapi_check.py: what an upstream REAPI server holds, asked independently.

Usage: python reapi_check.py uploaded CACHE_DIR HOST:PORT [INSTANCE]

For every ActionResult in clonestage's local action cache CACHE_DIR/ac/<hh>/<hash>-<size>
(the results that machine executed), asks the upstream with Python grpcio, not clonestage's
code: GetActionResult must return a result with the same exit code and the same output
files (path, digest, executable bit), and FindMissingBlobs must find every blob it names
(output files, output trees, stdout, stderr) present. Prints "N of N results present" and
exits 0, or prints each difference and exits 1. Needs grpcio and tests/lib/pb.py.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import grpc  # noqa: E402
import pb  # noqa: E402
from pb import re  # noqa: E402


def digest_key(d):
    return (d.hash, d.size_bytes)


def summary(result):
    """(exit code, sorted output files, every blob digest it names) of an ActionResult."""
    r = re.ActionResult.FromString(result)
    files = sorted((o.path, digest_key(o.digest), o.is_executable) for o in r.output_files)
    blobs = {dg for _, dg, _ in files}
    blobs |= {digest_key(od.tree_digest) for od in r.output_directories if od.HasField("tree_digest")}
    blobs |= {digest_key(d) for d in (r.stdout_digest, r.stderr_digest)}
    blobs = {b for b in blobs if b[1] > 0}  # the empty blob is never stored
    return r.exit_code, files, blobs


def uploaded(cache, addr, instance):
    channel = grpc.insecure_channel(addr)
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
            req = re.GetActionResultRequest(instance_name=instance, action_digest=re.Digest(hash=h, size_bytes=int(size)))
            try:
                theirs = summary(pb.call(channel, pb.V2 + "ActionCache/GetActionResult", req, 30).SerializeToString())
            except grpc.RpcError as e:
                problems.append("%s: GetActionResult: %s %s" % (name, e.code().name, e.details()))
                continue
            if theirs[:2] != local[:2]:
                problems.append("%s: the upstream's result differs: %r vs local %r" % (name, theirs[:2], local[:2]))
                continue
            req = re.FindMissingBlobsRequest(
                instance_name=instance, blob_digests=[re.Digest(hash=h, size_bytes=n) for h, n in sorted(local[2])])
            missing = pb.call(channel, pb.V2 + "ContentAddressableStorage/FindMissingBlobs", req, 30).missing_blob_digests
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
