# shellcheck shell=bash
# tests/lib/grpc_server.sh: sourced by the suites that drive `clonestage serve` with Python's
# grpcio (tests/transport, tests/compression). Before sourcing, set NAME (the prefix of every
# message) and PY_MODULES (what the venv must import, comma-separated). It then:
#   - checks the venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv) and the release binary
#     (rust/target/release/clonestage, or $CLONESTAGE_BIN), exiting 1 with the reason;
#   - starts the server on a fresh cache under a short temp dir (a socket path has at most
#     107 bytes), no action runs so no spawn wrapper is started, and waits for its socket;
#   - leaves PY, BIN, tmp, cache, sock and pid set, and an EXIT trap that stops the server
#     (SIGTERM, SIGKILL after 15 s) and removes the temp dir;
#   - sources tests/lib/report.sh (a suite reports with pass, fail, finish) and defines
#     server_still_up: pass, or fail with the server's log, after what the suite sent it.
# Run from the repository root.
# shellcheck source=tests/lib/report.sh
. tests/lib/report.sh
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
PY=$TOOLS/venv/bin/python
BIN=${CLONESTAGE_BIN:-$PWD/rust/target/release/clonestage}

"$PY" -c "import $PY_MODULES" 2>/dev/null ||
    die "$NAME: setup: $PY_MODULES" "cannot import them with $PY (run .ci/install.sh)"
[ -x "$BIN" ] || die "$NAME: setup: the helper" "$BIN not built (cargo build --release --bin clonestage)"

tmp=$(mktemp -d /tmp/cs-grpc.XXXXXX)
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

CLONESTAGE_PRESPAWN=0 "$BIN" serve --cache "$cache" --jobs 1 --spawn /bin/false \
    >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    [ -s "$cache/server/tcp-port" ] && break
    kill -0 "$pid" 2>/dev/null || die "$NAME: setup: the server starts" "it exited:" "$(tail_of "$tmp/server.log")"
    sleep 0.1
done
[ -S "$sock" ] || die "$NAME: setup: the server starts" "no socket at $sock:" "$(tail_of "$tmp/server.log")"

server_still_up() {
    if kill -0 "$pid" 2>/dev/null; then
        pass "$NAME: the server is still up"
    else
        fail "$NAME: the server died" "$(tail_of "$tmp/server.log")"
    fi
}
