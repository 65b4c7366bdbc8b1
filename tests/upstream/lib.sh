# shellcheck shell=bash disable=SC2154,SC2034 # up_name, up_tmp: set by the sourcing script; outputs for it
# tests/upstream/lib.sh: helpers shared by tests/upstream/run.sh and tests/perf/upstream.sh
# (sourced, not run): a real BuildGrid cache as the team's upstream, a lying proxy in front
# of it, clonestage servers standing for two developers' machines (one cache each), and
# Bazel 4.2.3 building examples/swiftlike through the launcher with a machine's cache.
#
# Before sourcing, set up_name (the prefix of messages) and up_tmp (an absolute directory
# for caches, logs and Bazel output roots). Every process started here is recorded in
# $up_tmp/pids and stopped by up_cleanup (SIGCONT first: a test may have SIGSTOPped one).
#
# Environment: CLONESTAGE_TOOLS (default /var/tmp/clonestage-tools: bgd-venv/ with BuildGrid
# 0.4.4 and venv/ with grpcio, both from .ci/install.sh), CLONESTAGE_BIN (default
# rust/target/release/clonestage of this checkout).

up_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
up_ws="$up_root/examples/swiftlike"
up_tools="${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}"
up_bgd="$up_tools/bgd-venv/bin/bgd"
up_py="$up_tools/venv/bin/python"
up_cs="${CLONESTAGE_BIN:-$up_root/rust/target/release/clonestage}"

up_say() { printf '%s: %s\n' "$up_name" "$*" >&2; }
up_die() {
  up_say "error: $*"
  exit 1
}

up_check_tools() {
  [ -x "$up_bgd" ] || up_die "no BuildGrid at $up_bgd (run .ci/install.sh, or set CLONESTAGE_TOOLS)"
  "$up_py" -c 'import grpc' 2>/dev/null || up_die "cannot import grpc with $up_py (run .ci/install.sh)"
  [ -x "$up_cs" ] || up_die "$up_cs not built (cargo build --release in rust/)"
  command -v bazel >/dev/null || up_die "no bazel on PATH"
}

up_track() { # PID: stopped by up_cleanup; out of the job table, so bash reports no "Killed"
  echo "$1" >>"$up_tmp/pids"
  disown "$1" 2>/dev/null
}

up_cleanup() {
  local pid
  [ -f "$up_tmp/pids" ] || return 0
  while read -r pid; do
    kill -CONT "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
  done <"$up_tmp/pids"
  local alive
  for _ in $(seq 50); do # up to 5 s for SIGTERM
    alive=0
    while read -r pid; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done <"$up_tmp/pids"
    [ "$alive" = 1 ] || break
    sleep 0.1
  done
  while read -r pid; do
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  done <"$up_tmp/pids"
  : >"$up_tmp/pids"
}

up_free_port() {
  "$up_py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# up_wait_grpc PORT PID WHAT: until a gRPC server on 127.0.0.1:PORT answers (any status
# but UNAVAILABLE), or PID died, or 60 s passed.
up_wait_grpc() {
  local i
  for i in $(seq 600); do
    if "$up_py" - "$1" <<'PY' 2>/dev/null; then return 0; fi
import sys, grpc
ch = grpc.insecure_channel("127.0.0.1:" + sys.argv[1])
try:
    ch.unary_unary("/build.bazel.remote.execution.v2.Capabilities/GetCapabilities")(b"", timeout=2)
except grpc.RpcError as e:
    sys.exit(1 if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) else 0)
PY
    kill -0 "$2" 2>/dev/null || return 1
    [ "$i" -lt 600 ] && sleep 0.1
  done
  return 1
}

# up_start_bgd DIR: BuildGrid (cache only) with its blobs in DIR on a free loopback port;
# sets bgd_pid and bgd_port.
up_start_bgd() {
  local dir="$1"
  mkdir -p "$dir/cas"
  bgd_port="$(up_free_port)"
  sed -e "s|@PORT@|$bgd_port|" -e "s|@DIR@|$dir/cas|" "$up_root/tests/upstream/cache.yml.in" >"$dir/cache.yml"
  setsid "$up_bgd" server start "$dir/cache.yml" </dev/null >"$dir/bgd.log" 2>&1 &
  bgd_pid=$!
  up_track "$bgd_pid"
  if ! up_wait_grpc "$bgd_port" "$bgd_pid"; then
    tail -n 20 "$dir/bgd.log" >&2
    up_die "BuildGrid did not answer on 127.0.0.1:$bgd_port (log: $dir/bgd.log)"
  fi
}

# up_start_proxy DIR MODES: the lying proxy in front of BuildGrid; sets proxy_pid, proxy_port.
up_start_proxy() {
  local dir="$1" i
  mkdir -p "$dir"
  rm -f "$dir/port"
  setsid "$up_py" "$up_root/tests/upstream/lying_proxy.py" "127.0.0.1:$bgd_port" "$dir/port" "$2" \
    </dev/null >"$dir/proxy.log" 2>&1 &
  proxy_pid=$!
  up_track "$proxy_pid"
  for i in $(seq 300); do
    [ -s "$dir/port" ] && break
    kill -0 "$proxy_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$dir/port" ] || up_die "the lying proxy did not start (log: $dir/proxy.log)"
  read -r proxy_port <"$dir/port"
}

# up_start_cs CACHE [SERVE FLAGS...]: `clonestage serve` on CACHE (one "machine"), detached,
# until `address` answers; sets cs_pid.
up_start_cs() {
  local cache="$1" i
  shift
  mkdir -p "$cache"
  setsid "$up_cs" --cache "$cache" serve "$@" </dev/null >>"$cache.serve.log" 2>&1 &
  cs_pid=$!
  up_track "$cs_pid"
  for i in $(seq 150); do
    "$up_cs" --cache "$cache" address >/dev/null 2>&1 && return 0
    kill -0 "$cs_pid" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$cache.serve.log" >&2
  up_die "clonestage serve on $cache did not start (flags: $*)"
}

up_stop_cs() { # CACHE
  "$up_cs" --cache "$1" stop --timeout 30 >/dev/null 2>&1
}

# up_bazel CACHE OUTROOT LOG ARGS...: one Bazel 4.2.3 command in examples/swiftlike through
# the launcher (tools/bazel) with the clonestage server on CACHE; bounded by 15 minutes.
up_bazel() {
  local cache="$1" outroot="$2" log="$3"
  shift 3
  (cd "$up_ws" && CLONESTAGE_CACHE="$cache" CLONESTAGE_BIN="$up_cs" XDG_CONFIG_HOME="$up_tmp/xdg" \
    timeout -k 10 900 bazel --output_user_root="$outroot" "$@") >"$log" 2>&1
}

# up_bazel_plain OUTROOT LOG ARGS...: the same without the launcher (baselines).
up_bazel_plain() {
  local outroot="$1" log="$2"
  shift 2
  (cd "$up_ws" && CLONESTAGE_DISABLE=1 timeout -k 10 900 bazel --output_user_root="$outroot" "$@") >"$log" 2>&1
}

up_shutdown_bazel() { # OUTROOT
  (cd "$up_ws" && CLONESTAGE_DISABLE=1 timeout 60 bazel --output_user_root="$1" shutdown) >/dev/null 2>&1
}

# up_stats CACHE: `clonestage stats --json`, once it stops changing (counters are written
# off the request path).
up_stats() {
  local a b
  a="$("$up_cs" --cache "$1" stats --json 2>/dev/null)"
  for _ in $(seq 20); do
    sleep 0.1
    b="$("$up_cs" --cache "$1" stats --json 2>/dev/null)"
    [ "$a" = "$b" ] && break
    a="$b"
  done
  printf '%s\n' "$a"
}

# up_key JSON KEY: a numeric counter of a stats JSON (0 when absent).
up_key() {
  local v
  v="$(printf '%s' "$1" | grep -o "\"$2\"[[:space:]]*:[[:space:]]*[0-9]*" | head -n 1 | grep -o '[0-9]*$')"
  echo "${v:-0}"
}

# up_drain CACHE: wait (up to 120 s) until the server's write-behind queue is empty; status 1
# when it is not.
up_drain() {
  local s i
  for i in $(seq 240); do
    s="$("$up_cs" --cache "$1" stats --json 2>/dev/null)"
    [ "$(up_key "$s" upstream_queue_len)" = 0 ] && [ "$(up_key "$s" upstream_results_uploaded)" -gt 0 ] && return 0
    sleep 0.5
  done
  return 1
}

up_ac_entries() { # CACHE: results in the local action cache
  find "$1/ac" -type f ! -name '.*' 2>/dev/null | wc -l | tr -d ' '
}

# up_outputs FILE: the SHA-256 of every regular file Bazel's last build left in bazel-bin
# (runfiles are symlinks; Bazel's own manifests are left out), sorted, into FILE. Left out too:
# the stand-in compiler's `<Module>.modcache` reports, which record whether each compile built
# or loaded its implicit modules, that is the state of the machine's module cache, not what the
# action computed (examples/swiftlike/README.md); a cache that executes again differs there.
up_outputs() {
  (cd "$up_ws/bazel-bin/" && find . -type f ! -name '*.runfiles_manifest' ! -name MANIFEST ! -name '*.modcache' -print0 |
    sort -z | xargs -0 sha256sum) >"$1"
}
