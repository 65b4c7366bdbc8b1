#!/usr/bin/env bash
# tests/teamrc/run.sh: a team's .bazelrc must not defeat or break clonestage
# (issue 12, parts 2 and 3). tests/teamrc/.bazelrc carries a dead
# --remote_cache, a --disk_cache, per-mnemonic --strategy lines for
# SwiftCompile and ObjcCompile and other common remote flags, then the lines
# docs/swift-ios-teams.md documents (a try-import of clonestage.bazelrc and
# `build --config=clonestage`, last). Driven as a user drives it: `bazel` in
# the workspace runs the launcher tools/bazel (Bazel 4.2.3, so over loopback
# TCP), which starts `clonestage serve` on a temporary cache.
#
#   1. with this checkout's strategy/clonestage.bazelrc: the build is green,
#      every action ran remotely (Bazel's process summary has no other kind),
#      the server executed each one, the disk cache directory was never
#      created and nothing reached the team's cache;
#   2. the same config minus one part at a time, to show what each part is
#      for: without the --disk_cache reset Bazel 4.2.3 fails the build
#      ("Cannot combine gRPC based remote execution with disk caching");
#      without the --remote_cache reset the dead team cache fails Bazel's
#      capability check and every action runs locally; without the
#      --strategy lines the SwiftCompile and ObjcCompile actions run locally;
#   3. a team's --experimental_remote_downloader (a grpcio stand-in that logs
#      the metadata of each call) never receives clonestage's token header,
#      while the build's own calls carry it (they succeed);
#   4. --config=clonestage_swift_only after it: only the two SwiftCompile
#      actions go to clonestage (its --spawn_strategy=local does not override
#      the mnemonics build:clonestage names, so it names them again);
#   5. without the launcher (CLONESTAGE_DISABLE=1): the line `clonestage
#      address --for-bazel 4.2.3` prints, put in ~/.bazelrc (a temporary HOME),
#      sends every action to the running server.
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

passed=0
failed=0
say() { printf '%s\n' "$*"; }
pass() {
  passed=$((passed + 1))
  say "PASS: $1 [${SECONDS}s]"
}
fail() { # fail NAME [DETAIL...]
  failed=$((failed + 1))
  say "FAIL: $1 [${SECONDS}s]"
  shift
  local line
  for line in "$@"; do
    printf '      %s\n' "$line"
  done
}
tail_of() { tail -n "${2:-12}" "$1" 2>/dev/null | sed 's/^/      | /'; }

bz() { # bz LOG ARGS...: one Bazel command in the workspace through the launcher, bounded
  local log="$1"
  shift
  (cd "$ws" && timeout -k 10 180 bazel --output_user_root="$out_root" "$@") >"$log" 2>&1
}

finish() {
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
trap finish EXIT
trap 'exit 130' INT TERM

summary_of() { grep -E '^INFO: [0-9,]+ process(es)?: ' "$1" | tail -n 1; }
spawns() { # spawns LOG KIND: spawns of KIND ("remote", "local", ...) in Bazel's summary
  local n
  n="$(summary_of "$1" | grep -oE "[0-9,]+ $2[,.]" | head -n 1 | tr -dc 0-9)"
  echo "${n:-0}"
}
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
# One clean build; the nonce keeps every action key new.
build() { # build NAME LOG [CONFIG-FILTER]
  use_config "${3:-}"
  rm -rf "$disk_cache"
  bz "$logs/$1-clean.log" clean
  bz "$2" build --jobs=2 --action_env=TEAMRC_NONCE="$1-$$-$RANDOM" //...
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

# --- 1. the documented lines -----------------------------------------------------------------
before="$(server_actions)"
build full "$logs/full.log"
rc=$?
after="$(server_actions)"
remote="$(spawns "$logs/full.log" remote)"
others="$(not_remote "$logs/full.log")"
name="team .bazelrc + documented lines: green, every action through clonestage"
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

# --- 2. each part taken out ------------------------------------------------------------------
build no-disk-reset "$logs/no-disk-reset.log" '^build:clonestage --disk_cache=$'
rc=$?
name="without the --disk_cache reset Bazel 4.2.3 fails the build"
if [ "$rc" != 0 ] && grep -q 'Cannot combine gRPC based remote execution with disk caching' "$logs/no-disk-reset.log"; then
  pass "$name (exit $rc: $(grep -m1 -o 'Cannot combine gRPC based remote execution with disk caching' "$logs/no-disk-reset.log"))"
else
  fail "$name" "bazel exit $rc" "$(tail_of "$logs/no-disk-reset.log")"
fi

before="$(server_actions)"
build no-cache-reset "$logs/no-cache-reset.log" '^build:clonestage --remote_cache=$'
rc=$?
after="$(server_actions)"
name="without the --remote_cache reset the dead team cache sends every action local"
if [ "$rc" = 0 ] && [ "$(spawns "$logs/no-cache-reset.log" remote)" = 0 ] && [ "$(spawns "$logs/no-cache-reset.log" local)" -ge 6 ] &&
  [ "$after" = "$before" ] && grep -q 'Failed to query remote execution capabilities' "$logs/no-cache-reset.log"; then
  pass "$name ($(summary_of "$logs/no-cache-reset.log" | sed 's/^INFO: //') $(grep -m1 -o 'Failed to query remote execution capabilities.*' "$logs/no-cache-reset.log"))"
else
  fail "$name" "bazel exit $rc; $(summary_of "$logs/no-cache-reset.log"); server actions +$((after - before))" "$(tail_of "$logs/no-cache-reset.log")"
fi

build no-strategy "$logs/no-strategy.log" '^build:clonestage --strategy='
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

# --- 4. clonestage_swift_only on top ----------------------------------------------------------
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

# --- 5. without the launcher: the ~/.bazelrc line `clonestage address --for-bazel` prints -------
name="without the launcher, the ~/.bazelrc line of 'clonestage address --for-bazel 4.2.3' reaches the server"
mkdir -p "$tmp/home"
if "$cs" --cache "$cache" address --for-bazel 4.2.3 >"$tmp/home/.bazelrc" 2>"$logs/address.err"; then
  use_config
  bz "$logs/home-clean.log" clean
  before="$(server_actions)"
  (cd "$ws" && HOME="$tmp/home" CLONESTAGE_DISABLE=1 timeout -k 10 180 \
    bazel --output_user_root="$out_root" build --jobs=2 --action_env=TEAMRC_NONCE="home-$$-$RANDOM" //...) \
    >"$logs/home.log" 2>&1
  rc=$?
  after="$(server_actions)"
  if [ "$rc" = 0 ] && [ "$(spawns "$logs/home.log" remote)" -ge 6 ] && [ -z "$(not_remote "$logs/home.log")" ] &&
    [ $((after - before)) -ge 6 ]; then
    pass "$name ($(cat "$tmp/home/.bazelrc" | sed "s|$cache|<cache>|"); $(summary_of "$logs/home.log" | sed 's/^INFO: //'))"
  else
    fail "$name" "bazel exit $rc; $(summary_of "$logs/home.log"); server actions +$((after - before))" "$(tail_of "$logs/home.log")"
  fi
else
  fail "$name" "clonestage address --for-bazel 4.2.3 failed: $(cat "$logs/address.err")"
fi

say "$passed passed, $failed failed ($((SECONDS))s)"
[ "$failed" = 0 ]
