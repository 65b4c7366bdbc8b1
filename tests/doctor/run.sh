#!/usr/bin/env bash
# tests/doctor/run.sh: `clonestage doctor` on this machine, as a Linux CI runs it.
#   1. a cache on XFS (reflink), Bazel 4.2.3: `doctor --json` exits 0; filesystem, stage, exec,
#      server and bazel pass (exec timed clones and links; bazel ran its two actions remote
#      through a server the doctor started, over loopback TCP with the token rc file, and
#      stopped); routing and xcode are skipped with their reasons; the human report is short;
#   2. a cache on ext4 (no clones), no bazel on PATH: exit 0, exec skipped (nothing to compare)
#      and bazel skipped, each saying why;
#   3. --bazel naming no file: bazel fails naming the path (exit 1);
#   4. a server that cannot start (CLONESTAGE_SPAWN names no wrapper): server fails with the
#      server's own error, bazel is skipped (exit 1);
#   5. stub Xcode tools (CLONESTAGE_APPLE_TOOLS): xcode passes with the stub DEVELOPER_DIR and
#      SDKROOT; a broken xcode-select makes it fail naming the cause.
#
# Prints PASS/FAIL per check and "N passed, M failed"; exit 1 on any failure. Caches live on
# the loop mounts of .ci/mount-cow.sh (mounted here when run as root) and in a temp dir, all
# removed on exit (DOCTOR_KEEP=1 keeps them). Needs: bazel 4.2.3, python3, the spawn wrapper
# ($CLONESTAGE_SPAWN, the cargo tests' build, or g++), rust/target/release/clonestage.

set -u -o pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
BIN="${CLONESTAGE_BIN:-$root/rust/target/release/clonestage}"
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/build.sh
source "$root/tests/lib/build.sh"

[ -x "$BIN" ] || {
  echo "no clonestage binary at $BIN (cargo build --release --bin clonestage)" >&2
  exit 1
}
if [ -z "${CLONESTAGE_TEST_XFS:-}" ] && [ "$(id -u)" = 0 ]; then
  eval "$(bash "$root/.ci/mount-cow.sh")"
fi
for v in CLONESTAGE_TEST_XFS CLONESTAGE_TEST_EXT4; do
  [ -n "${!v:-}" ] || {
    echo "$v is not set: run .ci/mount-cow.sh as root" >&2
    exit 1
  }
done
tmp="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-doctor.XXXXXX")"
xfs="$(mktemp -d "$CLONESTAGE_TEST_XFS/doctor.XXXXXX")"
ext4="$(mktemp -d "$CLONESTAGE_TEST_EXT4/doctor.XXXXXX")"
cleanup() {
  for c in "$xfs"/* "$ext4"/* "$tmp"/*; do
    [ -d "$c/server" ] && "$BIN" --cache "$c" stop --timeout 10 >/dev/null 2>&1
  done
  if [ "${DOCTOR_KEEP:-}" = 1 ]; then
    echo "kept $tmp $xfs $ext4"
  else
    chmod -R u+w "$tmp" "$xfs" "$ext4" 2>/dev/null
    rm -rf "$tmp" "$xfs" "$ext4"
  fi
}
trap cleanup EXIT

spawn="${CLONESTAGE_SPAWN:-$root/rust/target/tmp/clonestage-spawn/clonestage-spawn}"
if [ ! -x "$spawn" ]; then
  spawn="$tmp/clonestage-spawn"
  cxx_spawn "$root" "$spawn" || {
    echo "cannot build the spawn wrapper" >&2
    exit 1
  }
fi
export CLONESTAGE_SPAWN="$spawn"
unset CLONESTAGE_APPLE_TOOLS CLONESTAGE_PRESERVE_INODES
timeout="$(command -v timeout)" # absolute: some runs below clear PATH
bazel="$(command -v bazel)" || {
  echo "no bazel on PATH (Debian's bazel-bootstrap 4.2.3)" >&2
  exit 1
}

# expect JSON NAME=STATUS[:SUBSTRING] ...: each check's status, and a substring of its detail.
expect() {
  python3 - "$@" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
checks = {c["name"]: c for c in report["checks"]}
order = [c["name"] for c in report["checks"]]
bad = []
if order != ["filesystem", "stage", "exec", "routing", "server", "bazel", "xcode"]:
    bad.append(f"order {order}")
if not report.get("version"):
    bad.append("no version")
for c in report["checks"]:
    if set(c) != {"name", "status", "detail", "ms"} or not isinstance(c["ms"], int) or not c["detail"]:
        bad.append(f"malformed {c}")
for want in sys.argv[2:]:
    name, rest = want.split("=", 1)
    status, _, sub = rest.partition(":")
    c = checks.get(name)
    if c is None or c["status"] != status or sub not in c["detail"]:
        bad.append(f"{name}: want {status} with {sub!r}, got {c and c['status']}: {c and c['detail']}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
}

doctor() { # doctor OUT CACHE ARGS...: run with --json into OUT.json (stderr OUT.err); its exit code
  local out="$1" cache="$2"
  shift 2
  "$timeout" 900 "$BIN" --cache "$cache" doctor --json "$@" >"$tmp/$out.json" 2>"$tmp/$out.err"
}

# 1. XFS with Bazel 4.2.3: everything that can run here passes.
doctor xfs "$xfs/cache" --bazel "$bazel"
rc=$?
why=$(expect "$tmp/xfs.json" \
  filesystem=pass:xfs stage=pass:"the permission contract holds" \
  stage=pass:"the Mach-O dylib is the cache's own inode" \
  exec=pass:"first run: clone" exec=pass:"fresh link" \
  routing=skip:"only on macOS hosts" server=pass:"started one" \
  server=pass:"loopback TCP 127.0.0.1:" bazel=pass:"4.2.3" \
  bazel=pass:"2 actions ran remote" xcode=skip:"no Xcode tools" 2>&1)
if [ "$rc" = 0 ] && [ -z "$why" ]; then
  pass "XFS + Bazel 4.2.3: doctor --json passes; exec ran; 2 actions remote; routing and xcode skipped with reasons"
else
  fail "XFS + Bazel 4.2.3: doctor --json passes (exit $rc)" "$why" "$(tail -3 "$tmp/xfs.err")"
fi
if [ -z "$(ls -A "$xfs/cache/tmp" 2>/dev/null)" ] && ! "$BIN" --cache "$xfs/cache" status >/dev/null 2>&1; then
  pass "the doctor left no scratch directory and stopped the server it started"
else
  fail "the doctor left no scratch directory and stopped the server it started" "$(ls -A "$xfs/cache/tmp")"
fi
"$BIN" --cache "$xfs/cache" doctor --bazel "$bazel" --exec-runs 3 >"$tmp/human.txt" 2>/dev/null
lines=$(wc -l <"$tmp/human.txt")
if [ "$lines" -le 10 ] && grep -q '^pass bazel' "$tmp/human.txt" && grep -q '^skip xcode' "$tmp/human.txt" &&
  grep -q '^7 passed\|passed, 0 failed, 2 skipped$' "$tmp/human.txt"; then
  pass "the human report is $lines lines, one per check and a count"
else
  fail "the human report is short, one line per check" "$(cat "$tmp/human.txt")"
fi

# 2. ext4 (no clones), no bazel on PATH.
PATH=/nonexistent doctor ext4 "$ext4/cache"
rc=$?
why=$(expect "$tmp/ext4.json" filesystem=pass:ext4 filesystem=pass:"hardlink per file" \
  exec=skip:"has no clones" bazel=skip:"no bazel on PATH" server=pass 2>&1)
if [ "$rc" = 0 ] && [ -z "$why" ]; then
  pass "ext4, no bazel: exec and bazel skipped, each saying why"
else
  fail "ext4, no bazel: exec and bazel skipped, each saying why (exit $rc)" "$why" "$(tail -3 "$tmp/ext4.err")"
fi

# 3. --bazel naming nothing.
doctor nobazel "$ext4/cache" --bazel "$tmp/no-such-bazel" --exec-runs 2
rc=$?
why=$(expect "$tmp/nobazel.json" bazel=fail:"no Bazel at $tmp/no-such-bazel" 2>&1)
if [ "$rc" = 1 ] && [ -z "$why" ]; then
  pass "--bazel naming no file: bazel fails naming it, exit 1"
else
  fail "--bazel naming no file: bazel fails naming it, exit 1 (exit $rc)" "$why"
fi

# 4. A server that cannot start.
CLONESTAGE_SPAWN="$tmp/no-such-wrapper" doctor nospawn "$tmp/cache-nospawn" --bazel "$bazel" --exec-runs 2
rc=$?
why=$(expect "$tmp/nospawn.json" server=fail:"cannot find the spawn wrapper" bazel=skip:"no server" 2>&1)
if [ "$rc" = 1 ] && [ -z "$why" ]; then
  pass "a server that cannot start: server fails with its own error, bazel skipped, exit 1"
else
  fail "a server that cannot start: server fails with its own error, bazel skipped, exit 1 (exit $rc)" "$why"
fi

# 5. Stub Xcode tools: resolved as the server does; a broken xcode-select fails.
tools="$tmp/tools"
dev="$tools/Applications/Xcode_16.1.app/Contents/Developer"
mkdir -p "$dev"
printf '#!/bin/sh\necho %s\n' "$dev" >"$tools/xcode-select"
printf '#!/bin/sh\nexit 0\n' >"$tools/mdfind"
# shellcheck disable=SC2016 # the stub expands its own $2 and $DEVELOPER_DIR when it runs
printf '#!/bin/sh\necho "$DEVELOPER_DIR/SDKs/$2.sdk"\n' >"$tools/xcrun"
chmod 755 "$tools/xcode-select" "$tools/mdfind" "$tools/xcrun"
PATH=/nonexistent CLONESTAGE_APPLE_TOOLS="$tools" doctor xcode "$ext4/cache" --exec-runs 2
rc=$?
why=$(expect "$tmp/xcode.json" xcode=pass:"MacOSX: DEVELOPER_DIR=$dev SDKROOT=$dev/SDKs/macosx.sdk" \
  xcode=pass:"iPhoneSimulator: DEVELOPER_DIR=$dev SDKROOT=$dev/SDKs/iphonesimulator.sdk" 2>&1)
printf '#!/bin/sh\necho "xcode-select: error: no developer tools" >&2\nexit 2\n' >"$tools/xcode-select"
PATH=/nonexistent CLONESTAGE_APPLE_TOOLS="$tools" doctor xcode2 "$ext4/cache" --exec-runs 2
rc2=$?
why2=$(expect "$tmp/xcode2.json" xcode=fail:"no Xcode is selected" 2>&1)
if [ "$rc" = 0 ] && [ -z "$why" ] && [ "$rc2" = 1 ] && [ -z "$why2" ]; then
  pass "stub Xcode: DEVELOPER_DIR and SDKROOT as the server resolves them; a broken xcode-select fails"
else
  fail "stub Xcode: resolved, and a broken xcode-select fails (exit $rc, $rc2)" "$why" "$why2"
fi

finish
