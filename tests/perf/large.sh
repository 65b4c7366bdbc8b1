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
#      the local and clonestage builds run with --profile, and split.py splits
#      each action's extra time under clonestage against local into Bazel's own
#      remote-execution cost (Merkle tree, FindMissingBlobs/uploads, downloads),
#      the Execute call's transport, clonestage's share (Execute accepted to
#      response minus the command, from the server's debug log) and the
#      command's own difference, per action, medians (issue 15);
#   4. ROUNDS rounds of a rebuild of //... after `bazel clean` with an
#      unchanged salt: clonestage (every action, the compiler's too, served from
#      its action cache) against local (everything runs again), alternating;
#      target: clonestage at least 3x faster.
#
# A benchmark, not a test: it never checks timings and exits 0 when every
# build succeeded. Usage: tests/perf/large.sh [ROUNDS] (default 3; about
# 8 minutes on 2 cores, the first run in an output base also writes the SDK).
# Environment: PERF_WORK_MS; PERF_STAGING_ONLY=1 runs section 1 alone (with
# PERF_DIR on another filesystem: that filesystem's staging figures);
# PERF_SPLIT_ONLY=1 runs sections 2 and 3 with local and clonestage alone
# (alternating; no sandboxed, no staging or rebuild sections), for the split;
# PERF_COMPARE_BIN (with PERF_SPLIT_ONLY=1), a second helper (e.g. another
# checkout's build): its own server on PERF_DIR/cache-b, and a third
# configuration, clonestage_b, in every round's rotation, so that two builds of
# clonestage are compared in the same minutes (each with its split);
# PERF_OUTPUT_USER_ROOT, Bazel's --output_user_root for every command (then
# `bazel --output_user_root=... shutdown` is yours to run); and see lib.sh
# (CLONESTAGE_BIN, CLONESTAGE_SPAWN, PERF_DIR, PERF_KEEP). The traces and the
# server's lines of each round stay in PERF_DIR/split/ (with PERF_KEEP=1).
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
split_only="${PERF_SPLIT_ONLY:-0}"
startup=()
if [ -n "${PERF_OUTPUT_USER_ROOT:-}" ]; then startup=("--output_user_root=$PERF_OUTPUT_USER_ROOT"); fi
bazel() { command bazel "${startup[@]}" "$@"; }
# The server logs each executed action's phases ("action phases", "action ran") and each
# call's server-side time at debug: split.py reads clonestage's per-action figures there.
export CLONESTAGE_LOG="${CLONESTAGE_LOG:-info},clonestage_server::execution::run=debug,clonestage_server::execution::respond=debug,clonestage_server::rpc_timing=debug"
ws="$perf_checkout/tests/perf/large"
cd "$ws"
cmp_bin="${PERF_COMPARE_BIN:-}"
if [ -n "$cmp_bin" ]; then
  [ "$split_only" = 1 ] || perf_die "PERF_COMPARE_BIN needs PERF_SPLIT_ONLY=1"
  [ -x "$cmp_bin" ] || perf_die "PERF_COMPARE_BIN=$cmp_bin is not an executable file"
fi

perf_helper
perf_start_server
cache_b=""
if [ -n "$cmp_bin" ]; then
  # The second helper's server, on a cache of its own.
  cache_b="$perf_dir/cache-b"
  perf_serve_other "$cmp_bin" "$cache_b" "$perf_dir/serve-b.log"
fi
# clonestage stats --json of configuration $1's server (clonestage or clonestage_b).
stats_of() {
  if [ "$1" = clonestage_b ]; then
    # perf_stats asks perf_bin about perf_cache; this runs in a $(...) of the caller.
    perf_cache="$cache_b"
    perf_bin="$cmp_bin"
    perf_stats
  else
    perf_stats
  fi
}
log="$perf_dir/builds.log"
: >"$log"
common=(--jobs=2 "--define=perf_work_ms=$work_ms")

salt_n=0
new_salt() {
  salt_n=$((salt_n + 1))
  printf 'large %s %s %s\n' "$$" "$(date +%s%N)" "$salt_n" >"$ws/salt.txt"
}

# bazel build with the configuration $1 and targets (and flags) $2...
build() {
  local config="$1"
  shift
  echo "--- $config: $*" >>"$log"
  case "$config" in
    local) CLONESTAGE_DISABLE=1 bazel build "${common[@]}" --spawn_strategy=local "$@" >>"$log" 2>&1 ;;
    sandboxed) CLONESTAGE_DISABLE=1 bazel build "${common[@]}" --spawn_strategy=sandboxed "$@" >>"$log" 2>&1 ;;
    clonestage) bazel build "${common[@]}" --config=clonestage "$@" >>"$log" 2>&1 ;;
    clonestage_b) CLONESTAGE_CACHE="$cache_b" CLONESTAGE_BIN="$cmp_bin" bazel build "${common[@]}" --config=clonestage "$@" >>"$log" 2>&1 ;;
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
stage_lines=()
stage_ms=()
[ "$split_only" = 1 ] || perf_say "staging figures (//lib:A0 three times on a fresh cache)"
for _ in 1 2 3; do
  [ "$split_only" = 1 ] && break
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
# Section 1 fetched the SDK-like repository; alone, section 2 needs it fetched first (a fresh
# output base has none).
CLONESTAGE_DISABLE=1 bazel fetch //lib/... >>"$log" 2>&1 || perf_die "cannot fetch the workspace's repositories (log: $log)"
read -r sdk_manifest <"$(CLONESTAGE_DISABLE=1 bazel info output_base 2>/dev/null)/external/perf_sdk/MANIFEST"

configs=(local sandboxed clonestage)
[ "$split_only" = 1 ] && configs=(local clonestage)
[ -n "$cmp_bin" ] && configs=(local clonestage clonestage_b)
cs_configs=(clonestage)
[ -n "$cmp_bin" ] && cs_configs=(clonestage clonestage_b)
n_configs=${#configs[@]}

# --- 2. warm-up ------------------------------------------------------------------------
perf_say "warm-up: one build per configuration"
for c in "${configs[@]}"; do
  new_salt
  clean
  build "$c" //...
done
shape="$(for f in bazel-bin/lib/*.module; do head -n 1 "$f"; done |
  awk '{n++; i+=$4; b+=$6; if ($4>mi) mi=$4; if ($6>mb) mb=$6}
       END {printf "%d actions read %.0f files / %.1f MB on average, at most %d / %.1f MB", n, i/n, b/n/1e6, mi, mb/1e6}')"

# --- 3. execution rounds -------------------------------------------------------------
declare -A ms cs_before cs_after split_text pool_text
split_dir="$perf_dir/split"
declare -A serve_log=([clonestage]="$perf_dir/serve.log" [clonestage_b]="$perf_dir/serve-b.log")
mkdir -p "$split_dir/local"
for c in "${cs_configs[@]}"; do
  mkdir -p "$split_dir/$c"
  cs_before[$c]="$(stats_of "$c")"
done
for r in $(seq "$rounds"); do
  for k in $(seq 0 $((n_configs - 1))); do
    c="${configs[$(((r - 1 + k) % n_configs))]}"
    new_salt
    clean
    build "$c" //tools:compiler_for_actions
    prof=()
    from=0
    case "$c" in
      local) prof=("--profile=$split_dir/local/round-$r-local.json") ;;
      clonestage*)
        prof=("--profile=$split_dir/$c/round-$r-clonestage.json")
        from=$(($(wc -l <"${serve_log[$c]}") + 1))
        ;;
    esac
    t="$(timed "$c" //lib/... "${prof[@]}")"
    if [ "$from" != 0 ]; then
      sleep 0.2 # the server logs "action ran" just before it answers; let the last line land
      tail -n "+$from" "${serve_log[$c]}" >"$split_dir/$c/round-$r-server.log"
    fi
    ms[$c]="${ms[$c]:-} $t"
    perf_say "round $r/$rounds $c $t ms (load $(perf_load_now))"
  done
done
for c in "${cs_configs[@]}"; do
  cs_after[$c]="$(stats_of "$c")"
  # Each configuration's split against the same rounds' local builds.
  ln -f "$split_dir"/local/round-*-local.json "$split_dir/$c/"
  split_text[$c]="$(python3 "$perf_checkout/tests/perf/split.py" "$split_dir/$c")" ||
    perf_die "split.py could not split the rounds' traces in $split_dir/$c (PERF_KEEP=1 keeps them)"
  # Any pool figures the server counts (issue 15), over the rounds.
  pool_text[$c]="$(python3 -c '
import json, sys
b, a = json.loads(sys.argv[1]), json.loads(sys.argv[2])
def flat(d, p=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, p + k + ".")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            yield p + k, v
fb = dict(flat(b))
print(" ".join(f"{k} {v - fb.get(k, 0)}" for k, v in sorted(flat(a)) if "pool" in k) or "none counted by this server")
' "${cs_before[$c]}" "${cs_after[$c]}")"
done

# --- 4. rebuild after bazel clean, served from clonestage's action cache ---------------
rb_cs=()
rb_local=()
if [ "$split_only" != 1 ]; then
  perf_say "rebuild after bazel clean: clonestage's action cache against local"
  new_salt
  clean
  build clonestage //...
  rb_before="$(perf_stats)"
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
fi

# --- summary ---------------------------------------------------------------------------
end_load="$(perf_load_now)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
dd() { echo $(($(perf_key "$2" "$1") - $(perf_key "$3" "$1"))); }
read -ra l_ms <<<"${ms[local]}"
ml="$(perf_median "${l_ms[@]}")"
sandboxed_lines=""
if [ "$split_only" != 1 ]; then
  read -ra s_ms <<<"${ms[sandboxed]}"
  ms_="$(perf_median "${s_ms[@]}")"
  round_sratios=()
  for i in "${!l_ms[@]}"; do
    round_sratios+=("$(ratio "${s_ms[$i]}" "${l_ms[$i]}")")
  done
  sandboxed_lines="  wall ms sandboxed:  ${ms[sandboxed]}
  median sandboxed $ms_, min $(perf_min "${s_ms[@]}")
  sandboxed / local:   $(ratio "$ms_" "$ml") (medians), $(ratio "$(perf_min "${s_ms[@]}")" "$(perf_min "${l_ms[@]}")") (minimums)
  per round (same minute): sandboxed / local ${round_sratios[*]} (median $(perf_median "${round_sratios[@]}"))"
fi
title="tests/perf/large.sh"
[ "$split_only" = 1 ] && title="$title, PERF_SPLIT_ONLY=1"

cat <<EOF

=== clonestage with SwiftCompile-sized actions ($title) ===
date: $(date -u '+%Y-%m-%d %H:%M UTC')
$header
load average at end: $end_load
workload: 16 SwiftCompile-like actions (4 layers of 4, modules feed dependents), --jobs=2;
  $shape;
  shared SDK-like tree: $sdk_manifest; compile work ${work_ms} ms CPU per action after reading every input
EOF
if [ "$split_only" != 1 ]; then
  echo
  summary_staging
fi
cat <<EOF

2. build of //lib/... after bazel clean, new salt (every action runs), $rounds rounds, rotating order (${configs[*]})
  wall ms local:      ${ms[local]}
  median local $ml, min local $(perf_min "${l_ms[@]}")
EOF
[ -z "$sandboxed_lines" ] || printf '%s\n' "$sandboxed_lines"
for c in "${cs_configs[@]}"; do
  b="${cs_before[$c]}"
  a="${cs_after[$c]}"
  read -ra c_ms <<<"${ms[$c]}"
  mc="$(perf_median "${c_ms[@]}")"
  n_act="$(dd actions "$a" "$b")"
  per_act() { awk -v a="$(dd "$1" "$a" "$b")" -v n="$n_act" 'BEGIN {if (n > 0) printf "%.1f", a/n/1000; else print "n/a"}'; }
  # Each round ran the configurations back to back: their ratios within a round are
  # the least disturbed by load that changes from minute to minute.
  round_ratios=()
  for i in "${!l_ms[@]}"; do
    round_ratios+=("$(ratio "${c_ms[$i]}" "${l_ms[$i]}")")
  done
  helper="$perf_bin"
  [ "$c" = clonestage_b ] && helper="$cmp_bin"
  cat <<EOF
  -- $c (helper $helper)
  wall ms $c: ${ms[$c]}
  median $c $mc, min $(perf_min "${c_ms[@]}")
  $c / local:  $(ratio "$mc" "$ml") (medians), $(ratio "$(perf_min "${c_ms[@]}")" "$(perf_min "${l_ms[@]}")") (minimums)   target <= 1.10
  per round (same minute): $c / local ${round_ratios[*]} (median $(perf_median "${round_ratios[@]}"))
  $c - local:  $(awk -v a="$mc" -v b="$ml" 'BEGIN {printf "%+.0f", (a-b)/16}') ms per action (medians; 2 actions run at once)
  server, per action ($n_act actions): Execute accepted -> response $(per_act action_serve_us_total) ms;
    staging $(per_act stage_us_total) ms; wrapper start -> stats $(per_act action_spawn_us_total) ms, of which the command $(per_act action_exec_us_total) ms
  staging over these builds: $(staging_line "$b" "$a")
  pool over these builds: ${pool_text[$c]}
  split of each action's time, $c against local (split.py on the rounds' --profile traces and server log):
$(printf '%s\n' "${split_text[$c]}" | sed 's/^/  /')
EOF
done
if [ "$split_only" != 1 ]; then
  mrc="$(perf_median "${rb_cs[@]}")"
  mrl="$(perf_median "${rb_local[@]}")"
  rb_hits="$(dd action_cache_hits "$rb_after" "$rb_before")"
  rb_runs="$(dd actions "$rb_after" "$rb_before")"
  cat <<EOF

3. rebuild of //... after bazel clean, unchanged inputs, $rounds rounds, alternating
  wall ms clonestage (action cache): ${rb_cs[*]}
  wall ms local (runs everything):   ${rb_local[*]}
  median clonestage $mrc, local $mrl: clonestage $(ratio "$mrl" "$mrc")x faster (medians), $(ratio "$(perf_min "${rb_local[@]}")" "$(perf_min "${rb_cs[@]}")")x (minimums)   target >= 3x
  clonestage served $rb_hits action-cache hits and ran $rb_runs actions in these rebuilds
EOF
fi
