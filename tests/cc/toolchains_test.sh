#!/usr/bin/env bash
# The spawn wrapper's link with the C++ toolchains a consumer may register
# (cc/BUILD.bazel, issue 22 item 7), through Bazel 4.2.3 in this workspace:
#
# 1. GCC, Bazel's auto-configured toolchain (what `bazel test //...` here
#    uses; run that first): the saving is kept, i.e. libstdc++ is linked
#    statically, so the binary needs no libstdc++.so.
# 2. clang with libc++, configured the way toolchains_llvm configures its
#    "libc++" stdlib on Linux (-stdlib=libc++ for C++ compiles, link libs
#    -l:libc++.a -l:libc++abi.a: toolchains_llvm toolchain/cc_toolchain_config.bzl),
#    here through the auto-configuration's BAZEL_CXXOPTS/BAZEL_LINKLIBS and a
#    separate output base. The wrapper must link, run a command, and carry no
#    libstdc++: no libstdc++.so and none of libstdc++'s own code (its
#    __gnu_cxx:: runtime), which a `-Wl,-Bstatic -lstdc++` for every Linux
#    toolchain mixed into the libc++ program (or failed to link where, as with
#    LLVM-only sysroots, there is no libstdc++.a).
#
# Needs clang, libc++-dev and libc++abi-dev (.ci/install.sh). Exit 0 when all
# hold.
set -euo pipefail
cd "$(dirname "$0")"
export CLONESTAGE_DISABLE=1
# shellcheck source=tests/lib/report.sh
source ../lib/report.sh

# 1. GCC: the build of `bazel test //...`.
bazel build --jobs=2 @clonestage//cc:clonestage-spawn
gcc_bin=bazel-bin/external/clonestage/cc/clonestage-spawn
[ -x "$gcc_bin" ] || die "toolchains_test: $gcc_bin was not built"
if readelf -d "$gcc_bin" | grep -q 'NEEDED.*libstdc++'; then
    die "toolchains_test: the GCC build needs libstdc++.so: the static libstdc++ link was lost"
fi
pass "gcc: $gcc_bin links libstdc++ statically"

# 2. clang + libc++, in an output base of its own (another toolchain
# configuration), shut down at the end.
command -v clang >/dev/null || die "toolchains_test: clang not found (.ci/install.sh installs it)"
base=$(mktemp -d "${TMPDIR:-/tmp}/clonestage-clang-base.XXXXXX")
cleanup() {
    bazel --output_base="$base" shutdown >/dev/null 2>&1 || true
    rm -rf "$base"
}
trap cleanup EXIT
bazel --output_base="$base" build --jobs=2 \
    --repo_env=CC=clang \
    --repo_env=BAZEL_CXXOPTS=-stdlib=libc++ \
    --repo_env=BAZEL_LINKLIBS=-l%:libc++.a:-l%:libc++abi.a:-lm \
    @clonestage//cc:clonestage-spawn
clang_bin="$base/execroot/clonestage_cc_tests/bazel-out/k8-fastbuild/bin/external/clonestage/cc/clonestage-spawn"
[ -x "$clang_bin" ] || die "toolchains_test: $clang_bin was not built"
if readelf -d "$clang_bin" | grep -q 'NEEDED.*libstdc++'; then
    die "toolchains_test: the clang/libc++ build needs libstdc++.so"
fi
mixed=$(nm -C "$clang_bin" | grep -c '__gnu_cxx::' || true)
if [ "$mixed" != 0 ]; then
    nm -C "$clang_bin" | grep '__gnu_cxx::' | head -5 >&2
    die "toolchains_test: the clang/libc++ build carries libstdc++'s runtime ($mixed __gnu_cxx:: symbols)"
fi
out=$("$clang_bin" --stats - -- /bin/sh -c 'echo ran >&2; exit 3' 2>&1) && code=0 || code=$?
[ "$code" = 3 ] || die "toolchains_test: the clang/libc++ build exited $code, not 3: $out"
case "$out" in *ran*'"exit_code": 3'*) ;; *) die "toolchains_test: unexpected output: $out" ;; esac
pass "clang/libc++: $clang_bin links, runs, and carries no libstdc++"
finish
