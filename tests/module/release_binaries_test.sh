#!/usr/bin/env bash
# tests/module/release_binaries_test.sh: tools/release.sh's prebuilt helpers, for the four
# platforms: what each archive holds, that the macOS binaries are linked Mach-O for their arch
# with the stated minimum macOS and only system libraries, that the Linux ones need no glibc
# above 2.17, that the host's run, that the source archive carries the matching table, and
# that a second run gives the same bytes.
#
# Usage: tests/module/release_binaries_test.sh [OUT]
#   OUT  keep the first run's release there (tests/run.sh hands it to tests/consumer as
#        CLONESTAGE_RELEASE_OUT, so each archive is cross-built once per CI run); default: a
#        temporary directory, removed.
# Env: RELEASE_PLATFORMS (default: release.sh's four), RELEASE_TARGET_DIR (cargo's target
#      directory, default rust/target/release-archives: cold on a fresh clone, ~4-8 min per
#      platform on 2 cores; warm after that), RELEASE_REPRO_PLATFORMS (what the second run
#      rebuilds; default: x86_64 Linux and arm64 macOS, those of RELEASE_PLATFORMS; `all`:
#      every platform of the first run).
#
# Contract: builds the checkout's committed HEAD as it was at the start (tools/release.sh
# --ref, tag v<MODULE version>); reports through tests/lib/report.sh, stops at the first
# failed case (exit 1), exits 0 when every case passes; prints each run's time.
# What the second run proves: release.sh exports the commit afresh and compiles clonestage's
# own crates and the spawn wrapper again, links, packs and writes the table again, and all of
# it comes out byte for byte the same. The crates.io dependencies are compiled once, by the
# first run, and reused (cargo's fingerprints: same sources, flags and toolchain); that rustc
# compiles them deterministically is not shown here (docs/binaries.md).
# The second run rebuilds one platform per object format and linker by default, not all four
# (each one more release compile of the workspace crates for its target): x86_64 Linux,
# the ELF that also runs here, and arm64 macOS, the Mach-O with an ad hoc code signature (the
# output's name its identifier) and where the wrapper's debug map once differed (docs/binaries.md).
# The other two differ from these in the CPU only: the same paths, flags, linker and packing.
# With a subset the SHA256SUMS lines of those archives are compared, and the source archive
# byte for byte but for its table (which lists only what was rebuilt; case 4 checks the
# first run's); with `all`, every file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
keep=${1:-}
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/lib/report.sh
source "$here/../lib/report.sh"

version=$(python3 -c 'import re,sys; print(re.search(r"module\((?:[^)]*?)version\s*=\s*\"([^\"]+)\"", open(sys.argv[1]).read(), re.S).group(1))' "$root/MODULE.bazel")
tag=v$version
platforms=${RELEASE_PLATFORMS:-x86_64-unknown-linux-gnu,aarch64-unknown-linux-gnu,x86_64-apple-darwin,aarch64-apple-darwin}
target_dir=${RELEASE_TARGET_DIR:-$root/rust/target/release-archives}
macos_min=$(sed -n 's/^MACOS_MIN=//p' "$root/tools/release.sh")
glibc_min=$(sed -n 's/^GLIBC_MIN=//p' "$root/tools/release.sh")
out1=${keep:-$work/1}
rm -rf "$out1"
# HEAD once: a commit made in the checkout while this runs (an amend, a merge) must not make
# the second run build another commit, whose time (SOURCE_DATE_EPOCH) stamps every mtime.
head=$(git -C "$root" rev-parse --verify "HEAD^{commit}")
release() { # release OUT PLATFORMS
    "$root/tools/release.sh" "$tag" --ref "$head" --platforms "$2" --target-dir "$target_dir" --out "$1"
}

t0=$SECONDS
release "$out1" "$platforms" >"$work/run1.out" 2>"$work/run1.err" || { tail_of "$work/run1.err" 40; die "release_binaries_test: release.sh (first run)"; }
say "release_binaries_test: first run $((SECONDS - t0)) s ($platforms)"
grep '^release.sh: built ' "$work/run1.err" || true

# 1. Each archive: exactly the two binaries, 0755, under its top directory; SHA256SUMS holds.
IFS=, read -r -a triples <<<"$platforms"
(cd "$out1" && sha256sum --quiet -c SHA256SUMS) || die "release_binaries_test: SHA256SUMS does not match the archives"
[ "$(wc -l <"$out1/SHA256SUMS")" = "${#triples[@]}" ] || die "release_binaries_test: SHA256SUMS lists $(wc -l <"$out1/SHA256SUMS") archives, want ${#triples[@]}"
for t in "${triples[@]}"; do
    dir=clonestage-$tag-$t
    archive=$out1/$dir.tar.gz
    [ -f "$archive" ] || die "release_binaries_test: no $archive"
    listing=$(tar -tvzf "$archive" | awk '{print $1, $2, $6}' | sort)
    want=$(printf '%s\n' "drwxr-xr-x 0/0 $dir/" "-rwxr-xr-x 0/0 $dir/clonestage" "-rwxr-xr-x 0/0 $dir/clonestage-spawn" | sort)
    [ "$listing" = "$want" ] || die "release_binaries_test: $archive holds: $listing"
    mkdir -p "$work/x/$t"
    tar -xzf "$archive" -C "$work/x/$t"
    bins=("$work/x/$t/$dir/clonestage" "$work/x/$t/$dir/clonestage-spawn")
    # 2. Built for the platform: tools/cross/check-binary.py's Mach-O or ELF checks with
    # release.sh's minimum macOS and glibc floor, then file(1)'s word on it.
    case "$t" in
        *-apple-darwin) limit=(--target "${t%%-*}-macos" --macos-min "$macos_min") ;;
        *-linux-gnu) limit=(--target "${t%%-*}-linux" --glibc-max "$glibc_min") ;;
    esac
    python3 "$root/tools/cross/check-binary.py" "${limit[@]}" "${bins[@]}" || die "release_binaries_test: $t binaries (above)"
    for b in "${bins[@]}"; do
        what=$(file -b "$b")
        case "$t" in
            aarch64-apple-darwin) want_file="Mach-O 64-bit arm64 executable" ;;
            x86_64-apple-darwin) want_file="Mach-O 64-bit x86_64 executable" ;;
            aarch64-unknown-linux-gnu) want_file="ELF 64-bit LSB .*ARM aarch64" ;;
            x86_64-unknown-linux-gnu) want_file="ELF 64-bit LSB .*x86-64" ;;
        esac
        grep -Eq "^$want_file" <<<"$what" || die "release_binaries_test: file(1) on $t's ${b##*/}: $what"
        say "release_binaries_test: $t ${b##*/}: ${what%%, *}"
    done
    # 3. The host's binaries run here.
    if [ "$t" = "$(uname -m)-unknown-linux-gnu" ]; then
        got=$("${bins[0]}" --version)
        [ "$got" = "clonestage $version" ] || die "release_binaries_test: $t clonestage --version: '$got', want 'clonestage $version'"
        rc=0
        "${bins[1]}" -- /bin/sh -c 'exit 3' || rc=$?
        [ "$rc" = 3 ] || die "release_binaries_test: $t clonestage-spawn -- sh -c 'exit 3' exited $rc, want 3"
    fi
    pass "release_binaries_test: $t: the archive, its binaries built for the platform"
done

# 4. The source archive carries the table of exactly these archives, and passes the static
# module check (which holds the filled table to MODULE.bazel's version).
src_archive=$(sed -n 1p "$work/run1.out")
[ -f "$src_archive" ] || die "release_binaries_test: release.sh printed no source archive ($src_archive)"
mkdir "$work/src" && tar -xzf "$src_archive" -C "$work/src"
top=$(ls "$work/src")
python3 - "$work/src/$top/private/binaries_table.bzl" "$out1/SHA256SUMS" "$version" "$tag" <<'EOF' || die "release_binaries_test: the source archive's table"
import ast, sys
table, sums, version, tag = sys.argv[1:]
vals = {t.id: ast.literal_eval(n.value) for n in ast.parse(open(table).read()).body
        if isinstance(n, ast.Assign) for t in n.targets}
want = {}
for line in open(sums):
    sha, name = line.split()
    want[name[len("clonestage-" + tag + "-"):-len(".tar.gz")]] = (sha, name)
assert vals["CLONESTAGE_BINARIES_VERSION"] == version, vals["CLONESTAGE_BINARIES_VERSION"]
assert {k: v for k, v in vals["CLONESTAGE_BINARY_SHA256S"].items()} == {k: v[0] for k, v in want.items()}, vals
assert {k: u.rsplit("/", 1)[1] for k, u in vals["CLONESTAGE_BINARY_URLS"].items()} == {k: v[1] for k, v in want.items()}, vals
EOF
python3 "$here/check.py" "$work/src/$top" >"$work/check.out" || { cat "$work/check.out"; die "release_binaries_test: check.py on the source archive"; }
pass "release_binaries_test: the source archive's table and module check"

# 5. The wrapper does not depend on where its sources are (tools/cross/build-spawn.sh's
# promise): HEAD's cc/ and tools/cross/ at another path link to the archive's bytes. One
# platform (a macOS one when built: the ad hoc signature is where a path or name could creep in).
spawn_t=${triples[0]}
for t in "${triples[@]}"; do
    case "$t" in *-apple-darwin) spawn_t=$t ;; esac
done
elsewhere=$work/elsewhere/another/checkout
mkdir -p "$elsewhere" "$work/spawn"
git -C "$root" archive "$head" cc tools/cross | tar -x -C "$elsewhere"
case "$spawn_t" in
    *-apple-darwin) spawn_target=${spawn_t%%-*}-macos ;;
    *) spawn_target=${spawn_t%%-*}-linux ;;
esac
PATH="${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}/zig-venv/bin:$PATH" MACOS_MIN=$macos_min GLIBC=$glibc_min \
    bash "$elsewhere/tools/cross/build-spawn.sh" "$spawn_target" "$work/spawn/clonestage-spawn" || die "release_binaries_test: build-spawn.sh from $elsewhere"
cmp -s "$work/spawn/clonestage-spawn" "$work/x/$spawn_t/clonestage-$tag-$spawn_t/clonestage-spawn" \
    || die "release_binaries_test: $spawn_t clonestage-spawn linked from $elsewhere differs from the archive's"
pass "release_binaries_test: $spawn_t clonestage-spawn: the same bytes from another path"

# 6. Reproducible: a second run of RELEASE_REPRO_PLATFORMS, the same bytes.
repro=${RELEASE_REPRO_PLATFORMS:-x86_64-unknown-linux-gnu,aarch64-apple-darwin}
[ "$repro" = all ] && repro=$platforms
again=()
for t in "${triples[@]}"; do
    [[ ",$repro," == *",$t,"* ]] && again+=("$t")
done
[ ${#again[@]} -gt 0 ] || again=("${triples[0]}")
again_list=$(IFS=,; echo "${again[*]}")
t0=$SECONDS
release "$work/2" "$again_list" >"$work/run2.out" 2>"$work/run2.err" || { tail_of "$work/run2.err" 40; die "release_binaries_test: release.sh (second run)"; }
say "release_binaries_test: second run $((SECONDS - t0)) s ($again_list)"
grep '^release.sh: built ' "$work/run2.err" || true
for t in "${again[@]}"; do
    f=clonestage-$tag-$t.tar.gz
    cmp -s "$out1/$f" "$work/2/$f" || die "release_binaries_test: $f differs between two runs"
    grep -F " $f" "$out1/SHA256SUMS" | cmp -s - <(grep -F " $f" "$work/2/SHA256SUMS") || die "release_binaries_test: $f's SHA256SUMS line differs between two runs"
done
src2=$(sed -n 1p "$work/run2.out")
[ "${src2##*/}" = "${src_archive##*/}" ] || die "release_binaries_test: the second run's source archive is $src2, the first's $src_archive"
if [ ${#again[@]} = ${#triples[@]} ]; then
    for f in "$out1"/*; do
        cmp -s "$f" "$work/2/${f##*/}" || die "release_binaries_test: ${f##*/} differs between two runs"
    done
    [ "$(ls "$out1")" = "$(ls "$work/2")" ] || die "release_binaries_test: the two runs wrote different files"
else
    for n in 1 2; do
        case $n in 1) a=$src_archive ;; 2) a=$src2 ;; esac
        gzip -dc "$a" >"$work/src$n.tar"
        tar --delete -f "$work/src$n.tar" "$top/private/binaries_table.bzl"
    done
    cmp -s "$work/src1.tar" "$work/src2.tar" || die "release_binaries_test: the source archive differs between two runs (its table aside)"
fi
pass "release_binaries_test: rebuilt byte for byte the same: $again_list (SHA256SUMS, the source archive)"
finish
