#!/usr/bin/env bash
# tools/install-binaries.sh: from a clonestage checkout, build the helper `clonestage` and the
# spawn wrapper `clonestage-spawn` and install both where tools/bazel (the launcher) looks
# first: the per-version home <data>/clonestage/<version>/bin (`clonestage self-install`).
#
#   bash tools/install-binaries.sh [--spawn PATH] [--cxx] [--target-dir DIR] [--dir DIR]
#   bash tools/install-binaries.sh --build-helper [--target-dir DIR]
#
#   --spawn PATH       install this clonestage-spawn instead of building one
#                      (`bazel run @clonestage//:install` passes the one Bazel built)
#   --cxx              build the wrapper with the system C++ compiler ($CXX, else c++)
#                      without trying Bazel first
#   --target-dir DIR   cargo's target directory [default: $CARGO_TARGET_DIR, else
#                      <checkout>/rust/target]
#   --dir DIR          install there instead of the per-version home
#   --build-helper     only build `clonestage` and print its path (`bazel run
#                      @clonestage//:install` in WORKSPACE mode, whose `clonestage
#                      self-install` then installs it with the wrapper Bazel built)
#
# Contract:
#   - Runs only on clonestage's own Cargo workspace: the rust/ next to this script must be
#     the workspace whose `cli` member builds the `clonestage` binary; anything else is
#     refused (exit 2) before cargo runs.
#   - `clonestage` is built with `cargo build --locked --release` (the checked-in lockfile,
#     never updated); its progress shows on stderr.
#   - `clonestage-spawn` is built by `bazel build //cc:clonestage-spawn` in the checkout when
#     that works, else (no bazel, or it failed: said on stderr) with the system C++ compiler
#     the way rust/server/tests build it.
#   - Installing is the last step and atomic per file (`clonestage self-install`): any
#     earlier failure (no cargo, a failed build) exits 1 with the reason and leaves the
#     per-version home as it was.
#   - Progress on stderr; stdout is the directory the binaries are in (one line).
set -euo pipefail

say() { printf 'install-binaries: %s\n' "$*" >&2; }
die() { # die STATUS MESSAGE
  say "error: $2"
  exit "$1"
}

checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
spawn=""
cxx_only=0
target_dir=""
dest=""
helper_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --spawn) spawn="${2:?--spawn needs a path}"; shift 2 ;;
    --spawn=*) spawn="${1#--spawn=}"; shift ;;
    --cxx) cxx_only=1; shift ;;
    --target-dir) target_dir="${2:?--target-dir needs a directory}"; shift 2 ;;
    --target-dir=*) target_dir="${1#--target-dir=}"; shift ;;
    --dir) dest="${2:?--dir needs a directory}"; shift 2 ;;
    --dir=*) dest="${1#--dir=}"; shift ;;
    --build-helper) helper_only=1; shift ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    *) die 2 "unknown argument $1 (see --help)" ;;
  esac
done

# --- is this clonestage's own workspace? ---------------------------------------------------

manifest="$checkout/rust/Cargo.toml"
cli_manifest="$checkout/rust/cli/Cargo.toml"
if ! [ -f "$manifest" ] || ! [ -f "$checkout/rust/Cargo.lock" ] || ! [ -f "$cli_manifest" ] ||
  ! grep -q '^\[workspace\]' "$manifest" ||
  ! grep -Eq '^name = "clonestage"$' "$cli_manifest" ||
  ! grep -Eq '^clonestage-server = ' "$cli_manifest"; then
  die 2 "$checkout/rust is not clonestage's Cargo workspace (want rust/Cargo.toml, rust/Cargo.lock and the clonestage cli member); refusing to build it"
fi
[ -n "$target_dir" ] || target_dir="${CARGO_TARGET_DIR:-$checkout/rust/target}"
case "$target_dir" in
  /*) ;;
  *) target_dir="$PWD/$target_dir" ;;
esac
if [ -n "$spawn" ]; then
  case "$spawn" in
    /*) ;;
    *) spawn="$PWD/$spawn" ;;
  esac
  if ! [ -f "$spawn" ] || ! [ -x "$spawn" ]; then
    die 2 "--spawn $spawn is not an executable file"
  fi
fi

# --- clonestage ----------------------------------------------------------------------------

if ! command -v cargo >/dev/null 2>&1; then
  die 1 "cargo not found on PATH: install Rust (https://rustup.rs), then run this again; nothing was installed"
fi
say "building clonestage: cargo build --locked --release --bin clonestage (in $checkout/rust, target $target_dir; a first build takes minutes)"
# From inside the checkout: cargo reads the h2 [patch] from its .cargo/config.toml through the
# working directory, never through --manifest-path.
if ! (cd "$checkout/rust" && cargo build --locked --release --manifest-path "$manifest" --target-dir "$target_dir" --bin clonestage) >&2; then
  die 1 "cargo build in $checkout/rust failed (above); nothing was installed"
fi
helper="$target_dir/release/clonestage"
[ -x "$helper" ] || die 1 "cargo reported success but built no $helper"
if [ "$helper_only" = 1 ]; then
  printf '%s\n' "$helper"
  exit 0
fi

# --- clonestage-spawn ----------------------------------------------------------------------

build_spawn_with_bazel() { # prints the built wrapper's path; status 1 when Bazel cannot
  local bazel bin
  bazel="$(command -v bazel 2>/dev/null)" || {
    say "no bazel on PATH"
    return 1
  }
  say "building clonestage-spawn: bazel build //cc:clonestage-spawn (in $checkout)"
  # CLONESTAGE_DISABLE: the checkout's own tools/bazel must not try to start a helper that
  # is being installed; this build runs locally. --symlink_prefix=/: the checkout's
  # bazel-* links stay as they were (they may belong to another output root).
  (cd "$checkout" && CLONESTAGE_DISABLE=1 "$bazel" build --symlink_prefix=/ //cc:clonestage-spawn >&2) || return 1
  bin="$(cd "$checkout" && CLONESTAGE_DISABLE=1 "$bazel" info bazel-bin 2>/dev/null)" || return 1
  [ -x "$bin/cc/clonestage-spawn" ] || return 1
  printf '%s\n' "$bin/cc/clonestage-spawn"
}

build_spawn_with_cxx() { # the same sources and flags as rust/server/tests/common
  local cxx="${CXX:-c++}" os_skip out src
  local -a srcs=()
  command -v "$cxx" >/dev/null 2>&1 || die 1 "no C++ compiler ($cxx) to build clonestage-spawn; nothing was installed"
  case "$(uname -s)" in
    Darwin) os_skip="-linux.cc" ;;
    *) os_skip="-darwin.cc" ;;
  esac
  for src in "$checkout"/cc/*.cc; do
    case "$src" in
      *"$os_skip") ;;
      *) srcs+=("$src") ;;
    esac
  done
  mkdir -p "$target_dir/clonestage-spawn"
  out="$target_dir/clonestage-spawn/clonestage-spawn"
  say "building clonestage-spawn: $cxx -std=c++17 -O2 (cc/*.cc of $checkout)"
  "$cxx" -std=c++17 -O2 -I "$checkout" -o "$out.tmp.$$" "${srcs[@]}" >&2 ||
    die 1 "$cxx failed to build clonestage-spawn (above); nothing was installed"
  mv -f "$out.tmp.$$" "$out"
  printf '%s\n' "$out"
}

if [ -z "$spawn" ]; then
  if [ "$cxx_only" = 0 ] && spawn="$(build_spawn_with_bazel)"; then
    :
  else
    [ "$cxx_only" = 1 ] || say "Bazel could not build //cc:clonestage-spawn; using the system C++ compiler instead"
    spawn="$(build_spawn_with_cxx)"
  fi
fi

# --- install -------------------------------------------------------------------------------

args=(self-install --spawn "$spawn")
[ -z "$dest" ] || args+=(--dir "$dest")
if ! dir="$("$helper" "${args[@]}")"; then
  die 1 "clonestage self-install failed (above)"
fi
say "installed clonestage and clonestage-spawn in $dir"
printf '%s\n' "$dir"
