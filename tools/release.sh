#!/usr/bin/env bash
# tools/release.sh: makes a release: the source archive .bcr/source.template.json names and the
# prebuilt helpers the module installs (clonestage and clonestage-spawn for four platforms).
#
# Usage: tools/release.sh TAG [--ref REF] [--out DIR] [--repo NAME] [--owner OWNER]
#                             [--platforms LIST] [--target-dir DIR] [--source-only]
#   TAG         the release tag, v<version> or <version>; <version> must equal MODULE.bazel's
#               module version (the registry checks that the archive's MODULE.bazel matches).
#   REF         what to archive and build (default: TAG, which must then exist); any commit-ish.
#   DIR         where to write the archives (default: dist/ under the checkout).
#   NAME        the GitHub repository name, {REPO} in the template (default: clonestage).
#   OWNER       its GitHub owner, {OWNER} (default: from .bcr/metadata.template.json's
#               repository once filled in; until then the URLs keep {OWNER}, with a warning).
#   LIST        comma-separated Rust target triples (default: all four, PLATFORMS below).
#   --target-dir  cargo's target directory for the cross builds, reused between runs
#               (default: rust/target/release-archives under the checkout).
#   --source-only   the source archive alone, as before prebuilt helpers existed: no table.
#
# Contract:
# - For each platform, DIR/{REPO}-{TAG}-<triple>.tar.gz holds {REPO}-{TAG}-<triple>/clonestage
#   and .../clonestage-spawn (0755), cross-built from REF with cargo-zigbuild and zig (PyPI's
#   cargo-zigbuild and ziglang, .ci/install.sh; the wrapper by REF's
#   tools/cross/build-spawn.sh): Linux against glibc 2.17 (Rust's floor for
#   these targets), macOS as Mach-O for its arch with minos MACOS_MIN in LC_BUILD_VERSION,
#   linking macOS system libraries only. macOS builds use the cargo feature `tls-webpki`
#   (rustls with Mozilla's roots compiled in) instead of `tls`: the system's roots need
#   Security.framework, for which zig has no stubs (docs/binaries.md).
# - DIR/SHA256SUMS lists those archives (`sha256sum -c` form); the table the module reads,
#   private/binaries_table.bzl (Rust triple -> URL and sha256, as rules_rust generates
#   crate_universe/private/urls.bzl), is written into the source archive only, never the tree.
# - DIR/<url's file name> (today {REPO}-{TAG}.tar.gz) is `git archive` of REF under the top
#   directory strip_prefix names ({REPO}-{VERSION}/), so the registry's strip_prefix finds
#   MODULE.bazel, with that table in place of the empty one. Reads the template's url and
#   strip_prefix, so the two never drift. Prints the archive path, then `integrity:
#   sha256-<base64>` (the Subresource Integrity value source.json needs) and the filled
#   source.json.
# - Reproducible: the same REF gives the same bytes on every run on one machine. Sources are
#   exported to a fixed directory and remapped (--remap-path-prefix, -ffile-prefix-map), the
#   toolchains are pinned (RUST, zig from PyPI), no debug info, archives sorted with owner 0 and
#   every mtime at the commit's time (SOURCE_DATE_EPOCH), gzip -n.
# - Offline but for the registries cargo reads; never pushes or uploads. Exits non-zero with
#   the reason on a bad tag, a version mismatch, an unknown REF or platform, a missing tool or
#   Rust target, a failed build, or an archive that lacks MODULE.bazel under the prefix. Warns
#   (stderr) while .bcr/metadata.template.json still holds placeholders.
set -euo pipefail

die() { echo "release.sh: $*" >&2; exit 1; }
say() { echo "release.sh: $*" >&2; }

PLATFORMS="x86_64-unknown-linux-gnu,aarch64-unknown-linux-gnu,x86_64-apple-darwin,aarch64-apple-darwin"
# The Rust of the dev rules_rust (MODULE.bazel: 0.70.0's DEFAULT_RUST_VERSION), pinned so a
# release rebuilds to the same bytes.
RUST=1.95.0
GLIBC_MIN=2.17
MACOS_MIN=12.0

tag="" ref="" out="" repo="clonestage" owner="" platforms=$PLATFORMS target_dir="" source_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --ref) ref=${2:?--ref needs a value}; shift 2 ;;
        --out) out=${2:?--out needs a value}; shift 2 ;;
        --repo) repo=${2:?--repo needs a value}; shift 2 ;;
        --owner) owner=${2:?--owner needs a value}; shift 2 ;;
        --platforms) platforms=${2:?--platforms needs a value}; shift 2 ;;
        --target-dir) target_dir=${2:?--target-dir needs a value}; shift 2 ;;
        --source-only) source_only=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$tag" ] || die "one TAG only (got '$tag' and '$1')"; tag=$1; shift ;;
    esac
done
[ -n "$tag" ] || die "usage: tools/release.sh TAG [--ref REF] [--out DIR] [--platforms LIST] [--source-only] (see --help)"

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel) || die "not in a git checkout"
version=${tag#v}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+([-.+][0-9A-Za-z.+-]+)?$ ]] \
    || die "tag '$tag' is not v<major>.<minor>.<patch> or <major>.<minor>.<patch>"
ref=${ref:-$tag}
commit=$(git -C "$root" rev-parse --verify --quiet "$ref^{commit}") \
    || die "no commit '$ref' in $root (create the tag first, or pass --ref)"
IFS=, read -r -a triples <<<"$platforms"
for t in "${triples[@]}"; do
    [[ ",$PLATFORMS," == *",$t,"* ]] || die "unknown platform '$t' (known: $PLATFORMS)"
done

# The module version of the archived tree, not of the work tree.
module_version=$(git -C "$root" show "$commit:MODULE.bazel" \
    | python3 -c 'import re,sys; m=re.search(r"module\((?:[^)]*?)version\s*=\s*\"([^\"]+)\"", sys.stdin.read(), re.S); print(m.group(1) if m else "")')
[ -n "$module_version" ] || die "no module(version = ...) in MODULE.bazel at $ref"
[ "$module_version" = "$version" ] \
    || die "tag '$tag' says $version but MODULE.bazel at $ref says $module_version"

# The owner from the metadata template once it is filled in ("github:OWNER/REPO").
if [ -z "$owner" ]; then
    owner=$(git -C "$root" show "$commit:.bcr/metadata.template.json" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("repository", []):
    if r.startswith("github:") and "FILL" not in r and "/" in r:
        print(r[len("github:"):].split("/")[0]); break')
fi

# url and strip_prefix from the template at that commit, with the placeholders filled.
read -r url prefix < <(git -C "$root" show "$commit:.bcr/source.template.json" | python3 -c '
import json, sys
t = json.load(sys.stdin)
subst = {"{REPO}": sys.argv[1], "{TAG}": sys.argv[2], "{VERSION}": sys.argv[3]}
if sys.argv[4]:
    subst["{OWNER}"] = sys.argv[4]
def fill(s):
    for k, v in subst.items():
        s = s.replace(k, v)
    return s
print(fill(t["url"]), fill(t["strip_prefix"]))
' "$repo" "$tag" "$version" "$owner")
name=${url##*/}
case "$name" in *.tar.gz) ;; *) die "source.template.json url must end in .tar.gz (got $name)" ;; esac

out=${out:-$root/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git -C "$root" show -s --format=%ct "$commit")

# --- the prebuilt helpers ----------------------------------------------------------------------

# tar.gz of DIR's directory NAME, the same bytes for the same files: sorted, owner 0, the
# commit's time, modes as given, no name or time in the gzip header.
pack() { # pack DIR NAME ARCHIVE
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
        --format=ustar -C "$1" -cf - "$2" | gzip -9 -n >"$3.tmp.$$"
    mv -f "$3.tmp.$$" "$3"
}

# tools/cross/build-spawn.sh's name for a Rust triple.
spawn_target() { # spawn_target TRIPLE
    case "$1" in
        *-linux-gnu) echo "${1%%-*}-linux" ;;
        *-apple-darwin) echo "${1%%-*}-macos" ;;
    esac
}

if [ "$source_only" = 0 ]; then
    tools=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
    command -v cargo-zigbuild >/dev/null 2>&1 || PATH="$tools/zig-venv/bin:$PATH"
    if ! command -v cargo-zigbuild >/dev/null 2>&1 || ! command -v zig >/dev/null 2>&1; then
        die "cargo-zigbuild and zig not found (on PATH or in $tools/zig-venv/bin): run .ci/install.sh"
    fi
    installed=$(rustup +"$RUST" target list --installed 2>/dev/null) \
        || die "Rust $RUST not installed: rustup toolchain install $RUST"
    for t in "${triples[@]}"; do
        grep -qx "$t" <<<"$installed" || die "Rust $RUST lacks the target $t: rustup target add --toolchain $RUST $t"
    done

    target_dir=${target_dir:-$root/rust/target/release-archives}
    mkdir -p "$target_dir"
    target_dir=$(cd "$target_dir" && pwd -P)
    # A fixed source path per target dir: the same RUSTFLAGS every run, so cargo reuses the
    # compiled dependencies, and the same remapped paths in the binaries.
    src=$target_dir/src
    rm -rf "$src" "$target_dir/stage"
    mkdir -p "$src" "$target_dir/stage"
    # Cargo judges path crates fresh by mtime, so the export must not look older than the last
    # build: clonestage's own crates (and the wrapper) get mtimes of now and compile every run;
    # the rest of the tree (the vendored h2, a path crate too) keeps the commit's mtimes while
    # the commit is the one last built here, and gets now when it is another, so a different
    # tree never ships the last build's binaries. crates.io dependencies are reused.
    git -C "$root" archive "$commit" | tar -x -C "$src"
    if [ "$(cat "$target_dir/commit" 2>/dev/null)" != "$commit" ]; then
        find "$src" -exec touch {} +
        echo "$commit" >"$target_dir/commit"
    fi
    find "$src/rust/engine" "$src/rust/server" "$src/rust/cli" "$src/rust/bench" "$src/cc" -exec touch {} +
    cargo_home=${CARGO_HOME:-$HOME/.cargo}
    # Last match wins: the source (inside the target dir) after the target dir.
    export RUSTFLAGS="--remap-path-prefix=$cargo_home=/cargo --remap-path-prefix=$target_dir=/target --remap-path-prefix=$src=/$prefix"
    export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_INCREMENTAL=0
    export MACOSX_DEPLOYMENT_TARGET=$MACOS_MIN
    # zig's objects for the links compile afresh every run (zig's global cache keeps only its
    # libc and libc++ builds); build-spawn.sh uses a fresh cache of its own.
    export ZIG_LOCAL_CACHE_DIR=$target_dir/zig-cache
    rm -rf "$ZIG_LOCAL_CACHE_DIR"

    sums=()
    for t in "${triples[@]}"; do
        case "$t" in
            *-linux-gnu) zig_triple="$t.$GLIBC_MIN"; features=() ;;
            *-apple-darwin) zig_triple=$t; features=(--no-default-features --features tls-webpki) ;;
        esac
        dir="$repo-$tag-$t"
        t0=$SECONDS
        say "building $dir: cargo zigbuild (Rust $RUST) --target $zig_triple ${features[*]}, tools/cross/build-spawn.sh $(spawn_target "$t")"
        # From inside the exported tree: cargo reads the h2 [patch] of its .cargo/config.toml.
        # RUSTUP_TOOLCHAIN, not +RUST: cargo-zigbuild runs `cargo` again, which must be the
        # same toolchain's.
        (cd "$src/rust" && RUSTUP_TOOLCHAIN=$RUST cargo zigbuild --locked --release --target "$zig_triple" \
            "${features[@]}" --bin clonestage --target-dir "$target_dir/cargo") >&2 \
            || die "cargo zigbuild for $t failed (above)"
        mkdir -p "$target_dir/stage/$dir"
        install -m 0755 "$target_dir/cargo/$t/release/clonestage" "$target_dir/stage/$dir/clonestage"
        # The exported tree's own tools/cross/build-spawn.sh: the wrapper of REF, built the way
        # that script promises (zig c++, the glibc floor or minimum macOS in the target,
        # reproducible from any path).
        MACOS_MIN=$MACOS_MIN GLIBC=$GLIBC_MIN bash "$src/tools/cross/build-spawn.sh" \
            "$(spawn_target "$t")" "$target_dir/stage/$dir/clonestage-spawn" >&2 \
            || die "tools/cross/build-spawn.sh for clonestage-spawn ($t) failed (above)"
        chmod 0755 "$target_dir/stage/$dir/clonestage-spawn"
        pack "$target_dir/stage" "$dir" "$out/$dir.tar.gz"
        sums+=("$dir.tar.gz")
        say "built $dir.tar.gz in $((SECONDS - t0)) s"
    done
    (cd "$out" && sha256sum "${sums[@]}") >"$out/SHA256SUMS"

    # The table the module reads, in the source archive in place of the empty one.
    table=$target_dir/binaries_table.bzl
    python3 - "$table" "$version" "${url%/*}" "$out/SHA256SUMS" "$repo-$tag-" <<'EOF'
import sys
path, version, base, sums, stem = sys.argv[1:]
rows = []
for line in open(sums):
    sha, name = line.split()
    rows.append((name[len(stem) : -len(".tar.gz")], name, sha))
rows.sort()
with open(path, "w") as f:
    f.write('"""The prebuilt helpers of clonestage %s: generated by tools/release.sh."""\n\n' % version)
    f.write('CLONESTAGE_BINARIES_VERSION = "%s"\n\n' % version)
    f.write("CLONESTAGE_BINARY_URLS = {\n")
    for triple, name, _ in rows:
        f.write('    "%s": "%s/%s",\n' % (triple, base, name))
    f.write("}\n\nCLONESTAGE_BINARY_SHA256S = {\n")
    for triple, _, sha in rows:
        f.write('    "%s": "%s",\n' % (triple, sha))
    f.write("}\n")
EOF
fi

# --- the source archive ------------------------------------------------------------------------

archive="$out/$name"
tmp="$archive.tmp.$$"
trap 'rm -f "$tmp" "$tmp.tar"' EXIT
if [ "$source_only" = 1 ]; then
    # gzip -n through git's own tar.gz filter: no name or time in the gzip header, so the same
    # commit gives the same bytes (and the same integrity) on every run.
    git -C "$root" archive --format=tar.gz --prefix="$prefix/" -o "$tmp" "$commit"
else
    # The commit's tree with the generated table in place of the committed one, appended with
    # the metadata git archive gives every file (root, the commit's time, 0664: tar.umask 0002).
    git -C "$root" archive --format=tar --prefix="$prefix/" -o "$tmp.tar" "$commit"
    tar --delete -f "$tmp.tar" "$prefix/private/binaries_table.bzl"
    tar --owner=root:0 --group=root:0 --mtime="@$SOURCE_DATE_EPOCH" --mode=0664 \
        --format=ustar --transform="s|^.*|$prefix/private/binaries_table.bzl|" \
        -rf "$tmp.tar" -C "$(dirname "$table")" "$(basename "$table")"
    gzip -n <"$tmp.tar" >"$tmp"
    rm -f "$tmp.tar"
fi
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

if git -C "$root" show "$commit:.bcr/metadata.template.json" | grep -q 'FILL.IN'; then
    echo "release.sh: warning: .bcr/metadata.template.json still has FILL IN placeholders" \
        "(maintainers, homepage, repository): the owner must fill them before publishing" >&2
fi
if [ -z "$owner" ] && [ "$source_only" = 0 ]; then
    echo "release.sh: warning: no GitHub owner (--owner, or the metadata template's repository):" \
        "the binaries table's URLs name {OWNER}" >&2
fi
