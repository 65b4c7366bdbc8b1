#!/usr/bin/env bash
# clonestage's test runner, in tiers:
#   tests/run.sh quick      fmt, clippy, the Rust tests, the layout and module checks, the
#                           launcher suite: a few minutes on a warm cargo cache
#   tests/run.sh [full]     every suite below, in order: what .ci/run runs (the default)
#   tests/run.sh SUITE...   the named suites only (`tests/run.sh list` names them)
# Every selected suite runs even after one fails; the run ends with one table (suite, result,
# seconds) and exits 1 if any suite failed, 2 on an unknown suite name.
#
# Needs the tools from .ci/install.sh. As root it mounts the XFS/btrfs/ext4 loop images of
# .ci/mount-cow.sh first (the Rust tests of the clone paths use them; CI sets
# CLONESTAGE_REQUIRE_FS=1 so they fail rather than skip). tests/README.md maps each concern
# to the suites and files that test it.
set -uo pipefail
cd "$(dirname "$0")/.."
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
BUILDIFIER=${BUILDIFIER:-$TOOLS/node_modules/.bin/buildifier}
# shellcheck source=tests/lib/build.sh
. tests/lib/build.sh
# cargo SUB --manifest-path ...: the manifest flag belongs to the subcommand, not to cargo.
rcargo() { local sub=$1; shift; cargo "$sub" --manifest-path rust/Cargo.toml "$@"; }

# --- the suites: suite_NAME runs one, under `set -euo pipefail` in a subshell ---------------

suite_fmt() { rcargo fmt --all -- --check; }

suite_clippy() { rcargo clippy --workspace --all-targets -- -D warnings; }

suite_clippy_macos() {
    # The macOS code, type-checked and linted, not run. Without the default `tls` feature:
    # ring's C needs the macOS SDK to compile for this target.
    rcargo clippy --workspace --all-targets --target aarch64-apple-darwin --no-default-features -- -D warnings
}

suite_clippy_hooks() {
    rcargo clippy -p clonestage-engine -p clonestage --all-targets --features clonestage/fault-injection -- -D warnings
}

suite_rust_version() {
    # The lock checks with rust/Cargo.toml's rust-version, --locked. The other end, the dev
    # rules_rust's default Rust (MODULE.bazel, tools/release.sh's RUST), is the release suite's:
    # release.sh builds every workspace crate but the dev-dependencies with exactly that Rust,
    # --locked, for four platforms.
    local msrv
    msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' rust/Cargo.toml)
    case "$msrv" in *.*.*) ;; *) msrv="$msrv.0" ;; esac
    (cd rust && cargo +"$msrv" check --locked --workspace --target-dir target/msrv)
}

suite_rust_hooks() {
    # Only the tests that need the hooks, in a second build of the engine, server and CLI
    # (deps are shared) that cargo keeps beside the default one; need_helper puts the
    # hook-free binary back at target/release/clonestage for the suites after this one.
    rcargo test --release -p clonestage-engine -p clonestage --features clonestage/fault-injection -- \
        a_stage_interrupted_half_way a_failed_stage_leaves_nothing_behind the_binary_carries_the_fault_hook
    need_helper
}

suite_rust() {
    need_helper
    rcargo test --release --workspace
}

suite_transport() { need_helper; bash tests/transport/run.sh; }
suite_xcode() { need_helper; bash tests/xcode/run.sh; }
suite_compression() { need_helper; bash tests/compression/run.sh; }

suite_buildifier() {
    if [ ! -x "$BUILDIFIER" ]; then
        echo "buildifier not found at $BUILDIFIER (run .ci/install.sh)" >&2
        return 1
    fi
    local starlark
    mapfile -t starlark < <(git ls-files -co --exclude-standard -- '*.bzl' '*.bazel' 'WORKSPACE' '*/WORKSPACE' 'BUILD' '*/BUILD' | sort -u)
    [ ${#starlark[@]} -eq 0 ] || "$BUILDIFIER" -lint=warn -mode=check "${starlark[@]}"
}

suite_perf_split() { python3 tests/perf/split_test.py; }

suite_layout() {
    python3 tests/layout/check_test.py
    python3 tests/layout/check.py
    python3 tests/lib/harness_check.py # no pass()/fail() outside tests/lib/report.sh
}

suite_module() {
    python3 tests/module/check.py
    python3 tests/module/check_test.py
    python3 tests/module/h2_patch_test.py
    python3 rust/third_party/h2_patch.py check
    # The same check from an empty cargo home, as on a fresh machine: `cargo metadata
    # --offline` needs every platform's packages, which only its own `cargo fetch --locked`
    # brings.
    local fresh
    fresh=$(mktemp -d)
    CARGO_HOME="$fresh" python3 rust/third_party/h2_patch.py check
    rm -rf "$fresh"
    bash tests/module/h2_bazel_patch_test.sh
    bash tests/module/release_test.sh
    python3 tools/cross/check_binary_test.py # the release's Mach-O/ELF checker
}

suite_launcher() { bash tests/launcher/run.sh; }

suite_secrets() {
    need_helper
    bash tests/secrets/run.sh
    bash tests/secrets/run.sh --bazel # the same with Bazel 4.2.3 (~30 s)
}

suite_cc() {
    # The launcher is bypassed here: these tests are about the wrapper, run by Bazel locally.
    # tests/cc is a workspace of its own so the dev-only googletest stays out of @clonestage//...
    # Each suite also runs as <suite>_xnu: the Darwin build on the XNU emulation (tests/cc/xnu).
    (cd tests/cc && export CLONESTAGE_DISABLE=1 && bazel test --jobs=2 //...)
    # The link with GCC (libstdc++ kept static) and with clang and libc++.
    bash tests/cc/toolchains_test.sh
    (cd tests/cc && CLONESTAGE_DISABLE=1 bazel shutdown)
}

suite_e2e() { need_helper; bash tests/e2e/run.sh; }
suite_doctor() { need_helper; bash tests/doctor/run.sh; }
suite_upstream() { need_helper; need_spawn; bash tests/upstream/run.sh; }
suite_teamrc() { need_helper; need_spawn; bash tests/teamrc/run.sh; }
suite_release() {
    # Built once per run into CLONESTAGE_RELEASE_OUT: tests/consumer's prebuilt path installs
    # from the same archives (alone, it cross-builds the host's archive itself).
    bash tests/module/release_binaries_test.sh "$CLONESTAGE_RELEASE_OUT"
}

suite_consumer() { bash tests/consumer/run.sh; }
suite_reliability() { need_helper; bash tests/reliability/run.sh; }

# NAME|TIERS|what it checks (in the order of a full run)
SUITES=(
    "fmt|quick full|rustfmt"
    "clippy|quick full|clippy for Linux, all targets"
    "clippy_macos|full|clippy for aarch64-apple-darwin: the macOS code type-checked and linted, not run"
    "clippy_hooks|full|clippy with the fault-injection hooks on"
    "rust_version|full|cargo check --locked with rust-version's Rust (the dev rules_rust's default Rust: the release suite)"
    "rust_hooks|full|the tests that need the fault-injection hooks (a failed stage leaves nothing behind)"
    "rust|quick full|cargo test: engine, server, CLI, bench (XFS/btrfs/ext4 on the loop mounts)"
    "transport|full|grpcio over the unix socket with each :authority form; another uid refused"
    "xcode|full|the Apple environment (DEVELOPER_DIR/SDKROOT) through Bazel 4.2.3 on stub Xcode tools"
    "compression|full|zstd compressed-blobs, capabilities, BLAKE3 refused (grpcio + zstandard)"
    "doctor|full|clonestage doctor --json with a cache on XFS and Bazel 4.2.3, and its failure paths"
    "buildifier|quick full|buildifier on all Starlark"
    "perf_split|quick full|the parser that splits an action's extra time between Bazel and clonestage"
    "layout|quick full|import cycles, reach-ins, long files, repeated names, a //! doc on every file, one shell harness"
    "module|quick full|static check that @clonestage loads for consumers; the h2 patch; the release archive; the binary checker"
    "launcher|quick full|the POSIX shim tools/bazel and clonestage launch (the release binary) against a stub Bazel"
    "secrets|full|another uid against a TCP build through the launcher, and a restart"
    "cc|full|the spawn wrapper's googletest suite (tests/cc), also its Darwin build on an XNU emulation; its link with GCC and with clang+libc++"
    "e2e|full|Bazel 4.2.3 through clonestage serve (tests/e2e, examples/swiftlike)"
    "upstream|full|a real BuildGrid 0.4.4 as the team cache of two clonestage caches; down, stalled, lying"
    "teamrc|full|a team's .bazelrc (a dead --remote_cache, a --disk_cache, worker-style --strategy lines) through the launcher, without it, standing aside, every command kind"
    "release|full|the prebuilt helpers for four platforms (tools/release.sh, tools/cross): Mach-O minos 12.0, ELF glibc <= 2.17, x86_64 Linux and arm64 macOS rebuilt to the same bytes"
    "consumer|full|the adoption paths in fresh workspaces outside the repository: prebuilt, module, checkout"
    "reliability|full|kill -9, ENOSPC, fuzzing, hostile input, abandoned and idle uploads, write-through race, two output bases, a lying team cache, answer grace"
)

usage() {
    echo "usage: tests/run.sh [quick|full|list|SUITE...]" >&2
    exit 2
}

# --- what to run ------------------------------------------------------------------------------
selected=()
tier=
case "${1:-full}" in
    quick | full) tier=${1:-full} ;;
    list)
        for s in "${SUITES[@]}"; do
            IFS='|' read -r name tiers what <<<"$s"
            printf '%-13s %-11s %s\n' "${name//_/-}" "$tiers" "$what"
        done
        exit 0
        ;;
    -h | --help) usage ;;
esac
for s in "${SUITES[@]}"; do
    IFS='|' read -r name tiers _ <<<"$s"
    if [ -n "$tier" ]; then
        [[ " $tiers " == *" $tier "* ]] && selected+=("$name")
    fi
done
if [ -z "$tier" ]; then
    for want in "$@"; do
        want=${want//-/_}
        found=
        for s in "${SUITES[@]}"; do
            IFS='|' read -r name _ _ <<<"$s"
            [ "$name" = "$want" ] && found=1
        done
        [ -n "$found" ] || { echo "tests/run.sh: no suite '$want' (tests/run.sh list)" >&2; exit 2; }
        selected+=("$want")
    done
fi

if [ -z "${CLONESTAGE_TEST_XFS:-}" ] && [ "$(id -u)" = 0 ]; then
    mounts=$(bash .ci/mount-cow.sh) || { echo "tests/run.sh: .ci/mount-cow.sh failed" >&2; exit 1; }
    eval "$mounts"
fi

# The release suite's archives, for the consumer suite after it.
CLONESTAGE_RELEASE_OUT=$(mktemp -d)
export CLONESTAGE_RELEASE_OUT
trap 'rm -rf "$CLONESTAGE_RELEASE_OUT"' EXIT

# --- run each, keep going, then one table -----------------------------------------------------
results=()
failed=0
for name in "${selected[@]}"; do
    for s in "${SUITES[@]}"; do
        IFS='|' read -r n _ what <<<"$s"
        [ "$n" = "$name" ] && break
    done
    echo
    echo "=== ${name//_/-}: $what"
    start=$(date +%s)
    # Not inside `if`: bash ignores `set -e` in a tested subshell.
    (set -euo pipefail; "suite_$name")
    rc=$?
    secs=$(($(date +%s) - start))
    if [ "$rc" = 0 ]; then
        results+=("$(printf '%-13s %-5s %6s' "${name//_/-}" pass "$secs")")
    else
        results+=("$(printf '%-13s %-5s %6s  (exit %s)' "${name//_/-}" FAIL "$secs" "$rc")")
        failed=$((failed + 1))
    fi
done

echo
printf '%-13s %-5s %6s\n' suite result seconds
printf '%s\n' "${results[@]}"
if [ "$failed" -gt 0 ]; then
    echo "tests/run.sh: $failed of ${#selected[@]} suites failed"
    exit 1
fi
echo "tests/run.sh: all ${#selected[@]} suites passed"
