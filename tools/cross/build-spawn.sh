#!/usr/bin/env bash
# Cross-links the spawn wrapper (cc/) for one target with `zig c++`.
#
# Contract:
#   tools/cross/build-spawn.sh TARGET OUTPUT
#     TARGET  aarch64-macos | x86_64-macos    (minimum macOS $MACOS_MIN)
#             aarch64-linux | x86_64-linux    (glibc $GLIBC, dynamic)
#     OUTPUT  the executable to write (its directory must exist)
#   Environment:
#     ZIG        the zig to run (default: `zig` on PATH). Tested with ziglang 0.15.2
#                from PyPI, which .ci/install.sh puts in $TOOLS/zig-venv.
#     MACOS_MIN  minimum macOS, written as LC_BUILD_VERSION minos (default 12.0;
#                zig's own default is the newest macOS it knows, 15.0 for 0.15.2)
#     GLIBC      oldest glibc the Linux executables run on (default 2.17)
#   Exit status: 0 when OUTPUT was written; 1 when the compile or link failed
#   (zig's messages on stderr); 2 on bad usage or no zig. OUTPUT is written
#   whole or not at all.
#
# The sources are cc/*.cc with the per-OS half for the target, the flags those of
# cc/BUILD.bazel plus -O2. C++ runtime: zig's libc++, linked statically on every
# target; on macOS nothing but /usr/lib/libSystem.B.dylib is loaded.
#
# Reproducible: the same sources, zig and target give the same bytes from any
# checkout path. Each run compiles in a fresh zig local cache (so nothing comes
# from an earlier build of other sources), source paths are mapped to "."
# (-ffile-prefix-map), and zig links to a fixed name in a temporary directory,
# which macOS's ad-hoc code signature records as its identifier.
# tests/module/release_binaries_test.sh (the release suite) checks that a copy at
# another path links to the same bytes, and that a second release run does.
set -euo pipefail

usage() {
    sed -n '4,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
[ $# -eq 2 ] || usage
target=$1
output=$2
MACOS_MIN=${MACOS_MIN:-12.0}
GLIBC=${GLIBC:-2.17}
ZIG=${ZIG:-zig}

case "$target" in
    aarch64-macos | x86_64-macos) triple="$target.$MACOS_MIN"; os=darwin ;;
    aarch64-linux | x86_64-linux) triple="$target-gnu.$GLIBC"; os=linux ;;
    *) echo "build-spawn.sh: unknown target '$target'" >&2; usage ;;
esac
if ! command -v "$ZIG" >/dev/null 2>&1; then
    echo "build-spawn.sh: zig not found (ZIG=$ZIG); .ci/install.sh installs it" >&2
    exit 2
fi
out_dir=$(dirname -- "$output")
if [ ! -d "$out_dir" ]; then
    echo "build-spawn.sh: $out_dir: no such directory" >&2
    exit 2
fi

root=$(cd "$(dirname "$0")/../.." && pwd -P)
output=$(cd "$out_dir" && pwd -P)/$(basename -- "$output")
cd "$root"
sources=()
for f in cc/*.cc; do
    case "$f" in
        *-darwin.cc | *-linux.cc) [[ "$f" == *-"$os".cc ]] || continue ;;
    esac
    sources+=("$f")
done

work=$(mktemp -d "${TMPDIR:-/tmp}/clonestage-cross.XXXXXX")
trap 'rm -rf "$work"' EXIT
export ZIG_LOCAL_CACHE_DIR="$work/cache"
# Quiet on success: zig prints nothing unless something is wrong.
if ! "$ZIG" c++ -target "$triple" -std=c++17 -O2 -Wall -Wextra -g0 -s \
    -ffile-prefix-map="$root"=. -I . \
    -o "$work/clonestage-spawn" "${sources[@]}"; then
    echo "build-spawn.sh: zig c++ -target $triple failed" >&2
    exit 1
fi
cp "$work/clonestage-spawn" "$output.tmp.$$"
mv -f "$output.tmp.$$" "$output"
