#!/usr/bin/env bash
# tests/perf/upstream.sh: issue 14's figures, a team's cache (BuildGrid 0.4.4) behind clonestage.
#
# examples/swiftlike (--config=ci: SwiftCompile-like actions) with Bazel 4.2.3. Set-up,
# untimed: BuildGrid on a loopback port; machine A (clonestage with --upstream) builds and
# uploads; Bazel with --remote_cache straight to BuildGrid builds once (its own keys, should
# they differ). Then ROUNDS rounds, every configuration once per round, in an order rotated
# by one each round, each after `bazel clean` (its own Bazel output root, so no Bazel server
# restarts; the clonestage configurations share one cache path, emptied (all but the
# server's port and token, so Bazel's options and analysis cache stay) and served by a new
# `clonestage serve` before each build):
#   b-upstream   machine B from clean: empty cache, --upstream BuildGrid (every action
#                should be an upstream hit)
#   direct       Bazel --remote_cache=grpc:// to BuildGrid, no clonestage (a team today)
#   local        Bazel --spawn_strategy=local, no cache (every action runs)
#   none         clonestage, empty cache, no upstream (every action runs through it)
#   down         ... --upstream to a port where nothing listens
#   stalled      ... --upstream BuildGrid, SIGSTOPped during the build
#   lying        ... --upstream a proxy that corrupts every blob (tests/upstream/lying_proxy.py)
#   a-write      machine A with an empty cache and new action keys (--action_env nonce):
#                upstream misses, every action runs, write-behind uploads (default)
#   a-nowrite    the same with --upstream-write none
# Wall time is from the launcher's start to Bazel's exit. CPU seconds are those of Bazel's
# server (its reaped children, the local actions, included) plus the clonestage server's
# (its spawn wrappers and actions included), from /proc/<pid>/stat; BuildGrid's CPU is
# printed beside it (on a team it runs elsewhere). Medians over rounds; ratios of medians.
#
# A benchmark, not a test: prints the table (also to $PERF_DIR/upstream-figures.md), never
# judges a timing, exits 0 when every build that should succeed did. Targets (issue 14):
# b-upstream <= 1.0x direct; down, stalled, lying <= 1.1x none with 0 failures; a-write <=
# 1.05x a-nowrite.
#
# Usage: tests/perf/upstream.sh [ROUNDS]   (default 5; ~15 minutes on 2 cores)
# Environment: CLONESTAGE_TOOLS, CLONESTAGE_BIN (tests/upstream/lib.sh); PERF_DIR (default a
# new /var/tmp/upe2e-perf.XXXXXX, removed at exit unless PERF_KEEP=1); PERF_CONFIGS (a
# space-separated subset of the configurations above).
set -u -o pipefail

rounds="${1:-5}"
case "$rounds" in '' | *[!0-9]* | 0) echo "upstream.sh: ROUNDS must be a number >= 1" >&2 && exit 1 ;; esac
up_name="perf/upstream"
up_tmp="${PERF_DIR:-$(mktemp -d /var/tmp/upe2e-perf.XXXXXX)}"
mkdir -p "$up_tmp/xdg" "$up_tmp/logs"
up_tmp="$(cd "$up_tmp" && pwd -P)"
# shellcheck source=tests/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../upstream/lib.sh"
up_check_tools
logs="$up_tmp/logs"
read -r -a configs <<<"${PERF_CONFIGS:-b-upstream direct local none down stalled lying a-write a-nowrite}"
flags=(--config=ci --jobs=2 //...)
cache_b="$up_tmp/cache-b" # one path for every clonestage configuration: one Bazel server
tck="$(getconf CLK_TCK)"

finish() {
  local r
  for r in "$up_tmp"/bazel-*; do [ -d "$r" ] && up_shutdown_bazel "$r"; done
  [ -d "$cache_b" ] && up_stop_cs "$cache_b"
  [ -d "$up_tmp/cache-a0" ] && up_stop_cs "$up_tmp/cache-a0"
  up_cleanup
  if [ -z "${PERF_DIR:-}" ] && [ "${PERF_KEEP:-0}" != 1 ]; then
    chmod -R u+w "$up_tmp" 2>/dev/null
    rm -rf "$up_tmp"
  fi
}
trap finish EXIT
trap 'exit 130' INT TERM

cpu_ticks() { # PID: utime+stime+cutime+cstime of a live process, in clock ticks (0 if gone)
  local stat rest
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || {
    echo 0
    return
  }
  rest="${stat##*) }" # fields from 3 on (the command name may hold spaces)
  # shellcheck disable=SC2086 # split into fields on purpose
  set -- $rest
  echo $((${12} + ${13} + ${14} + ${15}))
}
bazel_pid() { # OUTROOT: the Bazel server's pid (its output base's server.pid.txt)
  local f
  for f in "$1"/*/server/server.pid.txt; do
    [ -f "$f" ] && cat "$f" && return
  done
  echo 0
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# --- set-up --------------------------------------------------------------------------------

up_start_bgd "$up_tmp/bgd"
upstream="grpc://127.0.0.1:$bgd_port"
n="-"
case " ${configs[*]} " in
  *" b-upstream "*)
    up_start_cs "$up_tmp/cache-a0" --upstream "$upstream"
    up_bazel "$up_tmp/cache-a0" "$up_tmp/bazel-a" "$logs/setup-a.log" build --config=clonestage "${flags[@]}" ||
      up_die "set-up: machine A's build failed (log: $logs/setup-a.log)"
    up_drain "$up_tmp/cache-a0" || up_die "set-up: A's write-behind queue did not drain"
    n="$(up_ac_entries "$up_tmp/cache-a0")"
    up_stop_cs "$up_tmp/cache-a0"
    ;;
esac
up_bazel_plain "$up_tmp/bazel-direct" "$logs/setup-direct.log" build --remote_cache="$upstream" "${flags[@]}" ||
  up_die "set-up: the direct --remote_cache build failed (log: $logs/setup-direct.log)"
dead_port="$(up_free_port)"
up_start_proxy "$up_tmp/proxy" corrupt

# --- one configuration's build -------------------------------------------------------------

# run CONFIG ROUND: sets wall_ms, cpu_s, bgd_s, ok, fetched (bytes B fetched, b-upstream)
run() {
  local c="$1" r="$2" outroot serve=() cs=0 plain=0 extra=() t0 t1 b0 b1 c0 c1 g0 g1 bp
  case "$c" in
    b-upstream) serve=(--upstream "$upstream") ;;
    none) serve=() ;;
    down) serve=(--upstream "grpc://127.0.0.1:$dead_port") ;;
    stalled) serve=(--upstream "$upstream") ;;
    lying) serve=(--upstream "grpc://127.0.0.1:$proxy_port") ;;
    a-write) serve=(--upstream "$upstream") && extra=(--action_env=UPE2E_NONCE="$$-$r-$RANDOM") ;;
    a-nowrite) serve=(--upstream "$upstream" --upstream-write none) && extra=(--action_env=UPE2E_NONCE="$$-$r-$RANDOM") ;;
    direct) plain=1 && extra=(--remote_cache="$upstream") ;;
    local) plain=1 && extra=(--spawn_strategy=local) ;;
  esac
  if [ "$plain" = 1 ]; then
    outroot="$up_tmp/bazel-$c"
    up_bazel_plain "$outroot" "$logs/$c-$r-clean.log" clean
  else
    outroot="$up_tmp/bazel-b"
    up_stop_cs "$cache_b"
    # Empty: CAS, action cache, upstream queue, stats. Kept: server/ (its TCP port and token,
    # which the restarted server reuses) and launcher/, so Bazel's options stay the same and
    # its server keeps its analysis cache, as for the direct and local builds (a new token
    # per build would discard it and cost the clonestage rows seconds that are no upstream's).
    chmod -R u+w "$cache_b" 2>/dev/null
    [ -d "$cache_b" ] && find "$cache_b" -mindepth 1 -maxdepth 1 ! -name server ! -name launcher -exec rm -rf {} +
    rm -f "$cache_b.serve.log"
    up_start_cs "$cache_b" "${serve[@]}"
    cs=$cs_pid
    up_bazel "$cache_b" "$outroot" "$logs/$c-$r-clean.log" clean
    extra=(--config=clonestage "${extra[@]}")
  fi
  bp="$(bazel_pid "$outroot")"
  b0="$(cpu_ticks "$bp")" c0="$(cpu_ticks "$cs")" g0="$(cpu_ticks "$bgd_pid")"
  [ "$c" = stalled ] && kill -STOP "$bgd_pid"
  t0="$(now_ms)"
  if [ "$plain" = 1 ]; then
    up_bazel_plain "$outroot" "$logs/$c-$r.log" build "${extra[@]}" "${flags[@]}"
  else
    up_bazel "$cache_b" "$outroot" "$logs/$c-$r.log" build "${extra[@]}" "${flags[@]}"
  fi
  ok=$?
  t1="$(now_ms)"
  [ "$c" = stalled ] && kill -CONT "$bgd_pid"
  [ "$bp" != 0 ] || bp="$(bazel_pid "$outroot")" # a first build started the Bazel server
  b1="$(cpu_ticks "$bp")" c1="$(cpu_ticks "$cs")" g1="$(cpu_ticks "$bgd_pid")"
  wall_ms=$((t1 - t0))
  cpu_s="$(awk -v t=$((b1 - b0 + c1 - c0)) -v k="$tck" 'BEGIN {printf "%.2f", t / k}')"
  bgd_s="$(awk -v t=$((g1 - g0)) -v k="$tck" 'BEGIN {printf "%.2f", t / k}')"
  fetched=""
  if [ "$plain" = 0 ]; then
    local s
    s="$(up_stats "$cache_b")"
    fetched="$(up_key "$s" upstream_bytes_fetched)"
    echo "$c round $r: hits $(up_key "$s" upstream_ac_hits) executed $(up_key "$s" actions) errors $(up_key "$s" upstream_errors) rejected $(up_key "$s" upstream_rejected) fetched $fetched B" >>"$logs/counters.txt"
  fi
  echo "$c round $r: $(grep -E '^INFO: [0-9,]+ process' "$logs/$c-$r.log" | tail -n 1)" >>"$logs/counters.txt"
}

# --- rounds --------------------------------------------------------------------------------

declare -A walls cpus bgds fails bytes
for c in "${configs[@]}"; do fails[$c]=0; done
load0="$(cut -d' ' -f1 /proc/loadavg)"
for r in $(seq "$rounds"); do
  k=${#configs[@]}
  for i in $(seq 0 $((k - 1))); do
    c="${configs[$(((i + r - 1) % k))]}"
    run "$c" "$r"
    walls[$c]="${walls[$c]:-} $wall_ms"
    cpus[$c]="${cpus[$c]:-} $cpu_s"
    bgds[$c]="${bgds[$c]:-} $bgd_s"
    bytes[$c]="${bytes[$c]:-} $fetched"
    [ "$ok" = 0 ] || fails[$c]=$((${fails[$c]} + 1))
    up_say "round $r/$rounds $c: ${wall_ms} ms, cpu ${cpu_s}s, exit $ok"
  done
done
load1="$(cut -d' ' -f1 /proc/loadavg)"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { # CONFIG BASE: median wall ratio, or "-"
  if [ -z "${walls[$1]:-}" ] || [ -z "${walls[$2]:-}" ]; then
    echo "-"
    return
  fi
  # shellcheck disable=SC2086
  awk -v a="$(median ${walls[$1]})" -v b="$(median ${walls[$2]})" 'BEGIN {printf "%.2fx", a / b}'
}
base_of() {
  case "$1" in
    b-upstream) echo "direct" ;;
    down | stalled | lying) echo "none" ;;
    a-write) echo "a-nowrite" ;;
    *) echo "" ;;
  esac
}
{
  echo "tests/perf/upstream.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), $rounds rounds interleaved, examples/swiftlike --config=ci ($n cacheable actions), Bazel 4.2.3, BuildGrid 0.4.4 on loopback"
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo) RAM, shared; load average $load0 at start, $load1 at end; cache filesystem: $(stat -f -c %T "$up_tmp") ($(df -P "$up_tmp" | awk 'NR==2 {print $1}'))"
  echo
  echo "| configuration | median wall | walls (ms) | median CPU s (Bazel + clonestage) | BuildGrid CPU s | vs | ratio | failures | bytes fetched (median) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for c in "${configs[@]}"; do
    base="$(base_of "$c")"
    # shellcheck disable=SC2086
    printf '| %s | %s ms | %s | %s | %s | %s | %s | %s/%s | %s |\n' "$c" "$(median ${walls[$c]})" "${walls[$c]# }" \
      "$(median ${cpus[$c]})" "$(median ${bgds[$c]})" "${base:--}" "$([ -n "$base" ] && ratio "$c" "$base" || echo -)" \
      "${fails[$c]}" "$rounds" "$([ -n "${bytes[$c]// /}" ] && median ${bytes[$c]} || echo -)"
  done
  echo
  echo "b-upstream vs local: $(ratio b-upstream local)"
} | tee "$up_tmp/upstream-figures.md"
echo "logs and counters: $logs (kept only with PERF_DIR or PERF_KEEP=1)" >&2
total_fails=0
for c in "${configs[@]}"; do total_fails=$((total_fails + ${fails[$c]})); done
[ "$total_fails" = 0 ]
