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
# Needs the venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv with grpcio). Prints client.py's
# lines, then PASS/FAIL per check and "N passed, M failed" (tests/lib/report.sh); exits
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=transport PY_MODULES="grpc"
# shellcheck source=tests/lib/grpc_server.sh
. tests/lib/grpc_server.sh

pass_if "transport: client.py (each :authority form, five RPCs each; its lines above)" \
    "$PY" tests/transport/client.py "$sock"

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
        fail "transport: other uid" "no python that uid 65534 can run"
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
        pass_if "transport: other uid: connect to the socket $sock_other, read the token $token_other (owner's connect: ${own/ALLOWED/allowed})" \
            test "$own/$sock_other/$token_other" = ALLOWED/refused/refused
    fi
else
    fail "transport: other uid" "not root: the other-uid check needs setpriv as root"
fi

server_still_up
finish
