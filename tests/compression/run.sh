#!/usr/bin/env bash
# zstd compressed-blobs and digest-function refusal end to end, with an independent gRPC client
# (grpcio + zstandard from PyPI), for what Bazel 4.2.3 here cannot exercise: it has no
# --remote_cache_compression (Bazel 5/6: --experimental_remote_cache_compression) and no
# --digest_function startup option (Bazel 7+ with blake3).
#
# Starts `clonestage serve` (rust/target/release/clonestage, or $CLONESTAGE_BIN) on a temp
# cache and runs client.py over unix:<cache>/server/clonestage.sock: capabilities (ZSTD,
# SHA256 only), a compressed upload + compressed read + plain read of the same blob (the
# server's own executable: a realistic build output), BLAKE3 requests refused. Prints
# `compression: ...` lines, including the figures (bytes on the wire and time, plain vs zstd),
# then PASS/FAIL and "N passed, M failed" (tests/lib/report.sh); exits non-zero on any failure.
#
# Needs the venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv with grpcio and zstandard).
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=compression PY_MODULES="grpc, zstandard"
# shellcheck source=tests/lib/grpc_server.sh
. tests/lib/grpc_server.sh

say "compression: machine: $(nproc) cores, $(uname -sm); cache on $(df -T "$cache" | awk 'NR==2{print $2}')"
pass_if "compression: client.py (capabilities, zstd upload and reads, BLAKE3 refused; its lines above)" \
    "$PY" tests/compression/client.py "$sock" "$BIN"
server_still_up
finish
