#!/usr/bin/env bash
# tests/perf/large.sh: SwiftCompile-sized actions through clonestage against
# Bazel's local strategy and its sandbox.
#
# The workspace tests/perf/large builds 16 libraries (four layers of four, each
# importing two of the layer below), one action each with mnemonic SwiftCompile
# reading ~1,585 files / 287-297 MB: an SDK-like tree of 1,540 files / 287 MB
# that every action reads, 40 sources, the salt file and its dependencies'
# 1 MiB modules. The compiler stand-in reads every input byte, then spends
# PERF_WORK_MS (default 1000) ms of CPU time for type-checking and code
# generation (--define=perf_work_ms).
#
# Sections, all with --jobs=2:
#   1. staging figures of one such action (//lib:A0) through clonestage on a
#      fresh cache: cold (first sight, CAS filled by Bazel's uploads), then
#      second and third sight (where the cache's filesystem clones whole trees,
#      the shared SDK subtree enters the subtree cache on the second sight and
#      is cloned whole from the third), from `clonestage stats --json` deltas;
#   2. warm-up: one build per configuration (Bazel server, page cache, CAS);
#   3. ROUNDS rounds, in rotating order, of a build of //lib/... after
#      `bazel clean` with a new salt (every action runs, none is cached;
#      the compiler, //tools:compile, is rebuilt first, untimed) with
#        local       CLONESTAGE_DISABLE=1 bazel build --spawn_strategy=local
#        sandboxed   CLONESTAGE_DISABLE=1 bazel build --spawn_strategy=sandboxed
#        clonestage  bazel build --config=clonestage (launcher, warm server and CAS)
#      targets (issue 3): clonestage within 1.1x of local; sandboxed reported;
#   4. ROUNDS rounds of a rebuild of //... after `bazel clean` with an
#      unchanged salt: clonestage (every action, the compiler's too, served from
#      its action cache) against local (everything runs again), alternating;
#      target: clonestage at least 3x faster.
#
# A benchmark, not a test: it never checks timings and exits 0 when every
# build succeeded. Usage: tests/perf/large.sh [ROUNDS] (default 3; about
# 8 minutes on 2 cores, the first run in an output base also writes the SDK).
# Environment: PERF_WORK_MS; PERF_STAGING_ONLY=1 runs section 1 alone (with
# PERF_DIR on another filesystem: that filesystem's staging figures); and see
# lib.sh (CLONESTAGE_BIN, CLONESTAGE_SPAWN, PERF_DIR, PERF_KEEP).
set -euo pipefail

perf_name=large
# shellcheck source=tests/perf/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds="$(perf_rounds "${1:-3}")"
work_ms="${PERF_WORK_MS:-1000}"
case "$work_ms" in
  '' | *[!0-9]*) perf_die "PERF_WORK_MS must be a number, not '$work_ms'" ;;
esac
staging_only="${PERF_STAGING_ONLY:-0}"
ws="$perf_checkout/tests/perf/large"
cd "$ws"

perf_helper
perf_start_server
log="$perf_dir/builds.log"
: >"$log"
common=(--jobs=2 "--define=perf_work_ms=$work_ms")

salt_n=0
new_salt() {
  salt_n=$((salt_n + 1))
  printf 'large %s %s %s\n' "$$" "$(date +%s%N)" "$salt_n" >"$ws/salt.txt"
}

# bazel build with the configuration $1 and targets $2...
build() {
  local config="$1"
  shift
  echo "--- $config: $*" >>"$log"
  case "$config" in
    local) CLONESTAGE_DISABLE=1 bazel build "${common[@]}" --spawn_strategy=local "$@" >>"$log" 2>&1 ;;
    sandboxed) CLONESTAGE_DISABLE=1 bazel build "${common[@]}" --spawn_strategy=sandboxed "$@" >>"$log" 2>&1 ;;
    clonestage) bazel build "${common[@]}" --config=clonestage "$@" >>"$log" 2>&1 ;;
  esac || perf_die "$config build of $* failed (log: $log)"
}

clean() { CLONESTAGE_DISABLE=1 bazel clean >>"$log" 2>&1; }

# Wall ms of a build of $2... with configuration $1.
timed() {
  local t0 t1
  t0="$(perf_now_ms)"
  build "$@"
  t1="$(perf_now_ms)"
  echo $((t1 - t0))
}

# Staging figures between two stats snapshots, one line.
staging_line() { # BEFORE AFTER
  local b="$1" a="$2" k out=""
  dk() { echo $(($(perf_key "$a" "$1") - $(perf_key "$b" "$1"))); }
  local stages us
  stages="$(dk stages)"
  us="$(dk stage_us_total)"
  out="stages $stages, staging $(awk -v u="$us" -v n="$stages" 'BEGIN {if (n > 0) printf "%.1f", u/n/1000; else print "n/a"}') ms/stage;"
  for k in clonefile reflink snapshot hardlink copy empty symlinks directories subtree_hits subtree_misses fallbacks; do
    out="$out $k $(dk "$k")"
  done
  out="$out; bytes $(awk -v x="$(dk bytes)" 'BEGIN {printf "%.1f MB", x/1e6}')"
  echo "$out"
}

header="$(perf_machine)"

# --- 1. staging figures of one action on a fresh cache --------------------------------
perf_say "staging figures (//lib:A0 three times on a fresh cache)"
stage_lines=()
stage_ms=()
for _ in 1 2 3; do
  new_salt
  clean
  build clonestage //tools:compiler_for_actions
  before="$(perf_stats)"
  stage_ms+=("$(timed clonestage //lib:A0)")
  after="$(perf_stats)"
  stage_lines+=("$(staging_line "$before" "$after")")
done
summary_staging() {
  cat <<EOF
1. staging of one action (//lib:A0, ~1,582 inputs / 287.5 MB) on a fresh cache, from stats deltas:
  cache filesystem: $(stat -f -c %T "$perf_cache")
  cold (1st sight, CAS filled by the uploads): ${stage_lines[0]}
  2nd sight:                                  ${stage_lines[1]}
  3rd sight (shared subtree cached, where the filesystem clones trees): ${stage_lines[2]}
  build wall ms (compiler prebuilt): ${stage_ms[*]}
EOF
}
if [ "$staging_only" = 1 ]; then
  echo
  echo "=== clonestage staging figures (tests/perf/large.sh, PERF_STAGING_ONLY=1) ==="
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "$header"
  summary_staging
  exit 0
fi
read -r sdk_manifest <"$(CLONESTAGE_DISABLE=1 bazel info output_base 2>/dev/null)/external/perf_sdk/MANIFEST"

# --- 2. warm-up ------------------------------------------------------------------------
perf_say "warm-up: one build per configuration"
for c in local sandboxed clonestage; do
  new_salt
  clean
  build "$c" //...
done
shape="$(for f in bazel-bin/lib/*.module; do head -n 1 "$f"; done |
  awk '{n++; i+=$4; b+=$6; if ($4>mi) mi=$4; if ($6>mb) mb=$6}
       END {printf "%d actions read %.0f files / %.1f MB on average, at most %d / %.1f MB", n, i/n, b/n/1e6, mi, mb/1e6}')"

# --- 3. execution rounds -------------------------------------------------------------
declare -A ms
configs=(local sandboxed clonestage)
cs_before="$(perf_stats)"
for r in $(seq "$rounds"); do
  for k in 0 1 2; do
    c="${configs[$(((r - 1 + k) % 3))]}"
    new_salt
    clean
    build "$c" //tools:compiler_for_actions
    t="$(timed "$c" //lib/...)"
    ms[$c]="${ms[$c]:-} $t"
    perf_say "round $r/$rounds $c $t ms (load $(perf_load_now))"
  done
done
cs_after="$(perf_stats)"

# --- 4. rebuild after bazel clean, served from clonestage's action cache ---------------
perf_say "rebuild after bazel clean: clonestage's action cache against local"
new_salt
clean
build clonestage //...
rb_before="$(perf_stats)"
rb_cs=()
rb_local=()
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="clonestage local"; else order="local clonestage"; fi
  for c in $order; do
    clean
    t="$(timed "$c" //...)"
    if [ "$c" = clonestage ]; then rb_cs+=("$t"); else rb_local+=("$t"); fi
    perf_say "rebuild $r/$rounds $c $t ms (load $(perf_load_now))"
  done
done
rb_after="$(perf_stats)"

# --- summary ---------------------------------------------------------------------------
end_load="$(perf_load_now)"
read -ra l_ms <<<"${ms[local]}"
read -ra s_ms <<<"${ms[sandboxed]}"
read -ra c_ms <<<"${ms[clonestage]}"
ml="$(perf_median "${l_ms[@]}")"
ms_="$(perf_median "${s_ms[@]}")"
mc="$(perf_median "${c_ms[@]}")"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
dd() { echo $(($(perf_key "$2" "$1") - $(perf_key "$3" "$1"))); }
n_act="$(dd actions "$cs_after" "$cs_before")"
per_act() { awk -v a="$(dd "$1" "$cs_after" "$cs_before")" -v n="$n_act" 'BEGIN {if (n > 0) printf "%.1f", a/n/1000; else print "n/a"}'; }
rb_hits="$(dd action_cache_hits "$rb_after" "$rb_before")"
rb_runs="$(dd actions "$rb_after" "$rb_before")"
# Each round ran the three configurations back to back: their ratios within a
# round are the least disturbed by load that changes from minute to minute.
round_ratios=()
round_sratios=()
for i in "${!l_ms[@]}"; do
  round_ratios+=("$(awk -v a="${c_ms[$i]}" -v b="${l_ms[$i]}" 'BEGIN {printf "%.2f", a/b}')")
  round_sratios+=("$(awk -v a="${s_ms[$i]}" -v b="${l_ms[$i]}" 'BEGIN {printf "%.2f", a/b}')")
done
mrc="$(perf_median "${rb_cs[@]}")"
mrl="$(perf_median "${rb_local[@]}")"

cat <<EOF

=== clonestage with SwiftCompile-sized actions (tests/perf/large.sh) ===
date: $(date -u '+%Y-%m-%d %H:%M UTC')
$header
load average at end: $end_load
workload: 16 SwiftCompile-like actions (4 layers of 4, modules feed dependents), --jobs=2;
  $shape;
  shared SDK-like tree: $sdk_manifest; compile work ${work_ms} ms CPU per action after reading every input

$(summary_staging)

2. build of //lib/... after bazel clean, new salt (every action runs), $rounds rounds, rotating order
  wall ms local:      ${ms[local]}
  wall ms sandboxed:  ${ms[sandboxed]}
  wall ms clonestage: ${ms[clonestage]}
  median local $ml, sandboxed $ms_, clonestage $mc
  min    local $(perf_min "${l_ms[@]}"), sandboxed $(perf_min "${s_ms[@]}"), clonestage $(perf_min "${c_ms[@]}")
  clonestage / local:  $(ratio "$mc" "$ml") (medians), $(ratio "$(perf_min "${c_ms[@]}")" "$(perf_min "${l_ms[@]}")") (minimums)   target <= 1.10
  sandboxed / local:   $(ratio "$ms_" "$ml") (medians), $(ratio "$(perf_min "${s_ms[@]}")" "$(perf_min "${l_ms[@]}")") (minimums)
  per round (same minute): clonestage / local ${round_ratios[*]} (median $(perf_median "${round_ratios[@]}")), sandboxed / local ${round_sratios[*]} (median $(perf_median "${round_sratios[@]}"))
  clonestage - local:  $(awk -v a="$mc" -v b="$ml" 'BEGIN {printf "%+.0f", (a-b)/16}') ms per action (medians; 2 actions run at once)
  server, per clonestage action ($n_act actions): Execute accepted -> response $(per_act action_serve_us_total) ms;
    staging $(per_act stage_us_total) ms; wrapper start -> stats $(per_act action_spawn_us_total) ms, of which the command $(per_act action_exec_us_total) ms
  staging over these builds: $(staging_line "$cs_before" "$cs_after")

3. rebuild of //... after bazel clean, unchanged inputs, $rounds rounds, alternating
  wall ms clonestage (action cache): ${rb_cs[*]}
  wall ms local (runs everything):   ${rb_local[*]}
  median clonestage $mrc, local $mrl: clonestage $(ratio "$mrl" "$mrc")x faster (medians), $(ratio "$(perf_min "${rb_local[@]}")" "$(perf_min "${rb_cs[@]}")")x (minimums)   target >= 3x
  clonestage served $rb_hits action-cache hits and ran $rb_runs actions in these rebuilds
EOF
