"""reapi.py: a small REAPI v2 client for the reliability suite, and the server harness.

Owns: protobuf wire encoding of the few REAPI messages the suite sends and reads (no
generated code: grpcio's generic calls carry raw bytes, so the suite needs only `grpcio`),
a client over the server's unix socket, and `Server`, which starts/kills/restarts
`clonestage serve` on a cache and checks its log for panics and aborts.

Everything that depends on the server's command line or its files is in CONFIG below, in one
place, so the flags other slices add (`serve --max-size`, `clonestage stop`) can be adjusted.
"""

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from wire import decode, f_bytes, f_varint  # noqa: E402

# --- the server's command line and files, in one place -------------------------------------

CONFIG = {
    # serve flags; {jobs} and {spawn} are filled in.
    "serve": ["serve", "--jobs", "{jobs}", "--spawn", "{spawn}"],
    # appended to "serve" when a part asks for a size bound (the integrity slice's flag)
    "max_size_flag": "--max-size",
    # how often the server's eviction looks (seconds), so a short run sees it work
    "evict_every_flag": "--evict-every",
    # `clonestage stop` (integrity slice): not used yet; Server.stop() sends SIGTERM, which
    # every version honours (drain, then exit)
    "stop": ["stop"],
    "socket": "server/clonestage.sock",
    "ready": "server/tcp-port",  # "<port>\n<pid>\n", written last at start
    # Bazel's grpc-java/grpc-core send no host name on unix sockets; until the transport fix
    # the server only accepts a host name, so the suite's own client sends "localhost".
    # grpcio's own choice (the %-encoded socket path) unless told: the server accepts any
    "authority": os.environ.get("RELIABILITY_AUTHORITY", ""),
}

# Log lines that mean the server died of a bug rather than of our SIGKILL.
CRASH_MARKERS = ("panicked at", "has overflowed its stack", "fatal runtime error", "Aborted",
                 "SIGSEGV", "stack backtrace")

# --- decoded messages (the wire format: tests/lib/wire.py) -------------------------------------


def one(msg, field, default=None):
    v = msg.get(field)
    return v[0] if v else default


# --- REAPI messages ----------------------------------------------------------------------------


class Digest:
    __slots__ = ("hash", "size")

    def __init__(self, h, size):
        self.hash = h
        self.size = size

    @staticmethod
    def of(data):
        return Digest(hashlib.sha256(data).hexdigest(), len(data))

    def enc(self):
        return f_bytes(1, self.hash) + f_varint(2, self.size)

    @staticmethod
    def dec(buf):
        m = decode(buf)
        return Digest(one(m, 1, b"").decode(), one(m, 2, 0))

    def __repr__(self):
        return "%s/%d" % (self.hash, self.size)


def directory(files=(), dirs=(), symlinks=()):
    """files: (name, Digest, executable); dirs: (name, Digest); symlinks: (name, target)."""
    out = b""
    for name, d, x in files:
        out += f_bytes(1, f_bytes(1, name) + f_bytes(2, d.enc()) + (f_varint(4, 1) if x else b""))
    for name, d in dirs:
        out += f_bytes(2, f_bytes(1, name) + f_bytes(2, d.enc()))
    for name, target in symlinks:
        out += f_bytes(3, f_bytes(1, name) + f_bytes(2, target))
    return out


def command(args, output_files=(), output_dirs=(), env=(), working_directory=None,
            output_paths=None):
    out = b"".join(f_bytes(1, a) for a in args)
    for k, v in env:
        out += f_bytes(2, f_bytes(1, k) + f_bytes(2, v))
    out += b"".join(f_bytes(3, p) for p in output_files)
    out += b"".join(f_bytes(4, p) for p in output_dirs)
    if working_directory:
        out += f_bytes(6, working_directory)
    if output_paths is not None:
        out += b"".join(f_bytes(7, p) for p in output_paths)
    return out


def action(command_digest, root_digest, timeout_s=None, do_not_cache=False, salt=b""):
    out = f_bytes(1, command_digest.enc()) + f_bytes(2, root_digest.enc())
    if timeout_s is not None:
        out += f_bytes(6, f_varint(1, timeout_s))
    if do_not_cache:
        out += f_varint(7, 1)
    if salt:
        out += f_bytes(9, salt)
    return out


class Result:
    """An ExecuteResponse (or a bare ActionResult) decoded into what the suite checks."""

    def __init__(self, status_code=0, status_message="", exit_code=None, outputs=None,
                 stdout=b"", stderr=b"", cached=False, raw=b""):
        self.status_code = status_code
        self.status_message = status_message
        self.exit_code = exit_code
        self.outputs = outputs or {}  # path -> Digest
        self.stdout = stdout
        self.stderr = stderr
        self.cached = cached
        self.raw = raw

    @staticmethod
    def from_action_result(buf):
        m = decode(buf)
        outs = {}
        for of in m.get(2, []):
            o = decode(of)
            outs[one(o, 1, b"").decode("utf-8", "replace")] = Digest.dec(one(o, 2, b""))
        return Result(exit_code=one(m, 4, 0), outputs=outs, stdout=one(m, 5, b""),
                      stderr=one(m, 7, b""), raw=buf)

    def __repr__(self):
        return "Result(status=%s %r exit=%s outputs=%s)" % (
            self.status_code, self.status_message[:200], self.exit_code, sorted(self.outputs))


# --- the client ---------------------------------------------------------------------------------

RE = "/build.bazel.remote.execution.v2."


class Client:
    def __init__(self, socket_path, timeout=60):
        self.channel = grpc.insecure_channel(
            "unix:" + socket_path,
            # A channel of its own: grpcio otherwise shares connections (and their reconnect
            # backoff after a kill) between channels to the same address.
            options=([("grpc.default_authority", CONFIG["authority"])] if CONFIG["authority"] else [])
            + [("grpc.use_local_subchannel_pool", 1),
                     ("grpc.max_receive_message_length", 64 << 20),
                     ("grpc.max_send_message_length", 64 << 20)])
        self.timeout = timeout
        self._u = lambda m: self.channel.unary_unary(m)
        self._s = lambda m: self.channel.unary_stream(m)

    def close(self):
        self.channel.close()

    def batch_upload(self, blobs):
        """blobs: list of bytes. Returns the list of their Digests; raises on any per-blob error."""
        req = b""
        digests = []
        for data in blobs:
            d = Digest.of(data)
            digests.append(d)
            req += f_bytes(2, f_bytes(1, d.enc()) + f_bytes(2, data))
        resp = decode(self._u(RE + "ContentAddressableStorage/BatchUpdateBlobs")(req, timeout=self.timeout))
        for r in resp.get(1, []):
            st = decode(one(decode(r), 2, b""))
            if one(st, 1, 0):
                raise grpc_error(one(st, 1, 0), one(st, 2, b"").decode("utf-8", "replace"))
        return digests

    def bytestream_write(self, data, chunk=64 << 10):
        d = Digest.of(data)
        name = "uploads/%s/blobs/%s/%d" % (uuid.uuid4(), d.hash, d.size)

        def reqs():
            off = 0
            first = True
            while True:
                part = data[off:off + chunk]
                last = off + len(part) >= len(data)
                m = b""
                if first:
                    m += f_bytes(1, name)
                m += f_varint(2, off) + (f_varint(3, 1) if last else b"") + f_bytes(10, part)
                yield m
                first = False
                off += len(part)
                if last:
                    return

        self.channel.stream_unary("/google.bytestream.ByteStream/Write")(reqs(), timeout=self.timeout)
        return d

    def bytestream_read(self, d):
        out = b""
        for resp in self._s("/google.bytestream.ByteStream/Read")(
                f_bytes(1, "blobs/%s/%d" % (d.hash, d.size)), timeout=self.timeout):
            out += one(decode(resp), 10, b"")
        return out

    def find_missing(self, digests):
        req = b"".join(f_bytes(2, d.enc()) for d in digests)
        resp = decode(self._u(RE + "ContentAddressableStorage/FindMissingBlobs")(req, timeout=self.timeout))
        return [Digest.dec(b) for b in resp.get(2, [])]

    def get_action_result(self, action_digest):
        """The cached ActionResult, or None on NOT_FOUND."""
        try:
            buf = self._u(RE + "ActionCache/GetActionResult")(
                f_bytes(2, action_digest.enc()), timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return Result.from_action_result(buf)

    def execute(self, action_digest, skip_cache_lookup=True, timeout=None):
        """Run an action; a Result with the status of the ExecuteResponse (or of the RPC)."""
        req = f_varint(3, 1 if skip_cache_lookup else 0) + f_bytes(6, action_digest.enc())
        last = None
        try:
            for op in self._s(RE + "Execution/Execute")(req, timeout=timeout or self.timeout):
                last = op
        except grpc.RpcError as e:
            return Result(status_code=e.code().value[0], status_message=e.details() or "")
        if last is None:
            return Result(status_code=2, status_message="no operation")
        op = decode(last)
        # google.longrunning.Operation: name 1, metadata 2, done 3, error 4, response 5
        if op.get(4):
            st = decode(op[4][0])
            return Result(status_code=one(st, 1, 0), status_message=one(st, 2, b"").decode("utf-8", "replace"))
        if not one(op, 3, 0) or not op.get(5):
            return Result(status_code=2, status_message="operation not done")
        er = decode(one(decode(op[5][0]), 2, b""))
        res = Result.from_action_result(one(er, 1, b"")) if er.get(1) else Result()
        st = decode(one(er, 3, b""))
        res.status_code = one(st, 1, 0)
        res.status_message = one(st, 2, b"").decode("utf-8", "replace")
        res.cached = bool(one(er, 2, 0))
        return res

    def run(self, args, inputs=None, root_digest=None, output_files=(), output_dirs=(),
            timeout_s=None, skip_cache_lookup=True, salt=b"", working_directory=None,
            output_paths=None, exec_timeout=None):
        """Upload a command, its action and (unless root_digest) a flat input root of
        {name: bytes}, then Execute. Returns (action Digest, Result)."""
        blobs = []
        if root_digest is None:
            files = []
            for name, data in sorted((inputs or {}).items()):
                files.append((name, Digest.of(data), False))
                blobs.append(data)
            root = directory(files=files)
            blobs.append(root)
            root_digest = Digest.of(root)
        cmd = command(args, output_files=output_files, output_dirs=output_dirs,
                      working_directory=working_directory, output_paths=output_paths)
        cd = Digest.of(cmd)
        act = action(cd, root_digest, timeout_s=timeout_s, salt=salt)
        ad = Digest.of(act)
        self.batch_upload(blobs + [cmd, act])
        return ad, self.execute(ad, skip_cache_lookup=skip_cache_lookup, timeout=exec_timeout)


class _RpcError(Exception):
    def __init__(self, code, message):
        super().__init__("status %d: %s" % (code, message))
        self.status_code = code


def grpc_error(code, message):
    return _RpcError(code, message)


# --- the server ---------------------------------------------------------------------------------


class Server:
    """`clonestage serve` on CACHE, started as a child (optionally as another user)."""

    def __init__(self, cs, spawn, cache, log, jobs=2, extra=(), user=None, env=None):
        self.cs = cs
        self.spawn = spawn
        self.cache = cache
        self.log = log
        self.jobs = jobs
        self.extra = list(extra)
        self.user = user
        self.env = env
        self.proc = None
        self.starts = 0

    @property
    def socket(self):
        return os.path.join(self.cache, CONFIG["socket"])

    def argv(self):
        serve = [a.format(jobs=self.jobs, spawn=self.spawn) for a in CONFIG["serve"]]
        argv = [self.cs, "--cache", self.cache] + serve + self.extra
        if self.user:
            argv = ["setpriv", "--reuid", self.user, "--regid", self.user, "--clear-groups",
                    "--reset-env"] + argv
        return argv

    def start(self, wait=30):
        """Start and wait until ready. Returns None, or why it did not come up."""
        self.starts += 1
        logf = open(self.log, "ab")
        logf.write(b"\n=== start %d\n" % self.starts)
        logf.flush()
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("CLONESTAGE_LOG", "info")
        self.proc = subprocess.Popen(self.argv(), stdout=logf, stderr=logf, env=env,
                                     start_new_session=True)
        logf.close()
        deadline = time.time() + wait
        ready = os.path.join(self.cache, CONFIG["ready"])
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return "exited with %s" % self.proc.returncode
            try:
                with open(ready) as f:
                    lines = f.read().split()
                if len(lines) >= 2 and int(lines[1]) == self.proc.pid and os.path.exists(self.socket):
                    return None
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        self.kill9()  # a server that never got ready must not linger (nor keep the cache's lock)
        return "not ready after %d s" % wait

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if not self.proc or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.kill9()

    def client(self, timeout=60):
        return Client(self.socket, timeout=timeout)

    def crashes(self):
        """Lines of the log that show a panic or an abort."""
        try:
            with open(self.log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return [ln for ln in text.splitlines() if any(m in ln for m in CRASH_MARKERS)]

    def verify(self):
        """(ok, output) of `clonestage verify` on the cache (run while the server is down)."""
        argv = [self.cs, "--cache", self.cache, "verify"]
        if self.user:
            argv = ["setpriv", "--reuid", self.user, "--regid", self.user, "--clear-groups"] + argv
        p = subprocess.run(argv, capture_output=True, text=True)
        return p.returncode == 0, (p.stdout + p.stderr).strip()


def say(line):
    print(line, flush=True)
