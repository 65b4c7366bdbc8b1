"""upstream_lies.py: the lying team cache of issue 23 (item 1), against a live server.

A fake upstream in this process (grpcio generic handlers, tests/lib/pb.py's messages: ActionCache
GetActionResult, CAS BatchReadBlobs/FindMissingBlobs, ByteStream Read) holds, for each case, the
Action and Command of an action that declares `out.txt` (as Bazel's uploads put them there)
and answers GetActionResult with one lie, every blob of which it has with the right bytes:

  file-escapes       an output file at ../../UPSTREAM_ESCAPE
  file-absolute      an output file at /tmp/UPSTREAM_ESCAPE-<pid>
  symlink-escapes    an output symlink at ../x
  tree-escapes       an output Tree whose root holds a file named ../../TREE_ESCAPE
  same-path-twice    out.txt twice, with different bytes
  undeclared         200,000 output files the Command never declared, out.txt missing
  exit-1             exit_code 1
  no-command         a well-formed result whose Action and Command the upstream lacks

For each, a fresh `clonestage serve --upstream` (so each lie is the first its breaker sees):
GetActionResult must answer NOT_FOUND; Execute (after the client uploads the action, as Bazel
does) must run the action here (not cached_result, exit 0, out.txt = "local\\n"); the local
action cache must then hold that local result; `upstream_rejected` must be 1; and no file the
lies name may exist outside the cache. Prints one line with the counts. Usage:
  upstream_lies.py CS SPAWN WORKDIR
"""

import json
import os
import subprocess
import sys
import threading
from concurrent import futures

import grpc

import reapi
from reapi import Digest, action, command
import pb  # tests/lib, on sys.path once reapi is imported
from pb import re

cs, spawn, work = sys.argv[1:4]
RE = "/build.bazel.remote.execution.v2."
ESCAPES = ["UPSTREAM_ESCAPE", "TREE_ESCAPE", "x", "/tmp/UPSTREAM_ESCAPE-%d" % os.getpid()]


class Fake:
    """The upstream's state: blobs by hash, results by action hash, calls by method."""

    def __init__(self):
        self.blobs = {}
        self.ac = {}
        self.calls = {}
        self.lock = threading.Lock()

    def put(self, data):
        d = Digest.of(data)
        self.blobs[d.hash] = data
        return d

    def count(self, m):
        with self.lock:
            self.calls[m] = self.calls.get(m, 0) + 1

    def get_action_result(self, req, ctx):
        self.count("GetActionResult")
        d = req.action_digest
        if d.hash not in self.ac:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "no result")
        return self.ac[d.hash]

    def batch_read(self, req, ctx):
        self.count("BatchReadBlobs")
        out = re.BatchReadBlobsResponse()
        for d in req.digests:
            data = self.blobs.get(d.hash)
            r = out.responses.add(digest=d, data=data or b"")
            if data is None:
                r.status.code = grpc.StatusCode.NOT_FOUND.value[0]
        return out

    def find_missing(self, req, ctx):
        self.count("FindMissingBlobs")
        return re.FindMissingBlobsResponse(
            missing_blob_digests=[d for d in req.blob_digests if d.hash not in self.blobs])

    def read(self, req, ctx):
        self.count("Read")
        name = req.resource_name
        h = name.split("/blobs/")[-1].split("/")[0] if "/blobs/" in name else name.split("/")[1]
        data = self.blobs.get(h)
        if data is None:
            ctx.abort(grpc.StatusCode.NOT_FOUND, "no blob")
        for i in range(0, max(len(data), 1), 1 << 20):
            yield pb.bs.ReadResponse(data=data[i:i + (1 << 20)])

    def serve(self):
        def u(f, method, kind=grpc.unary_unary_rpc_method_handler):
            _, req, reply = pb.RPCS[method]
            return kind(f, request_deserializer=req.FromString, response_serializer=reply.SerializeToString)

        handlers = [
            grpc.method_handlers_generic_handler("build.bazel.remote.execution.v2.ActionCache", {
                "GetActionResult": u(self.get_action_result, RE + "ActionCache/GetActionResult")}),
            grpc.method_handlers_generic_handler(
                "build.bazel.remote.execution.v2.ContentAddressableStorage", {
                    "BatchReadBlobs": u(self.batch_read, RE + "ContentAddressableStorage/BatchReadBlobs"),
                    "FindMissingBlobs": u(self.find_missing, RE + "ContentAddressableStorage/FindMissingBlobs")}),
            grpc.method_handlers_generic_handler("google.bytestream.ByteStream", {
                "Read": u(self.read, pb.BS + "Read", grpc.unary_stream_rpc_method_handler)}),
        ]
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=handlers,
                             options=[("grpc.max_send_message_length", 64 << 20),
                                      ("grpc.max_receive_message_length", 64 << 20)])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        return server, port


def cmd_for(case):
    return command(["/bin/sh", "-c", "echo local > out.txt"], env=[("CASE", case),
                   ("PATH", "/usr/bin:/bin")], output_paths=["out.txt"])


def out_file(path, d):
    return re.OutputFile(path=path, digest=d.pb())


def lie(fake, case):
    """The ActionResult of `case`'s lie."""
    good = fake.put(b"upstream bytes\n")
    other = fake.put(b"other upstream bytes\n")
    r = re.ActionResult(stdout_digest=fake.put(b"stdout\n").pb())
    ok = out_file("out.txt", good)
    if case == "file-escapes":
        r.output_files.extend([out_file("../../UPSTREAM_ESCAPE", good), ok])
    elif case == "file-absolute":
        r.output_files.extend([ok, out_file(ESCAPES[3], good)])
    elif case == "symlink-escapes":
        r.output_files.append(ok)
        r.output_symlinks.add(path="../x", target="out.txt")
    elif case == "tree-escapes":
        root = re.Directory.FromString(reapi.directory(files=[("../../TREE_ESCAPE", good, False)]))
        t = fake.put(re.Tree(root=root).SerializeToString())
        r.output_directories.add(path="out.txt", tree_digest=t.pb())
    elif case == "same-path-twice":
        r.output_files.extend([ok, out_file("out.txt", other)])
    elif case == "undeclared":
        r.output_files.extend(out_file("u%d" % i, good) for i in range(200000))
    elif case == "exit-1":
        r.output_files.append(ok)
        r.exit_code = 1
    else:
        raise ValueError(case)
    return r


CASES = ["file-escapes", "file-absolute", "symlink-escapes", "tree-escapes", "same-path-twice",
         "undeclared", "exit-1", "no-command"]


def stats_of(cache):
    p = subprocess.run([cs, "--cache", cache, "stats", "--json"], capture_output=True, text=True)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {}


def counter(stats, key):
    """A counter of `clonestage stats --json` wherever it sits (top level or under extra)."""
    if key in stats:
        return stats[key]
    for v in stats.values():
        if isinstance(v, dict) and key in v:
            return v[key]
    return 0


def escaped():
    """Files the lies name, anywhere under the suite's work dir or at the absolute path.
    clonestage never materializes a result, so this holds on any version: it is there so a
    server that ever did would be caught."""
    found = [p for p in ESCAPES if os.path.isabs(p) and os.path.lexists(p)]
    for dirpath, _, names in os.walk(work):
        found += [os.path.join(dirpath, n) for n in names if n in ESCAPES[:2]]
    return found


def run_case(fake, port, case):
    """'' when the case held, else what went wrong."""
    c = cmd_for(case)
    if case == "no-command":
        # A result for an action nobody uploaded anywhere: it cannot be checked.
        ad = Digest.of(b"an action the upstream has no Action for")
        fake.ac[ad.hash] = re.ActionResult(output_files=[out_file("out.txt", fake.put(b"upstream bytes\n"))])
    else:
        cd = fake.put(c)
        ad = fake.put(action(cd, Digest.of(b"")))
        fake.ac[ad.hash] = lie(fake, case)
    cache = os.path.join(work, "cache-" + case)
    srv = reapi.Server(cs, spawn, cache, cache + ".serve.log", jobs=2,
                       extra=["--upstream", "grpc://127.0.0.1:%d" % port,
                              "--upstream-timeout-ms", "5000"])
    why = srv.start()
    if why:
        return "the server did not start: %s" % why
    problems = []
    cl = srv.client(timeout=60)
    try:
        asked = fake.calls.get("GetActionResult", 0)
        got = cl.get_action_result(ad)
        if got is not None:
            problems.append("GetActionResult served the lie: %r" % got)
        if fake.calls.get("GetActionResult", 0) != asked + 1:
            problems.append("the upstream was not asked")
        if case != "no-command":
            cl.batch_upload([c, action(Digest.of(c), Digest.of(b""))])
            res = cl.execute(ad, skip_cache_lookup=False)
            local = Digest.of(b"local\n")
            if res.status_code != 0 or res.cached or res.exit_code != 0:
                problems.append("Execute did not run it here: %r cached=%s" % (res, res.cached))
            elif res.outputs.get("out.txt") is None or res.outputs["out.txt"].hash != local.hash:
                problems.append("Execute's out.txt is not the local one: %r" % res)
            stored = cl.get_action_result(ad)
            if stored is None or sorted(stored.outputs) != ["out.txt"] \
                    or stored.outputs["out.txt"].hash != local.hash:
                problems.append("the local cache does not hold the local result: %r" % stored)
    except Exception as e:  # an RPC error is a finding, not a crash of the suite
        problems.append("%s: %s" % (type(e).__name__, str(e)[:300]))
    finally:
        cl.close()
        srv.stop()
    crashes = srv.crashes()
    if crashes:
        problems.append("crash in the log: %s" % crashes[0])
    rejected = counter(stats_of(cache), "upstream_rejected")
    if rejected != 1:
        problems.append("upstream_rejected = %s, want 1" % rejected)
    found = escaped()
    if found:
        problems.append("files outside the cache: %s" % found)
    return "; ".join(problems)


def main():
    os.makedirs(work, exist_ok=True)
    fake = Fake()
    server, port = fake.serve()
    failed = []
    try:
        for case in CASES:
            why = run_case(fake, port, case)
            if why:
                failed.append(case)
                reapi.say("upstream_lies: %s: FAIL: %s" % (case, why[:600]))
    finally:
        server.stop(0)
    reapi.say("upstream_lies: %s: %d lies, %d served or stored (%s), %d refused, the action run "
              "here and its local result cached"
              % ("PASS" if not failed else "FAIL", len(CASES), len(failed),
                 ", ".join(failed) or "none", len(CASES) - len(failed)))
    sys.exit(1 if failed else 0)


main()
