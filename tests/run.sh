#!/usr/bin/env bash
# clonestage's whole test suite, the README's test command: formatting and lints (Rust for
# Linux and the macOS target, Starlark), the tests that need the fault-injection hooks (in a
# build with the cargo feature; the default build, without hooks, then replaces
# target/release/clonestage), the engine and CLI tests (the XFS/btrfs/ext4 ones on
# the loop mounts of .ci/mount-cow.sh, mounted here when run as root), the unix socket, the Xcode
# environment and zstd compression with independent clients, the static layout and module checks, the
# launcher, the token against another uid, the C++ spawn wrapper's googletest suite under Bazel
# (tests/cc), the end-to-end tests in tests/e2e, the team-settings workspace in tests/teamrc, the
# adoption paths in tests/consumer and the reliability suite in tests/reliability.
#
# Needs the tools from .ci/install.sh. Each step prints its name; the first failure stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
BUILDIFIER=${BUILDIFIER:-$TOOLS/node_modules/.bin/buildifier}
step() { echo; echo "=== $*"; }

if [ -z "${CLONESTAGE_TEST_XFS:-}" ] && [ "$(id -u)" = 0 ]; then
    mounts=$(bash .ci/mount-cow.sh)
    eval "$mounts"
fi

step "rustfmt"
cargo fmt --manifest-path rust/Cargo.toml --all -- --check

step "clippy (linux)"
cargo clippy --manifest-path rust/Cargo.toml --workspace --all-targets -- -D warnings

step "clippy (aarch64-apple-darwin: the macOS clonefile path, type-checked and linted, not run)"
# Without the default `tls` feature: ring's C needs the macOS SDK to compile for this target.
cargo clippy --manifest-path rust/Cargo.toml --workspace --all-targets --target aarch64-apple-darwin --no-default-features -- -D warnings

step "clippy (linux, the fault-injection test hooks on)"
cargo clippy --manifest-path rust/Cargo.toml -p clonestage-engine -p clonestage --all-targets --features clonestage/fault-injection -- -D warnings

step "cargo test with the fault-injection hooks (a failed stage leaves nothing behind)"
# Only the tests that need the hooks; a second build of the engine, server and CLI (deps are
# shared), kept by cargo beside the default one. The next step's default build then puts the
# hook-free binary back at target/release/clonestage (no recompile), which the later steps use.
cargo test --release --manifest-path rust/Cargo.toml -p clonestage-engine -p clonestage --features clonestage/fault-injection -- \
    a_stage_interrupted_half_way a_failed_stage_leaves_nothing_behind the_binary_carries_the_fault_hook

step "cargo test"
cargo build --manifest-path rust/Cargo.toml --release --bin clonestage
cargo test --release --manifest-path rust/Cargo.toml --workspace

step "transport: grpcio over the unix socket with each :authority form; another uid refused"
bash tests/transport/run.sh

step "xcode: the Apple environment (DEVELOPER_DIR/SDKROOT) through Bazel 4.2.3 on stub Xcode tools (tests/xcode)"
bash tests/xcode/run.sh

step "compression: zstd compressed-blobs, capabilities, BLAKE3 refused (grpcio + zstandard; tests/compression)"
bash tests/compression/run.sh

step "buildifier"
if [ ! -x "$BUILDIFIER" ]; then
    echo "buildifier not found at $BUILDIFIER (run .ci/install.sh)" >&2
    exit 1
fi
mapfile -t starlark < <(git ls-files -co --exclude-standard -- '*.bzl' '*.bazel' 'WORKSPACE' '*/WORKSPACE' 'BUILD' '*/BUILD' | sort -u)
if [ ${#starlark[@]} -gt 0 ]; then
    "$BUILDIFIER" -lint=warn -mode=check "${starlark[@]}"
fi

step "perf: the parser that splits an action's extra time between Bazel and clonestage (tests/perf/split_test.py)"
python3 tests/perf/split_test.py

step "layout: import cycles, reach-ins between the server's services, long files, repeated names, a //! doc on every file (tests/layout)"
python3 tests/layout/check_test.py
python3 tests/layout/check.py

step "module: static check that @clonestage loads for consumers; the BCR release archive (tests/module)"
python3 tests/module/check.py
python3 tests/module/check_test.py
python3 tests/module/h2_patch_test.py
python3 rust/third_party/h2_patch.py check
# The same check from an empty cargo home, as on a fresh machine: `cargo metadata --offline`
# needs every platform's packages, which only its own `cargo fetch --locked` brings.
fresh_cargo_home=$(mktemp -d)
CARGO_HOME="$fresh_cargo_home" python3 rust/third_party/h2_patch.py check
rm -rf "$fresh_cargo_home"
bash tests/module/h2_bazel_patch_test.sh
bash tests/module/release_test.sh

step "launcher (tools/bazel) against stub clonestage and bazel"
bash tests/launcher/run.sh

step "secrets: another uid against a TCP build through the launcher, and a restart (tests/secrets)"
bash tests/secrets/run.sh
bash tests/secrets/run.sh --bazel   # the same with Bazel 4.2.3 (~30 s)

step "bazel test of the spawn wrapper (googletest, the nested workspace tests/cc)"
# The launcher is bypassed here: these tests are about the wrapper, run by Bazel locally.
# tests/cc is a workspace of its own so the dev-only googletest stays out of @clonestage//...
(cd tests/cc && export CLONESTAGE_DISABLE=1 && bazel test --jobs=2 //... && bazel shutdown)

step "end to end: Bazel through clonestage serve (tests/e2e, examples/swiftlike)"
bash tests/e2e/run.sh

# After tests/e2e, which builds the spawn wrapper beside the helper (the servers here need it).
step "upstream: a real BuildGrid 0.4.4 as the team cache of two clonestage caches; down, stalled, lying (tests/upstream, ~3.5 min)"
bash tests/upstream/run.sh

step "team settings: a .bazelrc with a dead --remote_cache, a --disk_cache and worker-style --strategy lines, then --config=clonestage (tests/teamrc, Bazel 4.2.3, ~45 s)"
bash tests/teamrc/run.sh
step "consumer: the adoption paths in fresh workspaces outside the repository (tests/consumer: bazel run @clonestage//:install with a cold cargo build, then the README's without-the-module path)"
bash tests/consumer/run.sh

step "reliability suite (tests/reliability: kill -9, ENOSPC, fuzzing, hostile input, abandoned and idle uploads, write-through race, two output bases; docs/reliability.md)"
bash tests/reliability/run.sh

echo
echo "all test steps passed"
