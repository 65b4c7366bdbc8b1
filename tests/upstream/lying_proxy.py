"""tests/upstream/lying_proxy.py: a REAPI proxy that lies, in front of a real upstream.

Usage: python lying_proxy.py UPSTREAM_HOST:PORT PORT_FILE MODE[,MODE...]

Listens on a free loopback port (written to PORT_FILE once serving) and forwards every
gRPC call, as raw bytes, to UPSTREAM. What it changes on the way back, by MODE:
  corrupt  every blob it returns (ByteStream Read data, BatchReadBlobs data) has its first
           byte flipped: bytes that no longer match their digest;
  missing  every ActionResult (GetActionResult) names, for its first output file, a blob
           the upstream does not have (the SHA-256 of other bytes of the same size).
Everything else passes unchanged, uploads included. Needs only grpcio (the venv of
.ci/install.sh) and tests/lib/pb.py, whose generated messages it decodes and re-encodes.
"""

import hashlib
import os
import sys
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import grpc  # noqa: E402
import pb  # noqa: E402
from pb import re  # noqa: E402


def flip(data):
    return bytes([data[0] ^ 0xFF]) + data[1:] if data else data


def fake_digest(d):
    """A Digest naming a blob nobody has: the hash of other bytes, same size."""
    h = hashlib.sha256(b"clonestage lying proxy " + d.SerializeToString()).hexdigest()
    return re.Digest(hash=h, size_bytes=d.size_bytes)


def corrupt_read(resp):
    m = pb.bs.ReadResponse.FromString(resp)
    m.data = flip(m.data)
    return m.SerializeToString()


def corrupt_batch(resp):
    m = re.BatchReadBlobsResponse.FromString(resp)
    for r in m.responses:
        r.data = flip(r.data)
    return m.SerializeToString()


def missing_output(resp):
    """The ActionResult with its first output file's digest replaced by `fake_digest`."""
    m = re.ActionResult.FromString(resp)
    if m.output_files:
        m.output_files[0].digest.CopyFrom(fake_digest(m.output_files[0].digest))
    return m.SerializeToString()


class Proxy(grpc.GenericRpcHandler):
    def __init__(self, channel, modes):
        self.channel = channel
        self.modes = modes

    def rewrite(self, method, resp):
        if "corrupt" in self.modes:
            if method.endswith("ByteStream/Read"):
                return corrupt_read(resp)
            if method.endswith("BatchReadBlobs"):
                return corrupt_batch(resp)
        if "missing" in self.modes and method.endswith("ActionCache/GetActionResult"):
            return missing_output(resp)
        return resp

    def service(self, details):
        method = details.method
        md = [(k, v) for k, v in details.invocation_metadata
              if not k.startswith(":") and not k.startswith("grpc-") and k != "user-agent"]

        def fail(context, e):
            context.abort(e.code(), e.details() or "")

        if method.endswith("ByteStream/Read") or method.endswith("GetTree") or method.endswith("/Execute") \
                or method.endswith("/WaitExecution"):
            call = self.channel.unary_stream(method)

            def unary_stream(req, context):
                try:
                    for resp in call(req, metadata=md, timeout=context.time_remaining()):
                        yield self.rewrite(method, resp)
                except grpc.RpcError as e:
                    fail(context, e)
            return grpc.unary_stream_rpc_method_handler(unary_stream)
        if method.endswith("ByteStream/Write"):
            call = self.channel.stream_unary(method)

            def stream_unary(reqs, context):
                try:
                    return call(reqs, metadata=md, timeout=context.time_remaining())
                except grpc.RpcError as e:
                    fail(context, e)
            return grpc.stream_unary_rpc_method_handler(stream_unary)
        call = self.channel.unary_unary(method)

        def unary_unary(req, context):
            try:
                return self.rewrite(method, call(req, metadata=md, timeout=context.time_remaining()))
            except grpc.RpcError as e:
                fail(context, e)
        return grpc.unary_unary_rpc_method_handler(unary_unary)


def main():
    upstream, port_file, modes = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))
    unknown = modes - {"corrupt", "missing"}
    if unknown:
        sys.exit("lying_proxy: unknown mode(s) %s (corrupt, missing)" % ",".join(sorted(unknown)))
    opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    channel = grpc.insecure_channel(upstream, options=opts)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=opts)
    server.add_generic_rpc_handlers((Proxy(channel, modes),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % port)
    os.rename(port_file + ".tmp", port_file)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
