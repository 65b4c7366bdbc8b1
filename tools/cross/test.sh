#!/usr/bin/env bash
# The macOS executables of the spawn wrapper, linked and checked (a CI step of
# tests/run.sh; not for a quick tier: a cold zig builds libc++ once per target,
# ~4 minutes each on 2 cores).
#
# For aarch64-macos and x86_64-macos: links clonestage-spawn with
# tools/cross/build-spawn.sh, checks it with tools/cross/check-binary.py (thin
# Mach-O of that CPU, LC_BUILD_VERSION minos 12.0, only system dylibs), then
# links it again from a copy of the sources at another path and requires the
# same bytes. First the checker's own tests. Exit 0 when all hold.
# Environment: ZIG (default $CLONESTAGE_TOOLS/zig-venv/bin/zig, from
# .ci/install.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
export ZIG=${ZIG:-$TOOLS/zig-venv/bin/zig}
MACOS_MIN=12.0
export MACOS_MIN

python3 "$here/check_binary_test.py"

work=$(mktemp -d "${TMPDIR:-/tmp}/clonestage-cross-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The same sources at another path, for the reproducibility check.
copy="$work/elsewhere/checkout"
mkdir -p "$copy/tools" "$work/out"
cp -R "$root/cc" "$copy/cc"
cp -R "$here" "$copy/tools/cross"

for target in aarch64-macos x86_64-macos; do
    "$here/build-spawn.sh" "$target" "$work/out/clonestage-spawn-$target"
    python3 "$here/check-binary.py" --target "$target" --macos-min "$MACOS_MIN" \
        "$work/out/clonestage-spawn-$target"
    "$copy/tools/cross/build-spawn.sh" "$target" "$work/out/again-$target"
    if ! cmp -s "$work/out/clonestage-spawn-$target" "$work/out/again-$target"; then
        echo "cross/test.sh: $target: two links of the same sources differ (not reproducible)" >&2
        exit 1
    fi
    echo "$target: the same bytes from $root and from $copy"
done
