"""reapi.py: a small REAPI v2 client for the reliability suite, and the server harness.

Owns: the few REAPI messages the suite sends and reads, built with the generated modules of
tests/lib/pb.py (independent of clonestage's Rust code), a client over the server's unix socket, and `Server`, which starts/kills/restarts
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
import pb  # noqa: E402
from pb import re  # noqa: E402

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

# --- REAPI messages ----------------------------------------------------------------------------


class Digest:
    __slots__ = ("hash", "size")

    def __init__(self, h, size):
        self.hash = h
        self.size = size

    @staticmethod
    def of(data):
        return Digest(hashlib.sha256(data).hexdigest(), len(data))

    def pb(self):
        return re.Digest(hash=self.hash, size_bytes=self.size)

    @staticmethod
    def of_pb(m):
        return Digest(m.hash, m.size_bytes)

    def __repr__(self):
        return "%s/%d" % (self.hash, self.size)


def directory(files=(), dirs=(), symlinks=()):
    """A serialized Directory. files: (name, Digest, executable); dirs: (name, Digest);
    symlinks: (name, target). Names need not be UTF-8 (`pb.add`)."""
    d = re.Directory()
    extra = b"".join(pb.add(d, "files", re.FileNode(digest=dg.pb(), is_executable=x), name=n)
                     for n, dg, x in files)
    extra += b"".join(pb.add(d, "directories", re.DirectoryNode(digest=dg.pb()), name=n)
                      for n, dg in dirs)
    extra += b"".join(pb.add(d, "symlinks", re.SymlinkNode(), name=n, target=t) for n, t in symlinks)
    return d.SerializeToString() + extra


def command(args, output_files=(), output_dirs=(), env=(), working_directory=None,
            output_paths=None):
    """A serialized Command. Paths need not be UTF-8 (`pb.serialize`)."""
    m = re.Command(
        arguments=args,
        environment_variables=[re.Command.EnvironmentVariable(name=k, value=v) for k, v in env])
    return pb.serialize(m, output_files=list(output_files), output_directories=list(output_dirs),
                        working_directory=working_directory or "",
                        output_paths=list(output_paths or ()))


def action(command_digest, root_digest, timeout_s=None, do_not_cache=False, salt=b""):
    """A serialized Action."""
    m = re.Action(command_digest=command_digest.pb(), input_root_digest=root_digest.pb(),
                  do_not_cache=do_not_cache, salt=salt)
    if timeout_s is not None:
        m.timeout.seconds = timeout_s
    return m.SerializeToString()


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
    def from_action_result(m):
        outs = {o.path: Digest.of_pb(o.digest) for o in m.output_files}
        return Result(exit_code=m.exit_code, outputs=outs, stdout=m.stdout_raw,
                      stderr=m.stderr_raw, raw=m.SerializeToString())

    def __repr__(self):
        return "Result(status=%s %r exit=%s outputs=%s)" % (
            self.status_code, self.status_message[:200], self.exit_code, sorted(self.outputs))


# --- the client ---------------------------------------------------------------------------------

RE = pb.V2


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

    def close(self):
        self.channel.close()

    def batch_upload(self, blobs):
        """blobs: list of bytes. Returns the list of their Digests; raises on any per-blob error."""
        digests = [Digest.of(data) for data in blobs]
        req = re.BatchUpdateBlobsRequest(requests=[
            re.BatchUpdateBlobsRequest.Request(digest=d.pb(), data=data) for d, data in zip(digests, blobs)])
        resp = pb.call(self.channel, RE + "ContentAddressableStorage/BatchUpdateBlobs", req, self.timeout)
        for r in resp.responses:
            if r.status.code:
                raise grpc_error(r.status.code, r.status.message)
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
                yield pb.bs.WriteRequest(resource_name=name if first else "", write_offset=off,
                                         finish_write=last, data=part)
                first = False
                off += len(part)
                if last:
                    return

        pb.call(self.channel, pb.BS + "Write", reqs(), self.timeout)
        return d

    def bytestream_read(self, d):
        req = pb.bs.ReadRequest(resource_name="blobs/%s/%d" % (d.hash, d.size))
        return b"".join(r.data for r in pb.call(self.channel, pb.BS + "Read", req, self.timeout))

    def find_missing(self, digests):
        req = re.FindMissingBlobsRequest(blob_digests=[d.pb() for d in digests])
        resp = pb.call(self.channel, RE + "ContentAddressableStorage/FindMissingBlobs", req, self.timeout)
        return [Digest.of_pb(b) for b in resp.missing_blob_digests]

    def get_action_result(self, action_digest):
        """The cached ActionResult, or None on NOT_FOUND."""
        try:
            m = pb.call(self.channel, RE + "ActionCache/GetActionResult",
                        re.GetActionResultRequest(action_digest=action_digest.pb()), self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return Result.from_action_result(m)

    def execute(self, action_digest, skip_cache_lookup=True, timeout=None):
        """Run an action; a Result with the status of the ExecuteResponse (or of the RPC)."""
        req = re.ExecuteRequest(skip_cache_lookup=skip_cache_lookup, action_digest=action_digest.pb())
        last = None
        try:
            for op in pb.stub(self.channel, RE + "Execution/Execute")(req, timeout=timeout or self.timeout):
                last = op
        except grpc.RpcError as e:
            return Result(status_code=e.code().value[0], status_message=e.details() or "")
        if last is None:
            return Result(status_code=2, status_message="no operation")
        if last.HasField("error"):
            return Result(status_code=last.error.code, status_message=last.error.message)
        if not last.done or not last.HasField("response"):
            return Result(status_code=2, status_message="operation not done")
        er = re.ExecuteResponse()
        if not last.response.Unpack(er):
            return Result(status_code=2, status_message="response is a %s" % last.response.type_url)
        res = Result.from_action_result(er.result) if er.HasField("result") else Result()
        res.status_code = er.status.code
        res.status_message = er.status.message
        res.cached = er.cached_result
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
