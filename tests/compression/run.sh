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
# `compression: ...` lines, including the figures (bytes on the wire and time, plain vs zstd);
# exits non-zero on any failure.
#
# Needs the venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv with grpcio and zstandard).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
PY=$TOOLS/venv/bin/python
BIN=${CLONESTAGE_BIN:-$PWD/rust/target/release/clonestage}

if ! "$PY" -c 'import grpc, zstandard' 2>/dev/null; then
    echo "compression: no grpcio/zstandard in $TOOLS/venv (run .ci/install.sh)" >&2
    exit 1
fi
[ -x "$BIN" ] || { echo "compression: $BIN not built (cargo build --release --bin clonestage)" >&2; exit 1; }

tmp=$(mktemp -d /tmp/csz.XXXXXX) # short: a socket path has at most 107 bytes
cache=$tmp/c
sock=$cache/server/clonestage.sock
pid=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# No action runs here, so the spawn wrapper is never started (CLONESTAGE_PRESPAWN=0).
CLONESTAGE_PRESPAWN=0 "$BIN" serve --cache "$cache" --jobs 1 --spawn /bin/false \
    >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    [ -s "$cache/server/tcp-port" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/server.log" >&2; echo "compression: the server exited" >&2; exit 1; }
    sleep 0.1
done
[ -S "$sock" ] || { cat "$tmp/server.log" >&2; echo "compression: no socket at $sock" >&2; exit 1; }

status=0
echo "compression: machine: $(nproc) cores, $(uname -sm); cache on $(df -T "$cache" | awk 'NR==2{print $2}')"
"$PY" tests/compression/client.py "$sock" "$BIN" || status=1
kill -0 "$pid" 2>/dev/null || { echo "compression: the server died" >&2; cat "$tmp/server.log" >&2; status=1; }
[ $status = 0 ] && echo "compression: ok" || echo "compression: FAILED"
exit $status
