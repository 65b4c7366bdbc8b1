#!/usr/bin/env bash
# tests/perf/overhead.sh: clonestage's per-action overhead over Bazel's local strategy.
#
# The workspace tests/perf/overhead holds 50 independent trivial genrules. Each
# round builds it twice after `bazel clean`, with --jobs=1:
#   local       CLONESTAGE_DISABLE=1 bazel build --spawn_strategy=local
#   clonestage  bazel build --config=clonestage   (through the launcher tools/bazel,
#               against a server started here, already up and warm)
# in alternating order (local first in odd rounds, clonestage first in even
# ones). Before every build the genrules' common input salt.txt gets new
# content, so no action cache (Bazel's or clonestage's) can answer: all 50
# actions run, each through a full remote execution (GetActionResult miss,
# FindMissingBlobs, uploads of the new Action and input root, Execute,
# output download). The overhead per action is
#   (median wall clonestage - median wall local) / 50
# and the same with minimums, and the median over rounds of each round's own
# difference (the two builds of a round ran under similar load); the ratio of
# medians is printed too. After the
# rounds it times the spawn wrapper alone against running the command directly
# (where the per-action milliseconds go) and reads the server's staging and
# execution figures from `clonestage stats --json` deltas.
#
# A benchmark, not a test: it never checks timings and exits 0 when every
# build succeeded. Target (issue 3): at most 2 ms per action above local.
#
# Usage: tests/perf/overhead.sh [ROUNDS]   (default 5; ~1 minute on 2 cores)
# Environment: see lib.sh (CLONESTAGE_BIN, CLONESTAGE_SPAWN, PERF_DIR, PERF_KEEP).
set -euo pipefail

perf_name=overhead
# shellcheck source=tests/perf/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds="$(perf_rounds "${1:-5}")"
actions=50
ws="$perf_checkout/tests/perf/overhead"
cd "$ws"

perf_helper
perf_start_server
log="$perf_dir/builds.log"
: >"$log"

salt_n=0
new_salt() {
  salt_n=$((salt_n + 1))
  printf 'overhead %s %s %s\n' "$$" "$(date +%s%N)" "$salt_n" >"$ws/salt.txt"
}

# One timed build of the configuration $1; prints its wall time in ms.
timed_build() {
  local config="$1" t0 t1
  new_salt
  CLONESTAGE_DISABLE=1 bazel clean >>"$log" 2>&1
  t0="$(perf_now_ms)"
  case "$config" in
    local)
      CLONESTAGE_DISABLE=1 bazel build --jobs=1 --spawn_strategy=local //... >>"$log" 2>&1
      ;;
    clonestage)
      bazel build --jobs=1 --config=clonestage //... >>"$log" 2>&1
      ;;
  esac
  t1="$(perf_now_ms)"
  echo $((t1 - t0))
}

header="$(perf_machine)"

# Warm-up: the Bazel server, analysis, the launcher's fast path and the
# server's CAS (genrule-setup.sh), connections and device probe.
perf_say "warm-up"
timed_build local >/dev/null
timed_build clonestage >/dev/null
timed_build clonestage >/dev/null
if ! grep -q "$actions remote" "$log"; then
  perf_die "the clonestage build did not run $actions remote actions (log: $log)"
fi

before="$(perf_stats)"
local_ms=()
cs_ms=()
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="local clonestage"; else order="clonestage local"; fi
  for c in $order; do
    ms="$(timed_build "$c")"
    if [ "$c" = local ]; then local_ms+=("$ms"); else cs_ms+=("$ms"); fi
    perf_say "round $r/$rounds $c ${ms} ms (load $(perf_load_now))"
  done
done
after="$(perf_stats)"
remote_builds="$(grep -c "$actions remote" "$log" || true)"

# Server-side figures over the measured clonestage builds.
d() { echo $(($(perf_key "$after" "$1") - $(perf_key "$before" "$1"))); }
n_actions="$(d actions)"
n_stages="$(d stages)"
stage_us="$(d stage_us_total)"
exec_us="$(d action_exec_us_total)"
spawn_us="$(d action_spawn_us_total)"
serve_us="$(d action_serve_us_total)"
hits="$(d action_cache_hits)"

# What every build pays once, whatever its number of actions: null builds
# (nothing to run) of each configuration, alternating. The clonestage one goes
# through the launcher's server check and Bazel's remote set-up (a new gRPC
# channel and GetCapabilities per command); switching configurations makes both
# re-analyse, equally.
null_local=()
null_cs=()
for _ in 1 2 3 4; do
  t0="$(perf_now_ms)"
  CLONESTAGE_DISABLE=1 bazel build --jobs=1 --spawn_strategy=local //... >>"$log" 2>&1
  t1="$(perf_now_ms)"
  bazel build --jobs=1 --config=clonestage //... >>"$log" 2>&1
  t2="$(perf_now_ms)"
  null_local+=($((t1 - t0)))
  null_cs+=($((t2 - t1)))
done

# The process layer alone: bash -c run directly, through Bazel's own
# process-wrapper (what --spawn_strategy=local uses) and through clonestage-spawn,
# 200 runs each, interleaved in blocks of 50, from this shell.
spawn="${CLONESTAGE_SPAWN:-$(dirname "$perf_bin")/clonestage-spawn}"
pw="$(CLONESTAGE_DISABLE=1 bazel info install_base 2>/dev/null)/process-wrapper"
[ -x "$pw" ] || pw=/usr/share/bazel/process-wrapper
micro_dir="$perf_dir/micro"
mkdir -p "$micro_dir"
micro_direct=0
micro_pw=0
micro_cs=0
for _ in 1 2 3 4; do
  t0="$(perf_now_ms)"
  for i in $(seq 50); do /bin/bash -c "echo $i > $micro_dir/out"; done
  t1="$(perf_now_ms)"
  if [ -x "$pw" ]; then
    for i in $(seq 50); do
      "$pw" --timeout=0 --kill_delay=15 --stdout="$micro_dir/o" \
        --stderr="$micro_dir/e" --stats="$micro_dir/s" -- /bin/bash -c "echo $i > $micro_dir/out"
    done
  fi
  t2="$(perf_now_ms)"
  if [ -x "$spawn" ]; then
    for i in $(seq 50); do
      "$spawn" --timeout 0 --kill_delay 5 --stdout "$micro_dir/o" \
        --stderr "$micro_dir/e" --stats "$micro_dir/s" -- /bin/bash -c "echo $i > $micro_dir/out"
    done
  fi
  t3="$(perf_now_ms)"
  micro_direct=$((micro_direct + t1 - t0))
  micro_pw=$((micro_pw + t2 - t1))
  micro_cs=$((micro_cs + t3 - t2))
done

end_load="$(perf_load_now)"
med_l="$(perf_median "${local_ms[@]}")"
med_c="$(perf_median "${cs_ms[@]}")"
min_l="$(perf_min "${local_ms[@]}")"
min_c="$(perf_min "${cs_ms[@]}")"
pairs=()
for i in "${!cs_ms[@]}"; do pairs+=($((cs_ms[i] - local_ms[i]))); done
med_pair="$(perf_median "${pairs[@]}")"
per() { awk -v a="$1" -v b="$2" -v n="$actions" 'BEGIN {printf "%+.2f", (a-b)/n}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a/b}'; }
us_per() { awk -v a="$1" -v n="$2" 'BEGIN {if (n > 0) printf "%.2f", a/n/1000; else print "n/a"}'; }

cat <<EOF

=== clonestage per-action overhead (tests/perf/overhead.sh) ===
date: $(date -u '+%Y-%m-%d %H:%M UTC')
$header
load average at end: $end_load
workload: $actions trivial genrules (echo N > \$@), bazel clean before each build, --jobs=1,
  new salt input every build (every action runs: no action-cache hit anywhere)
rounds: $rounds, alternating order; wall of the whole bazel build command (launcher included)

build wall ms     local: ${local_ms[*]}
build wall ms clonestage: ${cs_ms[*]}
                        median    min
local (ms)             $(printf '%7s %7s' "$med_l" "$min_l")
clonestage (ms)        $(printf '%7s %7s' "$med_c" "$min_c")
per-action overhead    $(printf '%7s %7s' "$(per "$med_c" "$med_l")" "$(per "$min_c" "$min_l")") ms   (target: <= +2 ms)
paired (same round)     $(awk -v p="$med_pair" -v n="$actions" 'BEGIN {printf "%+7.2f", p/n}') ms per action: median over rounds of (clonestage - local)/$actions
ratio clonestage/local $(printf '%7s %7s' "$(ratio "$med_c" "$med_l")" "$(ratio "$min_c" "$min_l")")

null builds (nothing to run), ms: local ${null_local[*]}, clonestage ${null_cs[*]}
  fixed cost per build (medians): $(awk -v a="$(perf_median "${null_cs[@]}")" -v b="$(perf_median "${null_local[@]}")" 'BEGIN {printf "%+.0f", a-b}') ms = $(per "$(perf_median "${null_cs[@]}")" "$(perf_median "${null_local[@]}")") ms of the per-action figure above
  (launcher check and Bazel's per-command remote set-up, paid once per build)

server side, measured builds: $n_actions actions executed, $hits action-cache hits, $remote_builds/$((rounds + 2)) clonestage builds all remote
  per action (means): Execute accepted -> response $(us_per "$serve_us" "$n_actions") ms, of which
    staging $(us_per "$stage_us" "$n_stages") ms, wrapper start -> stats read $(us_per "$spawn_us" "$n_actions") ms,
    of which the command itself (bash -c via genrule-setup.sh) $(us_per "$exec_us" "$n_actions") ms
  the rest of each action's time is Bazel's side and the round trips: GetActionResult,
  FindMissingBlobs, ByteStream Write (new Action), Execute, ByteStream Read (the output)
process layer alone (ms per run, 200 runs each, interleaved, from a shell loop):
  bash -c direct $(awk -v t="$micro_direct" 'BEGIN {printf "%.2f", t/200}'), Bazel's process-wrapper $(awk -v t="$micro_pw" 'BEGIN {printf "%.2f", t/200}'), clonestage-spawn $(awk -v t="$micro_cs" 'BEGIN {printf "%.2f", t/200}')
  clonestage-spawn: $spawn ($(ldd "$spawn" 2>/dev/null | grep -c '=>' || true) shared libraries)
  process-wrapper: $pw ($(ldd "$pw" 2>/dev/null | grep -c '=>' || true) shared libraries)
EOF
