"""tests/upstream/lying_proxy.py: a REAPI proxy that lies, in front of a real upstream.

Usage: python lying_proxy.py UPSTREAM_HOST:PORT PORT_FILE MODE[,MODE...]

Listens on a free loopback port (written to PORT_FILE once serving) and forwards every
gRPC call, as raw bytes, to UPSTREAM. What it changes on the way back, by MODE:
  corrupt  every blob it returns (ByteStream Read data, BatchReadBlobs data) has its first
           byte flipped: bytes that no longer match their digest;
  missing  every ActionResult (GetActionResult) names, for its first output file, a blob
           the upstream does not have (the SHA-256 of other bytes of the same size).
Everything else passes unchanged, uploads included. Needs only grpcio (the venv of
.ci/install.sh) and tests/lib/wire.py; it decodes the few fields it touches by hand.
"""

import hashlib
import os
import sys
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import grpc  # noqa: E402
import wire  # noqa: E402


def fields(buf):
    """[(field, wire type, raw value)] of one message, raw value as bytes or int."""
    out = []
    i = 0
    while i < len(buf):
        key, i = wire.read_varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = wire.read_varint(buf, i)
        elif wt == 2:
            ln, i = wire.read_varint(buf, i)
            v = bytes(buf[i:i + ln])
            i += ln
        elif wt == 1:
            v = bytes(buf[i:i + 8])
            i += 8
        elif wt == 5:
            v = bytes(buf[i:i + 4])
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        out.append((field, wt, v))
    return out


def encode(fs):
    out = bytearray()
    for field, wt, v in fs:
        out += wire.varint(field << 3 | wt)
        if wt == 0:
            out += wire.varint(v)
        elif wt == 2:
            out += wire.varint(len(v)) + v
        else:
            out += v
    return bytes(out)


def edit(buf, field, fn):
    """buf with fn applied to every length-delimited value of field."""
    return encode([(f, wt, fn(v) if f == field and wt == 2 else v) for f, wt, v in fields(buf)])


def flip(data):
    return bytes([data[0] ^ 0xFF]) + data[1:] if data else data


def fake_digest(digest):
    """A Digest message naming a blob nobody has: the hash of other bytes, same size."""
    fs = fields(digest)
    size = next((v for f, wt, v in fs if f == 2 and wt == 0), 0)
    h = hashlib.sha256(b"clonestage lying proxy " + digest).hexdigest()
    return wire.f_bytes(1, h) + (wire.f_varint(2, size) if size else b"")


class Proxy(grpc.GenericRpcHandler):
    def __init__(self, channel, modes):
        self.channel = channel
        self.modes = modes

    def rewrite(self, method, resp):
        if "corrupt" in self.modes:
            if method.endswith("ByteStream/Read"):
                return edit(resp, 10, flip)  # ReadResponse.data
            if method.endswith("BatchReadBlobs"):
                # BatchReadBlobsResponse.responses[].data
                return edit(resp, 1, lambda r: edit(r, 2, flip))
        if "missing" in self.modes and method.endswith("ActionCache/GetActionResult"):
            fs = fields(resp)
            for n, (f, wt, v) in enumerate(fs):
                if f == 2 and wt == 2:  # the first OutputFile: its digest (field 2)
                    fs[n] = (f, wt, edit(v, 2, fake_digest))
                    break
            return encode(fs)
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
