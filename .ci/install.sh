#!/usr/bin/env bash
# Install everything clonestage's build and tests need on a fresh Debian machine (as root),
# and only what is missing: a command already on PATH (npm from NodeSource, say, whose nodejs
# conflicts with Debian's npm; a Rust from rustup) is used as it is. Safe to re-run. Used by
# .ci/run and tools/demo.sh; developers can run it once too. Rust comes from rustup into
# ~/.cargo when there is no cargo: callers then `. "$HOME/.cargo/env"`.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "install: $*" >&2; }

if [ "$(id -u)" != 0 ]; then
    echo "install: must run as root (apt-get, loop mounts)" >&2
    exit 1
fi

# clang, libc++-dev and libc++abi-dev: the spawn wrapper linked with clang and libc++
# (tests/cc/toolchains_test.sh).
pkgs=(bazel-bootstrap bazel-skylib bazel-platforms libgtest-dev googletest
      xfsprogs btrfs-progs e2fsprogs util-linux g++ shellcheck python3.11 python3.11-venv
      clang libc++-dev libc++abi-dev)
# Commands, not packages: installed from Debian only when missing.
command -v curl >/dev/null 2>&1 || pkgs+=(curl ca-certificates)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || pkgs+=(python3-venv)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck source=/dev/null # rustup's
    . "$HOME/.cargo/env"
fi
if ! command -v cargo >/dev/null 2>&1; then
    log "no cargo: installing Rust with rustup into ~/.cargo"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >/dev/null
    # shellcheck source=/dev/null # rustup's
    . "$HOME/.cargo/env"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
rustup target list --installed | grep -qx aarch64-apple-darwin || rustup target add aarch64-apple-darwin

# The Rust toolchains CI checks the workspace with (tests/run.sh): rust/Cargo.toml's
# rust-version, and the default Rust of the dev rules_rust (MODULE.bazel), which builds
# the release archives (tools/release.sh's RUST) for its four targets.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' rust/Cargo.toml)
release_rust=$(sed -n 's/^RUST=//p' tools/release.sh)
case "$msrv" in *.*.*) ;; *) msrv="$msrv.0" ;; esac
for tc in "$msrv" "$release_rust"; do
    rustup toolchain list | grep -q "^$tc-" || rustup toolchain install --profile minimal "$tc"
done
for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin; do
    rustup +"$release_rust" target list --installed | grep -qx "$t" || rustup target add --toolchain "$release_rust" "$t"
done

# buildifier from npm (the package ships the binary), into a tools dir outside the repo.
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
if [ ! -x "$TOOLS/node_modules/.bin/buildifier" ]; then
    log "npm install @bazel/buildifier into $TOOLS"
    mkdir -p "$TOOLS"
    (cd "$TOOLS" && npm install --silent --no-audit --no-fund @bazel/buildifier >/dev/null)
fi
# grpcio in a venv there: the independent REAPI client of tests/transport (>= 1.57: the
# %-encoded :authority grpc-core sends on a unix socket), tests/reliability and tests/upstream;
# protobuf (>= 6.31.1: what the generated modules of tests/lib/proto were generated for) and
# googleapis-common-protos (google.api, google.rpc, google.longrunning) for their messages;
# zstandard for tests/compression.
if ! "$TOOLS/venv/bin/python" -c 'import grpc, zstandard, google.api.annotations_pb2
from google.protobuf import runtime_version as v; assert (v.OSS_MAJOR, v.OSS_MINOR) >= (6, 31)' >/dev/null 2>&1; then
    log "pip install grpcio protobuf googleapis-common-protos zstandard into $TOOLS/venv"
    mkdir -p "$TOOLS"
    [ -x "$TOOLS/venv/bin/pip" ] || python3 -m venv "$TOOLS/venv"
    "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check 'grpcio>=1.57,<2' 'protobuf>=6.31.1,<7' \
        'googleapis-common-protos>=1.63,<2' 'zstandard>=0.22,<1' >/dev/null
fi
# BuildGrid 0.4.4, the real REAPI cache tests/upstream starts as clonestage's upstream
# (issue 14), in its own Python 3.11 venv: Debian 12's python3 is 3.11 (/usr/bin/python3.11,
# packages python3.11 and python3.11-venv above); a pyenv or other python3.11 on PATH also does.
if ! "$TOOLS/bgd-venv/bin/bgd" --help >/dev/null 2>&1; then
    py311=/usr/bin/python3.11
    [ -x "$py311" ] || py311="$(command -v python3.11 || true)"
    if [ -z "$py311" ]; then
        echo "install: python3.11 not found (apt-get install python3.11 python3.11-venv): BuildGrid needs it" >&2
        exit 1
    fi
    log "pip install buildgrid==0.4.4 into $TOOLS/bgd-venv ($py311)"
    mkdir -p "$TOOLS"
    [ -x "$TOOLS/bgd-venv/bin/pip" ] || "$py311" -m venv "$TOOLS/bgd-venv"
    "$TOOLS/bgd-venv/bin/pip" install -q --disable-pip-version-check 'buildgrid==0.4.4' >/dev/null
fi
# cargo-zigbuild and zig (PyPI's ziglang) in a venv there: tools/release.sh cross-builds the
# prebuilt helpers with them (zig links Mach-O and old-glibc ELF; `zig c++` builds the wrapper).
# Exact versions: they are part of what makes a release rebuild to the same bytes.
if ! "$TOOLS/zig-venv/bin/cargo-zigbuild" --version 2>/dev/null | grep -qx 'cargo-zigbuild 0.24.0' ||
    [ "$("$TOOLS/zig-venv/bin/zig" version 2>/dev/null)" != 0.15.2 ]; then
    log "pip install ziglang==0.15.2 cargo-zigbuild==0.24.0 into $TOOLS/zig-venv"
    mkdir -p "$TOOLS"
    [ -x "$TOOLS/zig-venv/bin/pip" ] || python3 -m venv "$TOOLS/zig-venv"
    "$TOOLS/zig-venv/bin/pip" install -q --disable-pip-version-check 'ziglang==0.15.2' 'cargo-zigbuild==0.24.0' >/dev/null
    # cargo-zigbuild looks for `zig` on PATH first (else `python3 -m ziglang`, which is slower).
    ln -sf "$("$TOOLS/zig-venv/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')" "$TOOLS/zig-venv/bin/zig"
fi
# The reliability suite's fuzz part: cargo-fuzz (run on stable with RUSTC_BOOTSTRAP=1).
if ! cargo fuzz --help >/dev/null 2>&1; then
    log "cargo install cargo-fuzz"
    cargo install --quiet --locked cargo-fuzz
fi
command -v setpriv >/dev/null 2>&1 || log "warning: setpriv (util-linux) missing: the other-uid tests cannot run"
log "done"
