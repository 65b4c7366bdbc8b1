"""uploads.py: the uploads part of the reliability suite (issue 23): abandoned compressed
uploads, streams left idle, resumption and what may follow finish_write, against a running
server from an independent client (grpcio, zstandard; messages encoded by hand).

  abandoned  8 ByteStream Writes of compressed-blobs/zstd at once, each one 1.2 MB frame of a
             100 MiB blob with a 128 MiB window, each stream ended without finish_write (the
             attack of issue 23). The server's RSS (VmRSS) before, at its peak while they run
             (sampled every 20 ms) and after they ended; the temp files of <cache>/tmp after.
             Must: RSS after at most 128 MiB above before.
  idle       the same 8 Writes, each stopped inside its frame and left open for 14 s, then
             ended. Must: peak RSS at most the decoders' cap (160 MiB) + 32 MiB above before;
             every call ends (ABORTED or RESOURCE_EXHAUSTED, both retried by Bazel).
  name       a Write of a name sends 1 MiB and idles with its stream open. QueryWriteStatus of
             the name must answer (10 s deadline each), a second Write resuming at the
             committed size must store the blob (30 s deadline), the first must end ABORTED.
  resume     a compressed Write (zstd level 3, no content size: Bazel's ZstdOutputStream) cut
             mid-frame; QueryWriteStatus; a new zstd stream of the rest from that
             uncompressed offset (Bazel's Chunker since 5.3) must complete it, committed_size
             = offset + compressed bytes of the new stream.
  finish     a message after the one with finish_write, in one-message and streamed Writes:
             INVALID_ARGUMENT, nothing stored.

Prints one line per case and `uploads: PASS|FAIL` last. Usage: uploads.py CS SPAWN WORKDIR
"""

import hashlib
import os
import subprocess
import sys
import threading
import time

import grpc
import zstandard

import reapi
from reapi import Digest
import pb  # tests/lib, on sys.path once reapi is imported

cs, spawn, work = sys.argv[1:4]
cache = os.path.join(work, "cache")
os.makedirs(cache, exist_ok=True)
server = reapi.Server(cs, spawn, cache, os.path.join(work, "serve.log"), jobs=2)
MIB = 1 << 20
WRITE = pb.BS + "Write"
QUERY = pb.BS + "QueryWriteStatus"
failures = []


def fail(case, why):
    failures.append(case)
    reapi.say("uploads: %s: FAIL: %s" % (case, why))


def rss():
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def tmp_bytes():
    p = subprocess.run(["du", "-sb", os.path.join(cache, "tmp")], capture_output=True, text=True)
    return int(p.stdout.split()[0]) if p.returncode == 0 else 0


def mb(n):
    return ("%.1f MB" if abs(n) < 10e6 else "%.0f MB") % (n / 1e6)


def channel():
    return grpc.insecure_channel("unix:" + server.socket, options=[
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.max_send_message_length", 64 << 20),
        ("grpc.max_receive_message_length", 64 << 20)])


def name_of(uuid, d, zstd):
    kind = "compressed-blobs/zstd" if zstd else "blobs"
    return "uploads/%s/%s/%s/%d" % (uuid, kind, d.hash, d.size)


def messages(name, data, start=0, chunk=64 * 1024, finish=True, hold=None):
    """WriteRequests of `data` from offset `start` (Bazel's offsets); `hold`: wait for this
    Event before ending the stream."""
    off = start
    for i in range(0, max(len(data), 1), chunk):
        part = data[i:i + chunk]
        last = i + chunk >= len(data)
        yield pb.bs.WriteRequest(resource_name=name if i == 0 else "", write_offset=off,
                                 finish_write=last and finish, data=part)
        off += len(part)
    if hold is not None:
        hold.wait()


def write(ch, reqs, timeout=120):
    """(status code name, committed_size or message)."""
    try:
        return "OK", pb.call(ch, WRITE, reqs, timeout).committed_size
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""


def query(ch, name, timeout=10):
    r = pb.call(ch, QUERY, pb.bs.QueryWriteStatusRequest(resource_name=name), timeout)
    return r.committed_size, r.complete


def read(ch, d):
    req = pb.bs.ReadRequest(resource_name="blobs/%s/%d" % (d.hash, d.size))
    return b"".join(r.data for r in pb.call(ch, pb.BS + "Read", req, 60))


def missing(d):
    cl = server.client()
    try:
        return bool(cl.find_missing([d]))
    finally:
        cl.close()


class Sampler:
    """The server's peak RSS while it runs."""

    def __init__(self):
        self.peak = rss()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.wait(0.02):
            try:
                self.peak = max(self.peak, rss())
            except OSError:
                return

    def done(self):
        self.stop.set()
        self.t.join()
        return self.peak


# A 100 MiB blob (a random MiB, repeated) as one 1.2 MB frame with a 128 MiB window: the
# attack's shape. Each upload is its own name; the blob never completes.
big = os.urandom(MIB) * 100
params = zstandard.ZstdCompressionParameters.from_level(
    3, window_log=27, enable_ldm=True, write_content_size=False)
big_z = zstandard.ZstdCompressor(compression_params=params).compress(big)
big_d = Digest(hashlib.sha256(big).hexdigest(), len(big))


def attack(case, hold_s):
    """8 Writes of big_z at once; with hold_s, each stops inside its frame and waits."""
    release = threading.Event() if hold_s else None
    data = big_z[:-16 * 1024] if hold_s else big_z
    results = [None] * 8
    chans = [channel() for _ in range(8)]

    def one(i):
        reqs = messages(name_of("%s-%d" % (case, i), big_d, True), data, finish=False,
                        hold=release)
        results[i] = write(chans[i], reqs)

    before = rss()
    sampler = Sampler()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    if hold_s:
        time.sleep(hold_s)
        release.set()
    for t in threads:
        t.join(180)
    peak = sampler.done()
    time.sleep(1)
    after = rss()
    for c in chans:
        c.close()
    codes = {}
    for r in results:
        code = r[0] if r else "no answer"
        codes[code] = codes.get(code, 0) + 1
    return before, peak, after, codes


def case_abandoned():
    before, peak, after, codes = attack("abandoned", 0)
    disk = tmp_bytes()
    ok = after - before <= 128 * MIB and set(codes) <= {"ABORTED", "RESOURCE_EXHAUSTED"}
    reapi.say("uploads: abandoned: 8 compressed Writes (%s frame, 128 MiB window, %s blob) ended "
              "without finish_write: RSS %s before, %s peak, %s after (+%s); temp files %s; "
              "calls %s: %s" % (mb(len(big_z)), mb(len(big)), mb(before), mb(peak), mb(after),
                                mb(after - before), mb(disk), codes, "PASS" if ok else "FAIL"))
    if not ok:
        failures.append("abandoned")


def case_idle():
    before, peak, after, codes = attack("idle", 14)
    ok = peak - before <= 192 * MIB and set(codes) <= {"ABORTED", "RESOURCE_EXHAUSTED"}
    reapi.say("uploads: idle: 8 compressed Writes left open inside their frames for 14 s: RSS "
              "%s before, %s peak (+%s), %s after; calls %s: %s"
              % (mb(before), mb(peak), mb(peak - before), mb(after), codes,
                 "PASS" if ok else "FAIL"))
    if not ok:
        failures.append("idle")


def case_name():
    blob = os.urandom(3 * MIB)
    d = Digest.of(blob)
    name = name_of("idle-name", d, False)
    ch = channel()
    release = threading.Event()
    first = {}
    t = threading.Thread(target=lambda: first.update(r=write(ch, messages(
        name, blob[:MIB], chunk=MIB, finish=False, hold=release))))
    t.start()
    t0 = time.time()
    try:
        committed = 0
        while committed == 0 and time.time() - t0 < 30:
            committed, _ = query(ch, name)
            time.sleep(0.01)
        q = time.time() - t0
        second = write(ch, messages(name, blob[committed:], start=committed), timeout=30)
        w = time.time() - t0 - q
        stored = second[0] == "OK" and read(ch, d) == blob
    except grpc.RpcError as e:
        fail("name", "while the first Write idles: %s %s" % (e.code().name, e.details()))
        release.set()
        t.join(60)
        ch.close()
        return
    t.join(30)
    release.set()
    t.join(60)
    ch.close()
    code = first.get("r", ("no answer",))[0]
    ok = committed == MIB and stored and code == "ABORTED"
    reapi.say("uploads: name: while a Write idles with its stream open, QueryWriteStatus "
              "answered %d in %.2f s, a second Write from there %s in %.2f s (blob %s), the "
              "first ended %s: %s" % (committed, q, second[0], w,
                                      "stored" if stored else "NOT stored", code,
                                      "PASS" if ok else "FAIL"))
    if not ok:
        failures.append("name")


def bazel_zstd(data):
    """What Bazel's ZstdCompressingInputStream sends: level 3, streamed (no content size)."""
    c = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return c.compress(data) + c.flush()


def case_resume():
    blob = b"".join(b"line %08d of a generated source file\n" % i for i in range(250000))
    d = Digest.of(blob)
    name = name_of("resume", d, True)
    z = bazel_zstd(blob)
    ch = channel()
    cut = write(ch, messages(name, z[:len(z) // 2], chunk=16 * 1024, finish=False))
    committed, _ = query(ch, name)
    rest = bazel_zstd(blob[committed:])
    done = write(ch, messages(name, rest, start=committed, chunk=16 * 1024))
    ok = (cut[0] == "ABORTED" and 0 < committed < len(blob) and done == ("OK", committed + len(rest))
          and read(ch, d) == blob)
    ch.close()
    reapi.say("uploads: resume: %s blob, %s zstd; cut after %d compressed bytes (%s), "
              "QueryWriteStatus %d (uncompressed), a new stream from there: %s %s (want %d): %s"
              % (mb(len(blob)), mb(len(z)), len(z) // 2, cut[0], committed, done[0], done[1],
                 committed + len(rest), "PASS" if ok else "FAIL"))
    if not ok:
        failures.append("resume")


def case_finish():
    ch = channel()
    got = []
    for what, blob, chunk in (("one message", os.urandom(1000), 1000),
                              ("streamed", os.urandom(600 * 1024), 256 * 1024)):
        d = Digest.of(blob)
        reqs = list(messages(name_of("after-" + what[0], d, False), blob, chunk=chunk))
        reqs.append(pb.bs.WriteRequest(write_offset=len(blob), data=b"more"))
        code, _ = write(ch, iter(reqs))
        got.append((what, code, missing(d)))
    ch.close()
    ok = all(code == "INVALID_ARGUMENT" and gone for _, code, gone in got)
    reapi.say("uploads: finish: a message after finish_write: %s: %s" % (
        ", ".join("%s %s (%s)" % (w, c, "not stored" if g else "STORED") for w, c, g in got),
        "PASS" if ok else "FAIL"))
    if not ok:
        failures.append("finish")


why = server.start()
if why:
    reapi.say("uploads: FAIL: the server did not start: %s" % why)
    sys.exit(1)
# Warm up (threads, allocator) before the baseline.
cl = server.client()
cl.bytestream_write(os.urandom(2 * MIB))
cl.close()
for case in (case_abandoned, case_idle, case_name, case_resume, case_finish):
    try:
        case()
    except Exception as e:  # a case that breaks is a failure, not the end of the part
        fail(case.__name__[5:], "%s: %s" % (type(e).__name__, e))
    if not server.alive():
        fail(case.__name__[5:], "the server exited: %s" % " | ".join(server.crashes()[:3]))
        break
crashes = server.crashes()
server.stop()
if crashes:
    fail("log", "panics: %s" % " | ".join(crashes[:3]))
reapi.say("uploads: %s" % ("PASS" if not failures else "FAIL (%s)" % ", ".join(failures)))
sys.exit(1 if failures else 0)
