#!/usr/bin/env bash
# The unix socket against clients that are not ours (issue 10, finding 9), and against other
# users.
#
# Starts `clonestage serve` (rust/target/release/clonestage, or $CLONESTAGE_BIN) on a temp
# cache and runs client.py, an independent grpcio client, over unix:<cache>/server/clonestage.sock
# with each :authority a client may send there: grpcio's default (the %-encoded socket path),
# the raw socket path (what grpc-java, so Bazel, sends) and `localhost`. Five RPCs per form
# (Capabilities, FindMissingBlobs, ByteStream Write and Read); every one must succeed.
#
# Then, as root, a client run as another uid (setpriv, uid/gid 65534) must be refused by the
# kernel: connecting to the socket (0600 in the 0700 server/ dir) and reading the token. The
# temp dir above the cache is made 0755 so that only the server's own modes stand in the way.
#
# Needs the venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv with grpcio). Prints
# `transport: ...` summary lines; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=transport PY_MODULES="grpc"
# shellcheck source=tests/lib/grpc_server.sh
. tests/lib/grpc_server.sh

status=0
"$PY" tests/transport/client.py "$sock" || status=1

# --- another uid ---------------------------------------------------------------------------
if [ "$(id -u)" = 0 ]; then
    chmod 0755 "$tmp" "$cache"
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
    # A Python that uid 65534 may run (the venv's may point into root's home).
    nobody_py=
    for p in "$PY" /usr/bin/python3 "$(command -v python3 || true)"; do
        if [ -n "$p" ] && as_nobody "$p" -c pass 2>/dev/null; then nobody_py=$p; break; fi
    done
    if [ -z "$nobody_py" ]; then
        echo "transport: no python that uid 65534 can run" >&2
        status=1
    else
        # Each probe prints "refused" (PermissionError) or what it got instead.
        probe='
import socket, sys
what, path = sys.argv[1], sys.argv[2]
try:
    if what == "connect":
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
    else:
        open(path).read()
    print("ALLOWED")
except PermissionError:
    print("refused")
except OSError as e:
    print("other error:", e)
'
        # The control: the same probe as the owner connects.
        own=$("$nobody_py" -c "$probe" connect "$sock")
        sock_other=$(as_nobody "$nobody_py" -c "$probe" connect "$sock")
        token_other=$(as_nobody "$nobody_py" -c "$probe" read "$cache/server/token")
        echo "transport: other uid: connect to the socket $sock_other, read the token $token_other (owner's connect: ${own/ALLOWED/allowed})"
        if [ "$own" != ALLOWED ] || [ "$sock_other" != refused ] || [ "$token_other" != refused ]; then
            status=1
        fi
    fi
else
    echo "transport: not root: the other-uid check needs setpriv as root" >&2
    status=1
fi

kill -0 "$pid" 2>/dev/null || { echo "transport: the server died" >&2; cat "$tmp/server.log" >&2; status=1; }
[ $status = 0 ] && echo "transport: ok" || echo "transport: FAILED"
exit $status
