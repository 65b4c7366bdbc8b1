#!/usr/bin/env bash
# tests/module/h2_bazel_patch_test.sh: Bazel's own patch implementation, as http_archive runs it
# for rules_rust's crate_universe (MODULE.bazel's crate.annotation for h2), turns crates.io's h2
# into exactly rust/third_party/h2.
#
# Contract: `bash tests/module/h2_bazel_patch_test.sh` (the `bazel` on PATH, 4.2.3 here; needs
# crates.io's h2 .crate, which rust/third_party/h2_patch.py check fetches into cargo's cache).
# A scratch workspace in a temp dir takes this checkout as @clonestage (local_repository, as a
# consumer would), declares @h2 the way crate_universe's extension does (http_archive of the
# .crate with sha256 and strip_prefix, patches = the module's patch label, patch_args = -p1,
# no patch_tool), fetches it, and diffs the result against the vendored tree (minus what
# PATCH.md lists). Reports through tests/lib/report.sh: exits 0 when they are equal, 1
# otherwise. Own --output_user_root, shut down at the end. About 30 s.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
version=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import h2_patch; print(h2_patch.patched_version(sys.argv[2]))' "$root/rust/third_party" "$root")
crate=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import h2_patch; print(h2_patch.find_crate(sys.argv[2]))' "$root/rust/third_party" "$version")
sha=$(sha256sum "$crate" | cut -d' ' -f1)
work=$(mktemp -d /var/tmp/h2-bazel-patch.XXXXXX)
ws=$work/ws
bz() { (cd "$ws" && CLONESTAGE_DISABLE=1 bazel --output_user_root="$work/root" "$@"); }
cleanup() { bz shutdown >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$ws"
cat >"$ws/WORKSPACE" <<WS
load("@bazel_tools//tools/build_defs/repo:http.bzl", "http_archive")

local_repository(name = "clonestage", path = "$root")

http_archive(
    name = "h2",
    build_file_content = 'exports_files(glob(["**"]))',
    patch_args = ["-p1"],
    patches = ["@clonestage//rust:third_party/h2-authority.patch"],
    sha256 = "$sha",
    strip_prefix = "h2-$version",
    type = "tar.gz",
    urls = ["file://$crate"],
)
WS
: >"$ws/BUILD.bazel"
name="h2 bazel patch: http_archive of crates.io's h2 $version + @clonestage//rust:third_party/h2-authority.patch, -p1 == rust/third_party/h2"
bz query @h2//:all >"$work/query.log" 2>&1 || die "$name" "fetching @h2 with the patch failed:" "$(tail_of "$work/query.log" 40)"
ext="$(bz info output_base 2>/dev/null)/external/h2"
if ! diff -r -x BUILD.bazel -x WORKSPACE -x WORKSPACE.bazel -x .github -x Cargo.lock -x PATCH.md \
    "$ext" "$root/rust/third_party/h2" >"$work/diff.log"; then
  die "$name" "Bazel's patched h2 differs from rust/third_party/h2:" "$(head -40 "$work/diff.log")"
fi
pass "$name"
finish
