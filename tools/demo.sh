#!/usr/bin/env bash
# clonestage's main job, with embedded defaults: build the helper and the spawn wrapper,
# then build and test the SwiftCompile-like example (examples/swiftlike) through clonestage
# the way a user does (its tools/bazel launcher starts `clonestage serve`; --config=clonestage
# routes every action to it; --config=staged makes each action check that its inputs arrived
# as read-only regular files), and print what clonestage did.
#
# On a fresh machine it first installs what it needs (.ci/install.sh, as root). The first
# build prints cargo's and Bazel's progress (minutes when cold); the summary is `clonestage
# stats` and `clonestage status` (the cache's filesystem, the staging method and why).
# Settings (all optional):
#   DEMO_SCALE=ci|full   ci (default): the real file counts, ~2 MB of content;
#                        full: 183 MB mean / 466 MB p95 per action (writes a 465 MB SDK tree once)
#   CLONESTAGE_CACHE     the cache (default: a fresh one under /var/tmp, removed afterwards;
#                        put it on btrfs or XFS, e.g. /mnt/clonestage-btrfs, to see snapshots/reflinks)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCALE=${DEMO_SCALE:-ci}

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck source=/dev/null # rustup's, on the user's machine
    . "$HOME/.cargo/env"
fi
if ! command -v bazel >/dev/null 2>&1 || ! command -v cargo >/dev/null 2>&1; then
    bash .ci/install.sh
    # shellcheck source=/dev/null # rustup's, just installed by install.sh
    command -v cargo >/dev/null 2>&1 || . "$HOME/.cargo/env"
fi

echo "demo: building clonestage (cargo build --locked --release: several minutes on a cold machine; cargo shows its progress)"
# No --quiet: a first build takes minutes, and a screen with nothing on it looks hung.
cargo build --locked --release --manifest-path rust/Cargo.toml --bin clonestage
echo "demo: building clonestage-spawn with Bazel"
CLONESTAGE_DISABLE=1 bazel build --jobs=2 //:spawn
install -m 0755 "$(CLONESTAGE_DISABLE=1 bazel info bazel-bin 2>/dev/null)/cc/clonestage-spawn" rust/target/release/.clonestage-spawn.$$
mv -f rust/target/release/.clonestage-spawn.$$ rust/target/release/clonestage-spawn
CS=$ROOT/rust/target/release/clonestage
# The launcher would look in the per-version home first (an earlier install); the demo
# shows the binaries it just built.
export CLONESTAGE_BIN=$CS

own_cache=0
if [ -z "${CLONESTAGE_CACHE:-}" ]; then
    CLONESTAGE_CACHE=$(mktemp -d /var/tmp/clonestage-demo-cache.XXXXXX)
    own_cache=1
fi
export CLONESTAGE_CACHE
stop_server() {
    local pid
    pid=$(sed -n 's/[^0-9]*\([0-9][0-9]*\).*/\1/p' "$CLONESTAGE_CACHE/server/lock" 2>/dev/null | head -n1)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    if [ "$own_cache" = 1 ]; then
        sleep 1
        chmod -R u+w "$CLONESTAGE_CACHE" 2>/dev/null || true
        rm -rf "$CLONESTAGE_CACHE"
    fi
}
trap stop_server EXIT

cd examples/swiftlike
scale_flag=--config=ci
[ "$SCALE" = full ] && scale_flag=
echo "demo: bazel test //... in examples/swiftlike through clonestage (cache $CLONESTAGE_CACHE, scale $SCALE)"
CLONESTAGE_DISABLE=1 bazel clean >/dev/null 2>&1 || true
# The launcher (tools/bazel) starts the server and adds the executor address.
bazel test --jobs=2 $scale_flag --config=clonestage --config=staged //...
sleep 0.5 # the server writes its counters just after answering
echo
"$CS" stats
echo
# Where the cache is, which filesystem, and why clonestage stages the way it does there.
"$CS" status || true
