#!/usr/bin/env bash
# tests/secrets/run.sh: what another local user can learn and do while a build runs through
# the launcher over loopback TCP (issue 10, finding 3), and whether the TCP address survives a
# server restart.
#
# A real `clonestage serve` on a temp cache, the workspace's tools/bazel, and a Bazel that is
# still running when the probes run: by default a stub Bazel (named bazel-4, so the launcher
# picks TCP) that reads the --bazelrc files it is given as Bazel does and waits; with --bazel,
# Debian's Bazel 4.2.3 itself building a genrule that runs in clonestage and waits. While it
# runs, as uid 65534 (setpriv; this script must run as root):
#   - every /proc/*/cmdline and /proc/*/environ it can read, and every file it can read under
#     the cache, the workspace and HOME, is
#     searched for the token (with --bazel that includes Bazel's output user root, under
#     HOME, whose java.log records every option Bazel read from rc files);
#   - GetCapabilities and Execute over TCP without a token, and with each token found, must
#     be refused (UNAUTHENTICATED); the token file and the unix socket must be out of reach.
# A control call as uid 65534 with the real token must succeed: the probe can see a leak.
# Then the server is restarted: the same port and token must answer, so a pasted address or
# an imported rc file does not go stale.
#
# Prints one figure line: "secrets: ...". Usage: bash tests/secrets/run.sh [--bazel]
# Needs: root, setpriv, curl with HTTP/2, g++ (unless $CLONESTAGE_SPAWN), a release build of
# the helper (rust/target/release/clonestage, or $CLONESTAGE_BIN).

set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
root="$(cd "$here/../.." && pwd -P)"
mode=stub
[ "${1:-}" = --bazel ] && mode=bazel
other=65534

# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/build.sh
source "$root/tests/lib/build.sh"

[ "$(id -u)" = 0 ] || die "setup: root" "needed: the probes run as uid $other with setpriv; not run"
for tool in setpriv curl; do
  command -v "$tool" >/dev/null || die "setup: $tool" "not found"
done

bin="${CLONESTAGE_BIN:-$root/rust/target/release/clonestage}"
[ -x "$bin" ] || die "setup: the helper" "none at $bin (cargo build --release)"

T="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-secrets.XXXXXX")"
chmod 755 "$T" # the other uid must be able to walk to everything not private by itself
cache="$T/cache"
ws="$T/ws"
home="$T/home"
mkdir -p "$ws/tools" "$home" "$T/bin"
chmod 755 "$ws" "$ws/tools" "$home" "$T/bin"

cleanup() {
  local pid
  [ -f "$T/done" ] || : >"$T/done"
  [ -n "${bazel_pid:-}" ] && wait "$bazel_pid" 2>/dev/null
  if [ "$mode" = bazel ]; then
    (cd "$ws" && HOME="$home" USER=root timeout 60 /usr/bin/bazel shutdown) >/dev/null 2>&1
  fi
  pid="$(tr -dc 0-9 <"$cache/server/lock" 2>/dev/null)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

spawn="${CLONESTAGE_SPAWN:-}"
if [ -z "$spawn" ]; then
  spawn="$T/bin/clonestage-spawn"
  cxx_spawn "$root" "$spawn" nice || die "setup: building clonestage-spawn with ${CXX:-g++}"
fi

cp "$root/tools/bazel" "$ws/tools/bazel"
: >"$ws/WORKSPACE"
cp "$root/strategy/clonestage.bazelrc" "$ws/tools/clonestage.bazelrc"
printf 'try-import %%workspace%%/tools/clonestage.bazelrc\n' >"$ws/.bazelrc"

# --- the Bazel that runs while the probes look -----------------------------------------

if [ "$mode" = stub ]; then
  # Like Bazel: reads the --bazelrc startup options before the command word (and what they
  # import); writes its
  # arguments and the rc text it read; says it runs, and waits for $T/done (bounded).
  cat >"$T/bin/bazel-4" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >"$STUB_OUT.args"
: >"$STUB_OUT.rc"
read_rc() { # an rc file's lines, following import and try-import as Bazel does
  local line depth="$2"
  [ "$depth" -lt 8 ] || return 0
  while IFS= read -r line; do
    case "$line" in
      "try-import "* | "import "*) read_rc "${line#* }" $((depth + 1)) ;;
      *) printf '%s\n' "$line" ;;
    esac
  done <"$1"
}
for a in "$@"; do
  case "$a" in
    --bazelrc=*) read_rc "${a#--bazelrc=}" 0 >>"$STUB_OUT.rc" 2>/dev/null ;;
    -*) ;;
    *) break ;;
  esac
done
: >"$STUB_OUT.running"
for _ in $(seq 1 600); do [ -e "$STUB_DONE" ] && exit 0; sleep 0.1; done
exit 1
EOF
  chmod 755 "$T/bin/bazel-4"
  real="$T/bin/bazel-4"
  build_args=(build //:slow)
else
  real=/usr/bin/bazel
  cat >"$ws/BUILD.bazel" <<EOF
genrule(
    name = "slow",
    outs = ["slow.txt"],
    cmd = "touch $T/stub.running; for i in \$\$(seq 1 600); do [ -e $T/done ] && break; sleep 0.1; done; echo ok > \$@",
)
EOF
  build_args=(build --config=clonestage --remote_local_fallback=false //:slow)
fi

# The same environment as a user's shell would give: HOME, PATH, the cache.
run_launcher() {
  (cd "$ws" && /usr/bin/env -i HOME="$home" PATH="/usr/local/bin:/usr/bin:/bin" USER=root \
    CLONESTAGE_CACHE="$cache" CLONESTAGE_BIN="$bin" CLONESTAGE_SPAWN="$spawn" BAZEL_REAL="$real" \
    STUB_OUT="$T/stub" STUB_DONE="$T/done" \
    "$ws/tools/bazel" "$@")
}

run_launcher "${build_args[@]}" >"$T/bazel.log" 2>&1 &
bazel_pid=$!
for _ in $(seq 1 1200); do
  [ -e "$T/stub.running" ] && break
  kill -0 "$bazel_pid" 2>/dev/null || break
  sleep 0.1
done
if ! [ -e "$T/stub.running" ]; then
  die "the build is running (through the launcher, over TCP)" "$(tail_of "$T/bazel.log" 20)"
fi
pass "the build is running ($mode Bazel, through the launcher)"

token="$(cat "$cache/server/token")"
port="$(head -n 1 "$cache/server/tcp-port")"
if [ "$mode" = stub ]; then
  # What the stub was handed must lead to the server: the executor and the token, on its
  # command line or in the rc files it read.
  handed="$(cat "$T/stub.args" "$T/stub.rc" 2>/dev/null)"
  pass_if "Bazel is handed the TCP executor" grep -qF -- "--remote_executor=grpc://127.0.0.1:$port" <<<"$handed"
  pass_if "Bazel is handed the token header (executor)" grep -qF -- "--remote_exec_header=x-clonestage-token=$token" <<<"$handed"
  pass_if "Bazel is handed the token header (cache)" grep -qF -- "--remote_cache_header=x-clonestage-token=$token" <<<"$handed"
fi

# --- as uid 65534, while the build runs --------------------------------------------------

as_other() { setpriv --reuid="$other" --regid="$other" --clear-groups "$@"; }

scan_dirs=("$cache" "$ws" "$home") # with --bazel, HOME holds Bazel's output user root
# The token goes to the scanner in a file only it can read, never in an argv (it would find
# itself), and the file lies outside the directories it searches.
printf '%s\n' "$token" >"$T/pattern"
chown "$other:$other" "$T/pattern"
chmod 600 "$T/pattern"
# shellcheck disable=SC2016 # expanded by the inner bash
as_other bash -c '
  pat="$1"
  shift
  for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
    if grep -qaFf "$pat" "$f" 2>/dev/null; then
      pid="${f#/proc/}"
      pid="${pid%%/*}"
      echo "$f ($(tr "\0" " " <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120))"
    fi
  done
  find "$@" -type f -readable -print0 2>/dev/null | xargs -0 -r grep -lFf "$pat" 2>/dev/null
' scan "$T/pattern" "${scan_dirs[@]}" >"$T/leaks"
nleaks="$(grep -c . "$T/leaks")"
nargv="$(grep -c '/cmdline ' "$T/leaks")"
nenv="$(grep -c '/environ ' "$T/leaks")"
nfiles=$((nleaks - nargv - nenv))
# What the owner sees: where the token is written at all (with --bazel: Bazel's java.log).
owner_view="$(grep -rlF -f "$T/pattern" "$home" "$ws" 2>/dev/null | grep -c .)"
if [ "$nleaks" = 0 ]; then
  pass "uid $other finds the token nowhere (argv, environ, files under cache/workspace/home)"
else
  fail "uid $other finds the token in $nleaks places" "$(head -n 10 "$T/leaks")"
fi

printf '\0\0\0\0\0' >"$T/empty.grpc" # one empty protobuf message, gRPC-framed
chmod 644 "$T/empty.grpc"
grpc_status() { # grpc_status METHOD [TOKEN] as uid 65534 over TCP: the grpc-status, or "none"
  # Without a token the request has no body: the server refuses it on its headers, and a body
  # still being sent then makes curl 7.88 report the stream reset instead of the status.
  local h=(-X POST)
  [ -n "${2:-}" ] && h=(-H "x-clonestage-token: $2" --data-binary @"$T/empty.grpc")
  as_other curl -s --max-time 10 --http2-prior-knowledge -o /dev/null -D - \
    -H 'content-type: application/grpc' -H 'te: trailers' "${h[@]}" \
    "http://127.0.0.1:$port/build.bazel.remote.execution.v2.$1" |
    tr -d '\r' | sed -n 's/^grpc-status: //p' | head -n 1 | grep . || echo none
}

st="$(grpc_status Capabilities/GetCapabilities)"
pass_if "uid $other: GetCapabilities over TCP without the token is UNAUTHENTICATED (grpc-status $st)" test "$st" = 16
st="$(grpc_status Execution/Execute)"
pass_if "uid $other: Execute over TCP without the token is UNAUTHENTICATED (grpc-status $st)" test "$st" = 16
# Execute with each token the scan found: what an attacker would do with it.
used=0
if [ "$nleaks" -gt 0 ]; then
  st="$(grpc_status Execution/Execute "$token")"
  used=1
  fail "uid $other ran Execute over TCP with the token it found (grpc-status $st, not 16: past the token check)"
fi
# The control: the probe itself can get through when it has the token.
pass_if "control: uid $other with the real token gets through (the probe can see a leak)" \
  test "$(grpc_status Capabilities/GetCapabilities "$token")" = 0

pass_if "uid $other cannot read the token file" \
  bash -c "! setpriv --reuid=$other --regid=$other --clear-groups cat '$cache/server/token' >/dev/null 2>&1"
pass_if "uid $other cannot connect to the unix socket" \
  bash -c "! setpriv --reuid=$other --regid=$other --clear-groups curl -s --max-time 5 --http2-prior-knowledge \
    --unix-socket '$cache/server/clonestage.sock' -o /dev/null http://localhost/ 2>/dev/null"

: >"$T/done"
wait "$bazel_pid"
rc=$?
bazel_pid=""
if [ "$mode" = bazel ]; then
  pass_if "the Bazel 4.2.3 build through clonestage succeeded" test "$rc" = 0
  pass_if "its action ran in clonestage (remote)" grep -qE '[0-9]+ remote' "$T/bazel.log"
  pass_if "Bazel has nothing to say about the rc files (no unknown command or option)" \
    bash -c "! grep -q 'while reading option defaults file' '$T/bazel.log'"
  if grep -qF -- "$token" "$T/bazel.log"; then
    fail "the token is in Bazel's console output"
  else
    pass "the token is not in Bazel's console output"
  fi
fi

# --- restart: the same port and token ----------------------------------------------------

old_pid="$(tr -dc 0-9 <"$cache/server/lock")"
kill "$old_pid"
for _ in $(seq 1 200); do kill -0 "$old_pid" 2>/dev/null || break; sleep 0.05; done
rm -f "$T/stub.running"
[ "$mode" = stub ] && run_launcher build //:slow >"$T/bazel2.log" 2>&1
if [ "$mode" = bazel ]; then
  run_launcher build --config=clonestage //:slow >"$T/bazel2.log" 2>&1
fi
new_port="$(head -n 1 "$cache/server/tcp-port" 2>/dev/null)"
new_pid="$(tr -dc 0-9 <"$cache/server/lock" 2>/dev/null)"
pass_if "the launcher started a new server" test -n "$new_pid" -a "$new_pid" != "$old_pid"
pass_if "the restarted server listens on the same port ($port, now ${new_port:-none})" test "$new_port" = "$port"
pass_if "the restarted server keeps the token" test "$(cat "$cache/server/token" 2>/dev/null)" = "$token"
pass_if "the old address and token still answer" test "$(grpc_status Capabilities/GetCapabilities "$token")" = 0

echo "secrets: token found by uid $other in $nleaks places (argv $nargv, environ $nenv, files $nfiles);" \
  "Execute as uid $other with a found token: $([ "$used" = 1 ] && echo "tried, got through" || echo "nothing to try");" \
  "port and token after a restart: $([ "$new_port" = "$port" ] && echo same || echo changed) ($mode Bazel);" \
  "files under HOME and the workspace with the token, as the owner sees them: $owner_view"
finish
