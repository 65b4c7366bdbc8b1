#!/usr/bin/env bash
# tests/teamrc/run.sh: a team's .bazelrc must not defeat or break clonestage, and clonestage
# must not change a team's build where it is not in the loop (issues 12 and 25).
# tests/teamrc/.bazelrc carries a dead --remote_cache, a --disk_cache, per-mnemonic
# --strategy lines for SwiftCompile and ObjcCompile and other common remote flags, then the
# one line `bazel run @clonestage//:install` adds (a try-import of clonestage.bazelrc, whose
# configs apply only when named). Driven as a user drives it: `bazel` in the workspace runs
# the launcher tools/bazel (Bazel 4.2.3, so over loopback TCP), which starts `clonestage
# serve` on a temporary cache and applies clonestage's settings from its own rc file.
#
#   1. through the launcher: the build is green, every action ran remotely (Bazel's process
#      summary has no other kind), the server executed each one, the disk cache directory was
#      never created and nothing reached the team's cache;
#   2. without the launcher, `--config=clonestage` minus one part at a time, to show what each
#      part is for (build:clonestage is the launcher's list, line for line: a Rust test checks
#      it): without the --disk_cache reset Bazel 4.2.3 fails the build ("Cannot combine gRPC
#      based remote execution with disk caching"); without the --remote_cache reset the dead
#      team cache fails Bazel's capability check and every action runs locally; without the
#      --strategy lines the SwiftCompile and ObjcCompile actions run locally; with all of it,
#      the line `clonestage address --for-bazel 4.2.3` prints, in ~/.bazelrc, sends every
#      action to the running server;
#   3. a team's --experimental_remote_downloader (a grpcio stand-in that logs the metadata of
#      each call) never receives clonestage's token header, while the build's own calls carry
#      it (they succeed);
#   4. --config=clonestage_swift_only on the command line: only the two SwiftCompile actions
#      go to clonestage (its --spawn_strategy=local does not override the mnemonics the
#      launcher names, so it names them again);
#   5. when the launcher stands aside (CLONESTAGE_DISABLE=1; a server that will not start),
#      the build runs with exactly the team's settings: as without clonestage at all;
#   6. every command kind, through the launcher and with it disabled: the same exit status
#      (no command fails on clonestage's settings, as a command-line --config=clonestage would
#      for version, query, fetch, sync and shutdown), the build-like ones through clonestage,
#      and no Bazel server restart when the launcher's --bazelrc comes and goes.
#
# Each build gets its own --action_env value, so none reuses another's results.
# Prints PASS/FAIL per check and "N passed, M failed" last; exit 1 on any
# failure. Environment: TMPDIR (cache, Bazel's output root and logs go there),
# TEAMRC_KEEP=1 keeps them. Needs: bazel (4.2.3), cargo, g++ when
# rust/target/release/clonestage-spawn is missing, coreutils' timeout, and the
# venv of .ci/install.sh ($CLONESTAGE_TOOLS/venv, grpcio) for check 3.

set -u -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
ws="$root/tests/teamrc"
cs="$root/rust/target/release/clonestage"

unset CLONESTAGE_DISABLE CLONESTAGE_TCP CLONESTAGE_VERBOSE
tmp="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-teamrc.XXXXXX")"
tmp="$(cd "$tmp" && pwd -P)"
cache="$tmp/cache"
logs="$tmp/logs"
out_root="$tmp/bazel" # Bazel's --output_user_root: a fresh Bazel server, shut down at the end
mkdir -p "$logs"
export CLONESTAGE_CACHE="$cache" CLONESTAGE_BIN="$cs"
disk_cache="$ws/.disk-cache" # what the workspace's --disk_cache=.disk-cache names
# Bazel without any launcher: what Debian's /usr/bin/bazel wrapper runs.
bazel_real="${BAZEL_REAL_FOR_TEST:-/usr/bin/bazel-4}"

report_elapsed=1 # "PASS: NAME [42s]"
tail_lines=12
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/bazel.sh
source "$root/tests/lib/bazel.sh"

bz() { # bz LOG ARGS...: one Bazel command in the workspace through the launcher, bounded
  local log="$1"
  shift
  (cd "$ws" && timeout -k 10 180 bazel --output_user_root="$out_root" "$@") >"$log" 2>&1
}

cleanup() {
  (cd "$ws" && CLONESTAGE_DISABLE=1 timeout 60 bazel --output_user_root="$out_root" shutdown) >/dev/null 2>&1
  "$cs" --cache "$cache" stop --timeout 20 >/dev/null 2>&1
  rm -f "$ws/tools/clonestage.bazelrc"
  rm -rf "$disk_cache"
  if [ "$failed" -gt 0 ] || [ "${TEAMRC_KEEP:-0}" = 1 ]; then
    say "run.sh: kept $tmp (cache, logs)"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

not_remote() { # kinds in the summary other than internal and remote
  summary_of "$1" | sed -E 's/^INFO: [0-9,]+ process(es)?: //; s/\.$//' | tr ',' '\n' |
    sed -E 's/^ *//' | grep -vE '^[0-9,]+ (internal|remote)$' | tr '\n' ',' | sed 's/,$//'
}
server_actions() { # actions the server has executed so far
  local v
  v="$("$cs" --cache "$cache" stats --json 2>/dev/null | sed -n 's/.*"actions"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p' | head -n 1)"
  echo "${v:-0}"
}
use_config() { # use_config [GREP-PATTERN]: install clonestage.bazelrc as a user does, minus matching lines
  if [ -n "${1:-}" ]; then
    grep -vE -- "$1" "$root/strategy/clonestage.bazelrc" >"$ws/tools/clonestage.bazelrc"
  else
    cp "$root/strategy/clonestage.bazelrc" "$ws/tools/clonestage.bazelrc"
  fi
}
# One clean build through the launcher; the nonce keeps every action key new.
build() { # build NAME LOG
  use_config
  rm -rf "$disk_cache"
  bz "$logs/$1-clean.log" clean
  bz "$2" build --jobs=2 --action_env=TEAMRC_NONCE="$1-$$-$RANDOM" //...
}
# The same without the launcher: --config=clonestage from the workspace's copy of
# clonestage.bazelrc (minus the lines matching FILTER) and the executor from the ~/.bazelrc
# line `clonestage address --for-bazel 4.2.3` prints.
build_config() { # build_config NAME LOG [CONFIG-FILTER]
  use_config "${3:-}"
  rm -rf "$disk_cache"
  bz "$logs/$1-clean.log" clean
  (cd "$ws" && HOME="$tmp/home" CLONESTAGE_DISABLE=1 timeout -k 10 180 \
    bazel --output_user_root="$out_root" build --jobs=2 --config=clonestage \
    --action_env=TEAMRC_NONCE="$1-$$-$RANDOM" //...) >"$2" 2>&1
}

say "run.sh: cache $cache, logs $logs"

# --- setup -----------------------------------------------------------------------------------
if ! (cd "$root/rust" && cargo build --release --bin clonestage) >"$logs/cargo.log" 2>&1 || [ ! -x "$cs" ]; then
  fail "setup: cargo build --release --bin clonestage" "$(tail_of "$logs/cargo.log")"
  exit 1
fi
# The server looks for the spawn wrapper beside itself (tests/e2e installs it there), else
# $CLONESTAGE_SPAWN: build it with the system compiler as rust/server/tests do.
if [ ! -x "$root/rust/target/release/clonestage-spawn" ]; then
  mapfile -t srcs < <(ls "$root"/cc/*.cc | grep -v -- '-darwin\.cc$')
  if ! "${CXX:-g++}" -std=c++17 -O2 -I "$root" -o "$tmp/clonestage-spawn" "${srcs[@]}" >"$logs/spawn.log" 2>&1; then
    fail "setup: build clonestage-spawn with ${CXX:-g++}" "$(tail_of "$logs/spawn.log")"
    exit 1
  fi
  export CLONESTAGE_SPAWN="$tmp/clonestage-spawn"
fi

# --- 1. through the launcher -----------------------------------------------------------------
before="$(server_actions)"
build full "$logs/full.log"
rc=$?
after="$(server_actions)"
remote="$(spawns "$logs/full.log" remote)"
others="$(not_remote "$logs/full.log")"
name="team .bazelrc + the install's line, through the launcher: green, every action through clonestage"
if [ "$rc" = 0 ] && [ "$remote" -ge 6 ] && [ -z "$others" ] && [ $((after - before)) -ge "$remote" ]; then
  pass "$name ($(summary_of "$logs/full.log" | sed 's/^INFO: //') server actions: +$((after - before)))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/full.log"); not remote: ${others:-none};" \
    "server actions +$((after - before)) (want >= 6 remote, all executed by the server)" "$(tail_of "$logs/full.log")"
fi
name="the disk cache stays empty"
if [ ! -e "$disk_cache" ] || [ -z "$(ls -A "$disk_cache")" ]; then
  pass "$name ($disk_cache never created)"
else
  fail "$name" "$(find "$disk_cache" | head -n 5)"
fi
name="nothing reached the team's remote cache"
if ! grep -q '127.0.0.1:1\b' "$logs/full.log"; then
  pass "$name (Bazel named no connection to grpc://127.0.0.1:1)"
else
  fail "$name" "$(grep '127.0.0.1:1\b' "$logs/full.log" | head -n 3)"
fi

# --- 2. without the launcher: --config=clonestage, whole and with each part taken out ----------
mkdir -p "$tmp/home"
if ! "$cs" --cache "$cache" address --for-bazel 4.2.3 >"$tmp/home/.bazelrc" 2>"$logs/address.err"; then
  fail "setup: clonestage address --for-bazel 4.2.3" "$(cat "$logs/address.err")"
fi
before="$(server_actions)"
build_config home "$logs/home.log"
rc=$?
after="$(server_actions)"
name="without the launcher, the ~/.bazelrc line of 'clonestage address --for-bazel 4.2.3' and --config=clonestage reach the server"
if [ "$rc" = 0 ] && [ "$(spawns "$logs/home.log" remote)" -ge 6 ] && [ -z "$(not_remote "$logs/home.log")" ] &&
  [ $((after - before)) -ge 6 ]; then
  pass "$name ($(sed "s|$cache|<cache>|" "$tmp/home/.bazelrc" | tr '\n' ' ')$(summary_of "$logs/home.log" | sed 's/^INFO: //'))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/home.log"); server actions +$((after - before))" "$(tail_of "$logs/home.log")"
fi

build_config no-disk-reset "$logs/no-disk-reset.log" '^build:clonestage --disk_cache=$'
rc=$?
name="without the --disk_cache reset Bazel 4.2.3 fails the build"
if [ "$rc" != 0 ] && grep -q 'Cannot combine gRPC based remote execution with disk caching' "$logs/no-disk-reset.log"; then
  pass "$name (exit $rc: $(grep -m1 -o 'Cannot combine gRPC based remote execution with disk caching' "$logs/no-disk-reset.log"))"
else
  fail "$name" "bazel exit $rc" "$(tail_of "$logs/no-disk-reset.log")"
fi

before="$(server_actions)"
build_config no-cache-reset "$logs/no-cache-reset.log" '^build:clonestage --remote_cache=$'
rc=$?
after="$(server_actions)"
name="without the --remote_cache reset the dead team cache sends every action local"
if [ "$rc" = 0 ] && [ "$(spawns "$logs/no-cache-reset.log" remote)" = 0 ] && [ "$(spawns "$logs/no-cache-reset.log" local)" -ge 6 ] &&
  [ "$after" = "$before" ] && grep -q 'Failed to query remote execution capabilities' "$logs/no-cache-reset.log"; then
  pass "$name ($(summary_of "$logs/no-cache-reset.log" | sed 's/^INFO: //') $(grep -m1 -o 'Failed to query remote execution capabilities.*' "$logs/no-cache-reset.log"))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/no-cache-reset.log"); server actions +$((after - before))" "$(tail_of "$logs/no-cache-reset.log")"
fi

build_config no-strategy "$logs/no-strategy.log" '^build:clonestage --strategy='
rc=$?
name="without the --strategy lines the team's SwiftCompile and ObjcCompile lines win"
# ModA, ModB (SwiftCompile) and ObjcC (ObjcCompile) local; the genrules and TeamTool remote.
if [ "$rc" = 0 ] && [ "$(spawns "$logs/no-strategy.log" local)" = 3 ] && [ "$(spawns "$logs/no-strategy.log" remote)" -ge 3 ]; then
  pass "$name ($(summary_of "$logs/no-strategy.log" | sed 's/^INFO: //'))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/no-strategy.log") (want 3 local)" "$(tail_of "$logs/no-strategy.log")"
fi

# --- 3. the token stays away from a team's downloader ------------------------------------------
py="${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}/venv/bin/python"
name="a team's --experimental_remote_downloader gets no clonestage token"
if ! "$py" -c 'import grpc' 2>/dev/null; then
  fail "$name" "no grpcio in $py (run .ci/install.sh)"
else
  use_config
  port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  : >"$logs/downloader.meta"
  "$py" "$ws/capture_metadata.py" "$port" "$logs/downloader.meta" 2>"$logs/downloader.err" &
  capture_pid=$!
  for _ in $(seq 1 50); do
    grep -q listening "$logs/downloader.meta" && break
    sleep 0.1
  done
  bz "$logs/downloader.log" build --experimental_remote_downloader=grpc://127.0.0.1:"$port" @team_fetched//file
  rc=$?
  kill "$capture_pid" 2>/dev/null
  wait "$capture_pid" 2>/dev/null
  calls="$(grep -c '^/build.bazel.remote.asset.v1.Fetch/FetchBlob' "$logs/downloader.meta")"
  if [ "$rc" != 0 ] && [ "$calls" -ge 1 ] && ! grep -q 'x-clonestage-token' "$logs/downloader.meta"; then
    pass "$name ($calls FetchBlob call(s), metadata: $(grep -m1 FetchBlob "$logs/downloader.meta" | cut -d' ' -f2-))"
  else
    fail "$name" "bazel exit $rc (want the stand-in's refusal), FetchBlob calls: $calls" \
      "$(cat "$logs/downloader.meta")" "$(tail_of "$logs/downloader.log" 5)"
  fi
fi

# --- 4. clonestage_swift_only on the command line ---------------------------------------------
use_config
bz "$logs/swift-only-clean.log" clean
bz "$logs/swift-only.log" build --jobs=2 --config=clonestage_swift_only --action_env=TEAMRC_NONCE="swift-only-$$-$RANDOM" //...
rc=$?
name="--config=clonestage_swift_only: only the SwiftCompile actions go to clonestage"
if [ "$rc" = 0 ] && [ "$(spawns "$logs/swift-only.log" remote)" = 2 ] && [ "$(spawns "$logs/swift-only.log" local)" = 4 ]; then
  pass "$name ($(summary_of "$logs/swift-only.log" | sed 's/^INFO: //'))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/swift-only.log") (want 2 remote, 4 local)" "$(tail_of "$logs/swift-only.log")"
fi

# --- 5. the launcher stands aside: exactly the team's settings ---------------------------------
# The reference: Bazel itself, no launcher (the real binary, not tools/bazel). --announce_rc
# lists every rc file and option Bazel read. With the team's dead --remote_cache and no
# --remote_local_fallback, Bazel 4.2.3 fails at its capability check (exit 34) before it says
# that, so a user's ~/.bazelrc turns the dead cache off here (in every run of this section and
# the next): Bazel alone then builds locally, with the team's strategies and disk cache.
announced() { grep -E "^INFO: Reading rc options|^  '[a-z]+' options: " "$1"; }
use_config
mkdir -p "$tmp/home6"
echo 'build --remote_cache=' >"$tmp/home6/.bazelrc"
fresh() { # the same work for every run of this section: no Bazel or disk cache results
  (cd "$ws" && HOME="$tmp/home6" CLONESTAGE_DISABLE=1 timeout -k 10 180 bazel --output_user_root="$out_root" clean) \
    >"$logs/fresh-clean.log" 2>&1
  rm -rf "$disk_cache"
}
fresh
(cd "$ws" && HOME="$tmp/home6" timeout -k 10 180 "$bazel_real" --output_user_root="$out_root" build --jobs=2 --announce_rc \
  --action_env=TEAMRC_NONCE="plain-$$" //...) >"$logs/plain.log" 2>&1
plain_rc=$?
for aside in disabled no-server; do
  case "$aside" in
    disabled) env_aside=(CLONESTAGE_DISABLE=1) ;;
    no-server) env_aside=(CLONESTAGE_CACHE="$tmp/cache-no-server" CLONESTAGE_SPAWN=/nonexistent/clonestage-spawn) ;;
  esac
  fresh
  before="$(server_actions)"
  (cd "$ws" && env HOME="$tmp/home6" "${env_aside[@]}" timeout -k 10 180 bazel --output_user_root="$out_root" build --jobs=2 \
    --announce_rc --action_env=TEAMRC_NONCE="plain-$$" //...) >"$logs/aside-$aside.log" 2>&1
  rc=$?
  after="$(server_actions)"
  name="the launcher stands aside ($aside): Bazel reads exactly the team's rc files and options, and fills the team's disk cache"
  if [ "$rc" = "$plain_rc" ] && [ "$(announced "$logs/aside-$aside.log")" = "$(announced "$logs/plain.log")" ] &&
    [ -n "$(announced "$logs/plain.log")" ] && [ "$after" = "$before" ] &&
    [ "$(summary_of "$logs/aside-$aside.log")" = "$(summary_of "$logs/plain.log")" ] &&
    [ -n "$(find "$disk_cache" -type f 2>/dev/null | head -n 1)" ] &&
    { [ "$aside" = disabled ] || grep -q "running Bazel without the clonestage executor, with your workspace's own settings" "$logs/aside-$aside.log"; }; then
    pass "$name (exit $rc, $(summary_of "$logs/aside-$aside.log" | sed 's/^INFO: //') as Bazel alone: $(summary_of "$logs/plain.log" | sed 's/^INFO: //') $(announced "$logs/plain.log" | grep -c '^INFO: Reading') rc sources)"
  else
    fail "$name" "exit $rc (Bazel alone: $plain_rc)" "$(diff <(announced "$logs/plain.log") <(announced "$logs/aside-$aside.log") | head -n 8)" \
      "$(tail_of "$logs/aside-$aside.log" 6)"
  fi
done
"$cs" --cache "$tmp/cache-no-server" stop --timeout 10 >/dev/null 2>&1
fresh
(cd "$ws" && HOME="$tmp/home6" timeout -k 10 180 bazel --output_user_root="$out_root" build --jobs=2 --announce_rc \
  --action_env=TEAMRC_NONCE="plain-$$" //...) >"$logs/in-the-loop.log" 2>&1
name="in the loop, Bazel reads the launcher's rc file after the team's (the control for the above)"
if announced "$logs/in-the-loop.log" | grep -q "^INFO: Reading rc options for 'build' from $cache/launcher/bazelrc/" &&
  [ "$(announced "$logs/in-the-loop.log" | grep -c "^INFO: Reading rc options")" -gt "$(announced "$logs/plain.log" | grep -c "^INFO: Reading rc options")" ]; then
  pass "$name"
else
  fail "$name" "$(announced "$logs/in-the-loop.log" | head -n 12)"
fi

# --- 6. every command kind --------------------------------------------------------------------
# Through the launcher (its --bazelrc for the commands that build) and with it disabled: the
# same exit status for each, no option error, and one Bazel server for all of them. A user's
# ~/.bazelrc turns the team's dead cache off here, so that Bazel alone gets past its capability
# check and the two are compared on the commands themselves.
use_config
commands=(
  "version" "info" "query //..." "cquery //..." "aquery //:app"
  "build --action_env=TEAMRC_NONCE=cmds-$$-$RANDOM //:app"
  "test //:hello_test" "run //:hello" "coverage //:hello_test" "fetch //..." "sync"
  "clean" "help" "license" "canonicalize-flags -- --jobs=2" "dump" "print_action //:app"
  "mobile-install //:hello" "analyze-profile $tmp/no-such-profile"
)
starts=0
crashed=0
bad=()
for c in "${commands[@]}"; do
  read -r -a words <<<"$c"
  for mode in launcher plain; do
    log="$logs/cmd-${words[0]}-$mode.log"
    if [ "$mode" = plain ]; then
      (cd "$ws" && HOME="$tmp/home6" CLONESTAGE_DISABLE=1 timeout -k 10 180 bazel --output_user_root="$out_root" "${words[@]}") >"$log" 2>&1
    else
      (cd "$ws" && HOME="$tmp/home6" timeout -k 10 180 bazel --output_user_root="$out_root" "${words[@]}") >"$log" 2>&1
    fi
    echo $? >"$log.rc"
    # A start right after Bazel crashed (4.2.3's coverage does, here, either way) is Bazel's.
    if grep -q 'Starting local Bazel server' "$log" && [ "$crashed" = 0 ]; then
      starts=$((starts + 1))
    fi
    crashed=0
    grep -q 'FATAL: bazel crashed' "$log" && crashed=1
  done
  l="$logs/cmd-${words[0]}-launcher.log"
  if [ "$(cat "$l.rc")" != "$(cat "$logs/cmd-${words[0]}-plain.log.rc")" ] ||
    grep -Eq "Unrecognized option|Config value '[^']*' is not defined" "$l"; then
    bad+=("${words[0]}: exit $(cat "$l.rc") through the launcher, $(cat "$logs/cmd-${words[0]}-plain.log.rc") without; $(grep -m1 -E 'ERROR|Unrecognized' "$l")")
  fi
done
name="every command kind exits as without clonestage, with no option error"
if [ "${#bad[@]}" = 0 ]; then
  pass "$name (${#commands[@]} commands: $(for c in "${commands[@]}"; do read -r -a w <<<"$c"; printf '%s=%s ' "${w[0]}" "$(cat "$logs/cmd-${w[0]}-launcher.log.rc")"; done))"
else
  fail "$name" "${bad[@]}"
fi
name="the builds among them ran through clonestage (the launcher's rc file)"
if [ "$(spawns "$logs/cmd-build-launcher.log" remote)" -ge 1 ] && [ -z "$(not_remote "$logs/cmd-build-launcher.log")" ]; then
  pass "$name ($(summary_of "$logs/cmd-build-launcher.log" | sed 's/^INFO: //'))"
else
  fail "$name" "$(tail_of "$logs/cmd-build-launcher.log")"
fi
# `clean`, `shutdown`-free: only the first command may start Bazel's server (the launcher's
# --bazelrc coming and going does not restart it).
name="one Bazel server for all of them: the launcher's --bazelrc does not restart it"
if [ "$starts" -le 1 ]; then
  pass "$name ($starts start over $((2 * ${#commands[@]})) commands)"
else
  fail "$name" "$starts starts: $(grep -l 'Starting local Bazel server' "$logs"/cmd-*.log | xargs -n1 basename | tr '\n' ' ')"
fi

finish "($((SECONDS))s)"
