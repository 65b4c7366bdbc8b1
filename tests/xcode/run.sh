#!/usr/bin/env bash
# tests/xcode/run.sh: the Apple environment through Bazel (4.2.3 here). Starts
# `clonestage serve` (rust/target/release/clonestage, or $CLONESTAGE_BIN) on a temp cache with
# CLONESTAGE_APPLE_TOOLS pointing at stub xcode-select/mdfind/xcrun and one stub Xcode 15.2
# bundle, then builds a genrule running `env` in a scratch workspace, over the server's TCP
# address, with --action_env carrying XCODE_VERSION_OVERRIDE / APPLE_SDK_PLATFORM /
# APPLE_SDK_VERSION_OVERRIDE:
#   1. Xcode 15.2: the action ran remotely and its env has the stub Xcode's DEVELOPER_DIR,
#      SDKROOT from the stub xcrun, and TMPDIR;
#   2. Xcode 16.1 with --spawn_strategy=remote: the action fails (exit 1), and Bazel prints
#      its stderr, the server's message naming 16.1 and the installed 15.2;
#   3. Xcode 16.1 under the strategy of --config=clonestage (remote,local with
#      --remote_local_fallback): the same failure with the message, no silent local run;
#   4. an SDK version the stub Xcode lacks (17.4): SDKROOT from `xcrun --sdk iphonesimulator`,
#      the platform alone, as Bazel 8-9 ask for it.
# Every action's TMPDIR is the server's own (started with TMPDIR=$tmp/action-tmp).
#
# Prints PASS/FAIL per check and "N passed, M failed"; exit 1 on any failure. Everything lives
# in one temp dir (TMPDIR), removed on exit with the Bazel server and clonestage server it
# started (XCODE_KEEP=1 keeps it). Needs: bazel, timeout; the spawn wrapper from
# $CLONESTAGE_SPAWN, the cargo tests' build (rust/target/tmp/clonestage-spawn), or g++ ($CXX).

set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
BIN="${CLONESTAGE_BIN:-$root/rust/target/release/clonestage}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-xcode.XXXXXX")"
tmp="$(cd "$tmp" && pwd -P)"
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/build.sh
source "$root/tests/lib/build.sh"
server_pid=""
B=(bazel "--output_user_root=$tmp/bazel-root")

cleanup() {
  (cd "$tmp/ws" 2>/dev/null && "${B[@]}" shutdown >/dev/null 2>&1)
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  if [ "${XCODE_KEEP:-}" = 1 ]; then
    echo "kept $tmp"
  else
    chmod -R u+w "$tmp" 2>/dev/null
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

[ -x "$BIN" ] || {
  echo "no clonestage binary at $BIN (cargo build --release --bin clonestage)" >&2
  exit 1
}
spawn="${CLONESTAGE_SPAWN:-$root/rust/target/tmp/clonestage-spawn/clonestage-spawn}"
if [ ! -x "$spawn" ]; then
  spawn="$tmp/clonestage-spawn"
  cxx_spawn "$root" "$spawn" || {
    echo "cannot build the spawn wrapper" >&2
    exit 1
  }
fi

# The stub host: one Xcode 15.2 (15C500b) in Applications, selected; Spotlight finds nothing.
tools="$tmp/tools"
dev="$tools/Applications/Xcode_15.2.app/Contents/Developer"
mkdir -p "$dev"
printf '<plist><dict><key>CFBundleShortVersionString</key><string>15.2</string><key>ProductBuildVersion</key><string>15C500b</string></dict></plist>\n' \
  >"$tools/Applications/Xcode_15.2.app/Contents/version.plist"
printf '#!/bin/sh\necho %s\n' "$dev" >"$tools/xcode-select"
printf '#!/bin/sh\nexit 0\n' >"$tools/mdfind"
# shellcheck disable=SC2016 # the stub expands its own $2 and $DEVELOPER_DIR when it runs
printf '#!/bin/sh\ncase "$2" in iphonesimulator17.2|iphonesimulator) echo "$DEVELOPER_DIR/SDKs/$2.sdk" ;; *) echo "no SDK $2" >&2; exit 1 ;; esac\n' >"$tools/xcrun"
chmod 755 "$tools/xcode-select" "$tools/mdfind" "$tools/xcrun"

cache="$tmp/cache"
mkdir -p "$tmp/action-tmp"
TMPDIR="$tmp/action-tmp" CLONESTAGE_APPLE_TOOLS="$tools" CLONESTAGE_LOG=info "$BIN" serve --cache "$cache" --jobs 1 \
  --spawn "$spawn" >"$tmp/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  [ -s "$cache/server/tcp-port" ] && break
  sleep 0.1
done
[ -s "$cache/server/tcp-port" ] || {
  fail "server starts" "$(tail -5 "$tmp/serve.log")"
  exit 1
}

mkdir -p "$tmp/ws"
touch "$tmp/ws/WORKSPACE"
printf 'genrule(\n    name = "env",\n    outs = ["env.txt"],\n    cmd = "env | sort > $@",\n)\n' >"$tmp/ws/BUILD"
cd "$tmp/ws" || exit 1
build() { # build LOG XCODE_VERSION FLAGS...
  local log="$1" v="$2"
  shift 2
  timeout 600 "${B[@]}" "--bazelrc=$cache/server/tcp.bazelrc" build --remote_download_outputs=all \
    "--action_env=XCODE_VERSION_OVERRIDE=$v" --action_env=APPLE_SDK_PLATFORM=iPhoneSimulator \
    --action_env=APPLE_SDK_VERSION_OVERRIDE=17.2 "$@" //:env >"$tmp/$log" 2>&1
}

# 1. found
if build found.log 15.2 --spawn_strategy=remote &&
  grep -q '1 remote' "$tmp/found.log" &&
  grep -qx "DEVELOPER_DIR=$dev" bazel-bin/env.txt &&
  grep -qx "SDKROOT=$dev/SDKs/iphonesimulator17.2.sdk" bazel-bin/env.txt &&
  grep -qx "TMPDIR=$tmp/action-tmp" bazel-bin/env.txt; then
  pass "Xcode 15.2: DEVELOPER_DIR, SDKROOT and TMPDIR in the remote action's env"
else
  fail "Xcode 15.2: DEVELOPER_DIR, SDKROOT and TMPDIR in the remote action's env" \
    "$(tail -5 "$tmp/found.log")" "$(grep -E 'DEVELOPER_DIR|SDKROOT|TMPDIR' bazel-bin/env.txt 2>/dev/null)"
fi

# 2. missing, no fallback: a failed action whose stderr (printed by Bazel) names the Xcode
if ! build missing.log 16.1 --spawn_strategy=remote &&
  grep -q 'clonestage: Xcode 16.1 (XCODE_VERSION_OVERRIDE) is not installed' "$tmp/missing.log" &&
  grep -q "installed: 15.2.0.15C500b at $dev" "$tmp/missing.log"; then
  pass "Xcode 16.1 without fallback: the build fails with the server's message"
else
  fail "Xcode 16.1 without fallback: the build fails with the server's message" "$(tail -8 "$tmp/missing.log")"
fi

# 3. missing, with --config=clonestage's fallback: still a failed action with the message,
# never a silent local run (an Execute error would have been retried locally without a word)
if ! build fallback.log 16.1 --spawn_strategy=remote,local --remote_local_fallback &&
  ! grep -q '1 local' "$tmp/fallback.log" &&
  grep -q 'clonestage: Xcode 16.1 (XCODE_VERSION_OVERRIDE) is not installed' "$tmp/fallback.log"; then
  pass "Xcode 16.1 with --remote_local_fallback: the build fails with the server's message, no silent local run"
else
  fail "Xcode 16.1 with --remote_local_fallback: the build fails with the server's message, no silent local run" \
    "$(tail -8 "$tmp/fallback.log")"
fi

# 4. an SDK version the Xcode lacks: the platform alone (Bazel 8-9's xcrun --sdk <platform>)
if build other-sdk.log 15.2 --spawn_strategy=remote --action_env=APPLE_SDK_VERSION_OVERRIDE=17.4 &&
  grep -qx "SDKROOT=$dev/SDKs/iphonesimulator.sdk" bazel-bin/env.txt; then
  pass "SDK 17.4, which Xcode 15.2 lacks: SDKROOT of the platform alone"
else
  fail "SDK 17.4, which Xcode 15.2 lacks: SDKROOT of the platform alone" \
    "$(tail -5 "$tmp/other-sdk.log")" "$(grep -E 'SDKROOT' bazel-bin/env.txt 2>/dev/null)"
fi

finish
