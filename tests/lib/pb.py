"""REAPI messages and calls for the Python test clients, from generated protobuf modules.

The clients (tests/transport, tests/compression, tests/reliability, tests/upstream) are
independent of clonestage's Rust code on purpose: their messages come from `_pb2` modules
generated from the REAPI and ByteStream .proto files (tests/lib/proto, README there), run by
the `protobuf` and `googleapis-common-protos` packages of .ci/install.sh's venv. Import this
module with tests/lib on sys.path: it puts tests/lib/proto there too.

`call(channel, METHOD, request, timeout)` makes one RPC of `RPCS` and returns its typed
reply (a list of replies for a server stream; a client stream takes an iterable).

Hostile input needs one thing generated code refuses: string fields that are not UTF-8 (a
name with a lone surrogate, sent as its surrogateescape bytes). `serialize` and `add` set such
values by hand after the message's own bytes: a parser merges fields in any order and appends
repeated ones, so the server sees the same message.
"""

import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto"))
from build.bazel.remote.execution.v2 import remote_execution_pb2 as re  # noqa: E402
from google.bytestream import bytestream_pb2 as bs  # noqa: E402
from google.longrunning import operations_pb2 as ops  # noqa: E402

V2 = "/build.bazel.remote.execution.v2."
BS = "/google.bytestream.ByteStream/"

# method path: (kind, request type, reply type); kind is grpcio's channel method.
RPCS = {
    V2 + "Capabilities/GetCapabilities": ("unary_unary", re.GetCapabilitiesRequest, re.ServerCapabilities),
    V2 + "ContentAddressableStorage/FindMissingBlobs": ("unary_unary", re.FindMissingBlobsRequest, re.FindMissingBlobsResponse),
    V2 + "ContentAddressableStorage/BatchUpdateBlobs": ("unary_unary", re.BatchUpdateBlobsRequest, re.BatchUpdateBlobsResponse),
    V2 + "ContentAddressableStorage/BatchReadBlobs": ("unary_unary", re.BatchReadBlobsRequest, re.BatchReadBlobsResponse),
    V2 + "ContentAddressableStorage/GetTree": ("unary_stream", re.GetTreeRequest, re.GetTreeResponse),
    V2 + "ActionCache/GetActionResult": ("unary_unary", re.GetActionResultRequest, re.ActionResult),
    V2 + "ActionCache/UpdateActionResult": ("unary_unary", re.UpdateActionResultRequest, re.ActionResult),
    V2 + "Execution/Execute": ("unary_stream", re.ExecuteRequest, ops.Operation),
    V2 + "Execution/WaitExecution": ("unary_stream", re.WaitExecutionRequest, ops.Operation),
    BS + "Read": ("unary_stream", bs.ReadRequest, bs.ReadResponse),
    BS + "Write": ("stream_unary", bs.WriteRequest, bs.WriteResponse),
    BS + "QueryWriteStatus": ("unary_unary", bs.QueryWriteStatusRequest, bs.QueryWriteStatusResponse),
}


def stub(channel, method):
    """grpcio's callable for `method` (a key of RPCS), typed both ways."""
    kind, req, reply = RPCS[method]
    return getattr(channel, kind)(method, request_serializer=req.SerializeToString, response_deserializer=reply.FromString)


def call(channel, method, request, timeout, **kw):
    """One RPC; a server stream's replies as a list."""
    out = stub(channel, method)(request, timeout=timeout, **kw)
    return list(out) if RPCS[method][0] == "unary_stream" else out


def digest(data):
    """The SHA-256 Digest of `data`."""
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def _varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _utf8(v):
    try:
        v.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def serialize(msg, **strings):
    """`msg` serialized with the string fields `strings` (name: str, or a list for a repeated
    field) set; values that are not UTF-8 are encoded by hand after it."""
    extra = b""
    for name, values in strings.items():
        field = msg.DESCRIPTOR.fields_by_name[name]
        repeated = isinstance(values, (list, tuple))
        for v in values if repeated else [values]:
            if _utf8(v):
                getattr(msg, name).append(v) if repeated else setattr(msg, name, v)
            else:
                data = v.encode("utf-8", "surrogateescape")
                extra += _varint(field.number << 3 | 2) + _varint(len(data)) + data
    return msg.SerializeToString() + extra


def add(parent, field, node, **strings):
    """Append `node` (with `strings` set as in `serialize`) to the repeated message field `field`
    of `parent`; returns b"", or the node's hand-encoded field when a string is not UTF-8 (the
    caller appends it to `parent`'s bytes)."""
    if all(_utf8(v) for v in strings.values()):
        for k, v in strings.items():
            setattr(node, k, v)
        getattr(parent, field).append(node)
        return b""
    data = serialize(node, **strings)
    number = parent.DESCRIPTOR.fields_by_name[field].number
    return _varint(number << 3 | 2) + _varint(len(data)) + data
