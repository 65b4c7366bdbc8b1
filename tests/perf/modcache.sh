#!/usr/bin/env bash
# tests/perf/modcache.sh: a clean SwiftCompile-like build with an implicit module cache,
# under Bazel's local strategy and through clonestage with and without its shared cache
# directory (issue 24).
#
# The workspace is examples/swiftlike at CI scale: 20 SwiftCompile-like actions, each run by
# the worker stand-in (two executed inputs), each importing the stand-in SDK's Foundation
# (5 implicit modules: Darwin, Dispatch, ObjectiveC, CoreFoundation, Foundation), the two
# UI ones also SwiftUI (UIKit, Combine, SwiftUI), and four of them CShims, a workspace module
# whose map is an input. Each module build costs PERF_MODULE_MS (default 150) ms of CPU; each
# compile PERF_WORK_MS (default 300) ms more for type-checking. The module cache is at
# rules_swift's path, <bin_dir>/_swift_module_cache, declared by no action.
#
# Configurations, PERF_ROUNDS (argument, default 3) rounds in rotating order, each after
# `bazel clean`, with the tools prebuilt untimed and every action executed (clonestage runs
# with --noremote_accept_cached):
#   local          CLONESTAGE_DISABLE=1, --spawn_strategy=local (cache in the exec root,
#                  emptied by bazel clean)
#   shared         --config=clonestage, default --shared-dir, the shared directory emptied
#                  before the build (the same module work as local)
#   shared_warm    the same, the directory kept from the previous build (what a developer's
#                  clean build gets: it survives bazel clean, as Xcode's module cache does)
#   unshared       --config=clonestage against a second server with --shared-dir none
# For each: wall ms of the build, and the implicit module builds it did, summed from the
# compiles' Name.modcache reports (loaded / built / waited per module).
#
# A benchmark, not a test: it exits 0 when every build succeeded and judges no timing.
# Environment: PERF_MODULE_MS, PERF_WORK_MS, and see lib.sh (CLONESTAGE_BIN,
# CLONESTAGE_SPAWN, PERF_DIR, PERF_KEEP).
set -euo pipefail

perf_name=modcache
# shellcheck source=tests/perf/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds="$(perf_rounds "${1:-3}")"
module_ms="${PERF_MODULE_MS:-150}"
work_ms="${PERF_WORK_MS:-300}"
for v in "$module_ms" "$work_ms"; do
  case "$v" in '' | *[!0-9]*) perf_die "PERF_MODULE_MS and PERF_WORK_MS must be numbers" ;; esac
done
ws="$perf_checkout/examples/swiftlike"
cd "$ws"

perf_helper
perf_start_server
# The second server: no shared directories.
cache_none="$perf_dir/cache-none"
perf_serve_other "$perf_bin" "$cache_none" "$perf_dir/serve-none.log" CLONESTAGE_SHARED_DIRS=none
grep -q 'no shared cache directories' "$perf_dir/serve-none.log" ||
  perf_die "the second server did not turn sharing off (log: $perf_dir/serve-none.log)"

log="$perf_dir/builds.log"
: >"$log"
common=(--jobs=2 --config=ci "--define=swiftlike_module_ms=$module_ms" "--define=swiftlike_work_ms=$work_ms")
libs=(//app/... //core/... //features/... //ui/...)

build() { # CONFIG ARGS...
  local c="$1"
  shift
  echo "--- $c: $*" >>"$log"
  case "$c" in
    local) CLONESTAGE_DISABLE=1 bazel build "${common[@]}" --spawn_strategy=local "$@" ;;
    shared | shared_warm) bazel build "${common[@]}" --config=clonestage --noremote_accept_cached "$@" ;;
    unshared) CLONESTAGE_CACHE="$cache_none" bazel build "${common[@]}" --config=clonestage --noremote_accept_cached "$@" ;;
  esac >>"$log" 2>&1 || perf_die "$c build of $* failed (log: $log)"
}

# "built loaded waited" over the compiles' reports of the last build.
module_counts() {
  find -L bazel-bin/ -name '*.modcache' -exec cat {} + 2>/dev/null |
    awk '{n[$3]++} END {printf "%d %d %d", n["built"], n["loaded"], n["waited"]}'
}

# The shared server's directories emptied (it is idle: no action runs between builds).
empty_shared() {
  local d
  for d in "$perf_cache"/shared/*; do
    [ -d "$d" ] || continue
    find "$d" -mindepth 1 -delete
  done
}

header="$(perf_machine)"
configs=(local shared shared_warm unshared)
declare -A ms mods
perf_say "warm-up: one build per configuration"
for c in "${configs[@]}"; do
  CLONESTAGE_DISABLE=1 bazel clean >>"$log" 2>&1
  build "$c" //compiler:for_actions
  build "$c" "${libs[@]}"
done
for r in $(seq "$rounds"); do
  for k in 0 1 2 3; do
    c="${configs[$(((r - 1 + k) % 4))]}"
    CLONESTAGE_DISABLE=1 bazel clean >>"$log" 2>&1
    build "$c" //compiler:for_actions
    [ "$c" = shared ] && empty_shared
    t0="$(perf_now_ms)"
    build "$c" "${libs[@]}"
    t="$(($(perf_now_ms) - t0))"
    ms[$c]="${ms[$c]:-} $t"
    mods[$c]="$(module_counts)"
    perf_say "round $r/$rounds $c $t ms, modules built/loaded/waited ${mods[$c]} (load $(perf_load_now))"
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
read -ra l_ms <<<"${ms[local]}"
ml="$(perf_median "${l_ms[@]}")"
cat <<EOF
=== implicit module cache: clean builds, local against clonestage with and without its shared directory (tests/perf/modcache.sh) ===
date: $(date -u '+%Y-%m-%d %H:%M UTC')
$header
load average at end: $(perf_load_now)
workload: examples/swiftlike --config=ci, 20 SwiftCompile-like actions through the worker stand-in,
  module cache at <bin_dir>/_swift_module_cache; 9 implicit modules (8 of the stand-in SDK at a
  stable path, CShims with its map inside the root, imported by 4 compiles), ${module_ms} ms CPU to
  build each; ${work_ms} ms CPU of compile work per action; --jobs=2; $rounds rounds, rotating order

config        wall ms (per round)          median   / local (median)  per round / local      module builds (built loaded waited, last round)
EOF
for c in "${configs[@]}"; do
  read -ra c_ms <<<"${ms[$c]}"
  mc="$(perf_median "${c_ms[@]}")"
  rr=()
  for i in "${!l_ms[@]}"; do rr+=("$(ratio "${c_ms[$i]}" "${l_ms[$i]}")"); done
  printf '%-13s %-28s %-8s %-17s %-22s %s\n' "$c" "${ms[$c]# }" "$mc" "$(ratio "$mc" "$ml")" "${rr[*]}" "${mods[$c]}"
done
cat <<EOF

target: shared (every action executed by clonestage, the module cache as cold as local's) <= 1.10x local.
EOF
