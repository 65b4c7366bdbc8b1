#!/usr/bin/env bash
# tools/release.sh: makes the release archive that .bcr/source.template.json names.
#
# Usage: tools/release.sh TAG [--ref REF] [--out DIR] [--repo NAME]
#   TAG   the release tag, v<version> or <version>; <version> must equal MODULE.bazel's
#         module version (the registry checks that the archive's MODULE.bazel matches).
#   REF   what to archive (default: TAG, which must then exist); any commit-ish.
#   DIR   where to write the archive (default: dist/ under the checkout).
#   NAME  the GitHub repository name, {REPO} in the template (default: clonestage).
#
# Contract: writes DIR/<url's file name> (today {REPO}-{TAG}.tar.gz) with `git archive` of
# REF, every path under the top directory strip_prefix names ({REPO}-{VERSION}/), so the
# registry's strip_prefix finds MODULE.bazel. Reads the template's url and strip_prefix, so
# the two never drift. Prints the archive path, then `integrity: sha256-<base64>` (the
# Subresource Integrity value source.json needs) and the filled source.json. Offline; reads
# only the git checkout; never pushes or uploads. Exits non-zero with the reason on a bad
# tag, a version mismatch, an unknown REF or an archive that lacks MODULE.bazel under the
# prefix. Warns (stderr) while .bcr/metadata.template.json still holds placeholders.
set -euo pipefail

die() { echo "release.sh: $*" >&2; exit 1; }

tag="" ref="" out="" repo="clonestage"
while [ $# -gt 0 ]; do
    case "$1" in
        --ref) ref=${2:?--ref needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --repo) repo=${2:?--repo needs a value}; shift 2 ;;
        -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$tag" ] || die "one TAG only (got '$tag' and '$1')"; tag=$1; shift ;;
    esac
done
[ -n "$tag" ] || die "usage: tools/release.sh TAG [--ref REF] [--out DIR] [--repo NAME]"

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || die "not in a git checkout"
version=${tag#v}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-.+][0-9A-Za-z.+-]+)?$ ]] \
    || die "tag '$tag' is not v<major>.<minor>.<patch> or <major>.<minor>.<patch>"
ref=${ref:-$tag}
commit=$(git -C "$root" rev-parse --verify --quiet "$ref^{commit}") \
    || die "no commit '$ref' in $root (create the tag first, or pass --ref)"

# The module version of the archived tree, not of the work tree.
module_version=$(git -C "$root" show "$commit:MODULE.bazel" \
    | python3 -c 'import re,sys; m=re.search(r"module\((?:[^)]*?)version\s*=\s*\"([^\"]+)\"", sys.stdin.read(), re.S); print(m.group(1) if m else "")')
[ -n "$module_version" ] || die "no module(version = ...) in MODULE.bazel at $ref"
[ "$module_version" = "$version" ] \
    || die "tag '$tag' says $version but MODULE.bazel at $ref says $module_version"

# url and strip_prefix from the template at that commit, with the placeholders filled.
read -r url prefix < <(git -C "$root" show "$commit:.bcr/source.template.json" | python3 -c '
import json, sys
t = json.load(sys.stdin)
subst = {"{REPO}": sys.argv[1], "{TAG}": sys.argv[2], "{VERSION}": sys.argv[3]}
def fill(s):
    for k, v in subst.items():
        s = s.replace(k, v)
    return s
print(fill(t["url"]), fill(t["strip_prefix"]))
' "$repo" "$tag" "$version")
name=${url##*/}
case "$name" in *.tar.gz) ;; *) die "source.template.json url must end in .tar.gz (got $name)" ;; esac

out=${out:-$root/dist}
mkdir -p "$out"
archive="$out/$name"
tmp="$archive.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# gzip -n through git's own tar.gz filter: no name or time in the gzip header, so the same
# commit gives the same bytes (and the same integrity) on every run.
git -C "$root" archive --format=tar.gz --prefix="$prefix/" -o "$tmp" "$commit"
# (The listing is read whole: grep -q closing the pipe early would fail tar under pipefail.)
listing=$(tar -tzf "$tmp")
grep -qx "$prefix/MODULE.bazel" <<<"$listing" || die "archive lacks $prefix/MODULE.bazel"
mv -f "$tmp" "$archive"
trap - EXIT

integrity="sha256-$(openssl dgst -sha256 -binary "$archive" | base64 | tr -d '\n')"
echo "$archive"
echo "integrity: $integrity"
python3 -c '
import json, sys
print(json.dumps({"integrity": sys.argv[1], "strip_prefix": sys.argv[2], "url": sys.argv[3]}, indent=4))
' "$integrity" "$prefix" "$url"

if git -C "$root" show "$commit:.bcr/metadata.template.json" | grep -q 'FILL IN'; then
    echo "release.sh: warning: .bcr/metadata.template.json still has FILL IN placeholders" \
        "(maintainers, homepage, repository): the owner must fill them before publishing" >&2
fi
