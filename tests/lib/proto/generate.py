#!/usr/bin/env python3
"""Regenerate the REAPI `_pb2` modules the Python test clients import.

Contract:
  generate.py --remote-apis DIR --googleapis DIR
      DIR (remote-apis): a checkout of bazelbuild/remote-apis at REMOTE_APIS_COMMIT;
      DIR (googleapis): one of googleapis/googleapis at GOOGLEAPIS_COMMIT (only
      google/bytestream/bytestream.proto is read from it).
      Writes build/bazel/remote/execution/v2/remote_execution_pb2.py,
      build/bazel/semver/semver_pb2.py and google/bytestream/bytestream_pb2.py beside this
      file with grpcio-tools' protoc, and prints what it wrote; exits 1 when grpcio-tools is
      not the pinned version (its protoc decides the bytes written) or a file is missing.

The other imports of those protos (google/api, google/rpc/status, google/longrunning and
protobuf's well-known types) come at run time from the `protobuf` and
`googleapis-common-protos` packages (.ci/install.sh), and at generation time from the same
packages' .proto files (googleapis-common-protos names the long-running operations file
operations_proto.proto; the module it ships registers it as google/longrunning/operations.proto,
the name remote_execution.proto imports, so it is given to protoc under that name).
Only these three modules are generated: the clients use grpcio's generic calls with the
messages' SerializeToString/FromString, and need no service stubs.
"""

import argparse
import os
import shutil
import sys
import tempfile

REMOTE_APIS_COMMIT = "becdd8f9ff811df88a22d3eadd6341753d51d167"
GOOGLEAPIS_COMMIT = "19e8384ecc44f6577a3d2e5123252c571549e732"
GRPCIO_TOOLS = "1.76.0"

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = [
    ("remote-apis", "build/bazel/remote/execution/v2/remote_execution.proto"),
    ("remote-apis", "build/bazel/semver/semver.proto"),
    ("googleapis", "google/bytestream/bytestream.proto"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--remote-apis", required=True)
    ap.add_argument("--googleapis", required=True)
    args = ap.parse_args()
    try:
        from importlib.metadata import version

        from google.api import annotations_pb2  # googleapis-common-protos
        from grpc_tools import protoc
    except ImportError as e:
        sys.exit("generate.py: %s: pip install grpcio-tools==%s googleapis-common-protos" % (e, GRPCIO_TOOLS))
    if version("grpcio-tools") != GRPCIO_TOOLS:
        sys.exit("generate.py: grpcio-tools %s, not the pinned %s" % (version("grpcio-tools"), GRPCIO_TOOLS))
    roots = {"remote-apis": args.remote_apis, "googleapis": args.googleapis}
    common = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(annotations_pb2.__file__))))
    with tempfile.TemporaryDirectory() as inc:
        for where, rel in PROTOS:
            src = os.path.join(roots[where], rel)
            if not os.path.isfile(src):
                sys.exit("generate.py: %s: missing (want %s at %s)" % (src, where, REMOTE_APIS_COMMIT if where == "remote-apis" else GOOGLEAPIS_COMMIT))
            os.makedirs(os.path.join(inc, os.path.dirname(rel)), exist_ok=True)
            shutil.copyfile(src, os.path.join(inc, rel))
        for sub in ["google/api", "google/rpc"]:
            shutil.copytree(os.path.join(common, sub), os.path.join(inc, sub),
                            ignore=lambda d, names: [n for n in names if not n.endswith(".proto")])
        os.makedirs(os.path.join(inc, "google/longrunning"), exist_ok=True)
        shutil.copyfile(os.path.join(common, "google/longrunning/operations_proto.proto"),
                        os.path.join(inc, "google/longrunning/operations.proto"))
        wkt = os.path.join(os.path.dirname(os.path.abspath(protoc.__file__)), "_proto")
        rels = [rel for _, rel in PROTOS]
        rc = protoc.main(["protoc", "-I" + inc, "-I" + wkt, "--python_out=" + HERE] + rels)
        if rc != 0:
            sys.exit("generate.py: protoc failed (%d)" % rc)
    for rel in rels:
        print("wrote", os.path.join(HERE, rel.replace(".proto", "_pb2.py")))


if __name__ == "__main__":
    main()
