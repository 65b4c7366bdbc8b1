# shellcheck shell=bash
# tests/lib/build.sh: sourced by tests/run.sh and by suites that need clonestage's binaries.
# Each function builds what a suite needs when it is missing or stale, so a suite run alone
# (`tests/run.sh e2e`) finds what the full run's earlier steps would have left.
#   need_helper: rust/target/release/clonestage, the default build (no fault-injection hooks;
#                cargo keeps the hooked build beside it, so this swaps it back without a compile)
#   need_spawn:  rust/target/release/clonestage-spawn, built by Bazel 4.2.3 (//:spawn) and put
#                beside the helper by rename (a running server keeps the inode it has)
#   cxx_spawn ROOT OUT [PREFIX...]: the Linux spawn wrapper built from ROOT/cc with the system
#                C++ compiler ($CXX, else g++), the Darwin files left out, for suites run without
#                Bazel; PREFIX... runs the compiler (tests/secrets passes `nice`)
# Run from the repository root.

need_helper() {
    cargo build --quiet --release --manifest-path rust/Cargo.toml --bin clonestage
}

need_spawn() {
    local out=rust/target/release/clonestage-spawn bin
    if [ -x "$out" ] && [ -z "$(find cc -newer "$out" -print -quit)" ]; then
        return 0
    fi
    CLONESTAGE_DISABLE=1 bazel build --jobs=2 //:spawn >/dev/null 2>&1 || {
        echo "need_spawn: bazel build //:spawn failed (run it for the log)" >&2
        return 1
    }
    bin="$(CLONESTAGE_DISABLE=1 bazel info bazel-bin 2>/dev/null)"
    install -m 0755 "$bin/cc/clonestage-spawn" "$out.$$" && mv -f "$out.$$" "$out"
}

cxx_spawn() {
    local root=$1 out=$2 f srcs=()
    shift 2
    for f in "$root"/cc/*.cc; do
        case "$f" in *-darwin.cc) ;; *) srcs+=("$f") ;; esac
    done
    "$@" "${CXX:-g++}" -std=c++17 -O2 -I "$root" -o "$out" "${srcs[@]}"
}
