#!/usr/bin/env bash
# tests/upstream/run.sh: issue 14 end to end against a real REAPI server. A team's cache
# (BuildGrid 0.4.4, cache only, on a free loopback port) is the upstream of two clonestage
# servers on one machine, each with its own cache: "machine A" and "machine B", two
# developers. Bazel 4.2.3 builds examples/swiftlike (--config=ci, SwiftCompile-like
# actions plus the C++ "compiler" they run) through the launcher:
#
#   1. A builds, its server started by the launcher with the upstream from the user's
#      config file (upstream.env; `clonestage status` shows it): every action executes on
#      A; write-behind empties its queue; every result in A's local action cache is in BuildGrid, equal, with all its
#      blobs (asked with Python grpcio, tests/upstream/reapi_check.py, not clonestage);
#   2. B (empty cache, fresh output base) builds: every cacheable action comes from the
#      upstream (B's upstream_ac_hits == the results A executed, B executed 0), the outputs
#      equal A's, B's CAS verifies (`clonestage verify`);
#   3. the upstream fails, each time with a fresh B cache and `bazel clean`:
#      down (nothing listens), stalled (BuildGrid SIGSTOPped), lying (a grpcio proxy that
#      corrupts every blob it returns; one that names a missing blob in every ActionResult):
#      the build is green, the outputs equal A's, B's CAS verifies, nothing the upstream
#      got wrong was served (every action is an upstream hit or executed here, and the
#      lying cases count upstream_rejected), and the counters moved (upstream_errors or
#      upstream_rejected). Wall times are printed, not asserted (tests/perf/upstream.sh
#      measures them).
#
# Prints PASS/FAIL per check and "N passed, M failed" last; exit 1 on any failure.
# Environment: TMPDIR (caches, logs, Bazel output roots; default /var/tmp), UPSTREAM_KEEP=1
# keeps them. Needs: .ci/install.sh's $CLONESTAGE_TOOLS (BuildGrid venv, grpcio venv), bazel
# 4.2.3, rust/target/release/clonestage and clonestage-spawn.

set -u -o pipefail

up_name="tests/upstream"
up_tmp="$(mktemp -d "${TMPDIR:-/var/tmp}/upe2e-upstream.XXXXXX")"
# shellcheck source=tests/upstream/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
up_check_tools

logs="$up_tmp/logs"
mkdir -p "$logs" "$up_tmp/xdg"
root_a="$up_tmp/bazel-a"
root_b="$up_tmp/bazel-b"
build_flags=(build --config=ci --config=clonestage --jobs=2 //...)

report_elapsed=1 # "PASS: NAME [42s]"
# shellcheck source=tests/lib/report.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/report.sh"
expect() { # NAME DETAIL COMMAND...: pass when COMMAND succeeds
  local name="$1" detail="$2"
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}

cleanup() {
  up_shutdown_bazel "$root_a"
  up_shutdown_bazel "$root_b"
  for c in "$up_tmp"/cache-*; do
    case "$c" in *.serve.log) ;; *) [ -d "$c" ] && up_stop_cs "$c" ;; esac
  done
  up_cleanup
  if [ "$failed" -gt 0 ] || [ "${UPSTREAM_KEEP:-0}" = 1 ]; then
    echo "run.sh: kept $up_tmp (caches, logs)"
  else
    chmod -R u+w "$up_tmp" 2>/dev/null
    rm -rf "$up_tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

up_start_bgd "$up_tmp/bgd"
echo "BuildGrid 0.4.4 on 127.0.0.1:$bgd_port (pid $bgd_pid)"
upstream="grpc://127.0.0.1:$bgd_port"

# --- 1. machine A builds and uploads ---------------------------------------------------

# A's server is the one the launcher starts, with the upstream from the user's config file
# (${XDG_CONFIG_HOME}/clonestage/upstream.env), as on a developer's machine.
cache_a="$up_tmp/cache-a"
mkdir -p "$up_tmp/xdg/clonestage"
printf '# machine A: writes (the default)\nCLONESTAGE_UPSTREAM=%s\n' "$upstream" >"$up_tmp/xdg/clonestage/upstream.env"
t0=$SECONDS
if up_bazel "$cache_a" "$root_a" "$logs/a.log" "${build_flags[@]}"; then
  pass "A: build green ($((SECONDS - t0))s)"
else
  fail "A: build green" "$(tail_of "$logs/a.log")"
  exit 1
fi
rm -f "$up_tmp/xdg/clonestage/upstream.env" # B's servers are started here, with flags
up_outputs "$up_tmp/outputs-a"
status_a="$("$up_cs" --cache "$cache_a" status 2>&1 | grep '^upstream:')"
expect "A: the launcher started the server with the config file's upstream ($status_a)" \
  "$(tail_of "$cache_a/launcher/serve.log")" [ "$status_a" = "upstream: $upstream (instance \"\", write executed)" ]
n="$(up_ac_entries "$cache_a")"
expect "A: executed cacheable actions ($n results in its action cache)" "none" [ "$n" -gt 0 ]
if up_drain "$cache_a"; then
  pass "A: the write-behind queue drained"
else
  fail "A: the write-behind queue drained" "$(up_stats "$cache_a")"
fi
stats_a="$(up_stats "$cache_a")"
echo "A: actions $(up_key "$stats_a" actions), results uploaded $(up_key "$stats_a" upstream_results_uploaded), blobs $(up_key "$stats_a" upstream_blobs_uploaded) ($(up_key "$stats_a" upstream_bytes_uploaded) bytes), dropped $(up_key "$stats_a" upstream_upload_dropped)"
expect "A: upstream_results_uploaded == its results ($n)" "$(up_key "$stats_a" upstream_results_uploaded)" \
  [ "$(up_key "$stats_a" upstream_results_uploaded)" = "$n" ]
if "$up_py" "$up_root/tests/upstream/reapi_check.py" uploaded "$cache_a" "127.0.0.1:$bgd_port" >"$logs/check-a.log" 2>&1; then
  pass "A: every result of A is in BuildGrid with its blobs ($(tail -n 1 "$logs/check-a.log"); grpcio)"
else
  fail "A: every result of A is in BuildGrid with its blobs" "$(tail_of "$logs/check-a.log")"
fi

# --- 2. machine B from clean, served by the upstream -----------------------------------

# b_build NAME UPSTREAM_URL: a fresh B cache and server, `bazel clean`, the build; sets
# stats_b, b_secs; checks green, outputs, verify.
b_build() {
  local name="$1" url="$2" cache="$up_tmp/cache-b-$1" t0 ok=1
  # A patient timeout: on a loaded CI machine BuildGrid (or the lying proxy) can answer later
  # than the default 1 s, which the server takes for a stall (breaker open: no hit, no lie seen).
  up_start_cs "$cache" --upstream "$url" --upstream-timeout-ms 5000
  up_bazel "$cache" "$root_b" "$logs/b-$name-clean.log" clean
  t0=$SECONDS
  if up_bazel "$cache" "$root_b" "$logs/b-$name.log" "${build_flags[@]}"; then
    b_secs=$((SECONDS - t0))
    pass "B $name: build green (${b_secs}s)"
  else
    b_secs=$((SECONDS - t0))
    fail "B $name: build green" "$(tail_of "$logs/b-$name.log")"
    ok=0
  fi
  stats_b="$(up_stats "$cache")"
  echo "B $name: $(grep -E '^INFO: [0-9,]+ process' "$logs/b-$name.log" | tail -n 1)"
  echo "B $name: actions $(up_key "$stats_b" actions), ac hits $(up_key "$stats_b" upstream_ac_hits), misses $(up_key "$stats_b" upstream_ac_misses), errors $(up_key "$stats_b" upstream_errors), rejected $(up_key "$stats_b" upstream_rejected), breaker opens $(up_key "$stats_b" upstream_breaker_opens), blobs fetched $(up_key "$stats_b" upstream_blobs_fetched) ($(up_key "$stats_b" upstream_bytes_fetched) bytes)"
  if [ "$ok" = 1 ]; then
    up_outputs "$up_tmp/outputs-b-$name"
    if cmp -s "$up_tmp/outputs-a" "$up_tmp/outputs-b-$name"; then
      pass "B $name: outputs equal A's ($(wc -l <"$up_tmp/outputs-a") files)"
    else
      fail "B $name: outputs equal A's" "$(diff "$up_tmp/outputs-a" "$up_tmp/outputs-b-$name" | head -n 10)"
    fi
  fi
  up_stop_cs "$cache"
  if "$up_cs" --cache "$cache" verify >"$logs/verify-$name.log" 2>&1; then
    pass "B $name: local CAS verifies ($(tail -n 1 "$logs/verify-$name.log"))"
  else
    fail "B $name: local CAS verifies" "$(tail_of "$logs/verify-$name.log")"
  fi
}
hits() { up_key "$stats_b" upstream_ac_hits; }
executed() { up_key "$stats_b" actions; }
every_action_accounted() { [ "$(($(hits) + $(executed)))" -ge "$n" ]; }

b_build served "$upstream"
expect "B served: upstream_ac_hits == A's results ($n)" "hits $(hits)" [ "$(hits)" = "$n" ]
expect "B served: executed 0" "executed $(executed)" [ "$(executed)" = 0 ]
expect "B served: fetched blobs from the upstream" "blobs fetched $(up_key "$stats_b" upstream_blobs_fetched)" \
  [ "$(up_key "$stats_b" upstream_blobs_fetched)" -gt 0 ]
expect "B served: no upstream error or rejection" \
  "errors $(up_key "$stats_b" upstream_errors), rejected $(up_key "$stats_b" upstream_rejected)" \
  [ "$(($(up_key "$stats_b" upstream_errors) + $(up_key "$stats_b" upstream_rejected)))" = 0 ]

# --- 3. the upstream fails ---------------------------------------------------------------

dead_port="$(up_free_port)" # nothing listens there
b_build down "grpc://127.0.0.1:$dead_port"
expect "B down: no upstream hit, every action executed here" "hits $(hits), executed $(executed)" \
  [ "$(hits)" = 0 ] && [ "$(executed)" -ge "$n" ]
expect "B down: upstream_errors counted" "errors $(up_key "$stats_b" upstream_errors)" \
  [ "$(up_key "$stats_b" upstream_errors)" -gt 0 ]

kill -STOP "$bgd_pid"
b_build stalled "$upstream"
kill -CONT "$bgd_pid"
expect "B stalled: no upstream hit, every action executed here" "hits $(hits), executed $(executed)" \
  [ "$(hits)" = 0 ] && [ "$(executed)" -ge "$n" ]
expect "B stalled: upstream_errors counted" "errors $(up_key "$stats_b" upstream_errors)" \
  [ "$(up_key "$stats_b" upstream_errors)" -gt 0 ]

for lie in corrupt missing; do
  up_start_proxy "$up_tmp/proxy-$lie" "$lie"
  b_build "lying-$lie" "grpc://127.0.0.1:$proxy_port"
  kill -TERM "$proxy_pid" 2>/dev/null
  expect "B lying-$lie: upstream_rejected counted" "rejected $(up_key "$stats_b" upstream_rejected)" \
    [ "$(up_key "$stats_b" upstream_rejected)" -gt 0 ]
  expect "B lying-$lie: every action an upstream hit or executed here" "hits $(hits), executed $(executed), n $n" \
    every_action_accounted
done

finish
