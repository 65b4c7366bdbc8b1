"""An independent REAPI client (grpcio from PyPI) over clonestage's unix socket.

Usage: client.py SOCKET

For each :authority form a client may send on a unix socket, it opens a channel to
unix:SOCKET and makes five RPCs: Capabilities.GetCapabilities, then a CAS round trip of a blob
unique to the form (FindMissingBlobs: missing; ByteStream Write; FindMissingBlobs: present;
ByteStream Read: the same bytes). The forms:

  default    grpcio's own choice (grpc-core >= 1.57 sends the %-encoded socket path)
  raw-path   grpc.default_authority forced to the raw socket path, as grpc-java (Bazel) sends it
  localhost  grpc.default_authority = localhost (a valid host name: the control)

Messages come from the generated REAPI modules (tests/lib/pb.py), not from clonestage's
code. Prints one line per RPC, one per form and a summary line
`transport: N/M RPCs ok (...)`; exits 1 if any RPC failed.
"""

import hashlib
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pb  # noqa: E402

TIMEOUT = 10  # seconds per RPC: a refused stream fails at once, a hang must not hang CI


# --- the RPCs --------------------------------------------------------------------------------

V2, BS = pb.V2, pb.BS


def call(channel, method, request):
    return pb.call(channel, method, request, TIMEOUT)


def get_capabilities(channel, _blob):
    reply = call(channel, V2 + "Capabilities/GetCapabilities", pb.re.GetCapabilitiesRequest())
    if not reply.execution_capabilities.exec_enabled:
        raise AssertionError(f"exec_enabled not set in {reply!r}")


def find_missing(channel, blob):
    req = pb.re.FindMissingBlobsRequest(blob_digests=[pb.digest(blob)])
    return call(channel, V2 + "ContentAddressableStorage/FindMissingBlobs", req).missing_blob_digests


def missing_before(channel, blob):
    if len(find_missing(channel, blob)) != 1:
        raise AssertionError("a new blob is not reported missing")


def write(channel, blob):
    h = hashlib.sha256(blob).hexdigest()
    req = pb.bs.WriteRequest(resource_name=f"uploads/transport-test/blobs/{h}/{len(blob)}", finish_write=True, data=blob)
    reply = call(channel, BS + "Write", iter([req]))
    if reply.committed_size != len(blob):
        raise AssertionError(f"committed_size {reply.committed_size} != {len(blob)}")


def present_after(channel, blob):
    if find_missing(channel, blob):
        raise AssertionError("the written blob is still reported missing")


def read(channel, blob):
    h = hashlib.sha256(blob).hexdigest()
    got = b"".join(m.data for m in call(channel, BS + "Read", pb.bs.ReadRequest(resource_name=f"blobs/{h}/{len(blob)}")))
    if got != blob:
        raise AssertionError(f"read {len(got)} bytes, not the {len(blob)} written")


RPCS = [get_capabilities, missing_before, write, present_after, read]


def main():
    sock = sys.argv[1]
    # Before 1.57 grpc-core sent `localhost` on a unix socket: the default form would test nothing.
    if tuple(int(x) for x in grpc.__version__.split(".")[:2]) < (1, 57):
        print(f"transport: grpcio {grpc.__version__} is older than 1.57 (install grpcio>=1.57)")
        return 1
    forms = [
        ("default", []),
        ("raw-path", [("grpc.default_authority", sock)]),
        ("localhost", [("grpc.default_authority", "localhost")]),
    ]
    ok_by_form = {}
    for name, options in forms:
        blob = f"clonestage transport test, form {name}\n".encode()
        ok = 0
        with grpc.insecure_channel("unix:" + sock, options=options) as channel:
            for rpc in RPCS:
                try:
                    rpc(channel, blob)
                    ok += 1
                    print(f"  {name}: {rpc.__name__} ok")
                except grpc.RpcError as e:
                    print(f"  {name}: {rpc.__name__} FAILED: {e.code()} {e.details()}")
                except AssertionError as e:
                    print(f"  {name}: {rpc.__name__} FAILED: {e}")
        print(f"form {name}: {ok}/{len(RPCS)} RPCs ok")
        ok_by_form[name] = ok
    total = sum(ok_by_form.values())
    expected = len(RPCS) * len(forms)
    detail = ", ".join(f"{k} {v}/{len(RPCS)}" for k, v in ok_by_form.items())
    print(f"transport: {total}/{expected} RPCs ok over unix:{sock} ({detail}; grpcio {grpc.__version__})")
    return 0 if total == expected else 1


if __name__ == "__main__":
    sys.exit(main())
