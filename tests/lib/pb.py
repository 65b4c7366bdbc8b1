"""REAPI messages and calls for the Python test clients, from generated protobuf modules.

The clients (tests/transport, tests/compression, tests/reliability, tests/upstream) are
independent of clonestage's Rust code on purpose: their messages come from `_pb2` modules
generated from the REAPI and ByteStream .proto files (tests/lib/proto, README there), run by
the `protobuf` and `googleapis-common-protos` packages of .ci/install.sh's venv. Import this
module with tests/lib on sys.path: it puts tests/lib/proto there too.

`call(channel, METHOD, request, timeout)` makes one RPC of `RPCS` and returns its typed
reply (a list of replies for a server stream; a client stream takes an iterable).
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
