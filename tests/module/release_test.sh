#!/usr/bin/env bash
# tests/module/release_test.sh: tools/release.sh --source-only makes exactly the archive that
# .bcr/source.template.json names, and refuses what it must. (The prebuilt helpers, which take
# cross builds, are tests/module/release_binaries_test.sh.)
#
# Contract: offline, a few seconds; works on a throwaway clone of this checkout's HEAD
# (tags it there, never here); exits 0 when every case passes, 1 with the failed case.
# Cases: the archive's name and top directory follow the template's url and strip_prefix;
# it holds what the module needs (MODULE.bazel, rust/Cargo.lock, the h2 patch, cc/, the
# install rule) and passes tests/module/check.py once extracted; the printed integrity is
# the archive's sha256 in SRI form; two runs give the same bytes; a tag whose version differs
# from MODULE.bazel, a malformed tag and a missing ref are refused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/lib/report.sh
source "$here/../lib/report.sh"

# A clone of the committed HEAD plus this work tree's release script and template, so the
# test checks the files being changed (uncommitted edits included) on a tree it may tag.
git clone -q --shared --no-checkout "$src" "$work/repo"
git -C "$work/repo" checkout -q --detach "$(git -C "$src" rev-parse HEAD)"
cp "$src/tools/release.sh" "$work/repo/tools/release.sh"
mkdir -p "$work/repo/.bcr" "$work/repo/private"
cp "$src/.bcr/source.template.json" "$src/.bcr/metadata.template.json" "$work/repo/.bcr/"
cp "$src/MODULE.bazel" "$work/repo/MODULE.bazel"
cp "$src/private/binaries_table.bzl" "$work/repo/private/"
git -C "$work/repo" add -A
git -C "$work/repo" -c user.name=t -c user.email=t@t commit -q --allow-empty -m "release test"
version=$(python3 -c 'import re,sys; print(re.search(r"version\s*=\s*\"([^\"]+)\"", open(sys.argv[1]).read()).group(1))' "$work/repo/MODULE.bazel")
git -C "$work/repo" tag "v$version"
repo=$work/repo

# 1. The archive the template names, with the template's prefix.
out1=$("$repo/tools/release.sh" "v$version" --source-only --out "$work/d1" 2>"$work/err1") || { cat "$work/err1"; die "release_test: release.sh v$version"; }
expect_url=$(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))
for k, v in (("{REPO}", "clonestage"), ("{TAG}", sys.argv[2]), ("{VERSION}", sys.argv[3])):
    t = {key: val.replace(k, v) if isinstance(val, str) else val for key, val in t.items()}
print(t["url"], t["strip_prefix"])' "$repo/.bcr/source.template.json" "v$version" "$version")
read -r url prefix <<<"$expect_url"
archive=$work/d1/${url##*/}
[ "$(sed -n 1p <<<"$out1")" = "$archive" ] || die "release_test: printed path '$(sed -n 1p <<<"$out1")', expected $archive"
[ -f "$archive" ] || die "release_test: no $archive"
[ "$prefix" = "clonestage-$version" ] || die "release_test: strip_prefix '$prefix' (template changed?)"
listing=$(tar -tzf "$archive")   # whole, so no grep -q closes a pipe on tar (pipefail)
tops=$(cut -d/ -f1 <<<"$listing" | sort -u)
[ "$tops" = "$prefix" ] || die "release_test: archive's top directories: $tops (want only $prefix)"
for f in MODULE.bazel BUILD.bazel defs.bzl private/install.bzl rust/Cargo.lock rust/BUILD.bazel \
    rust/Cargo.bazel.lock rust/third_party/h2-authority.patch .cargo/config.toml \
    rust/third_party/h2/Cargo.toml cc/clonestage-spawn.cc strategy/clonestage.bazelrc tools/bazel; do
    grep -qx "$prefix/$f" <<<"$listing" || die "release_test: archive lacks $prefix/$f"
done
if grep -q "^$prefix/rust/target/" <<<"$listing"; then die "release_test: archive holds rust/target"; fi

# 2. The printed integrity is the archive's sha256, SRI form.
want="sha256-$(python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.sha256(open(sys.argv[1],"rb").read()).digest()).decode())' "$archive")"
grep -qx "integrity: $want" <<<"$out1" || die "release_test: integrity line: $(grep integrity <<<"$out1" | head -1), want $want"
python3 -c 'import json,sys; d=json.loads(sys.stdin.read().split("\n",2)[2]); assert d["integrity"]==sys.argv[1] and d["strip_prefix"]==sys.argv[2] and d["url"]==sys.argv[3], d' \
    "$want" "$prefix" "$url" <<<"$out1" || die "release_test: printed source.json does not match"

# 3. Reproducible: a second run gives the same bytes.
"$repo/tools/release.sh" "v$version" --source-only --out "$work/d2" >/dev/null 2>&1 || die "release_test: second run"
cmp -s "$archive" "$work/d2/${url##*/}" || die "release_test: two runs of the same tag differ"

# 4. The extracted archive passes the static module check (it loads for a consumer).
mkdir "$work/x" && tar -xzf "$archive" -C "$work/x"
python3 "$here/check.py" "$work/x/$prefix" >"$work/check.out" || { cat "$work/check.out"; die "release_test: check.py on the archive"; }

# 5. Refusals, each with its reason.
refuse() {
    local why=$1; shift
    if "$repo/tools/release.sh" "$@" --source-only --out "$work/bad" >/dev/null 2>"$work/err"; then die "release_test: accepted: $*"; fi
    grep -q "$why" "$work/err" || { cat "$work/err"; die "release_test: refusal of '$*' does not say '$why'"; }
}
git -C "$repo" tag v9.9.9
refuse "MODULE.bazel at v9.9.9 says $version" v9.9.9
refuse "is not v<major>" release-1
refuse "no commit 'v7.7.7'" v7.7.7
refuse "unknown platform 'x86_64-pc-windows-msvc'" "v$version" --platforms x86_64-pc-windows-msvc
[ ! -e "$work/bad" ] || [ -z "$(ls -A "$work/bad")" ] || die "release_test: a refused run left files in $work/bad"

pass "release_test: ok ($archive, $(wc -c <"$archive") bytes)"
finish
